"""``checkpoints/last.ckpt`` holds the final weights when training ends.

``last.ckpt`` is written at every validation (``callbacks.last_checkpoint``) and every N
steps (``callbacks.step_checkpoint``). A training that ends between two of them, at
``trainer.max_steps`` past the last validation (``max_steps=8`` validated every 5 steps) or
at ``max_epochs`` of a step-interval validation, would keep its final steps nowhere, and a
training shorter than one validation no checkpoint at all: ``ckpt=last``, ``eval.py`` and
``predict.py`` would have nothing of the trained weights to load. :class:`FinalCheckpoint`
(``callbacks.final_checkpoint``) saves ``last.ckpt`` then:

* at the end of the training step that reaches ``max_steps``, where no validation follows
  (after a validation, ``last_checkpoint`` saves it): the state of a step checkpoint, which
  a resumed run continues exactly (a larger ``trainer.max_steps`` with
  ``allow_changes=[trainer.max_steps]`` goes on from it);
* at the end of training otherwise, where ``last.ckpt`` is not of the final step
  (``max_epochs``, ``max_time``, a stop asked by a callback): resumed, it starts the next
  epoch, as Lightning's own epoch-end checkpoints do.

Through ``trainer.save_checkpoint``, so with its ``.checksum``
(:mod:`cloudlstm.rundir.checkpoint_io`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning as L

from cloudlstm.rundir.layout import checkpoint_step
from cloudlstm.rundir.preemption import validates_now

log = logging.getLogger(__name__)


class FinalCheckpoint(L.Callback):
    """Save ``<dirpath>/<filename>.ckpt`` with the final weights (see the module).

    Args:
        dirpath: the run's checkpoint directory (``checkpoints/``).
        filename: the file's name without ``.ckpt``: ``last``, what ``ckpt=last`` and
            ``resume=auto`` take.
    """

    def __init__(self, dirpath: str | Path, filename: str = "last") -> None:
        self.path = Path(dirpath) / f"{filename}.ckpt"
        self._saved_step: int | None = None

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        # the step is done (optimiser step, schedulers): the point where step checkpoints
        # are saved, from which Lightning resumes mid-epoch exactly
        if not 0 < trainer.max_steps <= trainer.global_step or trainer.fast_dev_run:
            return
        if validates_now(trainer):
            return  # last_checkpoint saves after the validation, with its metrics
        self._save(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        step = trainer.global_step
        if step == 0 or self._saved_step == step or trainer.fast_dev_run:
            return
        # rank 0 reads the file, every rank saves together (a save is collective)
        stale = checkpoint_step(self.path) != step if trainer.is_global_zero else False
        if trainer.strategy.broadcast(stale, src=0):
            self._save(trainer)

    def _save(self, trainer: L.Trainer) -> None:
        trainer.save_checkpoint(self.path, weights_only=False)  # every state, to resume
        self._saved_step = trainer.global_step
        log.info("Training ended at step %d: saved %s.", trainer.global_step, self.path)
