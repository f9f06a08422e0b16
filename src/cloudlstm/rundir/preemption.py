"""A training stopped by SIGTERM (``scancel``, ``docker stop``, a preemption without requeue):
its checkpoint saved, its state said, exit status 143.

Lightning's own handling of SIGTERM (its ``_SignalConnector``) only notes the signal: the
loops then raise ``SIGTERMException``, a ``SystemExit`` without a code, so the process
would leave with status 0 (success), without a checkpoint of the steps since the last one.
Here instead:

* :class:`CheckpointOnSigterm` (``callbacks.sigterm_checkpoint``) saves
  ``checkpoints/last.ckpt`` at the end of the training step during which the signal came,
  through ``trainer.save_checkpoint`` (and so with its ``.checksum``), as a step checkpoint
  of ``callbacks.step_checkpoint`` would be saved. Not at a step that a validation
  follows (Lightning would resume past that validation without running it), nor during a
  validation: the ``last.ckpt`` there is (of the last validation or step checkpoint)
  stays the one to resume from, and the run's line says so.
* ``train`` turns the stop into :class:`RunInterrupted`, whose one line says where the
  checkpoint is and the command that continues the run (``resume=auto``);
  ``train.py`` logs it and exits with 143 (128 + SIGTERM), writing no ``metrics.json``
  (which marks a finished run). A job of a sweep is reported by the sweep: the basic
  launcher, which runs the jobs in its own process, stops with 143 at the interrupted job;
  a job in a process of its own (joblib) fails, and the sweep exits non-zero with its line.

Inside a SLURM allocation with Lightning's auto-requeue (``SLURMEnvironment``), SLURM's
signals are Lightning's: SIGUSR1 saves ``hpc_ckpt_<n>.ckpt`` and requeues the job, and the
SIGTERM of a requeue or a preemption saves nothing here, so that the requeued job resumes
from the checkpoint it would resume from without this module (``docs/cluster.md``). The
run still ends with 143 and its line. With several processes (DDP) the processes agree
on the step at which they stop (:class:`cloudlstm.engine.signals.SignalsTogether`), and
the save, a collective operation, is made there by all of them.
"""

from __future__ import annotations

import logging
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment

from cloudlstm.engine.signals import SignalsTogether
from cloudlstm.errors import UserError

log = logging.getLogger(__name__)

EXIT_CODE = 128 + signal.SIGTERM  # 143, what a shell reports for a process ended by SIGTERM


CTRL_C_EXIT_CODE = 128 + signal.SIGINT  # 130, what a shell reports after Ctrl-C


