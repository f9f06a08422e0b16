"""A long-format history table -> the model input of one forecast, as training built it.

Rows are laid on the training sampling grid
(:func:`~cloudlstm.data.sources.tables.pivot_long`), the last ``history_steps`` steps are
kept, gaps are filled as the loaders fill them
(:func:`~cloudlstm.data.sources.tables.fill_gaps_causally`: each series holds its last
reading, a leading gap takes the first one), and values and coordinates are normalised with
the statistics stored in the checkpoint (:class:`~cloudlstm.data.spec.DataSpec`); nothing
is fitted on the new data. The input's channels are put together and normalised as the
training windows' are (:mod:`cloudlstm.data.pipeline.model_input`, the one rule of both).
Its values are checked as training data's are: cells that are no finite number
(:func:`~cloudlstm.data.sources.bad_values.channel_values`), then values outside their
channel's valid range or absurd against the training medians and spreads
(:func:`~cloudlstm.data.pipeline.absurd_values.checked_history`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import tzinfo

import numpy as np
import pandas as pd

from cloudlstm.data.covariates import time_features
from cloudlstm.data.pipeline.absurd_values import CellNames, checked_history
from cloudlstm.data.pipeline.coordinates import FAR_OUTSIDE_SPANS, extents_outside
from cloudlstm.data.pipeline.model_input import (
    normalised,
    positions_before_covariates,
    with_time_features,
)
from cloudlstm.data.pipeline.wide_history import long_history, source_rows
from cloudlstm.data.sources.bad_values import (
    RowNames,
    channel_values,
    check_mode,
    holds_no_reading,
    index_row_names,
    row_names_through,
)
from cloudlstm.data.sources.degrees import check_degrees
from cloudlstm.data.sources.long_format import SAME_PLACE, _moving_points, _spans, unplaced
from cloudlstm.data.sources.tables import (
    ROW_COORDINATES_FIX,
    LongGrid,
    check_columns,
    empty_ids,
    fill_gaps_causally,
    id_hint,
    id_text,
    infer_step,
    numeric_column,
    pivot_long,
    refuse_nested_ids,
    step_text,
)
from cloudlstm.data.sources.times import (
    API_OPTIONS,
    SOURCE_OPTIONS,
    check_time_reading,
    counting_unit,
    parse_times,
    time_zone,
)
from cloudlstm.data.spec import DEFAULT_COORD_COLS, DataSpec
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.data.transforms import scale_coords
from cloudlstm.errors import UserError

log = logging.getLogger(__name__)


@dataclass
class ForecastInput:
    """The model input built from a history.

    Attributes:
        x: ``(M, N, C_in)`` float32 normalised input (the model's input steps): the
            target channels, the measured covariates, the time features.
        future: ``(J, N, F)`` float32 time features of the forecast steps, or None when
            the model was trained without them.
        coords: ``(N, L)`` float32 normalised coordinates (moving points: the last positions).
        point_ids: the N points, training points first in training order, then new ones.
        raw_coords: ``(N, L)`` coordinates in raw units (moving points: the last positions).
        filled: ``(N,)`` how many of each point's M x C input entries were filled.
        last_time: the last timestamp of the history.
        step: the sampling period.
        zone: the time zone the history's times were written in (:func:`time_zone`), in
            which the forecast's times are given; None: without one (naive, as read).
    """

    x: np.ndarray
    coords: np.ndarray
    point_ids: list[str]
    raw_coords: np.ndarray
    filled: np.ndarray
    last_time: np.datetime64
    step: np.timedelta64
    future: np.ndarray | None = None
    zone: tzinfo | None = None


@contextmanager
def user_errors() -> Iterator[None]:
    """The long-format helpers' ValueErrors (bad data) as one-line UserErrors."""
    try:
        yield
    except UserError:
        raise
    except ValueError as err:
        raise UserError(str(err)) from None


@dataclass(frozen=True)
class TimeReading:
    """How a history's times are read: in ``time_format`` or ``time_unit`` where either is
    given, else as the run's training data were (the checkpoint's). ``options`` is where the
    user sets them, named in the fixes of messages: this class in Python
    (:data:`~cloudlstm.data.sources.times.API_OPTIONS`), ``"data.source."`` for predict.py.
    A date pandas read month first is warned of, as in training."""

    time_format: str | None = None
    time_unit: str | None = None
    options: str = field(default=API_OPTIONS, repr=False)

    def __post_init__(self) -> None:
        """Refuse a unit pandas does not count in, a format without a strftime code, or
        both: in one line, where they failed later in a traceback or one was not read."""
        check_time_reading(self.time_format, self.time_unit, "TimeReading.")

    def settings(self, info: DataSpec) -> tuple[str | None, str | None]:
        """``(time_format, time_unit)``: the ones given, else the run's."""
        if self.time_format is None and self.time_unit is None:
            return info.time_format, info.time_unit
        return self.time_format, self.time_unit


def warn_other_clock(column: pd.Series, zone: tzinfo | None, info: DataSpec, what: str) -> None:
    """Warn where a history's times carry a UTC offset and the training file's did not, or
    the reverse (``info.times_zoned``): both are read as written (with an offset: as UTC;
    without: as the clock the training file kept), so local clock times on one side and
    UTC on the other shift every input by the offset, the time features with it. Times
    already parsed (a ``datetime64`` column, :meth:`Forecaster.update`'s buffer) say
    nothing of how they were written, and are left alone."""
    trained = info.times_zoned
    if trained is None or pd.api.types.is_datetime64_dtype(column):
        return
    if zone is not None and not trained:
        log.warning(
            "%s writes its times with a zone or UTC offset, read as UTC, but the training "
            "file wrote clock times without one: if those were local times, every input is "
            "shifted by the offset. Write the history's times as the training file did.",
            what,
        )
    elif zone is None and trained and not pd.api.types.is_numeric_dtype(column):
        log.warning(
            "%s writes its times without a zone, read as UTC, but the training file wrote "
            "them with a UTC offset: if the history's are local times, every input is "
            "shifted by the offset. Write them with their offset, as the training file did.",
            what,
        )


def parse_history(
    df: pd.DataFrame,
    info: DataSpec,
    what: str,
    reading: TimeReading | None = None,
    row_names: RowNames | None = None,
) -> pd.DataFrame:
    """Check the columns and parse the time column (to ``datetime64[ns]``, naive UTC) as
    ``reading`` says (None: as the run's training data were). ``row_names`` names a row of
    ``df`` by its position, as the user finds it (None: ``data row`` and the position).

    Raises:
        UserError: a column is missing (expected vs found), a timestamp cannot be read, or
            a point id is empty.
    """
    reading = reading or TimeReading()
    time_format, time_unit = reading.settings(info)
    expected = [info.time_col, info.id_col, *info.coord_cols, *info.read_channels]
    with user_errors():
        check_columns(
            df,
            expected,
            what,
            f"The model ({info.model}) was trained on these columns; rename yours to match.",
        )
        times = parse_times(
            df[info.time_col],
            f"column {info.time_col!r} of {what}",
            time_format,
            time_unit,
            options=reading.options,
            row_names=row_names,
        )
    if df.empty:
        raise UserError(
            f"{what} has no rows, only its columns: give the readings of the last "
            f"{info.history_steps} steps."
        )
    empty = np.flatnonzero(empty_ids(df[info.id_col]))
    if len(empty):
        first = f"data row {empty[0]}" if row_names is None else row_names([int(empty[0])])[0]
        raise UserError(
            f"{what}: column {info.id_col!r} has {len(empty)} empty point id(s) (first at "
            f"{first}): give every row its point."
        )
    column = df[info.id_col]
    refuse_nested_ids(column, what, row_names)
    # as the training file's: 007 stays 007, 7.0 is 7; once per distinct id, which a
    # history of many steps repeats in every step (a week of METR-LA: 400,000 rows)
    ids = column.map({i: id_text(i) for i in column.unique()})
    return df.assign(**{info.time_col: times, info.id_col: ids})


def shown_times(times: np.ndarray, zone: tzinfo | None = None) -> pd.DatetimeIndex:
    """Parsed times (UTC where the history's had a zone) as messages show them: in the
    history's own zone (:func:`time_zone`), so that they can be found in the user's file."""
    index = pd.DatetimeIndex(times)
    return index if zone is None else index.tz_localize("UTC").tz_convert(zone)


def shown_time(time: np.datetime64, zone: tzinfo | None = None) -> pd.Timestamp:
    """One parsed time as messages show it (:func:`shown_times`)."""
    return shown_times(np.asarray([time], dtype="datetime64[ns]"), zone)[0]


def history_step(
    times: np.ndarray, info: DataSpec, what: str, zone: tzinfo | None = None
) -> np.timedelta64:
    """The training sampling period, checked against the history's own; messages show
    times in ``zone`` (:func:`shown_time`).

    Raises:
        UserError: the history is sampled at another interval, has a timestamp off the
            training step's grid, or the period is unknown.
    """
    distinct = np.unique(times)
    found = infer_step(distinct) if len(distinct) > 1 else None
    expected = info.step
    if expected is None and found is None:
        raise UserError(f"{what} has one timestamp and the training data had no sampling step.")
    if expected is not None and found is not None:
        check_on_grid(distinct, expected, found, what, zone)
    if expected is not None:
        check_phase(distinct[0], expected, info.grid_origin(), what, zone)
    return expected if expected is not None else found


def check_phase(
    first: np.datetime64,
    step: np.timedelta64,
    origin: np.datetime64 | None,
    what: str,
    zone: tzinfo | None = None,
) -> None:
    """Refuse a history whose grid is shifted from the training grid (every ``step`` from
    ``origin``): readings at :07 past the hour for a model trained on readings on the hour.

    Raises:
        UserError: naming the history's first time, the shift, and the nearest grid time.
    """
    if origin is None:
        return
    shift = (first - origin) % step
    if shift == np.timedelta64(0, "ns"):
        return
    on_grid = first - shift
    raise UserError(
        f"{what}: its times are {step_text(shift)} after the training data's grid (every "
        f"{step_text(step)} from {shown_time(origin, zone)}): its first, "
        f"{shown_time(first, zone)}, falls between {shown_time(on_grid, zone)} and "
        f"{shown_time(on_grid + step, zone)}. Resample the history onto the training grid."
    )


def check_on_grid(
    distinct: np.ndarray,
    step: np.timedelta64,
    found: np.timedelta64,
    what: str,
    zone: tzinfo | None = None,
) -> None:
    """Refuse sorted distinct ``times`` that are no samples of a ``step`` grid.

    Every time must be a whole number of steps after the first, and of two gaps or more at
    least one exactly one step: a history with missing steps is fine (they are filled), one
    sampled every 2 steps (``found``, its most common gap) is another interval, not a sparse
    history. A single gap says no interval: two times, the rest of a stream that
    :meth:`~cloudlstm.forecast.Forecaster.update` kept across a gap, are read as a history
    with missing steps, as the whole history they came from is.

    Raises:
        UserError: naming the first time off the grid where the history is sampled at the
            step, else the history's own interval.
    """
    unit = int(step / np.timedelta64(1, "ns"))
    offsets = (distinct - distinct[0]).astype("timedelta64[ns]").astype(np.int64)
    off_grid = np.flatnonzero(offsets % unit)
    if len(off_grid) and found == step:  # sampled at the step, some times drifted off it
        raise UserError(
            f"{what}: timestamp {shown_time(distinct[off_grid[0]], zone)} is not a whole number "
            f"of {step_text(step)} steps after its first, {shown_time(distinct[0], zone)} "
            f"({len(off_grid)} such timestamp(s)), but the model was trained on data every "
            f"{step_text(step)}: resample the history onto that grid."
        )
    if len(off_grid) or (len(offsets) > 2 and not (np.diff(offsets) == unit).any()):
        raise UserError(
            f"{what} is sampled every {step_text(found)}, but the model was trained on data "
            f"every {step_text(step)}: resample the history to {step_text(step)} steps."
        )


def recent_window(
    df: pd.DataFrame, info: DataSpec, what: str, zone: tzinfo | None = None
) -> tuple[pd.DataFrame, np.timedelta64]:
    """The rows of the last ``history_steps`` steps of a parsed history, and the step;
    messages show times in ``zone`` (:func:`shown_time`).

    Raises:
        UserError: the history spans fewer steps than the model's input needs.
    """
    times = df[info.time_col].to_numpy()
    step, need = history_step(times, info, what, zone), info.history_steps
    first, last = times.min(), times.max()
    covered = int((last - first) // step) + 1
    if covered < need:
        reach = f" ({info.input_steps} input steps reaching back {need})"
        raise UserError(
            f"{what} covers {covered} step(s) of {step_text(step)} ({shown_time(first, zone)} "
            f"to {shown_time(last, zone)}), but the model needs {need}"
            f"{reach if need != info.input_steps else ''}: give at least {need} steps, i.e. "
            f"from {shown_time(last - (need - 1) * step, zone)} on."
        )
    kept = times > last - need * step
    _warn_jump(times[~kept], times[kept], need, step, what, zone)
    return df[kept], step


def _warn_jump(
    before: np.ndarray,
    kept: np.ndarray,
    need: int,
    step: np.timedelta64,
    what: str,
    zone: tzinfo | None,
) -> None:
    """One warning where the history's times jump by more than the ``need`` steps the model
    reads, between the readings ``before`` its window and those ``kept`` in it: none of the
    earlier ones is read, and a time mistyped ahead (a century, a year) looks just so."""
    if not len(before):
        return
    older, newer = before.max(), kept.min()
    if newer - older <= need * step:
        return
    log.warning(
        "%s jumps from %s to %s, %s steps of %s on: the model reads its last %d steps, so no "
        "reading before %s is used. If a time is mistyped, correct it.",
        what,
        shown_time(older, zone),
        shown_time(newer, zone),
        f"{(newer - older) // step:,}",
        step_text(step),
        need,
        shown_time(newer, zone),
    )


def order_points(ids: list[str], info: DataSpec, what: str, wide: bool = False) -> list[str]:
    """Training points present in the history (training order), then new points (sorted).
    ``wide``: the history was a wide table, whose points are columns, not rows.

    Raises:
        UserError: a model tied to its training points (``fixed_points``) gets new points,
            or misses some of them (a point model is forecast without them, with a warning).
    """
    present = set(ids)
    known = [p for p in info.point_ids if p in present]
    new = sorted(present - set(info.point_ids))
    # a new point written as a training one in another case or as a float (773869.0)
    near = id_hint(new, info.point_ids, "the training points")
    if info.fixed_points and new:
        raise UserError(
            f"{what} has {len(new)} point(s) the model was not trained on ({', '.join(new[:5])}"
            f"{' ...' if len(new) > 5 else ''}); {info.model} cannot forecast them: "
            f"{info.fixed_points}. Leave them out, or train a point model (e.g. model=cloudlstm)."
            f"{near}"
        )
    if near:  # forecast as new sites, beside the training point they likely are
        log.warning("%s has new point(s) forecast as new sites.%s", what, near)
    if info.fixed_points and len(known) < len(info.point_ids):
        missing = [p for p in info.point_ids if p not in present]
        part = "column" if wide else "row"
        where = "" if wide else f" in the last {info.history_steps} steps"
        raise UserError(
            f"{info.model} forecasts exactly its {len(info.point_ids)} training points "
            f"({info.fixed_points}), but {what} has no {part} of {', '.join(missing[:5])}"
            f"{' ...' if len(missing) > 5 else ''}{where}. Give each a {part}{where and ' there'}"
            " (readings left empty are filled from the other points, with a warning), or "
            "train a point model (e.g. model=cloudlstm)."
        )
    if not wide:  # a wide table's missing columns are warned of as it is read
        _warn_points_left_out(known, info, what)
    return known + new


def _warn_points_left_out(known: list[str], info: DataSpec, what: str) -> None:
    """Warn of training points without a row in the steps read, where the history has rows
    of others: they are not forecast, and a point left out of an export of the network is
    more often an accident than a choice (a history of new points alone is a choice)."""
    if not known or len(known) == len(info.point_ids):
        return
    given = set(known)
    missing = [str(p) for p in info.point_ids if p not in given]
    more = f" ... ({len(missing)} in all)" if len(missing) > 5 else ""
    log.warning(
        "%s has no row in its last %d steps for %d of the %d training point(s) (%s), which "
        "are not forecast: add their rows (empty readings where they have none) to forecast "
        "them.",
        what,
        info.history_steps,
        len(missing),
        len(info.point_ids),
        ", ".join(missing[:5]) + more,
    )


def _warn_stale_new_points(
    table: pd.DataFrame, window: pd.DataFrame, info: DataSpec, what: str
) -> None:
    """Warn of new points (no training point) with rows in the history ``table`` but none
    in the steps read (``window``): they are not forecast, which a training point in that
    case is warned of too (:func:`_warn_points_left_out`)."""
    read = set(window[info.id_col].unique()) | set(info.point_ids)
    stale = sorted(set(table[info.id_col].unique()) - read)
    if not stale:
        return
    more = f" ... ({len(stale)} in all)" if len(stale) > 5 else ""
    log.warning(
        "%s has rows of %d new point(s) (%s) only before its last %d steps, which are not "
        "forecast: add their rows there (empty readings where they have none) to forecast "
        "them.",
        what,
        len(stale),
        ", ".join(map(str, stale[:5])) + more,
        info.history_steps,
    )


def check_reading(reading: object) -> None:
    """Refuse a ``reading`` that is no :class:`TimeReading` (a format string given for it)."""
    if reading is not None and not isinstance(reading, TimeReading):
        raise UserError(
            f"reading={reading!r} is a {type(reading).__name__}, not a TimeReading: give "
            "TimeReading(time_format=...) or TimeReading(time_unit=...), or leave it out to "
            "read the times as the training data's were."
        )


def build_input(
    df: pd.DataFrame,
    info: DataSpec,
    what: str = "the history",
    bad_values: str = "error",
    reading: TimeReading | None = None,
    row_names: RowNames | None = None,
) -> ForecastInput:
    """The normalised model input of the forecast after the last timestamp of ``df``.

    Args:
        df: long-format rows ``(time, id, coordinates, one column per value channel and
            per measured covariate)``, or a wide table of a one-channel run's training
            points (:func:`~cloudlstm.data.pipeline.wide_history.long_history`); missing
            cells or rows, and cells of the training files' missing value, are filled.
            Time features are computed from the times.
        info: the training data's description, from the checkpoint.
        what: how to name ``df`` in error messages.
        bad_values: what a value that is no finite number, outside its channel's valid
            range or absurd does: ``error``, or ``warn`` (it is missing, and filled).
        reading: how the times are read (:class:`TimeReading`); None: as the run's were.
        row_names: how messages name a row of ``df`` by its position, as the user finds it
            in the file it was read from (a CSV's line:
            :func:`~cloudlstm.data.sources.tables.file_row_names`); None: by the index of
            ``df`` (:func:`~cloudlstm.data.sources.bad_values.index_row_names`).

    Raises:
        UserError: ``reading`` is no :class:`TimeReading`, missing columns, unreadable
            cells, bad values (``bad_values=error``), another sampling interval, too little
            history, points without coordinates, or points the model cannot take.
    """
    mode = check_mode(bad_values)
    check_reading(reading)
    # predict.py's option, else the Python argument
    option = (
        "data.source.bad_values" if reading and reading.options == SOURCE_OPTIONS else "bad_values"
    )
    long = long_history(df, info, what, mode, row_names)
    given_long = long is df  # its rows are the table's, not a wide table's melted cells
    if given_long:
        _warn_unread_columns(df, info, what)
    own_rows = long_rows(df, info)
    long_names = _long_row_names(df, long, own_rows, row_names)
    table = parse_history(long, info, what, reading, long_names)
    time_format, time_unit = (reading or TimeReading()).settings(info)
    zone = time_zone(long[info.time_col], time_format, time_unit)
    warn_other_clock(long[info.time_col], zone, info, what)
    table = _marked_missing(table, info).reset_index(drop=True)  # index: the table's rows
    df, step = recent_window(table, info, what, zone)
    _warn_stale_new_points(table, df, info, what)
    names = row_names_through(long_names, df.index.to_numpy())  # df's index: rows of long
    # the times as written, where two offsets naming one moment are shown so
    written = long[info.time_col].iloc[df.index] if zone is not None and given_long else None
    clock = zone is None and counting_unit(long[info.time_col], time_unit) is None
    need = info.history_steps
    ids = order_points(df[info.id_col].unique().tolist(), info, what, wide=not given_long)
    index = {p: n for n, p in enumerate(ids)}
    with user_errors():
        # the period is history_step's to check: the last steps read may all be missing
        grid = pivot_long(
            df,
            info.time_col,
            info.id_col,
            step,
            "error",
            what,
            refuse_sparse=False,
            written=written,
            row_names=names,
            clock=clock,
        )
        # as training reads them (a wide table's cells were read before it was melted:
        # long_history)
        values = channel_values(df, info.read_channels, what, mode, row_names=names, option=option)
        positions = row_positions(df, info, what, names)
    _refuse_unplaceable(df, positions, info, what, names, zone)
    # the grid starts at the history's first row; the window ends at its last timestamp
    first = need - len(grid.timestamps)
    column = np.array([index[p] for p in grid.point_ids])
    raw = np.full((need, len(ids), values.shape[1]), np.nan, dtype=np.float32)
    raw[first:, column] = grid.scatter(values, dtype=np.float32)
    pos = np.full((need, len(ids), info.num_dims), np.nan)
    pos[first:, column] = grid.scatter(positions)
    times = grid.timestamps[-1] - step * np.arange(need - 1, -1, -1)
    shown = shown_times(times, zone)  # as the messages name them
    raw_coords, track, located = _coordinates(pos, ids, info, shown, what)
    named = None  # a wide table's cells: by point and time alone, its rows are melted ones
    if own_rows:
        at = np.full((need, len(ids)), np.nan)
        at[first:, column] = grid_rows(grid)
        named = cell_rows(at, names)
    raw = _checked_values(raw, ids, raw_coords, times, info, what, mode, shown, named, option)
    _refuse_unread_channels(raw, info, shown, what)
    _warn_other_units(raw, info, shown, what)
    _warn_unread_points(raw, ids, info, shown, what)
    _warn_unread_steps(raw, info, shown, what)
    filled, observed = fill_gaps_causally(raw)
    if info.moving:  # positions are channels too, as in training
        cut = len(info.value_channels)
        filled = positions_before_covariates(filled, track, cut)
        observed = positions_before_covariates(observed, located, cut)
    scaler = info.input_scaler()
    # as in training: an entry no point had in the window becomes 0, the training mean
    normed = normalised(filled, scaler.mean.astype(np.float32), scaler.std.astype(np.float32))
    rows = need + np.asarray(info.input_offsets)
    last_time = grid.timestamps[-1]
    past, future = _time_inputs(last_time, step, need, info, len(ids))
    normed, observed = with_time_features(normed, observed, past)
    degenerate = np.asarray(info.coord_degenerate)
    coords = scale_coords(
        raw_coords, np.asarray(info.coord_lo), np.asarray(info.coord_span), degenerate
    )
    return ForecastInput(
        x=normed[rows].astype(np.float32),
        coords=coords.astype(np.float32),
        point_ids=ids,
        raw_coords=raw_coords,
        filled=(~observed[rows]).sum(axis=(0, 2)),
        last_time=last_time,
        step=step,
        future=future,
        zone=zone,
    )


def row_positions(df: pd.DataFrame, info: DataSpec, what: str, names: RowNames) -> np.ndarray:
    """``(R, L)`` the coordinates of the rows ``df`` of a history or snapshot (NaN where
    empty), read as training read its files' (:func:`~cloudlstm.data.sources.tables.
    numeric_column`), and a latitude beyond ±90 or a longitude beyond ±180 degrees refused
    as training refuses one (:func:`~cloudlstm.data.sources.degrees.check_degrees`, by the
    columns' names), naming its row as ``names`` does and its point. An infinite
    coordinate is left to :func:`_refuse_unplaceable`, whose line says what it is.

    Raises:
        UserError: a coordinate that is no number, or out of degrees.
    """
    positions = np.stack(
        [numeric_column(df, c, what, ROW_COORDINATES_FIX, names) for c in info.coord_cols],
        axis=1,
    )
    ids = df[info.id_col]
    check_degrees(
        np.where(np.isinf(positions), np.nan, positions),
        info.coord_cols,
        lambda row: f"{names([row])[0]} ({info.id_col}={str(ids.iloc[row])!r})",
        what,
    )
    return positions


def _checked_values(
    raw: np.ndarray,
    ids: list[str],
    coords: np.ndarray,
    times: np.ndarray,
    info: DataSpec,
    what: str,
    mode: str,
    shown: pd.DatetimeIndex | None = None,
    rows: CellNames | None = None,
    option: str = "data.source.bad_values",
) -> np.ndarray:
    """``raw (H, N, C)`` (NaN: missing) checked for values outside their channel's valid
    range and absurd ones, against the training data's (``info.value_reference``; a
    checkpoint written before it: not checked); with ``mode="warn"`` those made NaN.
    Messages name ``times`` as ``shown`` has them, each value's row as ``rows`` does (its
    step where None), and ``option`` as the one that sets ``mode``."""
    if info.value_reference is None:
        return raw
    observed = np.isfinite(raw)
    stream = PointCloudStream(
        values=np.where(observed, raw, 0.0),
        mask=observed,
        coords=coords,
        channel_names=info.read_channels,
        point_ids=ids,
        timestamps=times,
    )
    checked = checked_history(stream, info.value_reference, mode, what, option, shown, rows)
    return np.where(checked.mask, raw, np.nan).astype(np.float32)


def long_rows(df: pd.DataFrame, info: DataSpec) -> bool:
    """Whether the rows :func:`long_history` makes of ``df`` are its own (the long format,
    its times or ids perhaps its index), not a wide table's cells melted into rows."""
    return info.id_col in (*df.columns, *df.index.names)


def grid_rows(grid: LongGrid) -> np.ndarray:
    """``(T, N)`` the position of the row that gave each cell of ``grid``; NaN: none."""
    return grid.scatter(np.arange(len(grid.t_idx))[:, None])[..., 0]


def _long_row_names(
    df: pd.DataFrame, long: pd.DataFrame, own_rows: bool, row_names: RowNames | None
) -> RowNames:
    """How messages name the rows of ``long``, :func:`long_history` of the table ``df``, by
    their positions: as the rows of ``df`` they come from (a wide table's cells by their
    row), as ``row_names`` names those (a file's lines), or by the index: of ``long`` where
    its rows are the table's (its labels), else ``df``'s rows' positions (``data row``)."""
    if own_rows:
        return row_names or index_row_names(long.index)
    names = row_names or index_row_names(pd.RangeIndex(len(df)))
    return row_names_through(names, source_rows(df, long))


def cell_rows(at: np.ndarray, names: RowNames) -> CellNames:
    """How messages name the rows of the user's table that gave the cells ``(t, n)``: ``at
    (T, N)`` holds each one's position, named as ``names`` names it, as a cell that is no
    number is named; ``names`` is asked once for the cells of a message (a file's lines
    are read once for them)."""
    width = at.shape[1]
    through = row_names_through(names, at.reshape(-1))  # cell t * N + n: its row

    def named(cells: list[tuple[int, int]]) -> list[str]:
        return list(through([t * width + n for t, n in cells]))

    return named


def checked_snapshot(
    rows: pd.DataFrame,
    grid: LongGrid,
    info: DataSpec,
    mode: str,
    zone: tzinfo | None,
    named: bool = True,
) -> pd.DataFrame:
    """A snapshot's long ``rows`` (channel cells numbers, laid on ``grid``) checked for
    values outside their channel's valid range and absurd ones, as a history's are
    (:func:`build_input`): kept, such a value would make every forecast of the next steps
    refuse the stream. With ``mode="warn"``, a copy where they are empty (missing). Each
    value is named by its point, time (in ``zone``) and, where ``named`` (not a wide
    table's melted cells), its row of ``rows``.

    Raises:
        UserError: ``mode="error"`` and some values are out of range or absurd.
    """
    channels = list(info.read_channels)
    # the training files' "no reading" value is a gap, not a reading to judge
    raw = grid.scatter(_marked_missing(rows, info)[channels].to_numpy(np.float64), np.float32)
    at = grid_rows(grid)
    ids = list(grid.point_ids)
    # the check judges each channel's values alone: the points' places play no part
    coords = np.zeros((len(ids), info.num_dims))
    shown = shown_times(grid.timestamps, zone)
    names = cell_rows(at, index_row_names(rows.index)) if named else None
    what = "the snapshot"
    checked = _checked_values(
        raw, ids, coords, grid.timestamps, info, what, mode, shown, names, "bad_values"
    )
    t, n, c = np.nonzero(np.isfinite(raw) & ~np.isfinite(checked))
    if not len(t):
        return rows
    out = rows.copy()
    for row, k in zip(at[t, n].astype(int), c, strict=True):
        out.iloc[row, out.columns.get_loc(channels[k])] = np.nan
    return out


def _refuse_unread_channels(
    raw: np.ndarray, info: DataSpec, times: pd.DatetimeIndex, what: str
) -> None:
    """A channel without a reading at any point of the history ``raw (H, N, C)`` (NaN:
    missing) becomes its training mean at every point and step, as an entry no point had
    does in training. A forecast channel so filled is refused: the forecast would start
    from invented values. A measured covariate so filled is warned of: the forecast stands
    on the other inputs. (A point without readings is filled from the others', as in
    training, and counted in ``filled_inputs``.)"""
    seen = np.isfinite(raw).any(axis=(0, 1))
    unread = [c for c, s in zip(info.read_channels, seen, strict=True) if not s]
    if not unread:
        return
    steps = f"{len(times)} steps read ({times[0]} to {times[-1]})"
    forecast = [c for c in unread if c in info.value_channels]
    if forecast:
        raise UserError(
            f"{what} has no reading of {', '.join(map(repr, forecast))} at any point in the "
            f"{steps}: the forecast would start from invented values; give the readings of "
            "those steps."
        )
    log.warning(
        "%s has no reading of the covariate(s) %s at any point in the %s: they are their "
        "training means there.",
        what,
        ", ".join(map(repr, unread)),
        steps,
    )


# how many times larger than the training data's a history channel's readings must be to be
# taken for other units (mg and µg: 1000). Over Beijing's four years the network's readings
# of a step reached 18 times the training's (SO2), 101 times in the wettest hour (RAIN).
# Smaller ones are not judged: a channel near 0 (a temperature, a wind) is 1e-18 of it.
UNITS_FACTOR = 200.0


def _warn_other_units(raw: np.ndarray, info: DataSpec, times: pd.DatetimeIndex, what: str) -> None:
    """One warning per channel whose readings at some step the model reads of ``raw (H, N,
    C)`` (NaN: missing; ``times (H,)``) are typically ``UNITS_FACTOR`` times those of
    training or more: readings in other units (Beijing's CO in the files' µg/m³ for a run
    trained on mg/m³). Each lies too near the others of its step to
    be absurd alone, and the forecast would start from inputs 1000 times too large.
    Typical: |median| + spread, the training's from the checkpoint's reference
    (:mod:`~cloudlstm.data.pipeline.absurd_values`), each step's across its points."""
    channels = (info.value_reference or {}).get("channels") or {}
    read = len(raw) + np.asarray(info.input_offsets)  # the steps the model reads
    for k, name in enumerate(info.read_channels):
        entry = channels.get(name) or {}
        if entry.get("median") is None or not entry.get("spread"):
            continue
        trained = abs(entry["median"]) + entry["spread"]
        factors = [(t, _typical(raw[t, :, k]) / trained) for t in read]
        off = [(t, f) for t, f in factors if f >= UNITS_FACTOR]
        if not off:
            continue
        t, factor = off[0]
        log.warning(
            "%s: its %r readings at %s are typically %s the training data's (%.4g, the "
            "training's %.4g; %d of the %d steps read so): are they in other units? The "
            "model reads them in the training's, so the forecast is off by as much: convert "
            "them.",
            what,
            name,
            times[t],
            f"{factor:,.0f} times",
            float(np.nanmedian(raw[t, :, k])),
            entry["median"],
            len(off),
            len(read),
        )


def _typical(values: np.ndarray) -> float:
    """|median| + spread (1.4826 x the median absolute deviation) of ``values (N,)``, NaN
    left out; 0 without any."""
    values = values[np.isfinite(values)]
    if not len(values):
        return 0.0
    median = float(np.median(values))
    return abs(median) + 1.4826 * float(np.median(np.abs(values - median)))


def _warn_unread_steps(raw: np.ndarray, info: DataSpec, times: pd.DatetimeIndex, what: str) -> None:
    """One warning when steps the model reads of the history ``raw (H, N, C)`` (NaN:
    missing) have no forecast channel's reading at any point, as after an outage of the
    whole network: they hold the readings of the steps before, at every point alike,
    which ``filled_inputs`` would not tell from scattered gaps."""
    forecast = [info.read_channels.index(c) for c in info.value_channels]
    read = len(times) + np.asarray(info.input_offsets)  # the steps the model reads
    empty = read[~np.isfinite(raw[read][:, :, forecast]).any(axis=(1, 2))]
    if not len(empty):
        return
    shown = ", ".join(str(times[t]) for t in empty[:3])
    log.warning(
        "%s has no reading at any point in %d of the %d steps the model reads (%s%s): they "
        "hold the readings of the steps before, so the forecast stands on %d step(s) of "
        "readings.",
        what,
        len(empty),
        len(read),
        shown,
        " ..." if len(empty) > 3 else "",
        len(read) - len(empty),
    )


def _unread_columns(df: pd.DataFrame, info: DataSpec) -> list[str]:
    """The columns of ``df`` that hold values the run reads as nothing: neither its time, id,
    coordinate nor read channel columns. A column of empty cells or missing-value texts
    (``n/a``: :func:`~cloudlstm.data.sources.bad_values.holds_no_reading`, as a Parquet file
    or a DataFrame keeps them) holds none: a table's spare column, left out."""
    read = {*info.coord_cols, *info.read_channels, info.time_col, info.id_col}
    return [c for c in df.columns if c not in read and not holds_no_reading(df[c])]


def _warn_unread_columns(df: pd.DataFrame, info: DataSpec, what: str) -> None:
    """Up to two warnings for the columns of ``df`` the run does not read
    (:func:`_unread_columns`), so that no reading given is dropped unsaid: one for a column
    named as a coordinate (``x``, ``y``, ``z``), as 3-D positions given to a run of 2-D ones
    would otherwise lose their ``z`` and sites apart only in it get one forecast; one naming
    the others (a channel ``extra`` the run was not trained on), whose readings the forecast
    does not stand on."""
    unread = _unread_columns(df, info)
    coords = [c for c in unread if c in DEFAULT_COORD_COLS]
    others = [str(c) for c in unread if c not in DEFAULT_COORD_COLS]
    if coords:
        log.warning(
            "%s has coordinate column(s) %s that the run does not read: it places points by "
            "its %d-D training coordinates %s alone, so points apart only in %s get one "
            "forecast. Leave %s out, or train a run on those coordinates "
            "(data.source.coord_cols).",
            what,
            ", ".join(coords),
            info.num_dims,
            ", ".join(info.coord_cols),
            ", ".join(coords),
            "it" if len(coords) == 1 else "them",
        )
    if others:
        them = "it" if len(others) == 1 else "them"
        log.warning(
            "%s has column(s) %s that the run does not read: its forecast stands on the "
            "channel(s) %s alone. Leave %s out, or train a run that reads %s "
            "(data.source.value_cols, data.source.covariate_cols).",
            what,
            ", ".join(others),
            ", ".join(info.read_channels),
            them,
            them,
        )


def _warn_unread_points(
    raw: np.ndarray, ids: list[str], info: DataSpec, times: pd.DatetimeIndex, what: str
) -> None:
    """One warning naming the points of the history ``raw (H, N, C)`` (NaN: missing) without
    a reading of some forecast channel in any step: their inputs there are filled from the
    other points', so their forecasts stand on their neighbours alone, which a glance at
    ``filled_inputs`` would not tell from a few gaps."""
    forecast = [info.read_channels.index(c) for c in info.value_channels]
    unread = ~np.isfinite(raw[:, :, forecast]).any(axis=0).all(axis=1)  # (N,)
    if not unread.any():
        return
    names = [p for p, u in zip(ids, unread, strict=True) if u]
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    log.warning(
        "%s has %d point(s) without a reading of their own in the %d steps read (%s to %s): "
        "%s. Their inputs are the other points' mean at each step, so their forecasts stand on the "
        "other points' readings alone.",
        what,
        len(names),
        len(times),
        times[0],
        times[-1],
        shown,
    )


def _marked_missing(df: pd.DataFrame, info: DataSpec) -> pd.DataFrame:
    """The cells holding the training files' "no reading" value (``info.missing_value``,
    METR-LA's 0) made empty, missing as they were in training, and filled as gaps."""
    if info.missing_value is None:
        return df
    marked = {
        c: df[c].mask(pd.to_numeric(df[c], errors="coerce") == info.missing_value)
        for c in info.read_channels
    }
    return df.assign(**marked)


def _time_inputs(
    last_time: np.datetime64, step: np.timedelta64, need: int, info: DataSpec, points: int
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The time features ``(H, F)`` of the history's last ``need`` steps and ``(J, N, F)``
    of the forecast's (at each of the ``points``), as the training windows had them; (None,
    None) without any."""
    if not info.time_features:
        return None, None
    times = last_time + step * np.arange(1 - need, info.output_steps + 1)
    features = time_features(times, info.time_features, info.time_zone)
    future = np.repeat(features[need:, None, :], points, axis=1)
    return features[:need], future


def far_outside(window: ForecastInput, info: DataSpec, what: str) -> str | None:
    """A one-line warning when points of a forecast lie far outside the training area, else
    None.

    Far: more than :data:`FAR_OUTSIDE_SPANS` times the training extent of a coordinate
    (``coord_span``) below its lowest or above its highest training value, i.e. normalised
    coordinates below -1 or above 2 where training had [0, 1]. Nearer points (a new station
    just beyond the network's edge) are an extrapolation a point model is built for; beyond
    that its learned neighbourhood geometry and positions have never been seen. Dimensions
    all training points share (``coord_degenerate``) are left out: the model does not read
    them.
    """
    live = ~np.asarray(info.coord_degenerate, dtype=bool)
    if not live.any() or not len(window.point_ids):
        return None
    beyond = extents_outside(window.coords, info.coord_degenerate)
    far = np.flatnonzero(beyond > FAR_OUTSIDE_SPANS)
    if not len(far):
        return None
    worst = far[np.argmax(beyond[far])]
    names = [c for c, keep in zip(info.coord_cols, live, strict=True) if keep]
    lo = np.asarray(info.coord_lo)[live]
    hi = lo + np.asarray(info.coord_span)[live]
    at = ", ".join(
        f"{c}={v:.6g}" for c, v in zip(names, window.raw_coords[worst][live], strict=True)
    )
    trained = ", ".join(f"{c} {a:.6g} to {b:.6g}" for c, a, b in zip(names, lo, hi, strict=True))
    return (
        f"{what}: {len(far)} of {len(window.point_ids)} point(s) lie more than "
        f"{FAR_OUTSIDE_SPANS:g}x the training area's extent outside it, up to "
        f"{_times(beyond[worst])} (point {window.point_ids[worst]} at {at}; training {trained}): "
        "the model extrapolates there, so forecasts at and near them are unreliable."
    )


def _times(value: float) -> str:
    """A multiple as a reader takes it in: ``1.5x``, ``1,197x``."""
    return f"{value:,.0f}x" if value >= 10 else f"{value:.2g}x"


def _refuse_unplaceable(
    df: pd.DataFrame,
    positions: np.ndarray,
    info: DataSpec,
    what: str,
    names: RowNames,
    zone: tzinfo | None = None,
) -> None:
    """Refuse a coordinate of the rows ``df`` (``positions (R, L)``; ``names`` names a row
    by its position) that is infinite, or beyond float32 once scaled as the run's
    coordinates were (the model's are float32): no place the model can take. An empty cell
    (NaN) is a missing coordinate, left to :func:`_coordinates`.

    Raises:
        UserError: naming the first such cell's point, time, row and value.
    """
    lo, span = np.asarray(info.coord_lo), np.asarray(info.coord_span)
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = (positions - lo) / span
    infinite = np.isinf(positions)
    bad = infinite | (np.abs(scaled) > np.finfo(np.float32).max)
    if not bad.any():
        return
    r, d = (int(i) for i in np.argwhere(bad)[0])
    column, value = info.coord_cols[d], positions[r, d]
    more = f"; {int(bad.sum())} such cells in the steps read" if bad.sum() > 1 else ""
    at = (
        f"{what}: point {df[info.id_col].iloc[r]} has {column}={value:g} at "
        f"{shown_time(df[info.time_col].iloc[r], zone)} ({names([r])[0]}{more})"
    )
    if infinite[r, d]:
        raise UserError(
            f"{at}: a coordinate must be a finite number (an empty cell where it is not "
            "known); fix or remove those rows."
        )
    raise UserError(
        f"{at}, which the model cannot place: scaled as the run's coordinates were ({column} "
        f"{lo[d]:g} to {lo[d] + span[d]:g} is 0 to 1), it is beyond float32's range "
        f"({np.finfo(np.float32).max:.3g}); fix or remove those rows."
    )


def _coordinates(
    pos: np.ndarray, ids: list[str], info: DataSpec, times: pd.DatetimeIndex, what: str
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Coordinates from the rows' positions ``pos (H, N, L)`` (NaN where not given) at
    ``times (H,)``.

    Returns ``(coords (N, L), track (H, N, L) or None, given (H, N, L))``: static points take
    the coordinates of their first row that has them (a training point whose rows have
    none, its training ones); moving points' positions are filled in time like values
    (``track``), and their last positions are the coordinates.

    Raises:
        UserError: a new (or moving) point has no coordinates in any row, or a point of a
            run trained on static points moves (:func:`_refuse_moving`).
    """
    given = np.isfinite(pos)
    located = given.all(axis=2)  # (H, N)
    lacking = [p for p, ok in zip(ids, located.any(axis=0), strict=True) if not ok]
    if info.moving:
        if lacking:
            raise UserError(f"{what}: moving point(s) {lacking[:5]} have no position in any row.")
        track = fill_gaps_causally(pos)[0]
        return track[-1], track, given
    training = dict(zip(info.point_ids, info.coords, strict=True))
    unknown = [n for n, p in enumerate(ids) if p in lacking and p not in training]
    if unknown:
        lacks = unplaced(pos[:, unknown], [ids[n] for n in unknown], info.coord_cols)
        raise UserError(f"{what}: new {lacks}; give each new point its location.")
    _refuse_moving(pos, located, ids, info, times, what)
    coords = pos[located.argmax(axis=0), np.arange(len(ids))]
    _warn_relocated(coords, located.any(axis=0), ids, info, what)
    for n in np.flatnonzero(~located.any(axis=0)):
        coords[n] = training[ids[n]]
    return coords, None, given


def _warn_relocated(
    coords: np.ndarray, placed: np.ndarray, ids: list[str], info: DataSpec, what: str
) -> None:
    """One warning for training points that ``coords (N, L)`` (``placed (N,)``: given by
    the history) put elsewhere than training did, beyond float noise in a coordinate the
    model reads: they are forecast where the history puts them, which for a station that
    did not move is a mistake (x and y swapped, other units) that no other check sees."""
    read = ~np.asarray(info.coord_degenerate, dtype=bool)
    extent = max(_read_spans(info), default=0.0)
    training = dict(zip(info.point_ids, np.asarray(info.coords, dtype=np.float64), strict=True))
    moved = [
        n
        for n in np.flatnonzero(placed)
        if ids[n] in training
        and (np.abs(coords[n] - training[ids[n]])[read] > SAME_PLACE * extent).any()
    ]
    if not moved:
        return
    n = moved[0]
    log.warning(
        "%s places %d training point(s) elsewhere than training did, e.g. %s at %s, trained "
        "at %s: they are forecast where the history places them. If they did not move, give "
        "their training coordinates (columns swapped? other units?).",
        what,
        len(moved),
        ids[n],
        _position(info.coord_cols, coords[n]),
        _position(info.coord_cols, training[ids[n]]),
    )


def _read_spans(info: DataSpec) -> list[float]:
    """The training area's span in each coordinate the model reads (not one that every
    training point shares, ``coord_degenerate``): the scale of float noise in a position."""
    return [s for s, flat in zip(info.coord_span, info.coord_degenerate, strict=True) if not flat]


def _position(cols: Sequence[str], values: np.ndarray) -> str:
    """A position ``values (L,)`` in words: ``x=1, y=2``."""
    return ", ".join(f"{c}={v:g}" for c, v in zip(cols, values, strict=True))


def _refuse_moving(
    pos: np.ndarray,
    located: np.ndarray,
    ids: list[str],
    info: DataSpec,
    times: pd.DatetimeIndex,
    what: str,
) -> None:
    """Refuse a point whose positions ``pos (H, N, L)`` (``located (H, N)``: rows with all
    of them) change across the steps ``times`` read, in a run trained on static points: it
    would be placed at its first row's position. A change within float noise of the training
    area's extent is none (:data:`~cloudlstm.data.sources.long_format.SAME_PLACE`, the rule
    training found moving points by).

    Raises:
        UserError: naming the first such point, the two times and positions, and the fixes.
    """
    seen = pos[located]  # (rows with all coordinates, L)
    here = float(np.max(seen.max(axis=0) - seen.min(axis=0))) if len(seen) else 0.0
    extent = max([here, *_read_spans(info)])
    moves = np.flatnonzero(_moving_points(_spans(pos), extent))
    if not len(moves):
        return
    n = int(moves[0])
    first = int(located[:, n].argmax())
    apart = located[:, n] & (np.abs(pos[:, n] - pos[first, n]) > SAME_PLACE * extent).any(axis=1)
    then = int(apart.argmax())
    more = f" ({len(moves)} points move)" if len(moves) > 1 else ""
    was, now = (_position(info.coord_cols, pos[t, n]) for t in (first, then))
    raise UserError(
        f"{what}: point {ids[n]} moves between {times[first]} ({was}) "
        f"and {times[then]} ({now}){more}, but the run was trained on "
        "points that stay in place: give one position per point, or train on moving points "
        "(data.source.moving=true)."
    )
