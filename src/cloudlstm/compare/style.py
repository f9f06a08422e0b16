"""What the figures of a comparison share: the reference model, a value axis that starts
near the values when they are close, and rows' labels on short lines (PNG figures and the
--html page alike)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from cloudlstm.compare.groups import Group

REFERENCE = "persistence"  # the model drawn as a dashed reference line, not as a series
LABEL_WIDTH = 32  # characters on a line of a row's label in a legend or under a bar


def is_reference(group: Group) -> bool:
    """True for the persistence forecast's rows: the line every model has to beat."""
    return group.keys.get("model") == REFERENCE


def close_range(means: Sequence[float | None], stds: Sequence[float]) -> tuple[float, float] | None:
    """A value range around the bars when they are all positive and close (their spread
    less than half the largest); None to start at 0.

    From 0, bars of 94 and 109 look alike: the differences between models are what the
    figure is for, and its axis label says that it does not start at 0.
    """
    ends = [(m - s, m + s) for m, s in zip(means, stds, strict=True) if m is not None]
    if not ends:
        return None
    low, high = min(lo for lo, _ in ends), max(hi for _, hi in ends)
    if low <= 0 or high - low >= high / 2:
        return None
    pad = (high - low) * 0.15 or abs(high) * 0.05
    return max(0.0, low - pad), high + pad


def label_lines(label: str, width: int = LABEL_WIDTH) -> list[str]:
    """A legend or tick label on lines of at most ``width`` characters: labels of runs that
    differ in several keys are long enough to squeeze the axes to nothing (a legend as wide
    as the label, or tick labels as tall)."""
    return textwrap.wrap(label, width) or [label]
