"""Absurd readings: values outside their channel's physical range, or so far from the rest
of their channel that they cannot be real.

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
``warn`` logs that line and treats the values as missing (their series are filled again as
the loaders fill gaps: each holds its last reading forward, a leading gap takes the first
one). ``data.max_abs_z=null`` turns the check off.

Physical ranges: a source may declare the range of its channels' possible values,
``physical_ranges() -> {channel: (lo, hi)}`` with None for an open end (the Beijing and
Urban Air concentrations and the mobile traffic cannot be negative, Beijing's pressure lies
within 850-1100 hPa); ``data.valid_ranges`` (``{channel: [lo, hi]}``, null for an open end,
``{channel: null}``: no check) adds ranges and replaces the source's. An observed value
outside its channel's range is refused, or missing with ``bad_values=warn``, as an absurd
value is, and before the z-scores are measured: the same search and the same line, naming
the range and the option that changes it.

Forecasting new data checks a history the same way (:func:`checked_history`), against the
training data's medians, spreads, ranges and ``max_abs_z`` (:func:`training_reference`),
which the checkpoint stores (``DataSpec.value_reference``): a history is too short to
measure its own spreads, and its values must be judged by the data the model learned.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from cloudlstm.data.chunks import time_chunks
from cloudlstm.data.sources.tables import fill_gaps_causally, mean_of_readings
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.data.transforms import StandardScaler
from cloudlstm.errors import UserError

__all__ = [
    "DEFAULT_MAX_ABS_Z",
    "RANGES_OPTION",
    "CellNames",
    "Range",
    "check_max_abs_z",
    "check_resolution",
    "check_valid_ranges",
    "checked_history",
    "checked_stream",
    "merged_ranges",
    "robust_spread",
    "training_reference",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_ABS_Z = 1e4
# Observed training values per channel the median and spread are taken from (a strided
# sample of time steps beyond that, so a memory-mapped stream is not read whole).
SAMPLE_SIZE = 200_000
SHOWN = 5  # absurd values named in a message
# (quantile of |x - median|, the standard normal's |z| there): MAD first
SPREAD_QUANTILES = ((0.5, 0.6745), (0.75, 1.1503), (0.9, 1.6449), (0.99, 2.5758), (0.999, 3.2905))
RANGES_OPTION = "data.valid_ranges"
# a channel's valid values: (lowest, highest), None for an open end
Range = tuple[float | None, float | None]
# cells (step, point) -> how messages name each one's row in the user's table ("line 57"),
# asked once for the cells a message shows: a file's lines are read once for them all
CellNames = Callable[[list[tuple[int, int]]], list[str]]


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


def check_valid_ranges(value: Any) -> dict[str, Range | None]:
    """``data.valid_ranges`` as ``{channel: (lo, hi)}`` (None: that channel is not checked,
    whatever its source declares).

    Raises:
        UserError: not a mapping of channel names to ``[lo, hi]`` (numbers or null, lo <= hi)
            or null.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UserError(
            f"{RANGES_OPTION}={value!r}: give a mapping of channel names to [lo, hi], e.g. "
            f"{RANGES_OPTION}={{no2:[0,null]}} (null for an open end)."
        )
    return {str(name): _range(name, bounds) for name, bounds in value.items()}


def _range(name: Any, bounds: Any) -> Range | None:
    """One channel's ``[lo, hi]`` of ``data.valid_ranges`` as a tuple (None: not checked)."""
    if bounds is None:
        return None
    pair = [] if isinstance(bounds, str | bytes | Mapping) else list(_items(bounds))
    ends = [None if b is None else _number(b) for b in pair]
    if len(pair) == 2 and not any(e is not None and math.isnan(e) for e in ends):
        lo, hi = ends
        if lo is None or hi is None or lo <= hi:
            return (lo, hi) if (lo, hi) != (None, None) else None
    raise UserError(
        f"{RANGES_OPTION}.{name}={bounds!r}: give [lo, hi] with lo <= hi (numbers; null for "
        f"an open end, e.g. {RANGES_OPTION}={{{name}:[0,null]}}), or null for no check."
    )


def _items(bounds: Any) -> list:
    try:
        return list(bounds)
    except TypeError:
        return []


def _number(value: Any) -> float:
    """``value`` as a finite float; NaN for anything else (refused by the caller)."""
    if isinstance(value, bool):
        return math.nan
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number if math.isfinite(number) else math.nan


