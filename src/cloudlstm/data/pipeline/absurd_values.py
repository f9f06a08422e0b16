"""Absurd readings: values so far from the rest of their channel that they cannot be real.

A single reading of ``1e30`` in a data file is a finite float32, so it passes the checks of
the sources (:mod:`cloudlstm.data.sources.bad_values` refuses text and values beyond
float32 only). Left in, it ruins the run without a word: it inflates the scaler's standard
deviation until every real reading normalises to about 0, and one such value in the test
part makes the test MAE astronomical.

The check measures each observed value by a *robust* z-score,
``|value - median| / spread``, with the median and the spread of its channel taken from
the training part (the part the scaler is fitted on). The spread is the median absolute
deviation from the median, scaled to match a normal distribution's standard deviation
(``1.4826 x MAD``): unlike the standard deviation it is not moved by the outliers it is
meant to find, however large. A channel where most readings are equal (rain: mostly 0)
has no MAD, so the spread is the first non-zero one of the 75th, 90th, 99th and 99.9th
percentiles of the absolute deviations (each divided by the normal distribution's value
there), then their mean, then ``max(|median|, 1)``.

Values whose robust z-score exceeds ``max_abs_z`` (:data:`DEFAULT_MAX_ABS_Z`, 10,000) are
absurd, in every part of the stream (an absurd test value ruins the test scores as surely).
Why 10,000: a value z spreads out weighs z^2 = 1e8 typical readings in the scaler's
variance and in a squared-error loss, so one such value dominates any data set of fewer
than 1e8 readings per channel; while the most extreme real readings of the data sets
here lie far below it (Beijing: 55 spreads for SO2 and 133 for RAIN; the synthetic
mobile traffic, lognormal with Pareto bursts: 541; the synthetic air quality: 37).

What an absurd value does is the source's ``bad_values`` mode (``data.source.bad_values``
of ``data=points``), as for unreadable cells: ``error`` (the default, and for sources
without the option) stops with one line naming the channel, point, time and value;
``warn`` logs that line and treats the values as missing (their series are filled again
linearly in time, as the loaders fill gaps). ``data.max_abs_z=null`` turns the check off.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from cloudlstm.data.pipeline.chunks import time_chunks
from cloudlstm.data.pipeline.stream import PointCloudStream
from cloudlstm.errors import UserError

__all__ = ["DEFAULT_MAX_ABS_Z", "check_max_abs_z", "checked_stream", "robust_spread"]

log = logging.getLogger(__name__)

DEFAULT_MAX_ABS_Z = 1e4
# Observed training values per channel the median and spread are taken from (a strided
# sample of time steps beyond that, so a memory-mapped stream is not read whole).
SAMPLE_SIZE = 1_000_000
SHOWN = 5  # absurd values named in a message
# (quantile of |x - median|, the standard normal's |z| there): MAD first
SPREAD_QUANTILES = ((0.5, 0.6745), (0.75, 1.1503), (0.9, 1.6449), (0.99, 2.5758), (0.999, 3.2905))


def check_max_abs_z(value: Any) -> float | None:
    """``data.max_abs_z`` as a float (None: no check).

    Raises:
        UserError: not a number > 0.
    """
    if value is None:
        return None
    try:
        limit = float(value)
    except (TypeError, ValueError):
        limit = math.nan
    if not limit > 0:
        raise UserError(
            f"data.max_abs_z={value!r}: use a number > 0 (robust z-scores beyond it are "
            f"absurd values; default {DEFAULT_MAX_ABS_Z:g}) or null to check nothing."
        )
    return limit


def robust_spread(values: np.ndarray) -> tuple[float, float]:
    """``(median, spread)`` of a 1-D array of finite values (see the module docstring)."""
    median = float(np.median(values))
    deviation = np.abs(values - median)
    for q, z in SPREAD_QUANTILES:
        spread = float(np.quantile(deviation, q)) / z
        if spread > 0:
            return median, spread
    spread = float(deviation.mean())
    return median, spread if spread > 0 else max(abs(median), 1.0)


@dataclass
class _Found:
    """The absurd values of a stream: count, per channel, and the first few."""

    count: int
    per_channel: np.ndarray  # (C,) counts
    first: list[tuple[int, int, int, float]]  # (t, n, c, value)
    where: np.ndarray  # (K, 3) every (t, n, c)


def checked_stream(
    stream: PointCloudStream,
    train: tuple[int, int],
    max_abs_z: float | None,
    mode: str,
    what: str,
    mode_option: str | None,
) -> PointCloudStream:
    """``stream``, checked for absurd values (module docstring); with ``mode="warn"`` a
    copy in which they are missing and filled again.

    Args:
        train: the training part's ``[start, end)`` steps, where medians and spreads come from.
        max_abs_z: the robust z-score beyond which a value is absurd; None: no check.
        mode: ``"error"`` or ``"warn"``.
        what: how messages name the data (e.g. ``data.source.path=/x.csv``).
        mode_option: the option that selects ``mode`` (``data.source.bad_values``), or None
            where the source has none.

    Raises:
        UserError: ``mode="error"`` and some values are absurd.
    """
    if max_abs_z is None or stream.num_steps == 0:
        return stream
    median, spread = _training_spreads(stream, train)
    found = _find(stream, median, spread, max_abs_z)
    if found is None:
        return stream
    message = _describe(stream, found, median, spread, max_abs_z, what)
    if mode != "warn":
        warn = f", set {mode_option}=warn to treat them as missing" if mode_option else ""
        raise UserError(
            f"{message} Correct or remove them{warn}, or raise data.max_abs_z if they are "
            "real readings (null: no check)."
        )
    log.warning("%s They count as missing (%s=warn).", message, mode_option or "bad_values")
    return _as_missing(stream, found.where)


def _training_spreads(stream: PointCloudStream, train: tuple[int, int]) -> tuple[np.ndarray, ...]:
    """Per channel median and spread of the training part's observed values (NaN where a
    channel has none: it is not checked; the scaler says why it cannot be fitted)."""
    first, end = train
    n, c = stream.num_points, stream.num_channels
    stride = max(1, math.ceil((end - first) * n / SAMPLE_SIZE))
    values = np.asarray(stream.values[first:end:stride])
    seen = np.asarray(stream.mask[first:end:stride]) & np.isfinite(values)
    median, spread = np.full(c, np.nan), np.full(c, np.nan)
    for k in range(c):
        column = values[..., k][seen[..., k]]
        if column.size:
            median[k], spread[k] = robust_spread(column.astype(np.float64))
    return median, spread


def _find(
    stream: PointCloudStream, median: np.ndarray, spread: np.ndarray, max_abs_z: float
) -> _Found | None:
    """Every observed value beyond ``max_abs_z`` spreads from its channel's median, or None."""
    checked = np.isfinite(median)
    limit = np.where(checked, max_abs_z * spread, np.inf)
    center = np.where(checked, median, 0.0)
    where = []
    for a, b in time_chunks(0, stream.num_steps, stream.values[0].size):
        values = np.asarray(stream.values[a:b], dtype=np.float64)
        with np.errstate(invalid="ignore"):
            bad = np.asarray(stream.mask[a:b]) & (np.abs(values - center) > limit)
        if bad.any():
            hits = np.argwhere(bad)
            hits[:, 0] += a
            where.append(hits)
    if not where:
        return None
    hits = np.concatenate(where)
    first = [(int(t), int(n), int(c), float(stream.values[t, n, c])) for t, n, c in hits[:SHOWN]]
    per_channel = np.bincount(hits[:, 2], minlength=stream.num_channels)
    return _Found(len(hits), per_channel, first, hits)


