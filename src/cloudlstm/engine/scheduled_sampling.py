"""Scheduled sampling: a decoder that reads its own forecasts is fed the truth while it
learns, less and less often.

``module.scheduled_sampling=<tau>`` (a number of training steps; null, the default: off)
is DCRNN's curriculum learning (Li et al. 2018, after Bengio et al. 2015): at training step
``s`` the decoder reads, as the input of each forecast step, the true value of the step
before instead of its own forecast with probability

    p(s) = tau / (tau + exp(s / tau))

(the inverse sigmoid decay), near 1 at the start, one half at ``s = tau ln tau``, and
towards 0 after. As in DCRNN's code one draw decides a decoder step for the whole batch;
where the true value was not observed (a masked target), the decoder reads its forecast.
The draws come from torch's global generator, so a resumed run draws what the
uninterrupted one does. Validation, testing and forecasting never read the truth.

The option applies to every model with an autoregressive decoder
(:attr:`~cloudlstm.models.base.ForecastModel.reads_own_forecasts`); a model that forecasts
all steps at once has nothing to feed, and is refused. ``tau`` is in steps: DCRNN trains
METR-LA with ``tau = 2000`` over about 37,500 steps, so that p falls to one half at step
15,200; a budget of ``S`` steps with the same shape takes ``tau`` near ``S / 18``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from cloudlstm.errors import UserError
from cloudlstm.models.teacher import Teacher

__all__ = ["check_scheduled_sampling", "draw_teacher", "truth_probability"]


def check_scheduled_sampling(value: Any, model: nn.Module) -> int | None:
    """``module.scheduled_sampling`` as a whole number of steps, or None (off).

    Raises:
        UserError: not a whole number >= 1, or a model without a decoder reading its own
            forecasts.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(
            f"module.scheduled_sampling={value!r}: give the decay's steps, a whole number "
            ">= 1 (e.g. module.scheduled_sampling=100: the truth is read with probability "
            "one half at step 460), or null for none."
        )
    if not getattr(model, "reads_own_forecasts", False):
        raise UserError(
            f"module.scheduled_sampling={value}: {type(model).__name__} forecasts its steps "
            "without reading its own forecasts, so there is nothing to feed the truth in "
            "place of; scheduled sampling applies to the models with an autoregressive "
            "decoder (CloudLSTM, ConvLSTM, PredRNN++, DCRNN, LSTM, ...). Drop it, or set "
            "module.scheduled_sampling=null."
        )
    return value


def truth_probability(step: int, decay_steps: int) -> float:
    """``p(step) = tau / (tau + exp(step / tau))`` with ``tau = decay_steps``: how likely a
    decoder step reads the truth at training step ``step``."""
    exponent = step / decay_steps
    if exponent > 700:  # exp overflows a float: p is 0 to double precision long before
        return 0.0
    return decay_steps / (decay_steps + math.exp(exponent))


def draw_teacher(
    y: torch.Tensor,
    y_mask: torch.Tensor,
    probability: float,
    anchor: torch.Tensor | None = None,
) -> Teacher:
    """The truth of one training batch, at the decoder steps drawn with ``probability``.

    Args:
        y: the normalised targets ``(B, J, N, C_out)``.
        y_mask: where they were observed, the same shape (bool).
        anchor: with ``module.anchor=last``, the last observed frame ``(B, N, C_out)`` that
            the module adds to the model's output: the model's own output space is the
            targets less it.

    Returns:
        A :class:`~cloudlstm.models.teacher.Teacher` whose ``use`` is the drawn steps'
        observed targets; one draw per step, from torch's global generator.
    """
    drawn = torch.rand(y.shape[1]) < probability  # (J,)
    use = y_mask & drawn.to(y.device)[None, :, None, None]
    values = y if anchor is None else y - anchor.unsqueeze(1)
    return Teacher(values.detach(), use)
