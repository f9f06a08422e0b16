"""Wide tables (one row per time step, one column per point) -> :class:`PointCloudStream`.

The form in which traffic data sets come: METR-LA and PEMS-BAY as DCRNN distributes them
(``metr-la.h5``: a pandas DataFrame with a DatetimeIndex and one column per sensor id),
T-GCN's ``los_speed.csv`` (a CSV without a time column), the Milan mobile traffic
(``cellular_traffic.csv``: the hour, then one column per square). Each cell is the one
channel's value at a time and a point; the points' places come from a second file,
read by :func:`read_positions` (``id,x,y[,z]``, ``sensor_id,latitude,longitude``, DCRNN's
``index,sensor_id,latitude,longitude``, ``cellId,lon,lat``). :class:`WideTableSource`
reads both with the table toolkit of :mod:`~cloudlstm.data.sources.tables` (the rows on a
regular time grid, gaps filled, points without data dropped) and, given
``graph``, the points' graph (:mod:`~cloudlstm.data.sources.graphs`) for the models that
take one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cloudlstm.data.cache import CachedSource
from cloudlstm.data.sources.bad_values import (
    RowNames,
    channel_values,
    check_mode,
    refuse_flag_points,
)
from cloudlstm.data.sources.degrees import LATITUDE_NAMES, LONGITUDE_NAMES, check_degrees
from cloudlstm.data.sources.graphs import graph_among, read_graph
from cloudlstm.data.sources.tables import (
    HDF_SUFFIXES,
    PARQUET_SUFFIXES,
    build_stream,
    check_column_roles,
    check_columns,
    check_coordinate_columns,
    clock_change_hint,
    csv_dialect,
    file_row_name,
    file_row_names,
    id_hint,
    id_text,
    is_bare_number,
    numeric_column,
    parse_freq,
    parse_number,
    pivot_long,
    read_hdf,
    read_table,
    refuse_repeated_columns,
    skip_written_index,
    written_row_numbers,
)
from cloudlstm.data.sources.times import (
    TIMES_ZONED_KEY,
    check_time_reading,
    counting_unit,
    parse_times,
    time_zone,
)
from cloudlstm.data.sources.units_option import UnitsGiven, units_option
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.errors import MissingFileError, UserError

__all__ = ["WideTableSource", "read_positions"]

log = logging.getLogger(__name__)

# Bump when the reading changes, so stale caches are not reused.
# 5: gaps hold the last reading (4 and before: linear interpolation); 6: a series never read
# takes the mean of the other points' readings at each step (5: of their filled values);
# 7: a point column of True/False is refused (6: read as 1/0), and a positions file's header
# naming a column twice; 8: a point or coordinate column of complex numbers (7: their real
# part) or of True/False among numbers (7: read as 1/0) is refused
_VERSION = 8
# Names (lower case) a positions file's id column goes by, in the order they are looked for.
ID_NAMES = ("id", "sensor_id", "cellid", "cell_id", "square_id", "station", "node_id")
# Names (lower case) of a time column found without data.source.time_col.
TIME_NAMES = ("timestamp", "time", "datetime", "date")
# Rows of a repeated id named in its message; the others are counted.
SHOWN_ROWS = 5


def table_format(path: Path) -> str:
    """``"csv"``, ``"parquet"`` or ``"hdf"`` by the file's suffixes (a CSV may be compressed:
    ``.csv.gz``); a :class:`UserError` for any other."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in PARQUET_SUFFIXES:
        return "parquet"
    if suffixes and suffixes[-1] in HDF_SUFFIXES:
        return "hdf"
    if ".csv" in suffixes:
        return "csv"
    raise UserError(
        f"{path}: unknown table format (suffix {path.suffix!r}). A wide table is a CSV "
        "(.csv, .csv.gz, ...), a Parquet file (.parquet) or a pandas HDF5 file (.h5)."
    )