class RunInterrupted(UserError):
    """A training stopped by SIGTERM or Ctrl-C: the message names its checkpoint and how
    to go on; ``exit_code`` is the status the program leaves with."""

    def __init__(self, message: str, exit_code: int = EXIT_CODE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class CheckpointOnSigterm(L.Callback):
    """Save ``<dirpath>/<filename>.ckpt`` when SIGTERM stops the training (see the module).

    Args:
        dirpath: the run's checkpoint directory (``checkpoints/``).
        filename: the file's name without ``.ckpt``: ``last``, what ``resume=auto`` takes.
    """

    def __init__(self, dirpath: str | Path, filename: str = "last") -> None:
        self.path = Path(dirpath) / f"{filename}.ckpt"
        self.saved: Path | None = None  # the checkpoint saved on SIGTERM, if any

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        # the step is done (optimizer step, schedulers, step checkpoints): Lightning raises
        # SIGTERMException right after this hook; a step checkpoint is saved at this point too
        if not trainer.received_sigterm or self.saved is not None:
            return
        if not saves_on_sigterm(trainer):
            return
        if validates_now(trainer):
            # Lightning resumes a checkpoint of this point as one whose validation has run:
            # the validation would be skipped. Without it, the run goes on from the last one.
            log.info("Stopped before a validation: resuming goes back to the last checkpoint.")
            return
        trainer.save_checkpoint(self.path, weights_only=False)  # every state, to resume
        self.saved = self.path
        if trainer.is_global_zero:  # every DDP process saved (together), rank 0 says so
            log.info("Stopped: saved %s at step %d.", self.path, trainer.global_step)


def validates_now(trainer: L.Trainer) -> bool:
    """Whether a validation follows the training step that just ended (True where
    Lightning's loop cannot say: a checkpoint is then not saved)."""
    loop = trainer.fit_loop
    try:
        return bool(loop.epoch_loop._should_check_val_fx(loop._data_fetcher))
    except Exception as err:  # Lightning's private API changed
        log.warning("Cannot tell whether validation follows (%s): no checkpoint saved.", err)
        return True


def saves_on_sigterm(trainer: L.Trainer) -> bool:
    """Whether :class:`CheckpointOnSigterm` saves for this trainer: one process, or
    several that stop at the same step (:class:`SignalsTogether`); and no SLURM
    auto-requeue (whose signals Lightning handles)."""
    environment = trainer._accelerator_connector.cluster_environment
    slurm_requeue = isinstance(environment, SLURMEnvironment) and environment.auto_requeue
    together = any(isinstance(cb, SignalsTogether) for cb in trainer.callbacks)
    return (trainer.world_size == 1 or together) and not slurm_requeue


def interrupted(trainer: L.Trainer, run_dir: Path, cfg: Any) -> RunInterrupted:
    """The :class:`RunInterrupted` of a run stopped by SIGTERM or Ctrl-C, its line logged."""
    saved = next(
        (cb.saved for cb in trainer.callbacks if isinstance(cb, CheckpointOnSigterm)), None
    )
    if saved is not None:
        state, goes_on = f"saved {saved}", "continues from it"
    else:
        from cloudlstm.rundir.resume import newest_checkpoint

        newest = newest_checkpoint(run_dir)
        if newest is None:
            state, goes_on = "no checkpoint yet", "starts it over"
        else:
            step = checkpoint_step(newest)
            state = f"not saved; the newest checkpoint is {newest}, of step {step}"
            goes_on = "continues from it"
    ctrl_c = stopped_by_ctrl_c(trainer)
    by = "Ctrl-C" if ctrl_c else "SIGTERM"
    what = f"interrupted by {by} at step {trainer.global_step}: {state}."
    message = f"{who_stopped().capitalize()}{what} {continuation(run_dir, cfg, goes_on)}"
    if trainer.is_global_zero:  # the command of the other DDP processes is Lightning's
        log.error(message)
    return RunInterrupted(message, CTRL_C_EXIT_CODE if ctrl_c else EXIT_CODE)


def stopped_by_ctrl_c(trainer: L.Trainer) -> bool:
    """Whether Ctrl-C stopped the trainer's run (:class:`SignalsTogether` noted one)."""
    return any(isinstance(cb, SignalsTogether) and cb.ctrl_c > 0 for cb in trainer.callbacks)


def who_stopped() -> str:
    """``job <n> of the sweep, `` under a multirun, else nothing."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return f"job {HydraConfig.get().job.num} of the sweep, "
    return "run "


def continuation(run_dir: Path, cfg: Any, goes_on: str = "continues it") -> str:
    """How to continue the run in ``run_dir``, as commands to copy (resume=auto)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    if not HydraConfig.initialized():  # train() called from Python
        return f"Run dir {run_dir}: training with paths.output_dir={run_dir} {goes_on}."
    hydra = HydraConfig.get()
    # as given: an interpolation in an override stays one
    given = OmegaConf.to_container(hydra.overrides, resolve=False)
    task = [o for o in given["task"] if o.lstrip("+~").split("=")[0] != "resume"]
    if str(cfg.get("resume", "auto")) != "auto":
        task.append("resume=auto")  # never, or an older checkpoint, would not continue it
    if hydra.mode == RunMode.MULTIRUN:
        alone = shlex.join([*program(), *task, f"hydra.run.dir={run_dir}"])
        return (
            f"Run dir {run_dir}: `{alone}` {goes_on} alone, or the sweep's command with "
            f"hydra.sweep.dir={hydra.sweep.dir} runs its unfinished jobs (finished ones "
            "return their results at once)."
        )
    kept = [o for o in given["hydra"] if o.split("=")[0] not in ("hydra.mode", "hydra.run.dir")]
    command = shlex.join([*program(), *task, *kept, f"hydra.run.dir={run_dir}"])
    return f"Run dir {run_dir}: `{command}` {goes_on} (resume=auto)."


def program() -> list[str]:
    """The command that started training: ``cloudlstm-train`` or ``python <train.py>``."""
    name = Path(sys.argv[0]).name
    if name == "cloudlstm-train":
        return [name]
    return ["python", sys.argv[0] if name == "train.py" else "train.py"]


def checkpoint_step(path: Path) -> int | None:
    """The ``global_step`` of a checkpoint, read without loading its tensors (None if it
    cannot be read)."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except Exception:
        return None
    return checkpoint.get("global_step") if isinstance(checkpoint, dict) else None
