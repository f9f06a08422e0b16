"""A forecast's history given as a wide table -> the long-format rows forecasting reads.

Traffic data comes wide (:mod:`~cloudlstm.data.sources.wide_table`): one row per time step,
one column per sensor, e.g. DCRNN's ``metr-la.h5`` (the times in its index) or a CSV with a
time column. A run trained on such data forecasts from a recent file of the same form: its
columns are training points, whose coordinates the data description holds, and its cells
are the one channel the run reads. :func:`long_history` melts it into the rows of the long
format (time, id, empty coordinates: a training point's are its training ones) and leaves
a long-format table as it is.
"""

from __future__ import annotations

import logging
import re

import numpy as np
import pandas as pd

from cloudlstm.data.sources.bad_values import (
    RowNames,
    channel_values,
    holds_no_reading,
    refuse_flag_points,
)
from cloudlstm.data.sources.tables import (
    clock_change_hint,
    id_hint,
    id_text,
    index_as_columns,
    near_ids,
    refuse_repeated_columns,
    written_row_numbers,
)
from cloudlstm.data.sources.wide_table import TIME_NAMES
from cloudlstm.data.spec import DataSpec
from cloudlstm.errors import UserError

log = logging.getLogger(__name__)

SHOWN = 5  # column names quoted in a message
UNNAMED = re.compile(r"Unnamed: 0")  # pandas's name of an empty first header


def _check_not_points_written_otherwise(df: pd.DataFrame, info: DataSpec, what: str) -> None:
    """A table none of whose columns is a training point, though some would be one in
    another case (``S001`` for ``s001``) or without a whole float's ``.0`` (``773869.0``
    for ``773869``: :func:`~cloudlstm.data.sources.tables.id_hint`), is a wide table
    written otherwise: say so, rather than read it as the long format and miss its id
    column.

    Raises:
        UserError: some columns are training points written otherwise.
    """
    unmatched = near_ids([id_text(c) for c in df.columns], info.point_ids)
    if hint := id_hint(unmatched, info.point_ids, "the training points"):
        raise UserError(
            f"{what} has no {info.id_col} column, and its column(s) {_names(unmatched)} are "
            f"no training point's id.{hint}"
        )


def long_history(
    df: pd.DataFrame,
    info: DataSpec,
    what: str,
    bad_values: str | None = None,
    row_names: RowNames | None = None,
) -> pd.DataFrame:
    """``df`` as long-format rows: a wide table (no point-id column, training points as
    columns) melted, a long one with its named index levels as columns, any other table
    unchanged (its columns are checked later).

    ``bad_values``: where given (``error`` or ``warn``), a wide table's cells that are no
    finite number are refused or made missing here, named by the table's own row and point
    column, as the melted rows' later check would name them by rows and a channel the file
    does not have. ``row_names``: how those messages name a row of ``df`` by its position,
    as the user finds it in the file it was read from (a CSV's line); None: ``data row`` and
    the position.

    Raises:
        UserError: ``df`` is no DataFrame or names a column twice; a wide table whose run
            reads several channels, without times, with one time in several rows, with
            columns that are not training points, with a point column of True/False
            (:func:`~cloudlstm.data.sources.bad_values.refuse_flag_points`), or with bad
            cells (``bad_values="error"``).
    """
    if not isinstance(df, pd.DataFrame):
        raise UserError(
            f"{what} is a {type(df).__name__}, not a pandas DataFrame of readings (columns "
            f"{[info.time_col, info.id_col, *info.coord_cols, *info.read_channels]}): give "
            "pd.DataFrame(rows), pd.read_csv(path) or the like."
        )
    refuse_repeated_columns(df.columns, what)
    trained = set(info.point_ids)
    if info.id_col in (*df.columns, *df.index.names):
        # long format, its times (or ids) perhaps the index, as a Parquet file written
        # with df.set_index("timestamp") holds them: columns, as training read them
        return index_as_columns(df)
    if not set(map(id_text, df.columns)) & trained:
        _check_not_points_written_otherwise(df, info, what)
        return df
    channels = info.read_channels
    if len(channels) != 1:
        raise UserError(
            f"{what} is a wide table (one column per point), which holds one channel, but the "
            f"model reads {len(channels)} ({', '.join(channels)}): give the long format, "
            f"columns {[info.time_col, info.id_col, *info.coord_cols, *channels]}."
        )
    frame, time_col = _with_time_column(_without_row_numbers(df), info, what)
    frame = _without_empty_strangers(frame, time_col, trained, what)
    columns = [c for c in frame.columns if c != time_col]
    ids = [id_text(c) for c in columns]
    refuse_repeated_columns(ids, what)  # 773869 beside "773869": one point's two columns
    unknown = [i for i in ids if i not in trained]
    if unknown:
        raise UserError(
            f"{what}: column(s) {_names(unknown)} are not points the model was trained on, "
            "and a wide table gives no coordinates for new points: leave them out, or give "
            f"the long format (columns {info.time_col}, {info.id_col}, "
            f"{', '.join(info.coord_cols)}, {channels[0]})."
            + id_hint(unknown, info.point_ids, "the training points")
        )
    _refuse_repeated_times(frame[time_col], what, row_names)
    _warn_points_left_out(ids, info, what)
    # by their ids as text: a table pivoted from ids read as numbers has int columns
    frame = frame.rename(columns=dict(zip(columns, ids, strict=True)))
    refuse_flag_points(frame, ids, channels[0], what)
    if bad_values is not None:
        values = channel_values(frame, ids, what, bad_values, row_names=row_names)
        frame = frame.assign(**{c: values[:, j] for j, c in enumerate(ids)})
    # column by column, each of the frame's rows in order: source_rows counts on it
    long = frame.melt(
        id_vars=[time_col], value_vars=ids, var_name=info.id_col, value_name=channels[0]
    )
    long = long.rename(columns={time_col: info.time_col})
    return long.assign(**{c: float("nan") for c in info.coord_cols})