class WideTableSource(UnitsGiven, CachedSource):
    """A wide table of one channel: one row per time step, one column per point.

    Args:
        path: the table: CSV (``.csv``, ``.csv.gz`` and other pandas compressions), Parquet
            or pandas HDF5 (``.h5``, ``.hdf5``: ``DataFrame.to_hdf``, as DCRNN's
            ``metr-la.h5``). Its columns are named by the points' ids.
        positions: the points' places: a CSV or Parquet file with an id column and the
            coordinate columns (see :func:`read_positions`).
        root: the folder relative ``path``, ``positions`` and ``graph`` are in (None: as
            given).
        time_col: the column of the times; None looks for them: the index of an HDF5 or
            Parquet file (a DatetimeIndex, or times as text; not row numbers), a CSV's first
            column when its header is empty (a written index, as in
            ``cellular_traffic.csv``; one that numbers the rows 0, 1, 2, ... is skipped),
            else a column named ``timestamp``,
            ``time``, ``datetime`` or ``date``; a file with none of these has no time
            column (then ``start`` and ``step`` give the times).
        start: the first row's time for a file without time column (e.g.
            ``"2012-03-01 00:00"``); for a file with times, the time they must start at
            (a check; None: no check).
        step: the sampling period (``"5min"``, ``"1h"``); None: the most common gap of the
            file's times (a file without times needs it).
        missing_value: the value that means "no reading" (METR-LA: 0), read as missing.
        channel: the name of the one channel (e.g. ``speed``).
        units: the channel's unit, ``{channel: unit}`` (e.g. ``{speed: mph}``; None: not
            recorded), as :mod:`~cloudlstm.data.sources.units_option` takes it.
        key: the table of an HDF5 file that holds several (None: its only one).
        position_cols: the positions file's id column then its coordinate columns, e.g.
            ``[sensor_id, longitude, latitude]``; None: found by name (see
            :func:`read_positions`).
        graph: a graph of the points for the models that take one (DCRNN's ``adj_mx.pkl``,
            or an N x N CSV without header in the order of the table's point columns, see
            :mod:`~cloudlstm.data.sources.graphs`); it is checked against the points when
            the data's description is made (:meth:`adjacency`).
        name: stream name (default: the file name without suffixes).
        bad_values: a cell that is neither empty nor a finite number: ``"error"`` names it,
            ``"warn"`` counts it as missing (:mod:`cloudlstm.data.sources.bad_values`).
        covariate_cols: refused: a wide table holds one channel, so no column holds a
            covariate at every point (see :meth:`__init__`'s error).
        missing_hint: where to get the files, added to the error when they are absent.
        cache_dir: folder of the stream cache (None: the file is read at every load).
        time_format, time_unit: how the time column writes its times, as
            :class:`~cloudlstm.data.sources.long_format.LongFormatSource` takes them.

    Coordinates are the positions file's: ``(x, y[, z])``, or ``(longitude, latitude)`` in
    degrees for latitude/longitude columns, as :class:`~cloudlstm.data.sources.beijing`
    gives its stations (the datamodule min-max normalises each dimension). Points keep the
    table's column order; a point with no reading at all is dropped, gaps (empty cells,
    ``missing_value``, time steps without a row) are filled from the past (each series
    holds its last reading, a leading gap takes the first one) with ``mask`` False.
    """

    cache_prefix = "wide"

    def __init__(
        self,
        path: str | os.PathLike,
        positions: str | os.PathLike,
        root: str | os.PathLike | None = None,
        time_col: str | None = None,
        start: str | None = None,
        step: str | None = None,
        missing_value: float | None = None,
        channel: str = "value",
        key: str | None = None,
        position_cols: Sequence[str] | None = None,
        graph: str | os.PathLike | None = None,
        name: str | None = None,
        bad_values: str = "error",
        covariate_cols: Sequence[str] = (),
        missing_hint: str | None = None,
        cache_dir: str | os.PathLike | None = None,
        time_format: str | None = None,
        time_unit: str | None = None,
        units: Mapping[str, str] | None = None,
    ) -> None:
        if covariate_cols:
            raise UserError(
                f"data.source.covariate_cols={list(covariate_cols)}: a wide table holds one "
                "channel, one column per point, so no column holds a covariate at every "
                "point; give them in a long-format file (data=points with "
                "data.source.covariate_cols), or use data.time_features=[hour,weekday]."
            )
        self.root = None if root is None else Path(root).expanduser()
        self.path = self._under_root(path)
        self.positions = self._under_root(positions)
        self.graph = None if graph is None else self._under_root(graph)
        # Not `time_col`: that attribute of the source protocol names the time column of a
        # long-format history of this data, which stays the default; this one is the wide
        # table's, stored in the data description so that a wide history is read alike.
        self.wide_time_col = None if time_col is None else str(time_col)
        self.start = None if start is None else _timestamp(start, "data.source.start")
        # the clock of times counted from it: an offset written with it, or none (clock times)
        self.start_zoned = self.start is not None and pd.Timestamp(start).tz is not None
        self.start_written = start  # as given, for a message comparing it in UTC
        self.step = None if step is None else parse_freq(step, "data.source.step")
        self.time_format, self.time_unit = check_time_reading(time_format, time_unit)
        self.missing_value = (
            None
            if missing_value is None
            else parse_number(missing_value, "data.source.missing_value")
        )
        if channel is None or not str(channel).strip():
            raise UserError(
                f"data.source.channel={channel!r}: give the channel a name, e.g. "
                "data.source.channel=speed."
            )
        self.channel = str(channel)
        self.given_units = units_option(units, [self.channel])
        self.key = None if key is None else str(key)
        if isinstance(position_cols, str):
            position_cols = [position_cols]
        self.position_cols = None if position_cols is None else [str(c) for c in position_cols]
        if self.position_cols is not None:
            check_position_cols(self.position_cols)
        self.name = name or self.path.name.split(".")[0]
        self.bad_values = check_mode(bad_values)
        self.missing_hint = missing_hint
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self._graph: tuple[list[str], np.ndarray] | None = None

    def _under_root(self, path: str | os.PathLike) -> Path:
        path = Path(path).expanduser()
        return path if self.root is None or path.is_absolute() else self.root / path

    def _as_given(self, option: str, file: Path) -> str:
        """``data.source.<option>=...`` as the user gave it: a path under the root, with the
        root, or an absolute path, which the root does not prefix."""
        if self.root is not None and file.is_relative_to(self.root):
            under = file.relative_to(self.root)
            return f"data.source.{option}={under} in data.source.root={self.root}"
        return f"data.source.{option}={file}"

    def __repr__(self) -> str:
        return f"WideTableSource(path={str(self.path)!r}, positions={str(self.positions)!r})"

    def config(self) -> dict:
        """Every argument that decides the stream (the files: :meth:`input_files`; the
        graph is not part of the stream)."""
        return {
            "version": _VERSION,
            "time_col": self.wide_time_col,
            "start": None if self.start is None else str(self.start),
            # the stream records it (times_zoned): a cache made before that is read anew
            **({"start_zoned": self.start_zoned} if self.start is not None else {}),
            "step": None if self.step is None else str(pd.Timedelta(self.step)),
            "missing_value": self.missing_value,
            "channel": self.channel,
            "key": self.key,
            "position_cols": self.position_cols,
            "name": self.name,
            "bad_values": self.bad_values,
            **({"time_format": self.time_format} if self.time_format else {}),
            **({"time_unit": self.time_unit} if self.time_unit else {}),
        }

    def input_files(self) -> list[Path]:
        """The table and the positions file.

        Raises:
            MissingFileError: either is absent (with :attr:`missing_hint`).
            UserError: the table is a folder or of an unknown format, or ``key`` is given
                for a table that is no HDF5 file.
        """
        for option, file in (("path", self.path), ("positions", self.positions)):
            if file.is_dir():
                raise UserError(
                    f"data.source.{option}={file.resolve()} is a folder, not a file: name the "
                    f"{'table' if option == 'path' else 'positions file'} itself (CSV, Parquet"
                    f"{' or HDF5' if option == 'path' else ''}) in it."
                )
            if not file.is_file():
                hint = f" {self.missing_hint}" if self.missing_hint else ""
                raise MissingFileError(
                    f"No file {file.resolve()} ({self._as_given(option, file)}): set "
                    f"data.source.root and data.source.{option}.{hint}"
                )
        if table_format(self.path) != "hdf" and self.key is not None:
            # only an HDF5 file holds several tables: read nothing, it was left out unsaid
            raise UserError(
                f"data.source.key={self.key!r} names a table of an HDF5 file, but "
                f"data.source.path={self.path.resolve()} is no HDF5 file (.h5, .hdf5), which "
                "holds one table: leave data.source.key out (eval.py, whose run's config.yaml "
                "holds it: add data.source.key=null to its command), or give the .h5 file."
            )
        return [self.path, self.positions]

    # ------------------------------------------------------------------ the stream
    def generate(self, cache_path: Path | None = None) -> PointCloudStream:
        """Read the table and the positions into a stream, cached at ``cache_path``."""
        path, positions = self.input_files()
        what = f"file {path}"
        frame, index_times = self._read(path, what)
        frame = self._without_row_numbers(frame, path)
        time_col = self._time_column(frame, index_times, what)
        columns = [c for c in frame.columns if c != time_col]
        ids = self._point_ids(columns, what)
        coords = self._coords(ids, positions, what, frame)
        written = frame[time_col] if time_col is not None else index_times
        names = file_row_names(path, None if written is None else pd.Series(written))
        refuse_flag_points(frame, columns, self.channel, what)
        values = channel_values(frame, columns, what, self.bad_values, row_names=names)  # (R, N)
        if self.missing_value is not None:
            values[values == np.float32(self.missing_value)] = np.nan
        zoned = self.start_zoned  # times counted from data.source.start: written as it was
        if time_col is None and index_times is None:
            timestamps, step = self._counted_times(len(frame), what)
        else:
            raw = index_times if time_col is None else frame[time_col]
            lines = file_row_names(path, None)  # a time's row: by its line, or data row
            times = self._parse_times(raw, time_col, what, lines)
            column = pd.Series(raw)
            zoned = time_zone(column, self.time_format, self.time_unit) is not None
            # clock times, not numbers counted in a unit: they may repeat an hour
            clock = not zoned and counting_unit(column, self.time_unit) is None
            timestamps, step, values = self._on_grid(times, values, what, lines, clock)
        stream = build_stream(
            timestamps,
            ids,
            values.reshape(*values.shape, 1),
            [self.channel],
            coords=coords,
            step=step,
            name=self.name,
            source=str(path),
        )
        # as data=points records it, for a forecast's history
        stream.metadata[TIMES_ZONED_KEY] = zoned
        return self.cached(stream, cache_path)

    def _read(self, path: Path, what: str, rows: int | None = None) -> tuple[pd.DataFrame, Any]:
        """The table with text column names, and the index that holds its times (None: it
        has none, see :func:`_index_times`); ``rows``: read only the first rows (0: the
        columns)."""
        kind = table_format(path)
        index_times = None
        if kind == "csv":
            # the header as written: pandas renames repeated names ("a", "a.1") and empty ones
            dialect = csv_dialect(path, "the wide table")  # once: it says what it found
            header = read_table(
                path,
                "the wide table",
                header=None,
                nrows=1,
                dtype=str,
                keep_default_na=False,
                sep=dialect.get("sep", ","),
            )
            frame = read_table(path, "the wide table", nrows=rows, **dialect)
            if header.shape[1] == frame.shape[1]:
                frame.columns = [str(c).strip() for c in header.iloc[0]]
        else:
            if kind == "hdf":
                frame = read_hdf(path, "the wide table", self.key, rows)
            else:
                frame = read_table(path, "the wide table")
            index_times = _index_times(frame.index, what)
            frame = frame.reset_index(drop=True)
            frame.columns = [id_text(c) for c in frame.columns]
        if rows is not None:
            frame = frame.head(rows)
        refuse_repeated_columns(frame.columns, what)
        if frame.shape[1] == 0:
            raise UserError(f"{what} has no columns.")
        return frame, index_times

    def _parse_times(
        self, raw: Any, time_col: str | None, what: str, lines: RowNames
    ) -> np.ndarray:
        """The times of column ``time_col``, or of the index ``raw`` (``time_col`` None),
        as ``datetime64[ns]``, a row that cannot be read named as ``lines`` names it; an
        index that does not read as times is refused with the way to write the table
        without it."""
        if time_col is not None:
            where = f"column {time_col!r} of {what}"
        elif getattr(raw, "name", None) is not None:
            where = f"the index {raw.name!r} of {what}"
        else:
            where = f"the index of {what}"
        try:
            return parse_times(
                pd.Series(raw), where, self.time_format, self.time_unit, row_names=lines
            )
        except UserError as err:
            if time_col is not None or isinstance(raw, pd.DatetimeIndex):
                raise
            raise UserError(
                f"{err} If the index holds no times, write the table without it "
                "(DataFrame.reset_index(drop=True) before saving it) or name the time column "
                "(data.source.time_col)."
            ) from None

    def _without_row_numbers(self, frame: pd.DataFrame, path: Path) -> pd.DataFrame:
        """``frame`` without its first column where that column has no name and numbers
        the rows 0, 1, 2, ...: the index ``DataFrame.to_csv`` writes by default, which
        read as times would be 1970's first seconds. A nameless first column of times (a
        written DatetimeIndex, Milan's ``cellular_traffic.csv``) stays."""
        if frame.shape[1] == 0 or frame.columns[0] != "" or self.wide_time_col == "":
            return frame
        if not written_row_numbers(frame.iloc[:, 0]):
            return frame
        keep = "name it in the header and in data.source.time_col to read it as the times."
        skip_written_index(path, ["Unnamed: 0"], keep)
        return frame.iloc[:, 1:]

    def _time_column(self, frame: pd.DataFrame, index_times: Any, what: str) -> str | None:
        """The column of the times (None: the index's, or none; see ``time_col``)."""
        if self.wide_time_col is not None:
            if self.wide_time_col not in frame.columns:
                if index_times is not None and self.wide_time_col in ("index", index_times.name):
                    return None
                check_columns(
                    frame,
                    [self.wide_time_col],
                    what,
                    "Set data.source.time_col to the column of the times (null: found alone).",
                )
            return self.wide_time_col
        if index_times is not None:
            return None
        first = frame.columns[0]
        if first == "":  # a written index: the row labels, the times in these tables
            return first
        named = [c for c in frame.columns if c.lower() in TIME_NAMES]
        return named[0] if named else None

    def _point_ids(self, columns: list[str], what: str) -> list[str]:
        if not columns:
            raise UserError(f"{what} has no point columns besides the times.")
        unnamed = [k for k, c in enumerate(columns) if c == ""]
        if unnamed:
            raise UserError(
                f"{what}: point column {unnamed[0]} has no name; each point's column is "
                "named by its id (set data.source.time_col if it holds the times)."
            )
        return list(columns)

    def _coords(
        self, ids: list[str], positions: Path, what: str, frame: pd.DataFrame
    ) -> np.ndarray:
        """``(N, L)`` coordinates of the table's points (the columns ``ids`` of ``frame``)
        from the positions file."""
        place_ids, coords = read_positions(positions, self.position_cols)
        where = {p: k for k, p in enumerate(place_ids)}
        unplaced = [p for p in ids if p not in where]
        if unplaced:
            raise UserError(
                f"{what}: {len(unplaced)} point column(s) have no position in {positions}, "
                f"e.g. {unplaced[:5]} (its ids: e.g. {place_ids[:3]}). Give every column a "
                f"row of the positions file.{id_hint(unplaced, place_ids, 'the positions file')}"
                + self._times_hint(frame, unplaced, what)
            )
        unused = sorted(set(place_ids) - set(ids), key=where.get)
        if unused:
            raise UserError(
                f"{positions}: {len(unused)} position(s) have no column in {what}, e.g. "
                f"{unused[:5]}. Use the positions file of this table (or remove those rows)."
            )
        return coords[[where[p] for p in ids]]

    def _times_hint(self, frame: pd.DataFrame, unplaced: list[str], what: str) -> str:
        """The sentence naming the first of the columns ``unplaced`` (no point's) whose
        values read as times: the time column under a name not looked for (``time_utc``),
        taken for a point's; ``""`` where none does. Numbers are not read as times here,
        not even with ``time_unit``: a point's readings would read as seconds in 1970."""
        for column in unplaced:
            try:
                parse_times(frame[column], what, self.time_format)
            except UserError:
                continue
            return (
                f" Column {column!r} holds times: if it is the table's time column, name it "
                f"(data.source.time_col={column})."
            )
        return ""

    def _counted_times(self, rows: int, what: str) -> tuple[np.ndarray, np.timedelta64]:
        """The times of a file without any: ``start + k * step`` for row ``k``."""
        if self.start is None or self.step is None:
            raise UserError(
                f"{what} has no time column: give the first row's time and the sampling "
                "period (data.source.start='2012-03-01 00:00' data.source.step=5min), or "
                "name its time column (data.source.time_col)."
            )
        given = self.time_format or self.time_unit
        if given:
            option = "time_format" if self.time_format else "time_unit"
            raise UserError(
                f"data.source.{option}={given!r}, but {what} has no time column to read with "
                "it (its times are data.source.start and step): name the column "
                f"(data.source.time_col), or leave {option} out."
            )
        start = np.datetime64(self.start, "ns")
        return start + np.arange(rows) * self.step, self.step

    def _on_grid(
        self, times: np.ndarray, values: np.ndarray, what: str, lines: RowNames, clock: bool
    ) -> tuple[np.ndarray, np.timedelta64, np.ndarray]:
        """``(timestamps (T,), step, values (T, N))``: the rows ``values (R, N)`` at their
        ``times (R,)`` on a regular grid; NaN rows where the file has no row. A time of
        several rows is refused, its rows named as ``lines`` names them; ``clock``: the
        file writes clock times without zone, whose autumn change repeats an hour."""
        stamps = pd.Index(times)
        repeated = stamps.duplicated()
        if repeated.any():
            row = int(np.flatnonzero(repeated)[0])
            first = int(np.flatnonzero(stamps == stamps[row])[0])
            at = " and ".join(lines([first, row]))
            # one time written twice: the hour local clock times repeat in autumn
            hint = clock_change_hint(stamps[row]) if clock and repeated.sum() == 1 else ""
            raise UserError(
                f"{what}: the time {stamps[row]} has several rows ({at}); a wide table has "
                f"one row per time step{hint}."
            )
        if self.start is not None and stamps.min() != self.start:
            raise UserError(f"{what} starts at {stamps.min()}, not at {self._start_fix(clock)}")
        rows = pd.DataFrame({"time": times, "row": 0})
        grid = pivot_long(rows, "time", "row", self.step, "error", what, "data.source.step")
        return grid.timestamps, grid.step, grid.scatter(values, np.float32)[:, 0, :]

    def _start_fix(self, clock: bool) -> str:
        """The end of the line refusing a file that does not start at ``data.source.start``:
        the start as written, with the UTC time it was compared as where it has an offset,
        and the fix. ``clock``: the file writes clock times, compared as written, which a
        start with an offset cannot match in UTC but may as the same clock time."""
        if not self.start_zoned:
            return (
                f"data.source.start={self.start}: the file has its own times; set "
                "data.source.start=null to take them."
            )
        given = f"data.source.start='{self.start_written}' ({self.start} in UTC, as a start "
        if not clock:
            return f"{given}with an offset is compared): set data.source.start=null to take them."
        clock_start = pd.Timestamp(str(self.start_written)).tz_localize(None)
        return (
            f"{given}with an offset is compared): the file writes clock times without an "
            f"offset, compared as written; write the start so too (data.source.start="
            f"'{clock_start}'), or set data.source.start=null to take the file's times."
        )

    # ------------------------------------------------------------------ the graph
    def adjacency(self, point_ids: Sequence[str]) -> np.ndarray | None:
        """``(N, N)`` float64 weights among ``point_ids`` (the data's points, in the data's
        order) from :attr:`graph`, or None without one. The graph file is read once.

        Raises:
            UserError: the graph cannot be read, fails its checks
                (:func:`~cloudlstm.data.sources.graphs.read_graph`) or lacks some points.
        """
        if self.graph is None:
            return None
        if self._graph is None:
            self._graph = read_graph(self.graph, self._column_ids())
        ids, matrix = self._graph
        return graph_among(ids, matrix, point_ids, f"data.source.graph={self.graph}")

    def _column_ids(self) -> list[str] | None:
        """The table's point ids in its column order (the order of a graph without ids),
        read from its header alone; None when the table cannot be read."""
        what = f"file {self.path}"
        try:
            frame, index_times = self._read(self.input_files()[0], what, rows=0)
        except UserError:
            return None
        time_col = self._time_column(frame, index_times, what)
        return [c for c in frame.columns if c != time_col]


