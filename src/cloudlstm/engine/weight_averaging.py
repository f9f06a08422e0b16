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

from collections.abc import Callable
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
