"""Scheduled sampling's truth, handed to a decoder that reads its own forecasts.

A model with an autoregressive decoder (:attr:`ForecastModel.reads_own_forecasts`) feeds
each step's forecast back as the next step's input. Under scheduled sampling (DCRNN's
curriculum learning, Bengio et al. 2015) a training forward reads the true value instead,
at the steps drawn for it and where that value was observed. The training module draws
the steps and sets the model's :attr:`~cloudlstm.models.base.ForecastModel.teacher` for
that forward alone (:func:`taught`); the decoder reads it through :meth:`Teacher.read`, in
its own layout of the points (:meth:`Teacher.mapped`). Forecasts at validation, test and
prediction time never read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["Teacher", "read_back", "taught"]


@dataclass(frozen=True)
class Teacher:
    """The truth a decoder may read in place of its forecasts.

    ``values`` ``(B, J, ...)``: the true targets of the J forecast steps in the model's
    output space (normalised, less the anchor); ``use`` (bool, the same shape): where the
    decoder reads them, the drawn steps' observed values. Step j is indexed on dim 1.
    """

    values: torch.Tensor
    use: torch.Tensor

    def mapped(self, layout: Callable[[torch.Tensor], torch.Tensor]) -> Teacher:
        """The same truth in a decoder's layout: ``layout`` applied to ``values`` and to
        ``use`` (as 0 / 1 values, so that a layout writing zeros, e.g. into a grid's empty
        cells, marks them unused)."""
        use = layout(self.use.to(self.values.dtype)) > 0.5
        return Teacher(layout(self.values), use)

    def read(self, forecast: torch.Tensor, j: int) -> torch.Tensor:
        """The value of step ``j`` the decoder goes on from: ``forecast`` (any shape with
        as many elements as one step of ``values``), the truth where it is used."""
        use = self.use[:, j].reshape(forecast.shape)
        return torch.where(use, self.values[:, j].reshape(forecast.shape), forecast)


def read_back(teacher: Teacher | None, forecast: torch.Tensor, j: int) -> torch.Tensor:
    """:meth:`Teacher.read`, or ``forecast`` itself without a teacher."""
    return forecast if teacher is None else teacher.read(forecast, j)


@contextmanager
def taught(model: nn.Module, teacher: Teacher | None) -> Iterator[None]:
    """Let ``model``'s decoder read ``teacher`` during the block (one training forward)."""
    model.teacher = teacher  # type: ignore[assignment]
    try:
        yield
    finally:
        model.teacher = None  # type: ignore[assignment]