def merged_ranges(
    declared: Mapping[str, Range],
    given: Mapping[str, Range | None],
    channels: Sequence[str],
) -> dict[str, Range]:
    """The valid range of each channel that has one: the source's ``declared`` physical
    ranges, each replaced by the user's ``given`` one (``data.valid_ranges``; None: none).

    Raises:
        UserError: ``given`` names a channel the data does not have.
        ValueError: ``declared`` does (the source's mistake).
    """
    unknown = [name for name in given if name not in channels]
    if unknown:
        # Hydra merges a mapping given alone into the config's (refusing a new name, or
        # keeping the old ones with ++): null first, so that the mapping replaces it
        raise UserError(
            f"{RANGES_OPTION} names {unknown}, not channels of the data; its channels are "
            f"{list(channels)}. Set {RANGES_OPTION}=null to check only the ranges the source "
            f"declares, or replace the config's with {RANGES_OPTION}=null "
            f"'{RANGES_OPTION}={{{channels[0]}:[lo,hi]}}' (null for an open end)."
        )
    unknown = [name for name in declared if name not in channels]
    if unknown:
        raise ValueError(f"physical ranges of {unknown}, not channels of {list(channels)}")
    ranges = {**declared, **given}
    return {name: r for name, r in ranges.items() if r is not None and r != (None, None)}


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


@dataclass(frozen=True)
class _Bounds:
    """One check: each channel's valid values, ``lo <= value <= hi``, and how its line reads."""

    lo: np.ndarray  # (C,), -inf: no lower end
    hi: np.ndarray  # (C,), inf: no upper end
    beyond: str  # what the values found do ("lie outside ...")
    detail: Callable[[int, float], str]  # (channel, value) -> the words after the value
    fix: Callable[[str], str]  # (the first channel found) -> how to keep real readings


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
    valid_ranges: Mapping[str, Range] | None = None,
    held_out: np.ndarray | None = None,
) -> PointCloudStream:
    """``stream``, checked for values outside their channel's valid range, then for absurd
    values (module docstring); with ``mode="warn"`` a copy in which they are missing and
    filled again.

    Args:
        train: the training part's ``[start, end)`` steps, where medians and spreads come from.
        max_abs_z: the robust z-score beyond which a value is absurd; None: no check.
        mode: ``"error"`` or ``"warn"``.
        what: how messages name the data (e.g. ``data.source.path=/x.csv``).
        mode_option: the option that selects ``mode`` (``data.source.bad_values``), or None
            where the source has none.
        valid_ranges: ``{channel: (lo, hi)}`` (:func:`merged_ranges`); None end: open.
        held_out: ``(N,)`` bool, points held out of training: their readings give no
            median or spread (their values are still checked against the others').

    Raises:
        UserError: ``mode="error"`` and some values are out of range or absurd.
    """
    if stream.num_steps == 0:
        return stream
    if valid_ranges:
        stream = _checked(stream, _range_bounds(stream, valid_ranges), mode, what, mode_option)
    if max_abs_z is not None:
        bounds = _z_bounds(stream, train, max_abs_z, held_out)
        stream = _checked(stream, bounds, mode, what, mode_option)
    return stream


def _checked(
    stream: PointCloudStream,
    bounds: _Bounds,
    mode: str,
    what: str,
    mode_option: str | None,
    shown: pd.DatetimeIndex | None = None,
    rows: CellNames | None = None,
) -> PointCloudStream:
    """``stream`` when every observed value lies within ``bounds``; else the one line, as an
    error or (``mode="warn"``) a warning, and a copy where those values are missing. The
    line names times as ``shown`` has them (the stream's own where None), and each value's
    row of the user's table as ``rows`` does (its step where None)."""
    found = _find(stream, bounds)
    if found is None:
        return stream
    message = _describe(stream, found, bounds, what, shown, rows)
    if mode != "warn":
        warn = f", set {mode_option}=warn to treat them as missing" if mode_option else ""
        first = stream.channel_names[found.first[0][2]]
        raise UserError(f"{message} Correct or remove them{warn}, or {bounds.fix(first)}.")
    log.warning("%s They count as missing (%s=warn).", message, mode_option or "bad_values")
    return _as_missing(stream, found.where)