def _index_times(index: pd.Index, what: str) -> pd.Index | None:
    """The index of a Parquet or HDF5 table that holds its times: a DatetimeIndex, or any
    other index but row numbers (a RangeIndex, or unnamed labels 0, 1, 2, ...), read as
    times, which refuses one that is not (never dropped unread). None: row numbers.

    Raises:
        UserError: the index has several levels.
    """
    if isinstance(index, pd.MultiIndex):
        raise UserError(
            f"{what} has an index of {index.nlevels} levels {list(index.names)}: write the "
            "times as its one index or as a column (DataFrame.reset_index())."
        )
    if isinstance(index, pd.DatetimeIndex):
        return index
    if isinstance(index, pd.RangeIndex) or (index.name is None and written_row_numbers(index)):
        return None
    return index


def read_positions(
    path: Path, position_cols: Sequence[str] | None = None
) -> tuple[list[str], np.ndarray]:
    """The ids and ``(P, L)`` float64 coordinates of a positions file (CSV or Parquet).

    ``position_cols``: the id column then the coordinate columns. None finds them by name
    (any case): the id in ``id``, ``sensor_id``, ``cellId``, ``cell_id``, ``square_id``,
    ``station`` or ``node_id`` (the first present); the coordinates ``x, y[, z]``, else
    ``(longitude, latitude)`` from columns named ``longitude`` / ``lon`` / ``lng`` and
    ``latitude`` / ``lat``. Other columns (DCRNN's ``index``) are ignored.

    Raises:
        UserError: the columns are not found, an id is empty or repeated, a coordinate is
            not a finite number.
    """
    what = f"positions file {path}"
    # the id column's cells as written (NA is a station's code in some networks)
    id_names = list(position_cols or ())[:1] or list(ID_NAMES)
    table = read_table(path, "the positions file", text_cols=id_names, dtype=str)
    table.columns = [str(c).strip() for c in table.columns]
    id_col, coord_cols = _position_columns(table, position_cols, what)
    ids = [id_text(v) for v in table[id_col]]
    empty = [k for k, v in enumerate(table[id_col]) if pd.isna(v) or not id_text(v)]
    if empty:
        raise UserError(f"{what}: column {id_col!r} is empty at {file_row_name(path, empty[0])}.")
    _refuse_repeated_ids(ids, path, what)
    # a missing coordinate is refused below: the fix of readings (leave them empty) is wrong
    fix = "Coordinates must be numbers: write each one without units or text."
    lines = file_row_names(path, None)
    coords = np.stack([numeric_column(table, c, what, fix, lines) for c in coord_cols], axis=1)
    bad = ~np.isfinite(coords).all(axis=1)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise UserError(
            f"{what}: point {ids[row]!r} ({file_row_name(path, row)}) has no finite "
            f"coordinates in {coord_cols}; every point needs them."
        )
    check_degrees(
        coords, coord_cols, lambda row: f"point {ids[row]!r} ({file_row_name(path, row)})", what
    )
    return ids, coords


