"""A training stopped by SIGTERM (``scancel``, ``docker stop``, a preemption without requeue):
its checkpoint saved, its state said, exit status 143.

Lightning's own handling of SIGTERM (its ``_SignalConnector``) only notes the signal: the
loops then raise ``SIGTERMException``, a ``SystemExit`` without a code, so the process
would leave with status 0 (success), without a checkpoint of the steps since the last one.
Here instead:

* :class:`CheckpointOnSigterm` (``callbacks.sigterm_checkpoint``) saves
  ``checkpoints/last.ckpt`` at the end of the training step during which the signal came
  (:mod:`cloudlstm.engine.signals` sets Lightning's flag there while the run trains),
  through ``trainer.save_checkpoint`` (and so with its ``.checksum``), as a step checkpoint
  of ``callbacks.step_checkpoint`` would be saved: after the other callbacks' step-end
  hooks (a weight average's update), where the trainer's assembly puts it. At a step that
  a validation follows, or during that validation (at the end of the batch under way: the
  flag is set at once there), the step is saved as one whose validation is still to run,
  from its first batch: the resumed run runs it before it trains on
  (:mod:`cloudlstm.rundir.pending_validation`, where Lightning's own resume would skip
  it). Not saved, the ``last.ckpt`` there is (of the last validation or step checkpoint)
  staying the one to resume from, and the run's line saying so: during a validation's
  last batch (the validation then ends, and its own ``last.ckpt`` holds the step), the
  sanity check, or where Lightning's loops are not the ones that module knows. During a
  validation with a weight average (``callbacks=ema``), which stands in the model's place
  there, the live weights are put back for the save and the average in again after it
  (:func:`cloudlstm.engine.weight_averaging.live_weights_in_place`), so the checkpoint
  holds each in its own place, as between validations.
* ``train`` turns the stop into :class:`RunInterrupted`, whose one line says where the
  checkpoint is and the command that continues the run (``resume=auto``);
  ``train.py`` logs it and exits with 143 (128 + SIGTERM), writing no ``metrics.json``
  (which marks a finished run). A job of a sweep is reported by the sweep: the basic
  launcher, which runs the jobs in its own process, stops with 143 at the interrupted job;
  a job in a process of its own (joblib) fails, and the sweep exits non-zero with its line.

Inside a SLURM allocation with Lightning's auto-requeue (``SLURMEnvironment``), SIGUSR1
runs Lightning's requeue (``hpc_ckpt_<n>.ckpt``, ``scontrol requeue``), and the SIGTERM of
a requeue or a preemption saves nothing here, so that the requeued job resumes from the
checkpoint it would resume from without this module (``docs/cluster.md``). The run still
ends with 143 and its line. The requeue runs here, at the end of the training step
(:class:`SignalsTogether` notes the signal), after the other callbacks' step-end hooks,
or, with one process, at the end of the batch of the fit's validation under way; where a
validation is due (at a step it follows, or during it, its last batch included), its
checkpoint is saved as SIGTERM's above, to resume into that whole validation (Lightning's
handler saved wherever the signal came, and its resume skipped that validation or ran part
of it). Where Lightning's loops are not the ones known, it is saved as Lightning saves it,
with a warning. With several processes (DDP) the processes agree
on the step at which they stop (:class:`cloudlstm.engine.signals.SignalsTogether`), and
the save, a collective operation, is made there by all of them; where a validation
follows that step, they stop after it, at the ``last.ckpt`` it wrote, and nothing is
saved here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import lightning as L
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.trainer.states import TrainerFn

from cloudlstm.engine import ctrl_c_noted
from cloudlstm.engine.signals import SignalsTogether
from cloudlstm.engine.weight_averaging import check_averaging_hooks, live_weights_in_place
from cloudlstm.rundir.layout import checkpoint_step, newest_checkpoint
from cloudlstm.rundir.pending_validation import (
    check_loops,
    rewound_to_validation,
    settle_resumed_validation,
)
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
        # while saving one that resumes into its validation: whether saved during it
        self._rewinding: bool | None = None
        self._resumed_pending = False  # resumed from such a checkpoint, not yet validated

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        together = _signals_together(trainer)
        if together is not None:  # SLURM's requeue is run here, after the other callbacks
            together.requeue_by = self

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        # the step is done (optimizer step, schedulers, step checkpoints): Lightning raises
        # SIGTERMException right after this hook, or after one batch of the validation that
        # follows; a step checkpoint is saved at this point too
        together = _signals_together(trainer)
        if together is not None and together.requeue_due:  # every DDP process at once
            follows = _validation_follows(trainer, "the requeue's checkpoint resumes past it")
            self._requeue(trainer, together, False if follows else None)
        if not trainer.received_sigterm or self.saved is not None:
            return
        if not saves_on_sigterm(trainer):
            return
        if validates_now(trainer):
            self._save_before_validation(trainer, during_validation=False)
        else:
            self._save(trainer)

    def on_validation_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        together = _signals_together(trainer)
        fitting = trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking
        if together is not None and together.requeue and fitting and trainer.world_size == 1:
            self._requeue(trainer, together, True)  # DDP: at the next step's end, together
        # Lightning stops the validation after this hook; after its last batch it finishes
        # it instead (and the run's last.ckpt of that validation holds the step)
        if not trainer.received_sigterm or self.saved is not None or trainer.sanity_checking:
            return
        if trainer.state.fn != TrainerFn.FITTING or trainer.world_size > 1:
            return  # DDP: SignalsTogether stops after the validation, at the same step
        if not saves_on_sigterm(trainer):
            return
        loop = trainer.fit_loop.epoch_loop.val_loop
        if not getattr(getattr(loop, "batch_progress", None), "is_last_batch", True):
            self._save_before_validation(trainer, during_validation=True)

    def _save_before_validation(self, trainer: L.Trainer, during_validation: bool) -> None:
        """Save the step as a checkpoint that resumes into its whole validation, where
        Lightning's loops are the ones :mod:`cloudlstm.rundir.pending_validation` knows;
        else save nothing: the run then continues from its newest checkpoint."""
        if _can_rewind(trainer, during_validation, "no checkpoint saved"):
            with self._rewound(trainer, during_validation):
                self._save(trainer, " before its validation, which a resumed run runs first")

    def _requeue(
        self, trainer: L.Trainer, together: SignalsTogether, during_validation: bool | None
    ) -> None:
        """Run SLURM's requeue (Lightning's: ``hpc_ckpt_<n>.ckpt``, ``scontrol requeue``); at
        a step a validation follows (``during_validation=False``) or during it (True), its
        checkpoint resumes into that whole validation, where it can (else, with a warning,
        past it, as Lightning's own)."""
        why = "the requeued run resumes past that validation"
        if during_validation is None or not _can_rewind(trainer, during_validation, why):
            together.run_requeue()
            return
        with self._rewound(trainer, during_validation):
            together.run_requeue()

    @contextmanager
    def _rewound(self, trainer: L.Trainer, during_validation: bool) -> Iterator[None]:
        """Within the block, a checkpoint saved resumes into the validation due."""
        # during the validation a weight average (callbacks=ema) is in the weights' place
        live = live_weights_in_place(trainer) if during_validation else nullcontext()
        self._rewinding = during_validation
        try:
            with live:
                yield
        finally:
            self._rewinding = None

    def _save(self, trainer: L.Trainer, note: str = "") -> None:
        trainer.save_checkpoint(self.path, weights_only=False)  # every state, to resume
        self.saved = self.path
        if trainer.is_global_zero:  # every DDP process saved (together), rank 0 says so
            log.info("Stopped: saved %s at step %d%s.", self.path, trainer.global_step, note)

    def state_dict(self) -> dict[str, Any]:
        # marks the checkpoint that resumes into a validation, for on_validation_start
        return {"validation_pending": self._rewinding is not None}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resumed_pending = bool(state_dict.get("validation_pending", False))

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self._rewinding is not None:  # checked before the save: this does not raise
            loops = checkpoint["loops"]
            loops["fit_loop"] = rewound_to_validation(loops["fit_loop"], self._rewinding)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._resumed_pending and not trainer.sanity_checking:
            self._resumed_pending = False
            try:
                settle_resumed_validation(trainer)
            except AttributeError as err:  # resumed under another Lightning
                log.warning("Cannot settle the resumed validation's progress (%s).", err)

    def on_train_batch_start(self, trainer: L.Trainer, *_: Any) -> None:
        if self._resumed_pending:  # resumed past the validation: another Lightning's loops
            self._resumed_pending = False
            log.warning(
                "Resumed at step %d without the validation the checkpoint left to run: its "
                "metrics, early stopping and best checkpoint come at the next validation.",
                trainer.global_step,
            )


def validates_now(trainer: L.Trainer) -> bool:
    """Whether a validation follows the training step that just ended (True where
    Lightning's loop cannot say: a checkpoint is then not saved)."""
    follows = _validation_follows(trainer, "no checkpoint saved")
    return True if follows is None else follows


def _validation_follows(trainer: L.Trainer, why: str) -> bool | None:
    """Whether a validation follows the training step that just ended; None where
    Lightning's loop cannot say (with a warning ending in ``why``)."""
    loop = trainer.fit_loop
    try:
        return bool(loop.epoch_loop._should_check_val_fx(loop._data_fetcher))
    except Exception as err:  # Lightning's private API changed
        log.warning("Cannot tell whether validation follows (%s): %s.", err, why)
        return None


def _can_rewind(trainer: L.Trainer, during_validation: bool, why: str) -> bool:
    """Whether a checkpoint saved now can resume into the validation due (Lightning's loops
    and weight averaging are the ones known); else a warning ending in ``why``."""
    try:
        check_loops(trainer)
        rewound_to_validation(trainer.fit_loop.state_dict(), during_validation)
        check_averaging_hooks(trainer)
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        log.warning("Cannot save a checkpoint that validates when resumed (%s): %s.", err, why)
        return False
    return True


def _signals_together(trainer: L.Trainer) -> SignalsTogether | None:
    return next((cb for cb in trainer.callbacks if isinstance(cb, SignalsTogether)), None)


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