def _describe(
    stream: PointCloudStream,
    found: _Found,
    median: np.ndarray,
    spread: np.ndarray,
    max_abs_z: float,
    what: str,
) -> str:
    """One line: how many, in which channels, the first few (channel, point, time, value)."""
    names = stream.channel_names
    channels = ", ".join(
        f"{names[c]!r} ({count})" for c, count in enumerate(found.per_channel) if count
    )
    cells = "; ".join(
        f"channel {names[c]!r}, point {stream.point_ids[n]}, {_time(stream, t)}: {value:.6g} "
        f"({abs(value - median[c]) / spread[c]:.3g} spreads; training median "
        f"{median[c]:.6g}, spread {spread[c]:.3g})"
        for t, n, c, value in found.first
    )
    more = f" (first {len(found.first)})" if found.count > len(found.first) else ""
    return (
        f"{what}: {found.count} value(s) lie more than {max_abs_z:g} typical spreads from "
        f"their channel's training median (robust z-score), in {channels}{more}: {cells}."
    )


def _time(stream: PointCloudStream, t: int) -> str:
    if stream.timestamps is None:
        return f"step {t}"
    return f"time {pd.Timestamp(stream.timestamps[t])} (step {t})"


def _as_missing(stream: PointCloudStream, where: np.ndarray) -> PointCloudStream:
    """A copy of ``stream`` with the values at ``where`` ``(K, 3)`` missing, and each series
    that had one filled again: linear in time between its observed values, the nearest at
    the ends; a series left with none takes the mean of the other points' readings at each
    step (missing where none has one)."""
    values, mask = np.array(stream.values), np.array(stream.mask)
    t, n, c = where.T
    mask[t, n, c] = False
    steps = np.arange(stream.num_steps, dtype=np.float64)
    for point, channel in {(int(a), int(b)) for a, b in zip(n, c, strict=True)}:
        seen = mask[:, point, channel]
        if seen.any():
            values[:, point, channel] = np.interp(steps, steps[seen], values[seen, point, channel])
            continue
        others = np.where(mask[:, :, channel], values[:, :, channel], np.nan)
        with warnings.catch_warnings():  # "mean of empty slice": no point has a reading then
            warnings.simplefilter("ignore", RuntimeWarning)
            values[:, point, channel] = np.nanmean(others, axis=1)
    return replace(stream, values=values, mask=mask)