def _refuse_repeated_ids(ids: list[str], path: Path, what: str) -> None:
    """Refuse an id on several rows of the positions file ``path``, naming the rows of the
    first one repeated as the user finds them there (lines of a CSV, data rows of a Parquet
    or HDF5 file), and how many ids are repeated.

    Raises:
        UserError: an id is on several rows.
    """
    index = pd.Index(ids)
    repeated = index[index.duplicated()].unique().tolist()
    if not repeated:
        return
    rows = [int(r) for r in np.flatnonzero(index == repeated[0])]
    named = file_row_names(path, None)(rows[:SHOWN_ROWS])
    left = len(rows) - len(named)
    last = f"{left} more" if left else named.pop()
    others = f" ({len(repeated)} ids are repeated: {repeated[:5]})" if len(repeated) > 1 else ""
    raise UserError(
        f"{what}: the id {repeated[0]!r} has {len(rows)} rows ({', '.join(named)} and {last})"
        f"{others}; a positions file has one row per point: keep one of each."
    )


def check_position_cols(position_cols: Sequence[str]) -> None:
    """Refuse ``data.source.position_cols`` unless it is the id column then 2 or 3
    coordinate columns, each named once."""
    given = [str(c) for c in position_cols]
    check_coordinate_columns(given[1:], "data.source.position_cols", given)
    check_column_roles({"position_cols": given})


