"""A run directory resumed after it was copied or moved keeps to its own checkpoints.

Lightning's ``ModelCheckpoint`` stores in every checkpoint the absolute paths of its files
(the best one, the k best with their scores, the last) and its ``dirpath``. Resumed in
another directory (``cp -r run run_copy``, a run moved to other storage), it finds the
stored ``dirpath`` changed and restores nothing but the best path, the original's: the
copy's score history is lost (its next validation counts as a new best, and the earlier
best file is never removed), and a run with no validation left tests the original's best
checkpoint. :class:`FollowMovedRun` (``callbacks.moved_run``) rewrites those paths into
this run's checkpoint directory as the checkpoint is loaded, before the callbacks read it,
so a moved run resumes as it would have in place. A file found in the original directory
and not in this one stays where it is: this training continues another run's checkpoint.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning as L

log = logging.getLogger(__name__)

# the entries of ModelCheckpoint.state_dict that hold a path of its files
PATH_KEYS = ("best_model_path", "kth_best_model_path", "last_model_path")


class FollowMovedRun(L.Callback):
    """Rewrite the checkpoint callbacks' stored paths into their ``dirpath`` of this run."""

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        states = checkpoint.get("callbacks") or {}
        for callback in trainer.checkpoint_callbacks:
            state = states.get(callback.state_key)
            dirpath = getattr(callback, "dirpath", None)
            if not isinstance(state, dict) or not dirpath or not state.get("dirpath"):
                continue
            if state["dirpath"] == dirpath:
                continue
            log.info("Checkpoints written in %s: now in %s.", state["dirpath"], dirpath)
            states[callback.state_key] = rerooted(state, str(state["dirpath"]), str(dirpath))


def rerooted(state: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """``state`` (a ``ModelCheckpoint``'s) with its files under ``old`` put under ``new``;
    a path elsewhere, or a file that lies under ``old`` and not under ``new``, is left as
    it is: a training continuing another run's checkpoint (``resume=<path>`` in a new run
    directory) has that run's best checkpoint there, not here, and a test of it had looked
    for it here and failed with a traceback (Lightning removes no file outside ``new``)."""

    def move(path: Any) -> Any:
        if not path:
            return path
        try:
            moved = Path(new) / Path(str(path)).relative_to(old)
        except ValueError:
            return path
        return path if Path(str(path)).exists() and not moved.exists() else str(moved)

    state = {**state, "dirpath": new}
    for key in PATH_KEYS:
        if key in state:
            state[key] = move(state[key])
    if isinstance(state.get("best_k_models"), dict):
        state["best_k_models"] = {move(k): v for k, v in state["best_k_models"].items()}
    return state
