"""A training stopped by SIGTERM (``scancel``, ``docker stop``, a preemption without requeue):
its checkpoint saved, its state said, exit status 143.

Lightning's own handling of SIGTERM (its ``_SignalConnector``) only notes the signal: the
loops then raise ``SIGTERMException``, a ``SystemExit`` without a code, so the process
would leave with status 0 (success), without a checkpoint of the steps since the last one.
Here instead:

* :class:`CheckpointOnSigterm` (``callbacks.sigterm_checkpoint``) saves
  ``checkpoints/last.ckpt`` at the end of the training step during which the signal came
  (:mod:`cloudlstm.engine.signals` sets Lightning's flag there and only there), through
  ``trainer.save_checkpoint`` (and so with its ``.checksum``), as a step checkpoint of
  ``callbacks.step_checkpoint`` would be saved. Not at a step that a validation
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
from pathlib import Path
from typing import Any

import lightning as L
from lightning.fabric.plugins.environments import SLURMEnvironment

from cloudlstm.engine import ctrl_c_noted
from cloudlstm.engine.signals import SignalsTogether
from cloudlstm.rundir.layout import checkpoint_step, newest_checkpoint
from cloudlstm.rundir.stops import RunInterrupted, stop_error

log = logging.getLogger(__name__)


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


def interrupted(
    trainer: L.Trainer, run_dir: Path, cfg: Any, by: str | None = None
) -> RunInterrupted:
    """The :class:`RunInterrupted` of a run stopped by ``by`` ("SIGTERM" or "Ctrl-C"; by
    default, the signal the trainer noted), its line logged."""
    saved = next(
        (cb.saved for cb in trainer.callbacks if isinstance(cb, CheckpointOnSigterm)), None
    )
    if saved is not None:
        state, goes_on = f"saved {saved}", "continues from it"
    else:
        newest = newest_checkpoint(run_dir)
        if newest is None:
            state, goes_on = "no checkpoint yet", "starts it over"
        else:
            step = checkpoint_step(newest)
            state = f"not saved; the newest checkpoint is {newest}, of step {step}"
            goes_on = "continues from it"
    if by is None:
        by = "Ctrl-C" if stopped_by_ctrl_c(trainer) else "SIGTERM"
    what = f"interrupted by {by} at step {trainer.global_step}: {state}."
    error = stop_error(what, run_dir, cfg, goes_on, by)
    if trainer.is_global_zero:  # the command of the other DDP processes is Lightning's
        log.error(str(error))
    return error


def stopped_by_ctrl_c(trainer: L.Trainer) -> bool:
    """Whether Ctrl-C stopped the trainer's run: :class:`SignalsTogether` noted one, or the
    programs' handler did (:mod:`cloudlstm.engine.ctrl_c_noted`), which is back in place
    where a fit or a test is under way outside ``SignalsTogether``'s hold (the callbacks'
    teardown as the fit ends, the test's data being set up): Lightning's shutdown after
    that KeyboardInterrupt is a ``sys.exit(1)``, which is the user's stop, not a failure."""
    noted = any(isinstance(cb, SignalsTogether) and cb.ctrl_c > 0 for cb in trainer.callbacks)
    return noted or ctrl_c_noted.pressed()
