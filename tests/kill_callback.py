"""Callbacks that kill or hold their own training process, to test resuming, requeues and
run-directory locks (test_resume.py, test_slurm.py, test_run_lock.py), ones that hold a run as
its fit ends, a sweep as it ends or as a job of it ends (test_optuna_search.py,
test_preemption.py), and one that
fails its training with a bug (test_optuna_search.py)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import lightning as L
from hydra.experimental.callback import Callback

from cloudlstm.engine.signals import SignalsTogether


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


class KillAtValidation(L.Callback):
    """SIGKILL the process as the validation after training step ``step`` (the global step)
    starts: every checkpoint of that step saved before its validation is on disk."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking and trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class KillAtTestStart(L.Callback):
    """SIGKILL the process as testing starts: training and its last checkpoint are done."""

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


class SignalAtTest(L.Callback):
    """Send ``signum`` to the process itself before test batch ``batch`` (SIGTERM: 15,
    Ctrl-C: 2), as ``scancel`` or a user would while a run or an evaluation tests."""

    def __init__(self, signum: int, batch: int = 1) -> None:
        self.signum = signum
        self.batch = batch

    def on_test_batch_start(self, trainer: L.Trainer, _: object, __: object, idx: int) -> None:
        if idx == self.batch:
            os.kill(os.getpid(), self.signum)


class WaitAt(L.Callback):
    """Hold training at the start of epoch ``epoch`` (or of its training batch ``batch``)
    until file ``until`` exists.

    While it waits, ``<until>.waiting`` exists, so a test knows the job is there (the
    epochs before checkpointed) and can signal, requeue or cancel it. A SIGTERM (what SLURM
    sends a requeued or cancelled job) ends the wait, and Lightning then stops; so does
    SLURM's requeue signal, which the run acts on at the end of the step.
    """

    def __init__(self, epoch: int, until: str, batch: int | None = None) -> None:
        self.epoch = epoch
        self.batch = batch
        self.until = Path(until)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.batch is None and trainer.current_epoch == self.epoch:
            self._wait(trainer)

    def on_train_batch_start(self, trainer: L.Trainer, _: object, __: object, idx: int) -> None:
        if self.batch == idx and trainer.current_epoch == self.epoch:
            self._wait(trainer)

    def _wait(self, trainer: L.Trainer, timeout_s: float = 600) -> None:
        waiting = self.until.with_name(self.until.name + ".waiting")
        waiting.touch()
        deadline = time.monotonic() + timeout_s
        while not self.until.exists() and not stop_noted(trainer):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.until} did not appear in {timeout_s} s")
            time.sleep(0.2)
        waiting.unlink(missing_ok=True)


class WaitWhenBuilt(L.Callback):
    """Hold the run as its Trainer is built (the data read, the model built, no training
    yet) until file ``until`` exists; ``<until>.waiting`` exists while it waits."""

    def __init__(self, until: str, timeout_s: float = 600) -> None:
        until_path = Path(until)
        waiting = until_path.with_name(until_path.name + ".waiting")
        waiting.touch()
        deadline = time.monotonic() + timeout_s
        while not until_path.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{until_path} did not appear in {timeout_s} s")
            time.sleep(0.2)
        waiting.unlink(missing_ok=True)


class WaitAtFitEnd(L.Callback):
    """Hold the run as its fit ends (the callbacks' teardown: training and its last
    checkpoint done, training's Ctrl-C handler put back, the test not begun) until file
    ``until`` exists; ``<until>.waiting`` exists while it waits."""

    def __init__(self, until: str) -> None:
        self.until = until

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            WaitWhenBuilt(self.until)


class WaitAtMultirunEnd(Callback):
    """A Hydra callback (``+hydra.callbacks.<name>._target_=...``) that holds the sweep as
    it ends, after the comparison (the callbacks before it), until file ``until`` exists;
    ``<until>.waiting`` exists while it waits."""

    def __init__(self, until: str) -> None:
        self.until = until

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        WaitWhenBuilt(self.until)