def _range_bounds(
    stream: PointCloudStream,
    ranges: Mapping[str, Range],
    fix: Callable[[str], str] | None = None,
) -> _Bounds:
    """The check of the channels' valid ranges (``fix``: how its line ends, by default
    naming ``data.valid_ranges``). The ends are rounded to the stream's float type, so
    that a reading of exactly an end (0.1 read as float32) lies within."""
    c = stream.num_channels
    lo, hi = np.full(c, -np.inf), np.full(c, np.inf)
    for name, (low, high) in ranges.items():
        k = stream.channel_names.index(name)
        lo[k] = -np.inf if low is None else low
        hi[k] = np.inf if high is None else high
    dtype = stream.values.dtype if np.issubdtype(stream.values.dtype, np.floating) else np.float64
    lo, hi = (b.astype(dtype).astype(np.float64) for b in (lo, hi))
    names = stream.channel_names

    def detail(k: int, value: float) -> str:
        return f"valid range {_range_text(*ranges[names[k]])}"

    def change(name: str) -> str:
        # ++ sets the one channel whether the config's ranges are null, name it or not; a
        # key path cannot hold a name such as PM2.5, which the mapping form can
        if re.fullmatch(r"[A-Za-z_][\w-]*", name):
            key = f"{RANGES_OPTION}.{name}"
            return (
                f"change the range if they are real readings: '++{key}=[lo,hi]' (null for an "
                f"open end; ++{key}=null: no check)"
            )
        return (
            f"change the range if they are real readings: '{RANGES_OPTION}={{{name}:[lo,hi]}}' "
            f"(null for an open end; {{{name}:null}}: no check)"
        )

    return _Bounds(lo, hi, "lie outside their channel's valid range", detail, fix or change)


def _range_text(lo: float | None, hi: float | None) -> str:
    if lo is None:
        return f"<= {hi:g}"
    return f">= {lo:g}" if hi is None else f"[{lo:g}, {hi:g}]"


def _z_bounds(
    stream: PointCloudStream,
    train: tuple[int, int],
    max_abs_z: float,
    held_out: np.ndarray | None = None,
) -> _Bounds:
    """The check of robust z-scores: within ``max_abs_z`` spreads of the training median."""
    return _z_bounds_of(*_training_spreads(stream, train, held_out), max_abs_z)


def _z_bounds_of(
    median: np.ndarray,
    spread: np.ndarray,
    max_abs_z: float,
    fix: Callable[[str], str] | None = None,
) -> _Bounds:
    """The check of robust z-scores against each channel's ``median`` and ``spread``
    ``(C,)`` (NaN: not checked); ``fix``: how its line ends, by default naming
    ``data.max_abs_z``."""
    checked = np.isfinite(median)
    half = np.where(checked, max_abs_z * spread, np.inf)
    center = np.where(checked, median, 0.0)

    def detail(k: int, value: float) -> str:
        return (
            f"{abs(value - median[k]) / spread[k]:.3g} spreads; training median "
            f"{median[k]:.6g}, spread {spread[k]:.3g}"
        )

    return _Bounds(
        center - half,
        center + half,
        f"lie more than {max_abs_z:g} typical spreads from their channel's training median "
        "(robust z-score)",
        detail,
        fix or (lambda _: "raise data.max_abs_z if they are real readings (null: no check)"),
    )


