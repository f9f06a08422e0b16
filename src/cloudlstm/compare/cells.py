"""What table cells hold: a mean ± std over runs, a difference to a reference, columns."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Stat:
    """Mean and sample std (ddof=1, NaN for one run) over the runs of a group.

    ``decimals`` fixes how it is shown (a published value); None rounds both to the std's
    second significant digit.
    """

    mean: float
    std: float
    decimals: int | None = None

    @classmethod
    def over(cls, values: Sequence[float]) -> Stat:
        arr = np.asarray(values, dtype=float)
        with np.errstate(invalid="ignore"):  # an infinite value's spread is NaN: no spread shown
            return cls(float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else math.nan)


@dataclass(frozen=True)
class Diff:
    """A mean minus a reference value (the paper's), shown with its relative size."""

    value: float
    reference: float

    @property
    def relative(self) -> float:
        return self.value / self.reference if self.reference else math.nan


@dataclass(frozen=True)
class Column:
    """One table column; ``better`` marks metric columns whose best is bold: ``"min"``,
    ``"max"``, or a number, the value the best is closest to (an interval's nominal
    coverage, :attr:`~cloudlstm.engine.declared_metrics.MetricInfo.target`)."""

    name: str
    cells: list[Any]  # str, int, float, None or Stat
    better: str | float | None = None
    # the ``data`` column's: each row's data set (Group.data), within which best cells are
    # chosen, where it says more than the data's name; None: the names are the data sets
    data_sets: list[str] | None = None
