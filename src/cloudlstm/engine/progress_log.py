"""One line in the run's log at every validation: how far training is, the monitored score
and the best so far, the time a step takes and the training time left.

The progress bar draws on the terminal alone, so a run in the background, in a sweep's job
or on a cluster node wrote nothing to ``train.log`` between its start and its test, hours
apart on a CPU. The line reads, for example::

    step 500 of 2,000 (epoch 11): val/mae 2.931, best 2.912; 10.2 s a step, 4 h 15 min of
    training left at most (early stopping may end it sooner)
"""

from __future__ import annotations

import logging

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn

from cloudlstm.engine.callbacks import EpochTimer, steps_per_epoch

log = logging.getLogger(__name__)


class ProgressLog(L.Callback):
    """Logs :func:`progress_line` after every validation of a training (rank 0 only)."""

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        fitting = trainer.state.fn == TrainerFn.FITTING
        if fitting and not trainer.sanity_checking and trainer.is_global_zero:
            log.info(progress_line(trainer))


def progress_line(trainer: L.Trainer) -> str:
    """Where the training is, its score and its pace, in one line (module docstring)."""
    budget = _step_budget(trainer)
    score, pace = _score(trainer), _pace(trainer, budget)
    position = _position(trainer, budget)
    return position + (f": {score}" if score else "") + (f"; {pace}" if pace else "")


def _position(trainer: L.Trainer, budget: int | None) -> str:
    step, epoch = trainer.global_step, trainer.current_epoch
    if budget is not None:
        return f"step {step:,} of {budget:,} (epoch {epoch})"
    if trainer.max_epochs is not None and trainer.max_epochs > 0:
        return f"step {step:,} (epoch {epoch} of {trainer.max_epochs})"
    return f"step {step:,} (epoch {epoch})"


def _step_budget(trainer: L.Trainer) -> int | None:
    """The step at which training ends: ``max_steps`` or ``max_epochs``' steps, the sooner
    (None where neither is known)."""
    ends = []
    if trainer.max_steps is not None and trainer.max_steps > 0:
        ends.append(int(trainer.max_steps))
    per_epoch = steps_per_epoch(trainer)
    if trainer.max_epochs is not None and trainer.max_epochs > 0 and per_epoch:
        ends.append(int(trainer.max_epochs) * per_epoch)
    return min(ends) if ends else None


def _score(trainer: L.Trainer) -> str | None:
    """``<monitor> <value>, best <best>``: the monitored checkpoint's metric, the best
    counting this validation (checkpoints are updated after the other callbacks)."""
    monitored = (cb for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint))
    checkpoint = next((cb for cb in monitored if cb.monitor), None)
    if checkpoint is None or checkpoint.monitor not in trainer.callback_metrics:
        return None
    value = float(trainer.callback_metrics[checkpoint.monitor])
    best = value
    if checkpoint.best_model_score is not None:
        earlier = float(checkpoint.best_model_score)
        best = min(value, earlier) if checkpoint.mode == "min" else max(value, earlier)
    return f"{checkpoint.monitor} {value:.4g}, best {best:.4g}"


def _pace(trainer: L.Trainer, budget: int | None) -> str | None:
    """Seconds a step (training batches alone, :class:`EpochTimer`) and the training time
    the rest of the ``budget`` (:func:`_step_budget`) takes at that pace."""
    timer = EpochTimer.of(trainer)
    per_1k = timer.train_s_per_1k_steps if timer is not None else None
    if per_1k is None:
        return None
    per_step = per_1k / 1000
    pace = f"{per_step:.3g} s a step"
    if budget is None:
        return pace
    left = _duration(max(0, budget - trainer.global_step) * per_step)
    stopping = any(isinstance(cb, EarlyStopping) for cb in trainer.callbacks)
    sooner = " at most (early stopping may end it sooner)" if stopping else ""
    return f"{pace}, {left} of training left{sooner}"


def _duration(seconds: float) -> str:
    """``4 h 15 min``, ``12 min``, ``40 s``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"