def _training_sample(
    stream: PointCloudStream, train: tuple[int, int], held_out: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(values, observed)`` of the training part's time steps, strided down to about
    :data:`SAMPLE_SIZE` values per channel; the ``held_out`` points' count as unobserved."""
    first, end = train
    stride = max(1, math.ceil((end - first) * stream.num_points / SAMPLE_SIZE))
    values = np.asarray(stream.values[first:end:stride])
    observed = np.asarray(stream.mask[first:end:stride]) & np.isfinite(values)
    if held_out is not None:
        observed[:, held_out] = False
    return values, observed


def _training_spreads(
    stream: PointCloudStream, train: tuple[int, int], held_out: np.ndarray | None = None
) -> tuple[np.ndarray, ...]:
    """Per channel median and spread of the training part's observed values (NaN where a
    channel has none: it is not checked; the scaler says why it cannot be fitted)."""
    values, seen = _training_sample(stream, train, held_out)
    c = stream.num_channels
    median, spread = np.full(c, np.nan), np.full(c, np.nan)
    for k in range(c):
        column = values[..., k][seen[..., k]]
        if column.size:
            median[k], spread[k] = robust_spread(column.astype(np.float64))
    return median, spread


def check_resolution(
    stream: PointCloudStream,
    train: tuple[int, int],
    scaler: StandardScaler,
    what: str,
    max_abs_z: float | None,
    held_out: np.ndarray | None = None,
) -> None:
    """Refuse a ``scaler`` (fitted on the training part) under which the middle 98 % of a
    channel's training readings (1st to 99th percentile) normalise to one and the same
    float32 number, where they differ.

    The last line of defence when absurd values were let in (``data.max_abs_z=null``): one
    reading of 1e30 among 2,000 makes the mean ~5e26 and the standard deviation ~2e28,
    beside which every real reading is 0 in float32. The model then sees constant inputs,
    and every de-normalised target is the same number (0, to float32 precision): a
    persistence forecast (``module.anchor=last``, whose head then never leaves 0 under an
    L1 loss, whose gradient at 0 is 0) scores a test MAE of exactly 0. Sane data does not
    trip it: the bulk of its readings spans a good part of a standard deviation, millions
    of times float32's resolution there. The ``held_out`` points' ``(N,)`` readings (points
    held out of training) are not looked at, as the scaler does not fit them.

    Raises:
        UserError: naming the channel, the readings, the scaler's mean and standard
            deviation, and ``data.max_abs_z``.
    """
    values, seen = _training_sample(stream, train, held_out)
    mean, std = scaler.mean.astype(np.float32), scaler.std.astype(np.float32)
    for k, name in enumerate(stream.channel_names):
        raw = values[..., k][seen[..., k]]
        if raw.size < 2:
            continue
        pair = np.array(
            [np.quantile(raw, 0.01, method="lower"), np.quantile(raw, 0.99, method="higher")],
            dtype=np.float32,
        )
        norm = np.subtract(pair, mean[k], dtype=np.float32) / std[k]  # as windows are read
        if pair[0] == pair[1] or norm[0] != norm[1]:
            continue
        find = (
            f"data.max_abs_z=null checks none: set it (default {DEFAULT_MAX_ABS_Z:g}) to find them"
            if max_abs_z is None
            else f"lower data.max_abs_z (now {max_abs_z:g}) to find them"
        )
        raise UserError(
            f"{what}: the middle 98 % of channel {name!r}'s training readings ({pair[0]:.6g} "
            f"to {pair[1]:.6g}) normalise to one and the same float32 number, "
            f"{float(norm[0]):.6g}: the scaler's mean {scaler.mean[k]:.4g} and standard "
            f"deviation {scaler.std[k]:.4g} dwarf them, so the model would learn nothing and "
            "every de-normalised target would be the same number (a test MAE of 0). Values "
            f"far beyond the others inflate the scaler: {find}, and correct or remove them."
        )


def _find(stream: PointCloudStream, bounds: _Bounds) -> _Found | None:
    """Every observed value outside ``bounds``, or None."""
    where = []
    for a, b in time_chunks(0, stream.num_steps, stream.values[0].size):
        values = np.asarray(stream.values[a:b], dtype=np.float64)
        with np.errstate(invalid="ignore"):
            outside = (values < bounds.lo) | (values > bounds.hi)
            bad = np.asarray(stream.mask[a:b]) & outside
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
    bounds: _Bounds,
    what: str,
    shown: pd.DatetimeIndex | None = None,
    rows: CellNames | None = None,
) -> str:
    """One line: how many, in which channels, the first few (channel, point, time, value),
    each time followed by its row (``rows``, asked once for them all) or, where None, its
    step of a training stream; a forecast's history (``shown``) without rows names point
    and time alone, its step counting from the window read, which the user never sees."""
    names = stream.channel_names
    channels = ", ".join(
        f"{names[c]!r} ({count})" for c, count in enumerate(found.per_channel) if count
    )
    cells = [(t, n) for t, n, _, _ in found.first]
    if rows is not None:
        where: list[str | None] = list(rows(cells))
    else:
        where = [None if shown is not None else f"step {t}" for t, _ in cells]
    shown_cells = "; ".join(
        f"channel {names[c]!r}, point {stream.point_ids[n]}, {_time(stream, t, row, shown)}: "
        f"{value:.6g} ({bounds.detail(c, value)})"
        for (t, n, c, value), row in zip(found.first, where, strict=True)
    )
    more = f" (first {len(found.first)})" if found.count > len(found.first) else ""
    return f"{what}: {found.count} value(s) {bounds.beyond}, in {channels}{more}: {shown_cells}."


def _time(
    stream: PointCloudStream, t: int, where: str | None, shown: pd.DatetimeIndex | None = None
) -> str:
    """The time of step ``t`` (as ``shown`` has it; the stream's where None), followed by
    ``where``, the row or step of a value there (None: the time alone)."""
    if shown is not None:
        return f"time {shown[t]}" if where is None else f"time {shown[t]} ({where})"
    if stream.timestamps is None:
        return where or ""
    return f"time {pd.Timestamp(stream.timestamps[t])} ({where})"


