"""An exponential moving average (EMA) of the weights, in their place wherever they are judged.

``callbacks=ema`` adds :class:`EMAWeights`, one recipe option that every model takes alike.
It builds on Lightning's ``WeightAveraging`` (torch's ``AveragedModel`` holds the average):

* every validation runs on the average, so the checkpoint selection, early stopping, the
  conformal calibration and ``metrics.json`` judge the average, not the last step's weights;
* every checkpoint stores the average as its ``state_dict``, with the live weights and the
  number of updates beside it, so ``eval.py``, ``predict.py`` and the test load the average,
  and a resumed run continues both, bit for bit;
* buffers are not averaged: they follow the live model (a running statistic, a neighbour
  index), so only parameters are.

Why: on small data sets the best validation comes after a few hundred steps, at a high
learning rate, where the weights of one step are noisy; their average over the last
~1 / (1 - decay) steps is a smoother point of the same trajectory (docs/results.md, "Small
data sets: the recipe", measures it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import WeightAveraging
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor

from cloudlstm.errors import UserError

# The warm-up decay is (1 + n) / (_WARMUP + n) after n updates: 0.5 after 8, 0.9 after 80,
# 0.99 after 890.
_WARMUP = 10


def ema_update(decay: float) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    """The average's update after ``n`` earlier updates (``AveragedModel``'s ``avg_fn``):
    ``average + (1 - d) * (weights - average)`` with ``d = min(decay, (1 + n) / (10 + n))``.

    The warm-up of ``d`` lets the average follow the weights while they move fast, early in
    training, instead of holding on to their initial values for ~1 / (1 - decay) steps (as
    TensorFlow's ``ExponentialMovingAverage`` with ``num_updates``)."""

    def update(average: Tensor, weights: Tensor, num_averaged: Tensor) -> Tensor:
        warmup = (1 + num_averaged) / (_WARMUP + num_averaged)
        d = torch.clamp(warmup, max=decay).to(average.dtype)
        return average + (1 - d) * (weights - average)

    return update


def check_decay(decay: float) -> float:
    """``decay`` if it is a number in (0, 1); else a one-line error naming the key."""
    number = isinstance(decay, int | float) and not isinstance(decay, bool)
    if not (number and 0 < decay < 1):
        raise UserError(
            f"callbacks.ema_weights.decay={decay!r}: use a number in (0, 1), e.g. 0.99 (an "
            "average over about the last 1 / (1 - decay) = 100 steps)."
        )
    return float(decay)


class EMAWeights(WeightAveraging):
    """Validate, checkpoint and test an exponential moving average of the weights.

    Args:
        decay: the weight of the average at each optimiser step, after the warm-up of
            :func:`ema_update`: it averages over about the last ``1 / (1 - decay)`` steps.
    """

    def __init__(self, decay: float = 0.99) -> None:
        super().__init__(use_buffers=False, avg_fn=ema_update(check_decay(decay)))

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Resuming a fit: the live weights and the average, each from its own key. Testing
        (the best checkpoint after a fit), validating or predicting: nothing, so that the
        checkpoint's ``state_dict``, the average, is what runs; Lightning's callback would
        load the live weights over it whenever a fit in this process made an average."""
        if trainer.state.fn == TrainerFn.FITTING:
            super().on_load_checkpoint(trainer, pl_module, checkpoint)


def check_averaging_hooks(trainer: L.Trainer) -> None:
    """Raise ``TypeError`` unless every weight averaging of the trainer swaps the average
    in and out with Lightning's own validation hooks, which :func:`live_weights_in_place`
    calls (another swap, or none, would be undone wrongly: the caller then saves nothing)."""
    for cb in _averaging(trainer):
        for hook in ("on_validation_epoch_start", "on_validation_epoch_end"):
            if getattr(type(cb), hook) is not getattr(WeightAveraging, hook):
                raise TypeError(f"{type(cb).__name__}.{hook} is not WeightAveraging's")


@contextmanager
def live_weights_in_place(trainer: L.Trainer) -> Iterator[None]:
    """Within the block, during a fit's validation, the live weights are in the model's
    place and the average in its own, as between validations; after it, as before it.

    Why: ``WeightAveraging`` swaps the average into the model as a validation starts and
    back as it ends; a checkpoint saved in between (a SIGTERM's, SLURM's requeue) would
    store the average as the live weights and the live ones as the average. The block
    swaps back with the callbacks' own hooks (checked by :func:`check_averaging_hooks`),
    and again after it: each swap exchanges the values, bit for bit.
    """
    averaging, module = _averaging(trainer), trainer.lightning_module
    for cb in reversed(averaging):
        cb.on_validation_epoch_end(trainer, module)  # the live weights back in place
    try:
        yield
    finally:
        for cb in averaging:
            cb.on_validation_epoch_start(trainer, module)  # the average in, as before


def _averaging(trainer: L.Trainer) -> list[WeightAveraging]:
    return [cb for cb in trainer.callbacks if isinstance(cb, WeightAveraging)]
