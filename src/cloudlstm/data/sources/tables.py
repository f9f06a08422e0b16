"""The table toolkit every file-reading source shares: read, check, pivot, fill, assemble.

A raw table has one row per ``(time, point)`` (or is brought to that shape by its reader):

* :func:`read_table` reads a CSV (any pandas compression), Parquet or pandas HDF5 file;
  :func:`check_columns` and :func:`numeric_column` (and the times module's
  :func:`~cloudlstm.data.sources.times.parse_times`) check and convert its columns, naming
  the file and the offending cell in their errors;
* :func:`pivot_long` places rows on a regular time grid (:class:`LongGrid`);
* :func:`fill_gaps_causally` fills gaps from the past (each series holds its last reading)
  and returns the "really observed" mask;
* :func:`build_stream` drops points without any data, fills gaps and assembles the
  :class:`~cloudlstm.data.stream.PointCloudStream`.

Used by :mod:`~cloudlstm.data.sources.long_format`, :mod:`~cloudlstm.data.sources.wide_table`,
:mod:`~cloudlstm.data.sources.telecom_italia`, :mod:`~cloudlstm.data.sources.urban_air`,
:mod:`~cloudlstm.data.sources.beijing` and :mod:`cloudlstm.data.pipeline.forecast_input`.
"""

from __future__ import annotations

import csv
import difflib
import importlib.util
import itertools
import logging
import lzma
import os
import re
import sys
import warnings
import zipfile
import zlib
import zoneinfo
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pandas._libs.parsers import STR_NA_VALUES
from pandas.api.types import infer_dtype
from pandas.io.common import get_handle

from cloudlstm.data.cache import warn_dropped_points
from cloudlstm.data.sources.bad_values import RowNames, flags, refuse_unreal, written_cells
from cloudlstm.data.sources.cut_short import gzipped, refuse_cut_short
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.errors import MissingPackageError, UserError

__all__ = [
    "LongGrid",
    "build_stream",
    "case_hint",
    "id_hint",
    "near_ids",
    "check_column_roles",
    "check_columns",
    "check_coordinate_columns",
    "file_row_name",
    "file_row_names",
    "fill_gaps_causally",
    "id_text",
    "index_as_columns",
    "infer_step",
    "is_bare_number",
    "line_numbers",
    "numeric_column",
    "parse_freq",
    "pivot_long",
    "read_hdf",
    "read_table",
    "empty_ids",
    "refuse_flags_and_unreal",
    "refuse_nested_ids",
    "refuse_repeated_columns",
    "skip_written_index",
    "warn_dropped_points",
]

log = logging.getLogger(__name__)

_DAY = np.timedelta64(1, "D").astype("timedelta64[ns]")


# ---------------------------------------------------------------------- time grid
def parse_freq(freq: Any, option: str = "freq") -> np.timedelta64:
    """``"1h"``, ``"5min"``, ``"30s"`` or a timedelta -> a positive ``timedelta64[ns]``;
    ``option``: the setting that gave it, named in the error.

    A number without a unit (``5``, ``"5"``) is refused: pandas would read it as
    nanoseconds, and a run would train on steps of 5 ns.
    """
    if is_bare_number(freq):
        raise UserError(
            f"{option}={str(freq).strip()} has no unit: give a duration such as 5min or 1h "
            f"({option}=5min)."
        )
    try:
        step = pd.Timedelta(freq).to_timedelta64()
    except (ValueError, TypeError):
        step = None
    if step is None or not step > np.timedelta64(0, "ns"):
        raise UserError(
            f"{option}={freq!r}: give a positive duration such as '1h', '5min' or '30s'."
        )
    return step


def is_bare_number(value: Any, text: bool = True) -> bool:
    """Whether a setting is a number: an int or float, as Hydra passes ``5``, or (``text``)
    text of one (``"5"``, ``"1.5"``)."""
    if isinstance(value, bool | np.timedelta64):  # NumPy counts a timedelta64 an integer
        return False
    if isinstance(value, int | float | np.number):
        return True
    if not text or not isinstance(value, str):
        return False
    try:
        float(value)
    except ValueError:
        return False
    return True


def parse_number(value: Any, option: str) -> float:
    """A setting's number (a float, or text of one); ``option`` is named in the error."""
    try:
        return float(value)
    except (ValueError, TypeError):
        raise UserError(f"{option}={value!r} is not a number: give one, e.g. {option}=0.") from None


def infer_step(times: np.ndarray, step_option: str = "freq") -> np.timedelta64:
    """The most common positive gap between the distinct sorted ``times`` (ties: the smaller).

    ``step_option``: the option that sets the step, named in the error.
    """
    distinct = np.unique(times)
    if len(distinct) < 2:
        raise UserError(
            "Cannot infer the sampling period: the data has only one distinct timestamp. "
            f"Set {step_option} (e.g. {step_option}=1h) or provide more time steps."
        )
    gaps, counts = np.unique(np.diff(distinct), return_counts=True)
    return gaps[np.argmax(counts)]


def step_text(step: np.timedelta64) -> str:
    """A sampling step as a frequency string: ``1h``, ``5min``, ``30s``."""
    seconds = pd.Timedelta(step).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return str(pd.Timedelta(step))


