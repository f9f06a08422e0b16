"""A callback that SIGKILLs its own process, to test resuming (used by test_resume.py)."""

from __future__ import annotations

import os
import signal

import lightning as L


class KillAtEpochStart(L.Callback):
    """SIGKILL the process as training epoch ``epoch`` (0-based) starts.

    Everything of the epoch before, its checkpoint included, is done by then, so the process
    dies as a job killed right after that checkpoint would.
    """

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGKILL)


class KillAtStep(L.Callback):
    """SIGKILL the process before training step ``step`` (the global step) runs."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: L.Trainer, *_: object) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)