def source_rows(df: pd.DataFrame, long: pd.DataFrame) -> np.ndarray:
    """``(R,)`` the position of the row of ``df`` that each row of ``long``, its
    :func:`long_history`, comes from: its own, or, for a wide table melted one point column
    after another, the row of the cell it holds."""
    return np.arange(len(long)) % max(len(df), 1)


def _without_empty_strangers(
    frame: pd.DataFrame, time_col: str, trained: set[str], what: str
) -> pd.DataFrame:
    """``frame`` without the columns of no training point that hold no reading (a point
    training dropped for having none, written as the training file wrote it), with a
    warning naming them: they change no forecast. A column of empty text or missing-value
    texts (``n/a``, ``NA``: :func:`~cloudlstm.data.sources.bad_values.holds_no_reading`) is
    as empty as one of NaN, as training read it."""
    empty = [
        c
        for c in frame.columns
        if c != time_col and id_text(c) not in trained and holds_no_reading(frame[c])
    ]
    if empty:
        log.warning(
            "%s: column(s) %s hold no reading and are no training point (training drops a "
            "point without readings): left out.",
            what,
            _names([id_text(c) for c in empty]),
        )
    return frame.drop(columns=empty)


def _warn_points_left_out(ids: list[str], info: DataSpec, what: str) -> None:
    """Warn of training points without a column: they are not forecast, where a column left
    out of a wide table is more often an accident than a choice."""
    given = set(ids)
    missing = [str(p) for p in info.point_ids if str(p) not in given]
    if missing:
        log.warning(
            "%s has no column for %d of the %d training point(s) (%s), which are not "
            "forecast: add their columns (empty cells where they have no readings) to "
            "forecast them.",
            what,
            len(missing),
            len(info.point_ids),
            _names(missing),
        )


def _refuse_repeated_times(times: pd.Series, what: str, row_names: RowNames | None) -> None:
    """A wide table holds one row per time: a time written in two rows would be two readings
    of every point, refused later by each (time, point) of the melted rows. ``row_names``
    names the rows by their positions (None: ``data rows`` and the positions).

    Raises:
        UserError: naming the first time written twice, its rows, and how many others are."""
    repeated = times[times.duplicated(keep=False)]
    if repeated.empty:
        return
    first = repeated.iloc[0]
    rows = [int(r) for r in np.flatnonzero((times == first).to_numpy())]
    times_repeated = repeated.nunique()
    others = f", and {times_repeated - 1} other time(s) so" if times_repeated > 1 else ""
    hint = clock_change_hint(first) if times_repeated == 1 else ""
    shown = rows[:SHOWN]
    named = (
        f"data rows {', '.join(map(str, shown))}"
        if row_names is None
        else ", ".join(row_names(shown))
    )
    raise UserError(
        f"{what} writes the time {first} in {len(rows)} rows ({named}){others}: a wide table "
        f"holds one row per time, so keep one of each{hint}."
    )


def _without_row_numbers(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` without a nameless first column that numbers its rows (the index
    ``DataFrame.to_csv`` writes: :func:`written_row_numbers`), which would be read as the
    times, or refused as a column of no training point; a nameless column of times stays."""
    first = str(df.columns[0]) if len(df.columns) else None
    if first is None or not (first.strip() == "" or UNNAMED.fullmatch(first)):
        return df
    return df.iloc[:, 1:] if written_row_numbers(df.iloc[:, 0]) else df


def _with_time_column(df: pd.DataFrame, info: DataSpec, what: str) -> tuple[pd.DataFrame, str]:
    """``df`` with its times in a column, and that column's name, found as the wide-table
    source found the training table's: the column the run's ``data.source.time_col`` named,
    the run's ``time_col``, a column named like a time, a first column without a name (a
    written index: pandas reads it as ``Unnamed: 0``), or the index of times (an .h5 file's)."""
    lower = {str(c).lower(): c for c in df.columns}
    names = [info.wide_time_col, info.time_col, *TIME_NAMES]
    for name in (n.lower() for n in names if n is not None):
        if name in lower:
            return df, lower[name]
    first = str(df.columns[0]) if len(df.columns) else None
    if first is not None and (first.strip() == "" or UNNAMED.fullmatch(first)):
        return df, df.columns[0]
    if isinstance(df.index, pd.DatetimeIndex):
        return df.rename_axis(info.time_col).reset_index(), info.time_col
    raise UserError(
        f"{what} is a wide table (one column per point) without times: add a column "
        f"{info.wide_time_col or info.time_col!r} of the rows' times (a .h5 file may hold "
        "them as its index)."
    )


def _names(ids: list[str]) -> str:
    """The first few of ``ids``, and how many there are."""
    more = f" ... ({len(ids)} in all)" if len(ids) > SHOWN else ""
    return ", ".join(ids[:SHOWN]) + more
