"""A callback that writes down, before each training batch, where the trainer believes it
stands: to test what a resumed run counts (test_resume_mid_epoch.py)."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L


class RecordBatches(L.Callback):
    """Append ``{"step", "epoch", "batch_idx", "size"}`` of each training batch to ``path``
    (JSON lines); ``size``: the windows in the batch."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: object, batch_idx: int
    ) -> None:
        x = batch["x"] if isinstance(batch, dict) else batch[0]
        row = {
            "step": trainer.global_step,
            "epoch": trainer.current_epoch,
            "batch_idx": batch_idx,
            "size": int(x.shape[0]),
        }
        with self.path.open("a") as out:
            out.write(json.dumps(row) + "\n")
