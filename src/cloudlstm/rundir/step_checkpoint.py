"""``checkpoints/last.ckpt`` every N training steps (``callbacks.step_checkpoint``), never at
a step that a validation follows.

Lightning resumes a checkpoint saved at the end of a training step as one whose step is
done, validation included: a process killed during the validation that followed a step
checkpoint came back past that validation. Its score never reached the best checkpoint's
choice (a mid-run validation skipped for good), or, at the last step, the run tested an
earlier checkpoint than the one the same run uninterrupted tests. At such a step the
checkpoint is left to ``callbacks.last_checkpoint``, which saves after the validation;
a kill during it resumes from the checkpoint before, as :mod:`cloudlstm.rundir.preemption`
does on SIGTERM.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

from cloudlstm.rundir.preemption import validates_now


class StepCheckpoint(ModelCheckpoint):
    """:class:`ModelCheckpoint` of ``every_n_train_steps`` that skips the steps a
    validation follows (the validation's own checkpoint is saved after it)."""

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        every = self._every_n_train_steps
        due = every >= 1 and trainer.global_step % every == 0
        if due and validates_now(trainer):
            return
        super().on_train_batch_end(trainer, *args, **kwargs)
