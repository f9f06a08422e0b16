"""Where the train / val / test parts lie: the last fractions of the steps (the default), or
the times at which each part begins (``data.split_times``), as a user who knows the
calendar of the data chooses them: a test part of ordinary weeks rather than the holidays
at the end of a series, or the parts of a published protocol's dates.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from cloudlstm.data.pipeline.splits import split_bounds
from cloudlstm.data.sources.tables import infer_step
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.errors import UserError

log = logging.getLogger(__name__)

# The keys of data.split_times: where training, validation and test begin, and where the
# test ends (the steps from `end` on are not used); `train` and `end` are optional.
SPLIT_TIMES = ("train", "val", "test", "end")
EXAMPLE = 'data.split_times=\'{val: "2013-12-09", test: "2013-12-16"}\''


@dataclass(frozen=True)
class SplitRule:
    """The chronological parts of a stream: by ``val_fraction`` and ``test_fraction``
    (:func:`~cloudlstm.data.pipeline.splits.split_bounds`), or, with ``times``, between
    the given times (:func:`bounds_at_times`)."""

    val_fraction: float = 0.1
    test_fraction: float = 0.2
    times: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.times is not None:
            object.__setattr__(self, "times", checked_times(self.times))

    def bounds(self, stream: PointCloudStream) -> dict[str, tuple[int, int]]:
        """``[start, end)`` steps of each part of ``stream``."""
        if self.times is None:
            return split_bounds(stream.num_steps, self.val_fraction, self.test_fraction)
        return bounds_at_times(stream.timestamps, self.times, stream.name)

    def warn_between_steps(self, stream: PointCloudStream) -> None:
        """Warn of a split time that is no step of ``stream`` (``00:30`` in hourly data):
        its part begins at the next step, which the user may not expect."""
        if self.times is None or stream.timestamps is None:
            return
        stamps = np.asarray(stream.timestamps, dtype="datetime64[ns]")
        for key, time in self.times.items():
            at = np.datetime64(time.as_unit("ns"))
            step = int(np.searchsorted(stamps, at, "left"))
            if step < len(stamps) and stamps[step] != at:
                log.warning(
                    "data.split_times.%s=%s is no time of the data's steps: that part begins "
                    "at the next one, %s.",
                    key,
                    time,
                    pd.Timestamp(stamps[step]),
                )

    @property
    def optional(self) -> set[str]:
        """The parts that may hold no window: those given a zero fraction; with times, none."""
        if self.times is not None:
            return set()
        fractions = {"val": self.val_fraction, "test": self.test_fraction}
        return {part for part, fraction in fractions.items() if fraction == 0}


def checked_times(times: Mapping[str, Any]) -> dict[str, pd.Timestamp]:
    """``data.split_times`` as timestamps, refused in one line where a key is unknown, ``val``
    or ``test`` is missing, or a value is not a time. A time with a UTC offset becomes UTC,
    as the data readers store such times (``data/sources/times.py``); one without is taken
    as the data's own times."""
    if not isinstance(times, Mapping):
        raise UserError(f"data.split_times={times!r} is not a mapping: give {EXAMPLE}.")
    if unknown := sorted(set(times) - set(SPLIT_TIMES)):
        raise UserError(
            f"data.split_times has no key {', '.join(map(str, unknown))}: its keys are val and "
            "test, where those parts begin, and optionally train (where training begins) and "
            f"end (where the test ends), e.g. {EXAMPLE}."
        )
    if missing := [key for key in ("val", "test") if times.get(key) is None]:
        raise UserError(f"data.split_times needs {' and '.join(missing)}: e.g. {EXAMPLE}.")
    parsed = {}
    for key, value in times.items():
        if value is None:
            continue
        if isinstance(value, int | float):  # pandas reads 2024 as 2024 ns after 1970
            raise UserError(
                f"data.split_times.{key}={value!r} is a number, not a time: write the date "
                f"quoted, e.g. '{value}-01-01' or {EXAMPLE}."
            )
        try:
            parsed[key] = pd.Timestamp(value)
        except (ValueError, TypeError):
            raise UserError(
                f"data.split_times.{key}={value!r} is not a time: e.g. '2013-12-16' or "
                "'2013-12-16 08:00'."
            ) from None
        if parsed[key] is pd.NaT:
            raise UserError(f"data.split_times.{key}={value!r} is not a time.")
        if parsed[key].tzinfo is not None:  # as the readers store times with an offset
            parsed[key] = parsed[key].tz_convert("UTC").tz_localize(None)
    return parsed


def bounds_at_times(
    timestamps: np.ndarray | None, times: Mapping[str, pd.Timestamp], name: str
) -> dict[str, tuple[int, int]]:
    """The parts between ``times``: each begins at the first step at or after its time;
    training at the first step without ``train``, and the test ends after the last step
    without ``end``.

    Raises:
        UserError: the stream has no times, or the parts are not in order or one is empty.
    """
    if timestamps is None:
        raise UserError(
            f"data.split_times needs the data's times, and {name} has none: split it with "
            "data.val_fraction and data.test_fraction."
        )
    stamps = np.asarray(timestamps, dtype="datetime64[ns]")
    check_within_the_data(stamps, times, name)
    default = {"train": 0, "end": len(stamps)}
    steps = {
        key: int(np.searchsorted(stamps, np.datetime64(times[key].as_unit("ns")), "left"))
        if key in times
        else default[key]
        for key in SPLIT_TIMES
    }
    order = [steps[key] for key in SPLIT_TIMES]
    if any(a >= b for a, b in zip(order, order[1:], strict=False)):
        given = ", ".join(f"{k}={times[k]}" for k in SPLIT_TIMES if k in times)
        raise UserError(
            f"data.split_times ({given}) must leave each part at least one step, in the order "
            f"train < val < test < end, within the data's times ({name}: "
            f"{pd.Timestamp(stamps[0])} to {pd.Timestamp(stamps[-1])})."
        )
    return {
        "train": (steps["train"], steps["val"]),
        "val": (steps["val"], steps["test"]),
        "test": (steps["test"], steps["end"]),
    }


def check_within_the_data(stamps: np.ndarray, times: Mapping[str, pd.Timestamp], name: str) -> None:
    """Refuse a ``train`` before the data's first step or an ``end`` after the step that
    would follow its last: that part would begin or end at the data's edge instead, and
    a protocol's dates would be met in name only.

    Raises:
        UserError: naming the time, the data's span and the two ways out.
    """
    if len(stamps) < 2:
        return
    first, after_last = stamps[0], stamps[-1] + infer_step(stamps)
    span = f"{name} runs from {pd.Timestamp(first)} to {pd.Timestamp(stamps[-1])}"
    if "train" in times and np.datetime64(times["train"].as_unit("ns")) < first:
        raise UserError(
            f"data.split_times.train={times['train']} is before the data's first step ({span}):"
            " training would begin at the data's start. Leave train out to train from there, "
            "or give data that reach back to it."
        )
    if "end" in times and np.datetime64(times["end"].as_unit("ns")) > after_last:
        raise UserError(
            f"data.split_times.end={times['end']} is after the data's last step ({span}): the "
            "test would end at the data's end. Leave end out to test up to there, or give data "
            "that reach it."
        )
