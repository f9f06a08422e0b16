"""One line in the run's log at every validation: how far training is, the monitored score
and the best so far, the time a step takes and the training time left.

The progress bar draws on the terminal alone, so a run in the background, in a sweep's job
or on a cluster node wrote nothing to ``train.log`` between its start and its test, hours
apart on a CPU. The line reads, for example::

    step 500 of 2,000 (epoch 11): val/mae 2.931, best 2.912 (persistence 3.204); 10.2 s a
    step, 4 h 15 min of training left at most (early stopping may end it sooner)

``persistence`` is the validation MAE of the last observed frame on the same windows
(``val/persistence_mae``), the floor a trained model has to beat: a model still at
persistence (an anchored one, ``module.anchor=last``, starts there) shows the same number.
Where the best validation MAE at the end of training is no better than it,
:func:`persistence_warning` says so.
"""

from __future__ import annotations

import logging

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn

from cloudlstm.engine.callbacks import EpochTimer, steps_per_epoch
from cloudlstm.engine.module import PERSISTENCE_KEY

log = logging.getLogger(__name__)
# a best validation MAE less than this fraction below persistence's is no better than it
# (the demo's CloudLSTM ends 0.004 % below, its test MAE as far from persistence's)
PERSISTENCE_MARGIN = 1e-3


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
    return f"{checkpoint.monitor} {value:.4g}, best {best:.4g}{_persistence(trainer, checkpoint)}"


def _persistence(trainer: L.Trainer, checkpoint: ModelCheckpoint) -> str:
    """`` (persistence <mae>)`` after a monitored ``val/mae``; after another monitor the
    validation MAE too, which persistence's compares with; empty where it is not measured."""
    metrics = trainer.callback_metrics
    if PERSISTENCE_KEY not in metrics:
        return ""
    persistence = f"persistence {float(metrics[PERSISTENCE_KEY]):.4g}"
    if checkpoint.monitor == "val/mae" or "val/mae" not in metrics:
        return f" ({persistence})"
    return f", val/mae {float(metrics['val/mae']):.4g} ({persistence})"


def persistence_warning(val: dict[str, float], max_steps: int) -> str | None:
    """A line for a training whose best validation MAE (``val/mae_best`` of ``val``, the
    last validation's ``val/`` metrics) is no better than persistence's
    (``val/persistence_mae``, the last observed frame): above it, or less than
    :data:`PERSISTENCE_MARGIN` below, as an anchored model a rounding away from where it
    started is. None where it is better, or either is not known. ``max_steps``: the budget
    it ran (-1: given in epochs)."""
    best, persistence = val.get("val/mae_best"), val.get(PERSISTENCE_KEY)
    if best is None or persistence is None:
        return None
    if not best >= persistence * (1 - PERSISTENCE_MARGIN):  # NaN: nothing to compare
        return None
    longer = f"trainer.max_steps={4 * max_steps}" if max_steps > 0 else "trainer.max_epochs=..."
    return (
        f"The best validation MAE, {best:.5g}, is no better than persistence's, "
        f"{persistence:.5g} (the last observed frame, on the same windows; less than "
        f"{PERSISTENCE_MARGIN:.1%} below it or above): the model has learned nothing that "
        f"forecasts better. Train longer ({longer}), or try another model or recipe (e.g. "
        "model=linear)."
    )


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