class WaitAtJobEnd(Callback):
    """A Hydra callback that holds each job of a sweep as it ends, after its training and
    test, until file ``<until>_<job number>`` exists; ``<that file>.waiting`` exists while
    it waits."""

    def __init__(self, until: str) -> None:
        self.until = until

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        WaitWhenBuilt(f"{self.until}_{config.hydra.job.num}")


class SaveHpcCheckpointAndKill(L.Callback):
    """At the start of epoch ``epoch``, save ``hpc_ckpt_1.ckpt`` as Lightning's SLURM handler
    does on SIGUSR1, then SIGKILL the process (as SLURM ends a requeued job)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            path = trainer._checkpoint_connector.hpc_save_path(trainer.default_root_dir)
            trainer.save_checkpoint(path)
            os.kill(os.getpid(), signal.SIGKILL)


class SigtermAt(L.Callback):
    """Send SIGTERM to the process itself before training batch ``batch`` of epoch ``epoch``
    (as ``scancel`` or ``docker stop`` would during that step); under DDP in every process,
    or only in the process of global rank ``rank`` (``docker stop``, ``kill <pid>``)."""

    def __init__(
        self, epoch: int, batch: int, rank: int | None = None, signum: int = signal.SIGTERM
    ) -> None:
        self.epoch = epoch
        self.batch = batch
        self.rank = rank
        self.signum = signum  # SIGINT (2): a terminal's Ctrl-C, which every process gets

    def on_train_batch_start(self, trainer: L.Trainer, _: object, __: object, idx: int) -> None:
        mine = self.rank is None or trainer.global_rank == self.rank
        if mine and trainer.current_epoch == self.epoch and idx == self.batch:
            os.kill(os.getpid(), self.signum)


class SignalAfterStep(L.Callback):
    """Send ``signum`` to the process itself at the end of training batch ``batch`` of epoch
    ``epoch``, after the hooks of the callbacks before it (``SignalsTogether``'s, which
    acts on a signal noted before, included): where Lightning's own handler left a run
    stopped without the step's checkpoint, its stop flag set after the callbacks had looked."""

    def __init__(self, epoch: int, batch: int, signum: int = signal.SIGTERM) -> None:
        self.epoch = epoch
        self.batch = batch
        self.signum = signum

    def on_train_batch_end(self, trainer: L.Trainer, _: object, __: object, ___: object,
                           idx: int) -> None:  # fmt: skip
        if trainer.current_epoch == self.epoch and idx == self.batch:
            os.kill(os.getpid(), self.signum)


class BugAtValue(L.Callback):
    """Raise a RuntimeError, an error of no user's (a bug), as training starts, in a run
    whose ``value`` (an interpolated setting, e.g. ``${model.k}``) is ``fails_at``."""

    def __init__(self, value: object, fails_at: object) -> None:
        self.fails = value == fails_at

    def on_train_start(self, *_: object) -> None:
        if self.fails:
            raise RuntimeError("a bug of the test's own")


def stop_noted(trainer: L.Trainer) -> bool:
    """Whether the run was told to stop (SIGTERM, Ctrl-C) or to requeue its job (SLURM's
    signal, run at the end of the step), acted on or not yet."""
    together = [cb for cb in trainer.callbacks if isinstance(cb, SignalsTogether)]
    pending = any(cb.stop_pending or cb.requeue for cb in together)
    return trainer.received_sigterm or pending


class SignalAtValidation(L.Callback):
    """Send ``signum`` to the process itself before batch ``batch`` of the validation after
    training step ``step`` (the global step), as ``scancel`` or a user would during it; or
    of the sanity check (``sanity_check=True``). Only in a fit not resumed (a resumed one
    validates that step again)."""

    def __init__(
        self,
        step: int = 0,
        batch: int = 0,
        signum: int = signal.SIGTERM,
        sanity_check: bool = False,
    ) -> None:
        self.step = step
        self.batch = batch
        self.signum = signum
        self.sanity_check = sanity_check

    def on_validation_batch_start(self, trainer: L.Trainer, _: object, __: object,
                                  idx: int) -> None:  # fmt: skip
        at = trainer.sanity_checking == self.sanity_check and trainer.global_step == self.step
        fitting = trainer.state.fn == "fit" and trainer.ckpt_path is None
        if at and idx == self.batch and fitting:
            os.kill(os.getpid(), self.signum)