def _as_missing(stream: PointCloudStream, where: np.ndarray) -> PointCloudStream:
    """A copy of ``stream`` with the values at ``where`` ``(K, 3)`` missing, and each series
    that had one filled again as the loaders fill gaps
    (:func:`~cloudlstm.data.sources.tables.fill_gaps_causally`: its last observed value held
    forward, the first one in a leading gap; a series left with none, the other points'
    :func:`~cloudlstm.data.sources.tables.mean_of_readings`)."""
    values, mask = np.array(stream.values), np.array(stream.mask)
    t, n, c = where.T
    mask[t, n, c] = False
    pairs = sorted({(int(a), int(b)) for a, b in zip(n, c, strict=True)})
    seen = {(p, k) for p, k in pairs if mask[:, p, k].any()}
    if seen:  # the touched series alone, (T, S, 1): a whole channel of a large stream is not
        points, channels = (np.array(x) for x in zip(*sorted(seen), strict=True))
        refilled, _ = fill_gaps_causally(
            values[:, points, channels][:, :, None], mask[:, points, channels][:, :, None]
        )
        values[:, points, channels] = refilled[:, :, 0]
    for channel in sorted({k for p, k in pairs if (p, k) not in seen}):
        # left without a reading: the channel's readings at every point, averaged
        silent = [p for p, k in pairs if k == channel and (p, k) not in seen]
        mean = mean_of_readings(values[:, :, [channel]], mask[:, :, [channel]])  # (T, 1)
        values[:, silent, channel] = mean
    return replace(stream, values=values, mask=mask)


def training_reference(
    stream: PointCloudStream,
    train: tuple[int, int],
    max_abs_z: float | None,
    valid_ranges: Mapping[str, Range] | None = None,
    held_out: np.ndarray | None = None,
) -> dict[str, Any]:
    """What :func:`checked_stream` judged the data by, as plain values (for a checkpoint):
    ``{"max_abs_z": z, "channels": {name: {"median", "spread", "range"}}}``, each channel's
    training median and spread (None where it has no training reading) and valid range
    (``[lo, hi]``, None for an open end; None: no range).

    Args:
        train, held_out: as for :func:`checked_stream`.
        valid_ranges: ``{channel: (lo, hi)}`` (:func:`merged_ranges`).
    """
    median, spread = _training_spreads(stream, train, held_out)
    ranges = valid_ranges or {}

    def number(value: float) -> float | None:
        return float(value) if np.isfinite(value) else None

    return {
        "max_abs_z": max_abs_z,
        "channels": {
            name: {
                "median": number(median[k]),
                "spread": number(spread[k]),
                "range": list(ranges[name]) if name in ranges else None,
            }
            for k, name in enumerate(stream.channel_names)
        },
    }


def checked_history(
    stream: PointCloudStream,
    reference: Mapping[str, Any],
    mode: str,
    what: str,
    mode_option: str | None,
    shown: pd.DatetimeIndex | None = None,
    rows: CellNames | None = None,
) -> PointCloudStream:
    """A forecast's history ``stream``, checked as :func:`checked_stream` checks training
    data, against the training data's ``reference`` (:func:`training_reference`; channels
    it lacks are not checked); with ``mode="warn"`` a copy in which the values found are
    missing (and filled). Messages name times as ``shown`` has them (the history's own
    zone), the stream's where None, and each value's row of the user's table as ``rows``
    does (where None, its step).

    Raises:
        UserError: ``mode="error"`` and some values are out of range or absurd.
    """
    known = reference.get("channels") or {}
    own = [known.get(name) or {} for name in stream.channel_names]
    ranges = {
        name: tuple(entry["range"])
        for name, entry in zip(stream.channel_names, own, strict=True)
        if entry.get("range") is not None
    }
    if ranges:

        def wider(name: str) -> str:
            return f"retrain with a wider {RANGES_OPTION} if they are real readings"

        bounds = _range_bounds(stream, ranges, wider)
        stream = _checked(stream, bounds, mode, what, mode_option, shown, rows)
    max_abs_z = reference.get("max_abs_z")
    if max_abs_z is None:
        return stream

    def stat(key: str) -> np.ndarray:
        return np.array([np.nan if e.get(key) is None else e[key] for e in own], dtype=float)

    def higher(_: str) -> str:
        return (
            f"retrain with a higher data.max_abs_z (the run's: {max_abs_z:g}) if they are "
            "real readings: the model saw none like them"
        )

    bounds = _z_bounds_of(stat("median"), stat("spread"), float(max_abs_z), higher)
    return _checked(stream, bounds, mode, what, mode_option, shown, rows)