@dataclass
class LongGrid:
    """Where each row of a long table goes on a regular ``(T, N)`` grid.

    Attributes:
        timestamps: ``(T,)`` ``datetime64[ns]`` grid, from the first to the last row's time.
        point_ids: N point ids (sorted by their original value).
        step: the sampling period.
        t_idx, p_idx: ``(R,)`` grid step and point of every row.
        duplicates: "mean" when some ``(time, point)`` pairs have several rows to average.
    """

    timestamps: np.ndarray
    point_ids: list[str]
    step: np.timedelta64
    t_idx: np.ndarray
    p_idx: np.ndarray
    duplicates: str | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.timestamps), len(self.point_ids)

    def scatter(self, columns: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
        """``(R, K)`` row values -> ``(T, N, K)`` array, NaN where no row (or a NaN cell)."""
        t, n = self.shape
        columns = np.asarray(columns)
        out = np.full((t, n, columns.shape[1]), np.nan, dtype=dtype)
        t_idx, p_idx = self.t_idx, self.p_idx
        if self.duplicates == "mean":
            # NaN-aware mean per cell: a missing reading does not hide another row's value.
            means = pd.DataFrame(columns).groupby(t_idx * n + p_idx).mean()
            keys = means.index.to_numpy()
            t_idx, p_idx, columns = keys // n, keys % n, means.to_numpy()
        out[t_idx, p_idx] = columns
        return out


def pivot_long(
    df: pd.DataFrame,
    time_col: str,
    id_col: str,
    freq: Any = None,
    duplicates: str = "error",
    what: str = "the data",
    step_option: str = "freq",
    *,
    refuse_sparse: bool = True,
    written: pd.Series | None = None,
    row_names: RowNames | None = None,
    clock: bool = False,
) -> LongGrid:
    """Lay the rows of a long table on a regular time grid.

    Args:
        df: rows with a ``datetime64`` column ``time_col`` and a point-id column ``id_col``.
        freq: the grid step (e.g. ``"1h"``); ``None`` infers the most common positive gap.
        duplicates: ``"error"`` refuses several rows for one ``(time, point)`` and shows one;
            ``"mean"`` averages them.
        what: how to name the data in error messages (e.g. the file path).
        step_option: the source's option that sets ``freq``, named in the errors.
        refuse_sparse: refuse a grid whose steps mostly hold no row
            (:func:`_refuse_empty_grid`); False where the caller checked the period itself
            (a forecast's history, whose last steps may all be missing).
        written: the times as the file writes them, where they carry UTC offsets (read in
            UTC): two rows written with two offsets that name one moment are shown so.
        row_names: how that message names rows of ``df`` by their positions, as the user
            finds them in the file (:func:`file_row_names`); None: ``data rows`` and their
            index labels.
        clock: the times were written as clock times without zone (text or datetimes, not
            numbers counted in a unit, nor times with an offset): only those repeat the
            hour at which a zone's clocks go back, which a time of every point written
            twice is then said to be where it is such an hour (:func:`clock_change_hint`).

    Every timestamp must lie on the grid ``t0 + k * step`` (``t0`` = the earliest time);
    steps without any row become NaN cells, which :func:`fill_gaps_causally` later fills.
    """
    if duplicates not in ("error", "mean"):
        raise ValueError(f"duplicates must be 'error' or 'mean'; got {duplicates!r}.")
    if len(df) == 0:
        raise UserError(f"{what} has no rows.")
    times = df[time_col].to_numpy(dtype="datetime64[ns]")
    step = infer_step(times, step_option) if freq is None else parse_freq(freq, step_option)
    t0 = times.min()
    offset = (times - t0).astype(np.int64)
    step_ns = int(step.astype("timedelta64[ns]").astype(np.int64))
    off_grid = offset % step_ns != 0
    if off_grid.any():
        bad = int(np.flatnonzero(off_grid)[0])
        raise UserError(
            f"{what}: timestamp {pd.Timestamp(times[bad])} is not on the regular grid that starts "
            f"at {pd.Timestamp(t0)} with step {step_text(step)} "
            f"({int(off_grid.sum())} such rows). Set {step_option} to the sampling period, or "
            "resample the data onto a regular grid first."
        )
    t_idx = offset // step_ns
    codes, uniques = pd.factorize(df[id_col], sort=True)
    if refuse_sparse:
        _refuse_empty_grid(t_idx, step, freq is None, what, step_option, times, codes)
    p_idx = codes.astype(np.int64)
    n = len(uniques)
    key = t_idx * n + p_idx
    order = np.argsort(key, kind="stable")  # sorting beats hashing for millions of rows
    repeats = np.flatnonzero(np.diff(key[order]) == 0)
    dup_mode = None
    if len(repeats):
        if duplicates == "error":
            first = order[repeats[0]]
            point = str(df[id_col].iloc[first])
            pair = [int(first), int(order[repeats[0] + 1])]
            if written is not None and written.iloc[pair[0]] != written.iloc[pair[1]]:
                rows = _row_pair(df, sorted(pair), row_names)
                raise UserError(_one_moment(written, pair, rows, point, times[first], what))
            hint = _clock_change(t_idx[order[repeats]], n, times[first]) if clock else ""
            raise UserError(
                f"{what} has several rows for the same (time, point), e.g. time "
                f"{pd.Timestamp(times[first])} and {id_col}={point!r}. Keep one row per time "
                f"and point (aggregate or drop the duplicates){hint}."
            )
        dup_mode = "mean"
    timestamps = t0 + np.arange(int(t_idx.max()) + 1) * step
    return LongGrid(timestamps, [id_text(u) for u in uniques], step, t_idx, p_idx, dup_mode)


def _row_pair(df: pd.DataFrame, pair: list[int], row_names: RowNames | None) -> str:
    """Two rows of ``df`` by their positions ``pair`` (sorted): ``data rows 9 and 57`` by
    their index labels, or as ``row_names`` names them (``line 11 and line 59``)."""
    if row_names is None:
        return "data rows " + " and ".join(str(df.index[r]) for r in pair)
    return " and ".join(row_names(pair))


def _one_moment(
    written: pd.Series, pair: list[int], rows: str, point: str, moment: Any, what: str
) -> str:
    """The line for two rows of one point (``rows``, at the positions ``pair``) whose times,
    written with different UTC offsets, name one moment (``moment``, in UTC): the times as
    written."""
    times = " and ".join(str(written.iloc[r]) for r in sorted(pair))
    return (
        f"{what}: {rows} of point {point!r} write {times}, one moment "
        f"({pd.Timestamp(moment)} UTC: a time with an offset is read in UTC). Correct the "
        "offset that is wrong, or keep one row per time and point."
    )


# Below this share of grid steps with any row, the grid is not the data's period: filling
# it would invent nine values in ten.
_MIN_GRID_USE = 0.1


def _refuse_empty_grid(
    t_idx: np.ndarray,
    step: np.timedelta64,
    inferred: bool,
    what: str,
    step_option: str,
    times: np.ndarray,
    point_codes: np.ndarray,
) -> None:
    """Refuse a grid whose steps mostly hold no row, before any ``(T, N)`` array is built.

    ``t_idx (R,)``: each row's grid step; ``times (R,)`` and ``point_codes (R,)``: its time
    and point. Two causes are told apart: a given step finer than the data's period (every
    row on a coarser grid), and timestamps that do not repeat one period (jittered or
    irregular), where the most common gap between distinct times is a few seconds.
    """
    size = int(t_idx.max()) + 1
    coarser = int(np.gcd.reduce(t_idx)) if size > 1 else 1
    if not inferred and coarser > 1:
        period = step_text(step * coarser)
        raise UserError(
            f"{what}: every timestamp lies on a {period} grid, so {step_option}="
            f"{step_text(step)} leaves {100 * (1 - 1 / coarser):.0f}% of the steps without any "
            f"row, to be filled in. Set {step_option}={period}, the data's period."
        )
    used = len(np.unique(t_idx)) / size
    if used >= _MIN_GRID_USE:
        return
    source = (
        "inferred from the most common gap between timestamps"
        if inferred
        else f"set by {step_option}"
    )
    gap = _median_point_gap(times, point_codes)
    raise UserError(
        f"{what}: only {100 * used:.2g}% of the {size:,} steps of the {step_text(step)} grid "
        f"({source}) have any row; each point's readings are about {gap} apart (the median "
        "gap). If the timestamps are jittered or irregular, round them onto a regular grid "
        f"first (e.g. pandas' Series.dt.round) and set {step_option} to that period; if the "
        "data has long gaps, cut it to the period it covers."
    )


def _median_point_gap(times: np.ndarray, point_codes: np.ndarray) -> str:
    """The median gap between one point's consecutive distinct times, as text."""
    order = np.lexsort((times, point_codes))
    gaps = np.diff(times[order]).astype(np.int64)
    same_point = np.diff(point_codes[order]) == 0
    gaps = gaps[same_point & (gaps > 0)]
    if not len(gaps):
        return "(no point has two distinct times)"
    median = pd.Timedelta(int(np.median(gaps)), "ns")
    return step_text(median.round("min" if median >= pd.Timedelta(1, "min") else "s"))


def _clock_change(repeated_steps: np.ndarray, num_points: int, time: np.datetime64) -> str:
    """A hint where every point has one row too many, all at one ``time``: local clock
    times repeat the hour at which the clocks go back (:func:`clock_change_hint`)."""
    if len(repeated_steps) != num_points or len(np.unique(repeated_steps)) != 1:
        return ""
    return clock_change_hint(time)


def clock_change_hint(time: Any) -> str:
    """The hint for the time ``time`` written in two rows, as the file writes it (a clock
    time without zone, or a time with its offset): where it is a clock time that some zone
    this machine knows repeats when its clocks go back, the times may be that zone's clock
    and the hint names one such zone; ``""`` where none does, and for a time that cannot be
    read or carries a zone (no clock change repeats it).

    The file's zone is not known: a source reads clock times as UTC, and
    ``data.time_zone`` only sets the clock of the time features.
    """
    try:
        stamp = pd.Timestamp(time)
    except (ValueError, TypeError, OverflowError):
        return ""
    if pd.isna(stamp) or stamp.tz is not None:
        return ""
    clock = stamp.to_pydatetime(warn=False)
    zone = next((z for z in _zones_by_name() if _repeats(clock, z)), None)
    if zone is None:
        return ""
    second = clock.replace(tzinfo=zone, fold=1).isoformat()
    return (
        f"; if the file writes the local clock times of a zone such as {zone.key}, that is "
        "the hour which repeats when its clocks go back: write the times in UTC or with "
        f"their offset ({second} the second time), which are read as UTC"
    )


# Zones named first as the example of a clock change, one for each of the usual changes
# (the others, by name, after them): a file's clock is more likely Berlin's than Adak's.
_WELL_KNOWN_ZONES = (
    "Europe/London",
    "Europe/Berlin",
    "Europe/Helsinki",
    "America/New_York",
    "America/Chicago",
    "America/Denver",
    "America/Los_Angeles",
    "Australia/Sydney",
    "Pacific/Auckland",
)


def _zones_by_name() -> Iterator[zoneinfo.ZoneInfo]:
    """The IANA zones this machine knows, :data:`_WELL_KNOWN_ZONES` first, the others by
    name; legacy names (``CET``, ``EST5EDT``) and ``Etc/`` left out."""
    names = {n for n in zoneinfo.available_timezones() if "/" in n and not n.startswith("Etc/")}
    known = [n for n in _WELL_KNOWN_ZONES if n in names]
    return (zoneinfo.ZoneInfo(n) for n in [*known, *sorted(names - set(known))])


def _repeats(clock: datetime, zone: zoneinfo.ZoneInfo) -> bool:
    """Whether the clock time ``clock`` is in the hour ``zone`` repeats when its clocks go
    back: read before the change its offset is larger than after it (``fold``: PEP 495).
    A clock time skipped in spring has them the other way round."""
    before = clock.replace(tzinfo=zone, fold=0).utcoffset()
    after = clock.replace(tzinfo=zone, fold=1).utcoffset()
    return before is not None and after is not None and before > after


# ---------------------------------------------------------------------- gap filling
def fill_gaps_causally(
    values: np.ndarray, observed: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Fill the gaps of ``values (T, N, K)`` from the past only, and say which entries were
    observed.

    Each ``(point, k)`` series holds its last observed value forward: a filled entry never
    depends on a reading after it, so a window's input never sees its targets (linear
    interpolation in time would fill a gap at the last input step towards the first
    target). A leading gap (before the series' first reading) takes the first observed
    value: the one fill from a later reading, as nothing earlier exists. A series never
    observed takes :func:`mean_of_readings` of ``k``, and stays NaN only when no point ever
    observed ``k``.

    Args:
        values: the readings; NaN/inf entries are gaps.
        observed: optional ``(T, N, K)`` bool: also treat the entries where it is False as
            gaps (their values are replaced).

    Returns:
        ``(filled, mask)``: ``filled`` has the dtype of ``values``; ``mask (T, N, K)`` is True
        where the input was finite (and ``observed``): really observed.
    """
    values = np.asarray(values)
    mask = np.isfinite(values)
    if observed is not None:
        mask &= np.asarray(observed, dtype=bool)
    filled = _held_forward(values, mask)
    never = ~mask.any(axis=0)  # (N, K)
    if never.any():
        ks = np.flatnonzero(never.any(axis=0))
        across = mean_of_readings(values[:, :, ks], mask[:, :, ks])  # (T, len(ks))
        for j, k in enumerate(ks):
            filled[:, never[:, k], k] = across[:, j, None]
    return filled, mask


def mean_of_readings(values: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """``(T, K)``: at each step, the mean of the readings of ``values (T, N, K)`` that
    ``observed`` marks, over the points: what a series that never read ``k`` is filled
    with. Observed readings only: a point's filled values (its last reading held over a
    gap, a silent point's for months) are no news of that step. A step where no point read
    ``k`` holds the mean before it (the first one before any), as a series' gaps are
    filled; NaN only where no point ever read ``k``.
    """
    with warnings.catch_warnings():  # "mean of empty slice": no point has a reading then
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(np.where(observed, values, np.nan), axis=1)  # (T, K)
    return _held_forward(mean[:, None, :], np.isfinite(mean)[:, None, :])[:, 0, :]


def _held_forward(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``values (T, N, K)`` with each entry where ``mask`` is False holding its series' last
    entry where it is True (the first one before any); NaN in a series with none."""
    t = values.shape[0]
    flat = np.where(mask, values, np.nan).astype(values.dtype).reshape(t, -1)  # (T, N*K)
    flat_mask = mask.reshape(t, -1)
    if t:
        steps = np.arange(t, dtype=np.int64)[:, None]
        first = flat_mask.argmax(axis=0)  # (N*K,) first observed step (0 if never)
        chunk = max(1, (1 << 22) // t)  # columns at a time: index arrays of ~32 MiB at most
        for lo in range(0, flat.shape[1], chunk):
            part = slice(lo, lo + chunk)
            # the last observed step at or before each step (-1 before the first reading)
            last = np.maximum.accumulate(np.where(flat_mask[:, part], steps, -1), axis=0)
            source = np.where(last >= 0, last, first[part][None, :])
            flat[:, part] = np.take_along_axis(flat[:, part], source, axis=0)
    return flat.reshape(values.shape)


def _absolute(source: str) -> str:
    """``source`` as an absolute path where it names a file or folder, else as given."""
    path = Path(source).expanduser()
    return str(path.resolve()) if path.exists() else str(source)


def build_stream(
    timestamps: np.ndarray,
    point_ids: Sequence[str],
    values: np.ndarray,
    channel_names: Sequence[str],
    *,
    coords: np.ndarray | None = None,
    trajectory: np.ndarray | None = None,
    step: np.timedelta64,
    name: str,
    source: str,
) -> PointCloudStream:
    """Drop points without any observation, fill gaps, and assemble a stream.

    Args:
        timestamps: ``(T,)`` regular grid; values: ``(T, N, C)`` raw values, NaN = missing.
        coords: ``(N, L)`` static positions, or ``trajectory``: ``(T, N, L)`` positions of
            moving points (NaN gaps are filled in time like the values).
        step: sampling period, stored as ``metadata["step_minutes"]``.

    ``mask`` is False wherever a value was filled. ``metadata`` gets ``step_minutes``,
    ``steps_per_day`` (rounded, at least 1), ``source`` (the file's absolute path: a run
    trained on a relative path says which file that was) and ``dropped_points``.
    """
    point_ids = [str(p) for p in point_ids]
    keep, dropped = _points_with_data(values, point_ids, channel_names, name, source)
    filled, mask = fill_gaps_causally(values[:, keep])
    if trajectory is not None:
        trajectory = fill_gaps_causally(np.asarray(trajectory, dtype=np.float64)[:, keep])[0]
        coords = trajectory[0]
    else:
        coords = np.asarray(coords, dtype=np.float64)[keep]
    stream = PointCloudStream(
        values=filled.astype(np.float32),
        mask=mask,
        coords=coords,
        channel_names=list(channel_names),
        point_ids=[point_ids[i] for i in keep],
        timestamps=timestamps,
        name=name,
        metadata={
            "step_minutes": float(step / np.timedelta64(1, "m")),
            "steps_per_day": max(1, int(round(_DAY / step))),
            "source": _absolute(source),
            "dropped_points": dropped,
        },
        trajectory=trajectory,
    )
    _log_stream(stream, step, len(dropped))
    return stream


def _points_with_data(
    values: np.ndarray, point_ids: list[str], channel_names: Sequence[str], name: str, source: str
) -> tuple[np.ndarray, list[str]]:
    """Indices of the points of ``values (T, N, C)`` with at least one observation, and the
    ids of the others (logged). A ``UserError`` when no point, or some channel at no point,
    has an observed value: there would be nothing to fill its gaps from."""
    has_data = np.isfinite(values).any(axis=(0, 2))
    dropped = [p for p, ok in zip(point_ids, has_data, strict=True) if not ok]
    warn_dropped_points(name, dropped)
    if not has_data.any():
        raise UserError(f"{name}: no point has any observed value in {source}.")
    seen = np.isfinite(values).any(axis=(0, 1))
    unobserved = [c for c, ok in zip(channel_names, seen, strict=True) if not ok]
    if unobserved:
        raise UserError(
            f"{name}: channel(s) {unobserved} have no observed value at any point in {source}; "
            "leave them out of the value columns."
        )
    _warn_unread_channels(values, point_ids, channel_names, has_data, name)
    return np.flatnonzero(has_data), dropped


def _warn_unread_channels(
    values: np.ndarray,
    point_ids: list[str],
    channel_names: Sequence[str],
    has_data: np.ndarray,
    name: str,
) -> None:
    """Warn of the points kept (``has_data (N,)``) that never read some channel of
    ``values (T, N, C)``: that channel's series there is the other points' mean at each
    step (the gap filling), which the models read as the point's own."""
    unread = has_data[:, None] & ~np.isfinite(values).any(axis=0)  # (N, C)
    points = np.flatnonzero(unread.any(axis=1))
    if not len(points):
        return
    names = np.asarray(channel_names)
    shown = "; ".join(f"{point_ids[p]}: {', '.join(names[unread[p]])}" for p in points[:5])
    log.warning(
        "%s: %d point(s) have no reading of some channel in any step (%s%s). Those series "
        "are filled with the other points' mean at each step, which the models read as the "
        "point's own; they are left out of the scores unless data.score_filled=true. Leave "
        "such points out of the data to train on their own readings only.",
        name,
        len(points),
        shown,
        " ..." if len(points) > 5 else "",
    )


def _log_stream(stream: PointCloudStream, step: np.timedelta64, dropped: int) -> None:
    log.info(
        "%s: T=%d steps of %s, N=%d points (%d dropped), C=%d channels, %.1f%% filled%s.",
        stream.name,
        stream.num_steps,
        step_text(step),
        stream.num_points,
        dropped,
        stream.num_channels,
        100.0 * stream.missing_fraction,
        ", moving points" if stream.moving else "",
    )


# ---------------------------------------------------------------------- user files
PARQUET_SUFFIXES = (".parquet", ".pq")
HDF_SUFFIXES = (".h5", ".hdf5", ".hdf")
# Files that are tables, but of formats not read here: the suffix and what it is.
OTHER_FORMATS = {
    ".xlsx": "an Excel workbook",
    ".xls": "an Excel workbook",
    ".ods": "an OpenDocument spreadsheet",
    ".json": "a JSON file",
    ".feather": "a Feather file",
    ".npz": "a NumPy archive",
    ".npy": "a NumPy array",
}
# The suffixes of compressed files pandas reads, and what reading one raises when it is cut
# short (every codec: EOFError) or not compressed as its suffix says (gzip and bz2: an
# OSError, zip: BadZipFile, xz: LZMAError, a damaged deflate stream: zlib.error).
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zip", ".zst", ".tar")
DAMAGED = (EOFError, OSError, zipfile.BadZipFile, lzma.LZMAError, zlib.error)


def damaged_file(path: Path, what: str, err: BaseException) -> UserError:
    """The line for a file that reading failed on with one of :data:`DAMAGED`."""
    reason = str(err) or type(err).__name__
    if Path(path).suffix.lower() not in COMPRESSED_SUFFIXES and not gzipped(Path(path)):
        return UserError(f"Cannot read {what} {path}: {reason}.")
    return UserError(
        f"Cannot read {what} {path}: {reason}. It is cut short or not compressed as its "
        "name says (e.g. a download that stopped): fetch it again, or name it by its format."
    )


def missing_codec(path: Path, err: ImportError) -> MissingPackageError:
    """The line for a compressed file whose codec's package is not installed (.zst)."""
    return MissingPackageError(f"Reading {path}: {err} (or decompress the file).")


# A number written with a decimal comma: "-0,25", "12,5e-3"
_DECIMAL_COMMA = re.compile(r"^([+-]?\d+),(\d+(?:[eE][+-]?\d+)?)$")
# ... that reads as well as a whole number with a thousands separator: "2,585", "-12,500"
_THOUSANDS_COMMA = re.compile(r"[+-]?[1-9]\d{0,2}(?:,\d{3})+")
# Column separators other than a comma, as messages name them
SEPARATOR_NAMES = {"\t": "tabs", ";": "semicolons"}


def read_table(
    path: Path,
    what: str,
    hdf_key: str | None = None,
    text_cols: Sequence[str] = (),
    **csv_kwargs: Any,
) -> pd.DataFrame:
    """Read a CSV (compression from the suffix: .gz, .bz2, .zip, .xz), Parquet or pandas
    HDF5 file (``hdf_key``: the table of an HDF5 file, see :func:`read_hdf`), or a Parquet
    dataset folder (:func:`parquet_dataset_parts`; its partition keys read as text).
    ``text_cols``: a CSV's columns (point ids) whose cells keep their text
    (:func:`_as_written`).

    Raises:
        UserError: a file of a format that is no table of these (an Excel workbook, JSON),
            one that cannot be read as its suffix says (named with pandas' reason), or a
            text file cut short inside a row (:func:`refuse_cut_short`).
    """
    if path.is_dir():  # a Parquet dataset (:func:`parquet_dataset_parts`)
        if importlib.util.find_spec("pyarrow") is None:  # the text partitioning is pyarrow's
            raise MissingPackageError(
                f"Reading the Parquet dataset {path} needs pyarrow: `pip install pyarrow` "
                "(or write its rows into one file)."
            )
        return _read_parquet(path, what, partitioning=_partitions_as_text(path))
    suffix = path.suffix.lower()
    if suffix in OTHER_FORMATS:
        raise UserError(
            f"{what[:1].upper()}{what[1:]} {path} is {OTHER_FORMATS[suffix]}, which is not "
            "read: save it as CSV (.csv, .csv.gz, ...), Parquet (.parquet) or pandas HDF5 (.h5)."
        )
    if suffix in PARQUET_SUFFIXES:
        return _read_parquet(path, what)
    if suffix in HDF_SUFFIXES:
        return read_hdf(path, what, hdf_key)
    dialect = {} if "sep" in csv_kwargs else csv_dialect(path, what)
    refuse_cut_short(path, what, csv_kwargs.get("sep") or dialect.get("sep") or ",")
    try:
        if text_cols:
            csv_kwargs = {**csv_kwargs, **_as_written(path, text_cols, {**dialect, **csv_kwargs})}
        table = pd.read_csv(path, **dialect, **csv_kwargs)
    except UnicodeDecodeError as err:
        raise UserError(
            f"Cannot read {what} {path} as CSV: it is not UTF-8 text (a byte "
            f"0x{err.object[err.start]:02x}). Save it as UTF-8 (spreadsheets: CSV UTF-8)."
        ) from None
    except pd.errors.EmptyDataError:  # pandas: "No columns to parse from file"
        raise UserError(
            f"{what[:1].upper()}{what[1:]} {path} is empty, without even a header row: write "
            "the header row of its columns and its rows into it, or name the file that holds "
            "them."
        ) from None
    except (pd.errors.ParserError, ValueError) as err:
        # ValueError: a .zip holding several files, among others
        raise UserError(f"Cannot read {what} {path} as CSV: {err}") from None
    except DAMAGED as err:
        raise damaged_file(path, what, err) from None
    except ImportError as err:
        raise missing_codec(path, err) from None
    if csv_kwargs.get("header", "infer") is not None:
        refuse_row_labels(table, path, what, csv_kwargs.get("sep") or dialect.get("sep") or ",")
        _refuse_repeated_header(table, path, what, {**dialect, **_text_options(csv_kwargs)})
    if dialect.get("decimal") == "," and csv_kwargs.get("dtype") is str:
        # pandas applies `decimal` to the numbers it parses, not to text it keeps
        table = table.apply(lambda col: col.str.replace(_DECIMAL_COMMA, r"\1.\2", regex=True))
    return table


# how pandas renames a CSV header's repeated name: "no2", then "no2.1", "no2.2", ...
_RENAMED_REPEAT = re.compile(r"(.+)\.\d+")


def _text_options(csv_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The ``read_csv`` arguments of ``csv_kwargs`` that say how the file's text is split
    and decoded, which a second reading of its header needs too."""
    return {k: v for k, v in csv_kwargs.items() if k in ("sep", "encoding", "encoding_errors")}


def _refuse_repeated_header(
    table: pd.DataFrame, path: Path, what: str, options: dict[str, Any]
) -> None:
    """Refuse a CSV file whose header names a column twice, which pandas reads as two
    columns, renaming the second (``no2``, ``no2.1``): a channel of its own in training, a
    column no forecast reads, in silence. The header is read again as written (with the
    ``read_csv`` ``options`` of the file) only where a name looks so renamed: a file may
    name columns ``a`` and ``a.1`` itself.

    Raises:
        UserError: naming the columns written twice.
    """
    names = {str(c) for c in table.columns}
    renamed = (_RENAMED_REPEAT.fullmatch(n) for n in names)
    if not any(m is not None and m.group(1) in names for m in renamed):
        return
    header = pd.read_csv(path, header=None, nrows=1, dtype=str, keep_default_na=False, **options)
    written = [name for name in header.iloc[0] if name.strip()]
    refuse_repeated_columns(written, f"{what[:1].upper()}{what[1:]} {path}")


def index_as_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its named index levels as columns, as the file was made: a Parquet or
    HDF5 table written with its times (or ids) as its index
    (``df.set_index("timestamp").to_parquet(...)``) holds them there, not among its
    columns. An unnamed index (row numbers) stays the index."""
    if any(name is not None for name in df.index.names):
        return df.reset_index()
    return df


def _as_written(path: Path, text_cols: Sequence[str], options: dict[str, Any]) -> dict[str, Any]:
    """``read_csv`` arguments that keep the cells of the columns ``text_cols`` (found in
    the header read with ``options``, blanks and case aside) as written: ``NA``, ``None``
    or ``null`` is a station's code in some networks, which pandas' markers of a missing
    value would make empty. An empty cell stays missing; the other columns keep every
    marker."""
    names = pd.read_csv(path, **{**options, "nrows": 0}).columns
    kept = {str(c).strip().casefold() for c in text_cols}
    markers = sorted(STR_NA_VALUES)
    return {
        "keep_default_na": False,
        "na_values": {c: [""] if str(c).strip().casefold() in kept else markers for c in names},
    }


def refuse_row_labels(table: pd.DataFrame, path: Path, what: str, sep: str) -> None:
    """Refuse a CSV file whose data rows have more fields than its header (``sep``
    separated): pandas takes the extra first field(s) as the rows' labels, its index, and
    lays the header's names over the columns one place off (a trailing delimiter on each
    row, or R's ``write.table(sep=",")``, whose header has no cell for the row names).

    The index alone does not show it: pandas 3 makes labels that count evenly (``0, 1,
    2``) a RangeIndex, as if the rows had none, so the first rows' fields are counted.

    Raises:
        UserError: naming the cause (a trailing delimiter, or a header one cell short)
            and its fix.
    """
    beyond = _fields_beyond_header(path, sep)
    index = table.index
    plain = isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1
    if not beyond and plain:
        return
    count = max(len(beyond), index.nlevels)
    fields = "one field" if count == 1 else f"{count} fields"
    if beyond and all(not field.strip() for field in beyond):
        cause = f"each ends in a delimiter {sep!r}"
        fix = f"remove the {sep!r} that ends each data row"
    else:
        cause = "the header has no name for the first column, as R's write.table writes it"
        fix = (
            f"add the first column's name at the header's start (e.g. time{sep}...; R: "
            "write.csv, or write.table with col.names=NA)"
        )
    raise UserError(
        f"Cannot read {what} {path}: its data rows have {fields} more than its header "
        f"({cause}), so every column would be read one place off; {fix}."
    )


def _fields_beyond_header(path: Path, sep: str) -> list[str]:
    """The fields of a CSV file's first data row past the number of its header's
    (``[]``: none, or the file cannot be read here, which pandas then says)."""
    if len(sep) != 1:  # a regular expression: no csv module dialect
        return []
    try:
        with get_handle(path, "r", compression="infer", errors="replace") as handle:
            rows = (row for row in csv.reader(handle.handle, delimiter=sep) if row)
            header, first = next(rows, None), next(rows, None)
    except (*DAMAGED, ValueError, ImportError, csv.Error):
        return []
    if header is None or first is None:
        return []
    return first[len(header) :]


def line_numbers(
    path: Path, data_rows: Sequence[int], header: bool = True, sep: str | None = None
) -> list[int]:
    """The file's line numbers (from 1) of the data rows ``data_rows`` (from 0, sorted) of
    a text table, compressed or not, after one header line where ``header``: a message
    names a cell there, where an editor finds it. Each row is named by the line it starts
    on: a quoted field may go on over several lines, which pandas reads as one row, and a
    blank line (or one of spaces and tabs alone), which pandas skips, is counted; a line
    of quoted blanks (``"  "``) is a row. ``sep``: the
    separator (None: as :func:`csv_dialect` finds it), outside whose quoted fields a
    newline ends a row."""
    found, row, end = [], -1 if header else 0, 0
    # a gzipped file is read as its reader reads it, whatever its name (a day file's .txt)
    compression = "gzip" if gzipped(Path(path)) else "infer"
    with get_handle(path, "r", compression=compression, errors="replace") as handle, _any_field():
        lines = iter(handle.handle)
        first = next(lines, "")
        sep = sep or _separator(first) or ","
        spanned: list[str] = []  # the text of the row read last: csv drops its quotes
        records = csv.reader(_kept(itertools.chain([first], lines), spanned), delimiter=sep)
        for _ in records:
            start, end = end + 1, records.line_num  # the lines this row spans
            row += not _blank("".join(spanned), sep)
            spanned.clear()
            while len(found) < len(data_rows) and row == data_rows[len(found)] + 1:
                found.append(start)
            if len(found) == len(data_rows):
                break
    return found


@contextmanager
def _any_field() -> Iterator[None]:
    """The csv module reads a field of any length, as pandas does, where it refuses one
    beyond 128 KiB by default (a long text cell, a quoted note)."""
    before = csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # a C long on every platform
    try:
        yield
    finally:
        csv.field_size_limit(before)


def _kept(lines: Iterator[str], spanned: list[str]) -> Iterator[str]:
    """``lines``, each also added to ``spanned`` as the csv module reads it (it reads a
    line only when its row needs one)."""
    for line in lines:
        spanned.append(line)
        yield line


def _blank(text: str, sep: str) -> bool:
    """Whether the text of a CSV row is a line that pandas skips: empty, or spaces and tabs
    alone (a tab that separates is a field's end). A quoted field of blanks (``"  "``, or
    ``""``) is a row, which the csv module's fields alone do not tell from such a line."""
    return not text.rstrip("\r\n").strip(" \t".replace(sep, ""))


def file_row_names(
    path: str | os.PathLike[str], times: pd.Series | None, points: pd.Series | None = None
) -> RowNames:
    """How messages name the rows of a table read from the file ``path``, as its user
    finds them there: by the time each writes (``times``, as written: ``time 2012-03-01
    05:00:00``); where it writes none (no time column, an empty cell) by its line in a text
    file (``line 7``, from 1, the header and blank lines counted) or its data row in a
    Parquet or HDF5 file (``data row 5``, from 0). A long table's rows name their point
    first (``points``, its ids: ``point st1, time ...``). ``path`` is a ``Path`` or the
    text given to ``pd.read_csv``, as a user of the Python API has it."""
    path = Path(path)
    binary = {s.lower() for s in path.suffixes} & {*PARQUET_SUFFIXES, *HDF_SUFFIXES}
    text = path.is_file() and not binary

    def names(positions: list[int]) -> list[str]:
        timed = {r: times.iloc[r] for r in positions if times is not None}
        untimed = [r for r in positions if pd.isna(timed.get(r))]
        numbers = line_numbers(path, untimed) if text else untimed
        found = dict(zip(untimed, numbers, strict=True))
        where = {r: f"line {found[r]}" if text else f"data row {r}" for r in untimed}
        return [
            ("" if points is None else f"point {points.iloc[r]}, ")
            + where.get(r, f"time {timed.get(r)}")
            for r in positions
        ]

    return names


def file_row_name(path: Path, row: int) -> str:
    """The data row ``row`` (from 0) of a table read from the file ``path``, as its user
    finds it there (:func:`file_row_names`, without times): ``line 7`` of a text file,
    ``data row 5`` of a Parquet or HDF5 file."""
    return file_row_names(path, None)([row])[0]


def written_row_numbers(column: pd.Series | pd.Index) -> bool:
    """Whether ``column`` (or an index) numbers its rows 0, 1, 2, ...: the index
    ``DataFrame.to_csv`` writes as a nameless first column by default, which read as times
    would be 1970's first seconds."""
    counted = np.arange(len(column))
    return pd.api.types.is_integer_dtype(column) and np.array_equal(column, counted)


def skip_written_index(path: Path | str, names: Sequence[str], keep: str) -> None:
    """Say that the columns ``names`` of ``path``, without a name in its header, are not
    read: an index written with the rows (the row numbers ``DataFrame.to_csv`` writes as
    its first column by default); ``keep``: how to read such a column after all."""
    log.info(
        "%s: skipping column(s) without a name %s (an index written with the rows); %s",
        path,
        list(names),
        keep,
    )


def _read_parquet(path: Path, what: str, **options: Any) -> pd.DataFrame:
    """A Parquet file or dataset folder as a frame; ``options`` go to pyarrow."""
    if not any(importlib.util.find_spec(m) for m in ("pyarrow", "fastparquet")):
        raise MissingPackageError(
            f"Reading the Parquet file {path} needs pyarrow: `pip install pyarrow` "
            "(or convert the file to CSV)."
        )
    try:
        return pd.read_parquet(path, **options)
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise UserError(f"Cannot read {what} {path} as Parquet: {err}") from None


def parquet_dataset_parts(folder: Path) -> list[Path]:
    """The part files of ``folder`` when it is a Parquet dataset, as Spark, Dask and pyarrow
    write one: ``.parquet`` files, in ``key=value`` subfolders when it is partitioned, beside
    files whose names start with ``_`` or ``.`` (``_SUCCESS``, ``_metadata``, ``.crc``
    checksums), which readers skip. [] when it holds another file, or no part."""
    files = [
        path
        for path in sorted(folder.rglob("*"))
        if path.is_file()
        and not any(part[:1] in ("_", ".") for part in path.relative_to(folder).parts)
    ]
    parquet = all(path.suffix.lower() in PARQUET_SUFFIXES for path in files)
    return files if parquet else []


def _partitions_as_text(folder: Path) -> Any:
    """pyarrow's reading of the ``key=value`` folders of a partitioned dataset, every key a
    text column: inferred, ``id=007`` would become the number 7, another point's id."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    keys = {
        segment.split("=", 1)[0]
        for part in parquet_dataset_parts(folder)
        for segment in part.relative_to(folder).parts[:-1]
        if "=" in segment
    }
    return ds.partitioning(pa.schema([(key, pa.string()) for key in sorted(keys)]), flavor="hive")


def csv_dialect(path: Path, what: str = "the file", lines: int = 50) -> dict[str, str]:
    """How a CSV file separates its columns and decimals, when not as pandas assumes.

    A header without a comma but with a semicolon or a tab gives that separator (as
    spreadsheets write CSV in many locales); with such a separator, a cell of the first
    ``lines`` rows written as a decimal-comma number (``-0,25``) gives ``decimal=","``.
    Returns ``read_csv`` arguments, ``{}`` for a comma-separated file; ``what`` names the
    file in the error.

    Raises:
        UserError: every such cell reads as well as a number with thousands separators
            (``2,585``): :func:`_refuse_thousands_or_decimals`.
    """
    try:
        with get_handle(path, "r", compression="infer", errors="replace") as handle:
            head = [line.rstrip("\r\n") for line in itertools.islice(handle.handle, lines + 1)]
    except (*DAMAGED, ValueError, ImportError):  # ImportError: .zst without zstandard
        return {}  # read_csv then names what is wrong with the file
    sep = _separator(head[0] if head else "")
    if sep is None:
        return {}
    cells = (cell.strip() for line in head[1:] for cell in line.split(sep))
    commas = [cell for cell in cells if _DECIMAL_COMMA.fullmatch(cell)]
    if commas and all(_THOUSANDS_COMMA.fullmatch(cell) for cell in commas):
        raise _refuse_thousands_or_decimals(path, what, sep, commas[0])
    comma = bool(commas)
    log.info("%s: columns separated by %r%s.", path, sep, ", decimal commas" if comma else "")
    return {"sep": sep, **({"decimal": ","} if comma else {})}


def _separator(header: str) -> str | None:
    """The separator a CSV file's ``header`` line shows where it is not a comma: a
    semicolon or a tab in a header without a comma; None otherwise."""
    header = header.lstrip("\ufeff")
    return next((s for s in (";", "\t") if "," not in header and s in header), None)


def _refuse_thousands_or_decimals(path: Path, what: str, sep: str, cell: str) -> UserError:
    """The line for a file whose commas are thousands separators as well as decimal commas
    (``2,585``: 2585 or 2.585): read either way, numbers would be 1000 times off, or mix
    with ``988`` written without one."""
    return UserError(
        f"{what[:1].upper()}{what[1:]} {path} (columns separated by {SEPARATOR_NAMES[sep]}) "
        f"writes numbers such as {cell!r}, which read as {cell.replace(',', '')} with a "
        f"thousands separator or as {cell.replace(',', '.')} with a decimal comma, and no cell "
        f"of its first rows tells which: write the numbers without thousands separators "
        f"({cell.replace(',', '')}), or their decimals with a point ({cell.replace(',', '.')})."
    )


def _hdf5_reason(err: BaseException) -> str:
    """The error's message, or of an HDF5 library error its innermost line (a dozen lines
    of the library's call stack end with the reason, e.g. "truncated file: eof = ...")."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if "End of HDF5 error back trace" not in lines:
        return " ".join(lines)
    reason = lines[lines.index("End of HDF5 error back trace") - 1]
    if reason.startswith("truncated file"):
        return f"{reason}: it is cut short (e.g. a download that stopped), fetch it again."
    return reason


def read_hdf(
    path: Path, what: str, key: str | None = None, stop: int | None = None
) -> pd.DataFrame:
    """The DataFrame a pandas HDF5 file holds (``DataFrame.to_hdf``, as DCRNN's
    ``metr-la.h5`` and ``pems-bay.h5``): the one table of the file, or the table ``key``;
    ``stop``: read only the first rows (``0``: the columns and no row).

    Raises:
        MissingPackageError: PyTables (``tables``) is not installed.
        UserError: the file is no pandas HDF5 file, holds several tables and no ``key`` is
            given, has no table ``key``, or holds a Series.
    """
    if importlib.util.find_spec("tables") is None:
        raise MissingPackageError(
            f"Reading the HDF5 file {path} needs PyTables: `pip install tables` (or convert "
            "the file to CSV)."
        )
    try:
        with pd.HDFStore(path, mode="r") as store:
            keys = [k.lstrip("/") for k in store]  # the tables' keys
            if key is None and len(keys) != 1:
                if not keys:
                    raise UserError(f"{what} {path} holds no table that pandas wrote (to_hdf).")
                raise UserError(
                    f"{what} {path} holds the tables {keys}: name the one to read with the "
                    f"source's key option (data.source.key={keys[0]}, say)."
                )
            key = keys[0] if key is None else str(key).lstrip("/")
            if key not in keys:
                raise UserError(f"{what} {path} has no table {key!r}; it holds {keys}.")
            frame = store.select(key, stop=stop)
    except UserError:
        raise
    except Exception as err:  # PyTables' and pandas' many errors for a file they cannot read
        raise UserError(
            f"Cannot read {what} {path} as a pandas HDF5 file: {_hdf5_reason(err)}"
        ) from None
    if not isinstance(frame, pd.DataFrame):
        raise UserError(
            f"{what} {path}: the table {key!r} is a {type(frame).__name__}, not a DataFrame."
        )
    return frame


# Columns named in a message about missing ones: a wide table may have hundreds.
FOUND_SHOWN = 12


def check_columns(df: pd.DataFrame, expected: Sequence[str], what: str, hint: str) -> None:
    """Raise a ``UserError`` listing expected vs found columns when some are missing."""
    missing = [c for c in expected if c not in df.columns]
    if not missing:
        return
    found = [str(c) for c in df.columns]
    # Guessed only among the columns no expected one already is: a history lacking `temp`
    # must not be told to read its time column `timestamp` as the covariate.
    unclaimed = [c for c in found if c not in set(map(str, expected))]
    close = {m: difflib.get_close_matches(m, unclaimed, n=1) for m in missing}
    guesses = ", ".join(f"{m!r} -> {g[0]!r}?" for m, g in close.items() if g)
    shown = (
        found if len(found) <= FOUND_SHOWN else f"{found[:FOUND_SHOWN]} ... ({len(found)} in all)"
    )
    raise UserError(
        f"{what} lacks column(s) {missing}. Expected {list(expected)}; found {shown}."
        + (f" Did you mean: {guesses}" if guesses else "")
        + f" {hint}"
    )


# How many coordinates a point has: a place in the plane or in space.
COORDINATE_DIMS = (2, 3)
# The role of the column(s) each column option names, in the message of a column in two roles.
ROLES = {
    "time_col": "the time",
    "id_col": "the point id",
    "coord_cols": "a coordinate",
    "value_cols": "a channel to forecast",
    "covariate_cols": "an input-only covariate",
}


def _listed(cols: Sequence[str]) -> str:
    """Column names as an override writes them: ``[x,y]``."""
    return f"[{','.join(cols)}]"


def check_column_roles(roles: dict[str, Any], prefix: str = "data.source") -> None:
    """Refuse column options that name a column twice, in one list or in two options: a
    column read twice would be a doubled input or channel, or a coordinate also forecast.

    Args:
        roles: each option (``coord_cols``) -> its column (text) or columns (a list; None:
            found in the file), in the order they are named in the messages.
        prefix: the config node of the options.

    Raises:
        UserError: naming the option(s) and the column.
    """
    seen: dict[str, str] = {}
    for option, cols in roles.items():
        if cols is None:
            continue
        cols = [str(cols)] if isinstance(cols, str) else [str(c) for c in cols]
        twice = list(dict.fromkeys(c for c in cols if cols.count(c) > 1))
        if twice:
            raise UserError(
                f"{prefix}.{option}={_listed(cols)} names {', '.join(twice)} twice: name each "
                "column once."
            )
        for col in cols:
            if col in seen:
                first = seen[col]
                raise UserError(
                    f"{prefix}.{first} and {prefix}.{option} both name the column {col!r}: "
                    f"a column is either {ROLES.get(first, first)} or "
                    f"{ROLES.get(option, option)}, not both; name it in one of them."
                )
            seen[col] = option


def check_coordinate_columns(cols: Sequence[str], option: str, given: Sequence[str]) -> None:
    """Refuse ``cols``, the coordinate columns of the setting ``option`` (given as
    ``given``), unless they are 2 or 3: a point's place in the plane or in space. One
    column would make a line of the cloud and read the next one as a channel."""
    if len(cols) not in COORDINATE_DIMS:
        raise UserError(
            f"{option}={_listed(given)} names {len(cols)} coordinate column(s): a point's "
            "place takes 2 or 3 (x,y[,z] or lon,lat), e.g. "
            f"{option}={_listed([*given[: len(given) - len(cols)], 'x', 'y'])}."
        )


READINGS_FIX = "Leave missing readings empty (or NA) and remove units/text from the cells."
# in a long table a point's rows repeat its position, so a row may leave it out
ROW_COORDINATES_FIX = (
    "Write coordinates as plain numbers, without units or text (a row may leave them empty "
    "where the point's other rows give them)."
)


def refuse_flags_and_unreal(
    series: pd.Series, col: str, what: str, fix: str, at: Callable[[int], str]
) -> None:
    """Refuse a column of numbers ``col`` of ``what`` that holds True/False alone
    (:func:`~cloudlstm.data.sources.bad_values.flags`), which pandas would read as 1 and 0,
    with ``fix`` after the line; or complex numbers, or True/False among others
    (:func:`~cloudlstm.data.sources.bad_values.refuse_unreal`, naming a row by ``at``, its
    position). A column whose text counts as missing (Urban Air's ``NULL``) is checked so
    before it is read with ``pd.to_numeric``, which takes True for 1.

    Raises:
        UserError: naming the column and the fix.
    """
    if flags(series):
        raise UserError(f"Column {col!r} of {what} must be numeric, but holds True/False. {fix}")
    refuse_unreal(series, col, what, at)


def numeric_column(
    df: pd.DataFrame,
    col: str,
    what: str,
    fix: str = READINGS_FIX,
    row_names: RowNames | None = None,
) -> np.ndarray:
    """Column ``col`` as float64; a ``UserError`` showing one non-numeric entry otherwise,
    ending in ``fix`` (by default that of readings, which may be missing: a column that
    may not, coordinates say, gives its own). ``row_names`` names its row by its position
    as the user finds it in the file (:func:`file_row_names`); None: ``data row`` and its
    index label. A cell of blanks or a missing-value text (``n/a``) is empty
    (:func:`~cloudlstm.data.sources.bad_values.written_cells`), in a Parquet file or a
    DataFrame as in a CSV file. A column of True/False (:func:`~cloudlstm.data.sources.
    bad_values.flags`), which pandas would read as 1 and 0, is refused too: no coordinate
    or reading is a yes/no; and so is one of complex numbers, or of True/False among
    numbers (:func:`~cloudlstm.data.sources.bad_values.refuse_unreal`)."""
    series = df[col]

    def at(row: int) -> str:
        return f"data row {series.index[row]}" if row_names is None else row_names([row])[0]

    refuse_flags_and_unreal(series, col, what, fix, at)
    if pd.api.types.is_numeric_dtype(series):
        return series.to_numpy(dtype=np.float64, na_value=np.nan)
    coerced = pd.to_numeric(series, errors="coerce")
    bad = np.flatnonzero(coerced.isna().to_numpy() & written_cells(series))
    if len(bad):
        row = int(bad[0])
        raise UserError(
            f"Column {col!r} of {what} must be numeric, but holds e.g. {series.iloc[row]!r} "
            f"({len(bad)} such entries, first at {at(row)}). {fix}"
        )
    return coerced.to_numpy(dtype=np.float64, na_value=np.nan)


def written_ids(column: pd.Series) -> pd.Series:
    """A point-id column read as text (``dtype=str``), ready for :func:`pivot_long`: as
    numbers where every id is written as its number prints (``7``, ``42``: they sort as
    numbers, as pandas would have read them), else as the text itself (``007``, ``A1``),
    which a number would rewrite (``007`` read as 7 becomes the point ``7``). A column
    read as numbers (Parquet) is returned as it is. Empty ids stay empty."""
    if pd.api.types.is_numeric_dtype(column):
        return column
    text = column.map(lambda v: v if pd.isna(v) else id_text(v))
    given = text.dropna()
    numbers = pd.to_numeric(given, errors="coerce")
    if len(given) and numbers.notna().all() and (numbers.map(id_text) == given).all():
        return pd.to_numeric(text)
    return text


def empty_ids(column: pd.Series) -> np.ndarray:
    """``(R,)`` whether each id cell is empty: NaN or None, or text of blanks alone (``" "``
    in a CSV file, ``""`` in a DataFrame built from records), which :func:`id_text` would
    make the point ``""``. A missing-value text (``NA``) is an id as written: a station's
    code in some networks."""
    empty = column.isna().to_numpy().copy()
    if pd.api.types.is_numeric_dtype(column):
        return empty
    if infer_dtype(column, skipna=True) == "string":  # at C speed: a history's 400,000 rows
        blank = column.str.strip().eq("")
    else:  # ids of several kinds (bytes, numbers beside text): cell by cell
        blank = column.map(lambda v: isinstance(v, str | bytes) and not id_text(v))
    return empty | blank.to_numpy(dtype=bool)


# pandas' kinds of a column of objects whose cells are all scalars (infer_dtype)
_SCALAR_KINDS = frozenset(
    {"string", "bytes", "integer", "floating", "mixed-integer-float", "empty"}
)


def refuse_nested_ids(column: pd.Series, what: str, row_names: RowNames | None = None) -> None:
    """Refuse a point-id column whose cells hold several values each (a Parquet file's
    list or struct column: arrays, lists, mappings), which would be made the text of the
    list (point ``['p0']``) or fail. ``row_names`` names a row by its position as the user
    finds it (None: ``data row`` and the position). Only a column of objects can hold them.

    Raises:
        UserError: naming the column, the first such cell and its row.
    """
    if column.dtype != object or infer_dtype(column, skipna=True) in _SCALAR_KINDS:
        return  # at C speed: a week of METR-LA's rows in a few ms
    nested = column.map(lambda v: isinstance(v, Iterable) and not isinstance(v, str | bytes))
    rows = np.flatnonzero(nested.to_numpy(dtype=bool))
    if not len(rows):
        return
    row = int(rows[0])
    at = f"data row {row}" if row_names is None else row_names([row])[0]
    cell = column.iloc[row]
    raise UserError(
        f"{what}: column {column.name!r} holds {type(cell).__name__} cells, not point ids "
        f"(e.g. {cell!r} at {at}; {len(rows)} such rows): write one id per row, as text or "
        "a number."
    )


def case_hint(unmatched: Sequence[str], known: Sequence[str], where: str) -> str:
    """The sentence to add to the message of point ids ``unmatched`` that are none of
    ``known`` (the ids of ``where``) when some would be one ignoring the case (``S001`` and
    ``s001``), the likely cause; ``""`` otherwise. Ids are matched as written (two points
    may differ in case alone), so the case is named, never ignored."""
    return _near_hint(unmatched, known, where, *_NEAR_WAYS[0])


def id_hint(unmatched: Sequence[str], known: Sequence[str], where: str) -> str:
    """:func:`case_hint`, or else the sentence naming ids that differ from ``known`` only
    by a whole float's ``.0`` (``773869.0`` and ``773869``: pandas writes an integer column
    that had an empty cell as floats). They are named, not matched: an id beyond 2**53
    written as a float may be another one rounded, and ``1.0`` may be a code of its own."""
    hints = (_near_hint(unmatched, known, where, *way) for way in _NEAR_WAYS)
    return next((hint for hint in hints if hint), "")


def near_ids(ids: Sequence[str], known: Sequence[str]) -> list[str]:
    """The ids of ``ids`` that :func:`id_hint` names: none of ``known``, but one of them
    in another case or with a whole float's ``.0`` (a table whose columns are all such is
    one written otherwise, not one without the columns looked for)."""
    written = {str(k) for k in known}
    keyed = [(key, {key(k) for k in written}) for key, *_ in _NEAR_WAYS]
    return [
        str(i)
        for i in ids
        if str(i) not in written and any(key(str(i)) in keys for key, keys in keyed)
    ]


def _without_float_zero(text: str) -> str:
    """``text`` without the ``.0`` of a whole number written as a float (``773869.0``)."""
    return _WHOLE_FLOAT.sub(r"\1", text)


# the text of a whole number written as a float: 773869.0
_WHOLE_FLOAT = re.compile(r"^([+-]?[0-9]+)\.0*$")

# the ways an id none of the known ones is near one, in the order id_hint names them:
# (the key two such ids share, how they differ, why, the fix) for _near_hint; near_ids
# finds the ids by the same keys
_NEAR_WAYS: tuple[tuple[Callable[[str], str], str, str, str], ...] = (
    (str.casefold, "only in case", "", ""),
    (
        _without_float_zero,
        "only by a '.0'",
        ", as pandas writes a column of whole numbers that had an empty cell",
        " (as integers: in pandas, astype('Int64'))",
    ),
)


def _near_hint(
    unmatched: Sequence[str],
    known: Sequence[str],
    where: str,
    key: Callable[[str], str],
    how: str,
    why: str = "",
    fix: str = "",
) -> str:
    """The sentence naming the ids ``unmatched`` whose ``key`` is that of an id of
    ``known`` (the ids of ``where``): they differ from it ``how``, ``why`` (the likely
    cause), and are to be written alike (``fix``: how); ``""`` where none does."""
    keyed = {key(str(k)): str(k) for k in known}
    pairs = [(str(u), keyed[key(str(u))]) for u in unmatched if key(str(u)) in keyed]
    if not pairs:
        return ""
    if len(pairs) == len(unmatched):
        count = f"All {len(pairs)} differ" if len(pairs) > 1 else "It differs"
    else:
        count = f"{len(pairs)} of them {'differ' if len(pairs) > 1 else 'differs'}"
    return (
        f" {count} from an id of {where} {how} (e.g. {pairs[0][0]!r} and "
        f"{pairs[0][1]!r}){why}: ids are matched as written, so write them alike in "
        f"both{fix}."
    )


def id_text(value: Any) -> str:
    """A point id as text, the same whichever file it comes from: byte strings (Python 2
    pickles) decoded, whole floats without their ``.0`` (an integer id column with a gap
    reads as floats), surrounding blanks removed."""
    if isinstance(value, bytes):
        value = value.decode("latin1")
    if isinstance(value, (float, np.floating)) and np.isfinite(value) and float(value).is_integer():
        value = int(value)
    return str(value).strip()


def refuse_repeated_columns(names: Sequence[Any], what: str) -> None:
    """Refuse a table that names a column more than once (a DataFrame joined from two
    tables, or ``773869`` beside ``"773869"``): its cells would be read as one column's.
    ``names``: the columns as they are matched (a wide table's point ids as text).

    Raises:
        UserError: naming the first few repeated and the fix.
    """
    index = pd.Index(list(names))
    repeated = index[index.duplicated()].unique().tolist()
    if repeated:
        raise UserError(
            f"{what} names the column(s) {repeated[:5]} more than once: keep one of each."
        )