def _position_columns(
    table: pd.DataFrame, position_cols: Sequence[str] | None, what: str
) -> tuple[str, list[str]]:
    """The id column and the coordinate columns of a positions table."""
    hint = "Set data.source.position_cols=[<id column>, <x or longitude>, <y or latitude>]."
    if position_cols is not None:
        check_position_cols(position_cols)
        check_columns(table, list(position_cols), what, hint)
        return position_cols[0], list(position_cols[1:])
    by_name = {c.lower(): c for c in table.columns}
    id_col = next((by_name[n] for n in ID_NAMES if n in by_name), None)
    coord_cols = [by_name[n] for n in ("x", "y", "z") if n in by_name]
    if len(coord_cols) < 2 or "x" not in by_name or "y" not in by_name:
        lon = next((by_name[n] for n in LONGITUDE_NAMES if n in by_name), None)
        lat = next((by_name[n] for n in LATITUDE_NAMES if n in by_name), None)
        coord_cols = [] if lon is None or lat is None else [lon, lat]
    if id_col is None or not coord_cols:
        found = [str(c) for c in table.columns]
        why = ""
        if all(_is_number(c) for c in found):
            why = " It has no header row: add one, e.g. sensor_id,latitude,longitude."
        raise UserError(
            f"{what}: cannot tell its id and coordinate columns among {found} (expected e.g. "
            f"id,x,y or sensor_id,latitude,longitude).{why} {hint}"
        )
    return id_col, coord_cols


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _timestamp(value: Any, option: str) -> pd.Timestamp:
    """``value`` as a naive (UTC) timestamp; a :class:`UserError` naming ``option``.

    A number (``1330560000``, as Hydra passes it unquoted) is refused: pandas would read it
    as nanoseconds since 1970, and the rows would be dated 1970-01-01 00:00:01. Text of
    digits is a date (``"20120301"``, ``"2012"``), as pandas reads it.
    """
    if is_bare_number(value, text=False):
        raise UserError(f"{option}={value} is a number, not a date: {_date_instead(value)}")
    try:
        stamp = pd.Timestamp(value)
    except (ValueError, TypeError):
        stamp = pd.NaT
    if pd.isna(stamp):
        raise UserError(f"{option}={value!r} is not a date/time such as '2012-03-01 00:00'.")
    return stamp.tz_convert("UTC").tz_localize(None) if stamp.tz is not None else stamp


def _date_instead(number: Any) -> str:
    """The fix for a start given as a number: a date, shown as the number's reading as Unix
    time in seconds where that falls in 1990-2100, else an example."""
    try:
        unix = pd.Timestamp(float(number), unit="s")
    except (ValueError, OverflowError):
        unix = pd.NaT
    if not pd.isna(unix) and pd.Timestamp("1990") <= unix < pd.Timestamp("2100"):
        return f"write the date quoted, e.g. '{unix:%Y-%m-%d %H:%M}' ({number} as Unix time in s)."
    return "write the date quoted, e.g. '2012-03-01 00:00'."
