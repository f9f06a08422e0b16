"""Long-format tables (one row per time step and point) -> :class:`PointCloudStream`.

A long-format file has one row per ``(time, point)``: a timestamp, a point id, L coordinate
columns and one column per channel. :class:`LongFormatSource` reads such a CSV (optionally
compressed) or Parquet file with the shared table toolkit of
:mod:`~cloudlstm.data.sources.tables` (pivot on a regular grid, fill gaps, assemble).
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from cloudlstm.data.cache import CachedSource
from cloudlstm.data.covariates import COVARIATES_KEY
from cloudlstm.data.sources.bad_values import (
    RowNames,
    channel_values,
    check_mode,
    common_unit,
    filled_text,
    flags,
    mostly_numeric,
    numbers_among_text,
)
from cloudlstm.data.sources.degrees import check_degrees
from cloudlstm.data.sources.tables import (
    ROW_COORDINATES_FIX,
    LongGrid,
    build_stream,
    check_column_roles,
    check_columns,
    check_coordinate_columns,
    empty_ids,
    file_row_name,
    file_row_names,
    index_as_columns,
    numeric_column,
    parquet_dataset_parts,
    parse_freq,
    pivot_long,
    read_table,
    refuse_nested_ids,
    skip_written_index,
    written_ids,
)
from cloudlstm.data.sources.times import (
    TIMES_ZONED_KEY,
    check_time_reading,
    counting_unit,
    parse_times,
    time_zone,
)
from cloudlstm.data.sources.units_option import UnitsGiven, check_unit_channels, units_option
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.errors import MissingFileError, UserError

__all__ = ["LongFormatSource"]

log = logging.getLogger(__name__)

# Bump when the reading changes, so stale caches are not reused.
_VERSION = 9  # 5: True/False columns are no channels; degrees checked; 6: gaps hold the
# last reading (before: linear interpolation in time); 7: a series never read takes the
# mean of the other points' readings at each step (6: of their filled values); 8: a
# coordinate column of True/False is refused (7: read as 1/0), and a header naming a column
# twice (7: the second read as another, pandas' no2.1), an id column of lists (7: their text)
# and an id of blanks alone (7: the point ""); 9: a channel or coordinate column of complex
# numbers (8: their real part) or of True/False among numbers (8: read as 1/0) is refused


DATA_SUFFIXES = (".csv", ".parquet", ".pq")
# How pandas names a column whose header cell is empty
_UNNAMED = "Unnamed: "


def dataset_parts(path: Path, option: str) -> list[Path]:
    """The parts of the folder ``path`` given as ``option`` where a long-format file is
    read: a Parquet dataset (:func:`~cloudlstm.data.sources.tables.parquet_dataset_parts`).

    Raises:
        UserError: it is no Parquet dataset (:func:`_folder_given`).
    """
    if parts := parquet_dataset_parts(path):
        return parts
    raise UserError(_folder_given(path, option))


def _folder_given(path: Path, option: str) -> str:
    """The one-line error for a folder that is no Parquet dataset: the folder's data files,
    one of them as the example to give instead."""
    files = sorted(
        f.name
        for f in path.iterdir()
        if f.is_file()
        and f.name[:1] not in ("_", ".")  # _SUCCESS, .crc checksums: no data
        and any(s in DATA_SUFFIXES for s in (x.lower() for x in f.suffixes))
    )
    if not files:
        inside = "it holds no .csv or .parquet file"
        example = f"{option}={path.resolve() / 'data.csv'}"
    else:
        more = f" and {len(files) - 3} more" if len(files) > 3 else ""
        inside = f"it holds {', '.join(files[:3])}{more}"
        example = f"{option}={path.resolve() / files[0]}"
    return (
        f"{option}={path.resolve()} is a folder that is no Parquet dataset ({inside}): name "
        f"one long-format file, e.g. {example}; to train on several, concatenate their rows "
        "into one file, or write them as one Parquet dataset (a folder of .parquet parts)."
    )


# Coordinates of one point that differ by less than this fraction of the cloud's extent are
# one place (float noise): normalised to [0, 1] in float32 (7 digits), they would be equal.
SAME_PLACE = 1e-6
# Points that move less than this fraction of the cloud's extent are warned of (rounding?).
LITTLE_MOTION = 0.01
# Points away from their usual place at no more than this fraction of their located steps
# (and at least one) are warned of: a coordinate mistyped in a row, not a vehicle's track
RARE_MOTION = 0.01


def unplaced(pos: np.ndarray, ids: Sequence[str], cols: Sequence[str]) -> str:
    """What the points ``ids`` lack to be placed, from their positions ``pos (T, n, L)``
    (NaN where not given): ``point(s) [...] have no coordinates (columns [...]) in any row``,
    or, where some of their columns are given, which ones never are (a 2-D history for a
    run of 3-D positions: "no coordinates" would send the reader to the columns they gave),
    or that no row gives all of them at once."""
    given = np.isfinite(pos)  # (T, n, L)
    never = ~given.any(axis=0)  # (n, L)
    shown = list(ids[:5])
    if never.all():
        return f"point(s) {shown} have no coordinates in any row (columns {list(cols)})"
    absent = [c for c, gone in zip(cols, never.any(axis=0), strict=True) if gone]
    if absent:
        return (
            f"point(s) {shown} have no {', '.join(absent)} in any row (coordinate columns "
            f"{list(cols)}, all needed)"
        )
    return (
        f"point(s) {shown} have no row that gives all of their coordinates (columns "
        f"{list(cols)}): each row gives only some of them"
    )


def _spans(pos: np.ndarray) -> np.ndarray:
    """``(N, L)``: how far each point's known coordinates ``pos (T, N, L)`` range."""
    with warnings.catch_warnings():  # all-NaN slices were refused before
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmax(pos, axis=0) - np.nanmin(pos, axis=0)


def _extent(pos: np.ndarray) -> float:
    """The largest range of any coordinate over all points and steps of ``pos (T, N, L)``."""
    return float(np.max(np.nanmax(pos, axis=(0, 1)) - np.nanmin(pos, axis=(0, 1))))


def _rarely_moved(pos: np.ndarray, moves: np.ndarray, extent: float) -> list[tuple[int, int]]:
    """``(point, step)`` for each moving point (``moves (N,)`` of ``pos (T, N, L)``) that is
    away from its most frequent place at no more than :data:`RARE_MOTION` of the steps that
    locate it (at least one step): the first such step. A vehicle moves at most steps, and
    a sensor moved once stays at its new place."""
    found = []
    for point in np.flatnonzero(moves):
        track = pos[:, point]
        located = np.flatnonzero(np.isfinite(track).all(axis=1))
        places, counts = np.unique(track[located], axis=0, return_counts=True)
        usual = places[counts.argmax()]
        away = located[(np.abs(track[located] - usual) > SAME_PLACE * extent).any(axis=1)]
        if len(away) <= max(1, RARE_MOTION * len(located)):
            found.append((int(point), int(away[0])))
    return found


def _moving_points(spans: np.ndarray, extent: float) -> np.ndarray:
    """``(N,)`` True for points whose coordinates range (``spans (N, L)``, :func:`_spans`)
    over more than :data:`SAME_PLACE` of the cloud's ``extent`` (:func:`_extent`): float
    noise below it (a coordinate printed as ``6.3696168732`` in one row and
    ``6.36961687320001`` in the next) is no motion, and the model's float32 coordinates
    could not show it."""
    return (spans > SAME_PLACE * extent).any(axis=1)


class LongFormatSource(UnitsGiven, CachedSource):
    """A long-format CSV / Parquet file of a point-cloud stream (one row per time and point).

    Args:
        path: the file (``.csv``, ``.csv.gz`` and other pandas compressions, ``.parquet``).
        time_col: timestamp column (dates in the format pandas infers from the first row;
            timezones become naive UTC).
        id_col: point id column.
        coord_cols: the L coordinate columns, 2 or 3.
        value_cols: channel columns (at least one); ``None`` = every other column that is
            mostly numbers (other than ``covariate_cols``). A column has one role: the
            time, the id, a coordinate, a value or a covariate, named once.
        covariate_cols: columns read as measured covariates: input-only channels after
            the value channels, seen in the input window, never forecast or scored
            (:mod:`cloudlstm.data.covariates`).
        freq: grid step such as ``"1h"`` or ``"5min"``; ``None`` = the most common positive gap.
        name: stream name (default: the file name without suffixes).
        moving: ``None`` detects moving points (a point whose coordinates change over time);
            ``True`` always builds a ``trajectory``; ``False`` refuses changing coordinates.
        bad_values: what a channel cell that is neither empty nor a finite number (text,
            ``inf``) does: ``"error"`` names it, ``"warn"`` warns and treats it as missing
            (:mod:`cloudlstm.data.sources.bad_values`).
        cache_dir: folder of the stream cache, keyed by these arguments and the file's
            signature (``None``, the default: the file is read at every load).
        time_format: the strftime format of the times (``"%d/%m/%Y %H:%M"``) where pandas
            would infer another, or of dates written as digits (``"%Y%m%d%H"``).
        time_unit: the times are numbers of this unit since 1970-01-01 UTC (``"s"``: Unix
            time; ``"ms"``, ``"us"``, ``"ns"``); numbers without it are refused
            (:mod:`~cloudlstm.data.sources.times`).
        units: the channels' units, ``{channel: unit}`` (e.g. ``{pm25: ug/m3}``; a channel
            or covariate not named: not recorded), as
            :mod:`~cloudlstm.data.sources.units_option` takes it; checked against the
            file's channels at :meth:`load`.

    :meth:`load` lays the rows on a regular grid, fills gaps from the past (``mask`` False
    there; each series holds its last reading, a leading gap takes the first one) and drops
    points with no value at all. Static points take their (single) coordinates; moving
    points get a ``trajectory (T, N, L)`` whose gaps are filled in the same way, with
    ``coords = trajectory[0]``. Rows with empty coordinates are allowed when the point has
    coordinates in other rows.
    """

    cache_prefix = "points"

    def __init__(
        self,
        path: str | os.PathLike,
        time_col: str = "timestamp",
        id_col: str = "id",
        coord_cols: Sequence[str] = ("x", "y"),
        value_cols: Sequence[str] | None = None,
        freq: str | None = None,
        name: str | None = None,
        moving: bool | None = None,
        bad_values: str = "error",
        cache_dir: str | os.PathLike | None = None,
        covariate_cols: Sequence[str] = (),
        time_format: str | None = None,
        time_unit: str | None = None,
        units: Mapping[str, str] | None = None,
    ) -> None:
        self.path = Path(path).expanduser()
        self.time_col = str(time_col)
        self.id_col = str(id_col)
        if isinstance(coord_cols, str):
            coord_cols = [coord_cols]
        self.coord_cols = [str(c) for c in coord_cols]
        check_coordinate_columns(self.coord_cols, "data.source.coord_cols", self.coord_cols)
        if isinstance(value_cols, str):
            value_cols = [value_cols]
        self.value_cols = None if value_cols is None else [str(c) for c in value_cols]
        if self.value_cols == []:
            raise UserError(
                "data.source.value_cols=[] names no column to forecast: name them (e.g. "
                "data.source.value_cols=[pm25]), or give null to forecast every other column "
                "of numbers."
            )
        self.freq = None if freq is None else parse_freq(freq, "data.source.freq")
        self.time_format, self.time_unit = check_time_reading(time_format, time_unit)
        self.name = name or self.path.name.split(".")[0]
        self.moving = moving
        self.bad_values = check_mode(bad_values)
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        if isinstance(covariate_cols, str):
            covariate_cols = [covariate_cols]
        self.covariate_cols = [str(c) for c in covariate_cols or []]
        self.given_units = units_option(units)
        check_column_roles(
            {
                "time_col": self.time_col,
                "id_col": self.id_col,
                "coord_cols": self.coord_cols,
                "value_cols": self.value_cols,
                "covariate_cols": self.covariate_cols,
            }
        )

    def __repr__(self) -> str:
        return f"LongFormatSource(path={str(self.path)!r}, name={self.name!r})"

    def config(self) -> dict:
        """Every argument that determines the stream (the file itself: :meth:`input_files`)."""
        return {
            "version": _VERSION,
            "time_col": self.time_col,
            "id_col": self.id_col,
            "coord_cols": self.coord_cols,
            "value_cols": self.value_cols,
            "freq": None if self.freq is None else str(pd.Timedelta(self.freq)),
            "name": self.name,
            "moving": self.moving,
            "bad_values": self.bad_values,
            # only when set: the key (and the cache) of before covariates existed otherwise
            **({"covariate_cols": self.covariate_cols} if self.covariate_cols else {}),
            **({"time_format": self.time_format} if self.time_format else {}),
            **({"time_unit": self.time_unit} if self.time_unit else {}),
            # a dataset's parts by their place in it (their signatures name files alone):
            # a partition renamed (id=007 to id=7) is another stream
            **({"parts": self._parts()} if self.path.is_dir() else {}),
        }

    def _parts(self) -> list[str]:
        return [p.relative_to(self.path).as_posix() for p in parquet_dataset_parts(self.path)]

    def load(self) -> PointCloudStream:
        """The stream (:meth:`CachedSource.load`), ``units`` checked against its channels:
        with ``value_cols: null`` they are known once the file is read."""
        stream = super().load()
        check_unit_channels(self.given_units, stream.channel_names)
        return stream

    def input_files(self) -> list[Path]:
        """The file, or the parts of a Parquet dataset folder; a ``MissingFileError`` naming
        ``data.source.path`` when it is absent, a :class:`UserError` when it is another
        folder (one file, or one dataset, holds the whole stream)."""
        if self.path.is_dir():
            return dataset_parts(self.path, "data.source.path")
        if not self.path.is_file():
            raise MissingFileError(
                f"Long-format data file not found: {self.path.resolve()}. Set the path of your "
                "file (with data=points: `data.source.path=/path/to/file.csv`)."
            )
        return [self.path]

    def generate(self, cache_path: Path | None = None) -> PointCloudStream:
        """Read, check and pivot the file (see the class docstring), cached at ``cache_path``."""
        self.input_files()  # there, and a file or a dataset
        path = self.path
        what = f"{'Parquet dataset' if path.is_dir() else 'file'} {path}"
        df, value_cols = self._read(what)
        channels = [*value_cols, *self.covariate_cols]
        # each bad cell named by its point and time, as written
        names = file_row_names(path, df[self.time_col], df[self.id_col])
        values = channel_values(df, channels, what, self.bad_values, row_names=names)  # (R, C)
        lines = file_row_names(path, None)  # a row by its line (a CSV), or data row
        positions = self._row_positions(df, what, lines)  # (R, L)
        times = parse_times(
            df[self.time_col],
            f"column {self.time_col!r} of {what}",
            self.time_format,
            self.time_unit,
            row_names=lines,
        )
        zoned = time_zone(df[self.time_col], self.time_format, self.time_unit) is not None
        written = df[self.time_col] if zoned else None  # shown where two name one moment
        # clock times, not numbers counted in a unit: they may repeat an hour
        clock = not zoned and counting_unit(df[self.time_col], self.time_unit) is None
        df = df.assign(**{self.time_col: times})
        grid = pivot_long(
            df,
            self.time_col,
            self.id_col,
            self.freq,
            "error",
            what,
            "data.source.freq",
            written=written,
            row_names=lines,
            clock=clock,
        )
        static, trajectory = self._placed(grid, positions, what)
        stream = build_stream(
            grid.timestamps,
            grid.point_ids,
            grid.scatter(values, dtype=np.float32),
            channels,
            coords=static,
            trajectory=trajectory,
            step=grid.step,
            name=self.name,
            source=str(path),
        )
        if self.covariate_cols:
            stream.metadata[COVARIATES_KEY] = list(self.covariate_cols)
        # whether the file wrote its times with a zone (read as UTC) or as clock times, so
        # that a forecast's history written the other way is warned of
        stream.metadata[TIMES_ZONED_KEY] = zoned
        return self.cached(stream, cache_path)

    def _read(self, what: str) -> tuple[pd.DataFrame, list[str]]:
        """The file's rows, its key columns checked, and the channel columns."""
        # ids as text: a number would rewrite an id such as 007 (written_ids)
        # ... and verbatim: NA is a station's code in some networks, not a missing id
        df = read_table(
            self.path, "the long-format file", text_cols=[self.id_col], dtype={self.id_col: str}
        )
        df = index_as_columns(df)
        keys = [self.time_col, self.id_col, *self.coord_cols]
        check_columns(
            df,
            keys + (self.value_cols or []) + self.covariate_cols,
            what,
            "Set time_col / id_col / coord_cols / value_cols (data.source.time_col=... etc.) "
            "to the file's column names.",
        )
        if df.empty:  # before the channels are looked for: an empty column is no number
            raise UserError(f"{what} has no rows, only its columns: give a file with the readings.")
        value_cols = self.value_cols or self._numeric_columns(df, keys + self.covariate_cols)
        empty = empty_ids(df[self.id_col])
        if empty.any():
            row = int(np.flatnonzero(empty)[0])
            at = file_row_name(self.path, row)
            raise UserError(f"{what}: column {self.id_col!r} is empty at {at}.")
        refuse_nested_ids(df[self.id_col], what, file_row_names(self.path, None))
        return df.assign(**{self.id_col: written_ids(df[self.id_col])}), value_cols

    def _row_positions(self, df: pd.DataFrame, what: str, lines: RowNames) -> np.ndarray:
        """``(R, L)`` coordinates of every row (NaN where a cell is empty; never infinite);
        a row refused is named as ``lines`` names it."""
        positions = np.stack(
            [numeric_column(df, c, what, ROW_COORDINATES_FIX, lines) for c in self.coord_cols],
            axis=1,
        )
        if np.isinf(positions).any():
            row = int(np.flatnonzero(np.isinf(positions).any(axis=1))[0])
            raise UserError(
                f"{what} has infinite coordinates (first at {lines([row])[0]}, "
                f"{self.id_col}={str(df[self.id_col].iloc[row])!r}); fix or remove those rows."
            )
        check_degrees(
            positions,
            self.coord_cols,
            lambda row: f"{lines([row])[0]} ({self.id_col}={str(df[self.id_col].iloc[row])!r})",
            what,
        )
        return positions

    def _placed(
        self, grid: LongGrid, positions: np.ndarray, what: str
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """``(coords (N, L), None)`` for static points or ``(None, trajectory (T, N, L))``
        (NaN gaps, filled later) for moving ones, as ``moving`` asks or the rows show."""
        pos = grid.scatter(positions)  # (T, N, L), NaN where no row or an empty cell
        known = np.isfinite(pos).all(axis=2)  # (T, N)
        lost = np.flatnonzero(~known.any(axis=0))
        if len(lost):
            ids = [grid.point_ids[i] for i in lost]
            raise UserError(
                f"{what}: {unplaced(pos[:, lost], ids, self.coord_cols)}. Every point needs "
                "a location in at least one row."
            )
        spans, extent = _spans(pos), _extent(pos)
        moves = _moving_points(spans, extent)
        moving = bool(moves.any()) if self.moving is None else bool(self.moving)
        if self.moving is None and moving:
            self._warn_little_motion(spans, extent, moves, grid.point_ids, what)
            self._warn_rare_motion(pos, extent, moves, grid, what)
        if moves.any() and not moving:
            first = grid.point_ids[int(np.flatnonzero(moves)[0])]
            raise UserError(
                f"{what}: {int(moves.sum())} point(s) change coordinates over time (e.g. "
                f"{self.id_col}={first!r}) but moving=False. Set moving=true "
                "(data.source.moving=true) for moving points, or give each point one location."
            )
        if moving:
            return None, pos
        # a static point's coordinates: those of its first row that has them
        return pos[known.argmax(axis=0), np.arange(pos.shape[1])], None

    def _numeric_columns(self, df: pd.DataFrame, keys: list[str]) -> list[str]:
        """The channel columns found alone: the (mostly) numeric columns besides ``keys``,
        but one without a name (``Unnamed: 0``, the row numbers ``DataFrame.to_csv``
        writes as its first column by default), which would be forecast as a channel."""
        others = [c for c in df.columns if c not in keys]
        unnamed = [str(c) for c in others if str(c).startswith(_UNNAMED)]
        if unnamed:
            keep = "name a column and list it in data.source.value_cols to forecast it."
            skip_written_index(self.path, unnamed, keep)
            others = [c for c in others if str(c) not in unnamed]
        numeric = [str(c) for c in others if mostly_numeric(df[c])]
        skipped = [str(c) for c in others if str(c) not in numeric]
        # flags are never numeric: only the columns skipped are read for them
        true_false = [str(c) for c in others if str(c) in skipped and flags(df[c])]
        if true_false:
            log.info(
                "%s: skipping True/False column(s) %s; list them in data.source.value_cols "
                "(or covariate_cols) to read them as 0/1.",
                self.path,
                true_false,
            )
        text = [c for c in skipped if c not in true_false]
        self._refuse_channels_written_as_text(df, text)
        if text:
            log.info("%s: skipping non-numeric column(s) %s.", self.path, text)
        if not numeric:
            raise UserError(
                f"File {self.path} has no numeric value column besides {keys} (non-numeric: "
                f"{skipped}). Set value_cols to the channel columns."
            )
        return numeric

    def _refuse_channels_written_as_text(self, df: pd.DataFrame, columns: list[str]) -> None:
        """Refuse a column of ``columns`` (not numbers) that is a channel written as text,
        which would be left out of the forecast in silence: numbers with a unit in each
        cell (:func:`common_unit`), with thousands separators, or among text markers of
        missing readings (:func:`numbers_among_text`).

        Raises:
            UserError: names the column, a cell and the ways out.
        """
        leave_out = "or set data.source.value_cols to the channel columns to forecast without it"
        for col in columns:
            unit = common_unit(df[col])
            if unit is not None:
                cell = filled_text(df[col]).iloc[0]
                raise UserError(
                    f"File {self.path}: column {col!r} holds numbers with a unit (e.g. "
                    f"{cell!r}), so it is not read as a channel. Write the numbers alone (the "
                    f"unit in the column's name: {col}_{_name_part(unit)}), {leave_out}."
                )
            found = numbers_among_text(df[col])
            if found is None:
                continue
            share, grouped, text = found
            if grouped is not None:
                raise UserError(
                    f"File {self.path}: column {col!r} writes numbers with thousands "
                    f"separators (e.g. {grouped!r}), so it is not read as a channel. Write "
                    f"them without separators, {leave_out}."
                )
            raise UserError(
                f"File {self.path}: column {col!r} holds numbers in {share:.0%} of its filled "
                f"cells and text in the others (e.g. {text!r}), so it is not read as a "
                f"channel. To forecast it, list it in data.source.value_cols with "
                f"data.source.bad_values=warn (its text cells read as missing), {leave_out}."
            )

    def _warn_rare_motion(
        self, pos: np.ndarray, extent: float, moves: np.ndarray, grid: LongGrid, what: str
    ) -> None:
        """Warn of the points found moving that leave their usual place at only a few steps
        (:func:`_rarely_moved`): more likely a mistyped coordinate than a vehicle, and
        reading the data as moving points adds their positions to the forecast channels."""
        rare = _rarely_moved(pos, moves, extent)
        if not rare:
            return
        point, step = rare[0]
        place = ", ".join(
            f"{col}={value:g}" for col, value in zip(self.coord_cols, pos[step, point], strict=True)
        )
        log.warning(
            "%s: %d point(s) leave their usual place at only a few steps (e.g. %s=%r at %s: "
            "%s), so the data are read as moving points, whose positions are forecast too and "
            "scored with the readings. If those rows hold a mistyped coordinate, correct them; "
            "data.source.moving=false refuses any change of place, and "
            "data.source.moving=true reads the points as moving without this warning.",
            what,
            len(rare),
            self.id_col,
            grid.point_ids[point],
            pd.Timestamp(grid.timestamps[step]),
            place,
        )

    def _warn_little_motion(
        self, spans: np.ndarray, extent: float, moves: np.ndarray, ids: list[str], what: str
    ) -> None:
        """Warn when the points found moving (``moves (N,)``; ``spans (N, L)``, ``extent`` as
        :func:`_moving_points` takes them) move by less than :data:`LITTLE_MOTION` of the
        cloud's extent: more likely fixed sensors whose coordinates differ by rounding
        between rows than vehicles, and reading them as moving forecasts their positions."""
        reach = spans[moves].max(axis=1)  # (moving points,)
        if extent == 0 or reach.max() >= LITTLE_MOTION * extent:
            return
        first = ids[int(np.flatnonzero(moves)[0])]
        log.warning(
            "%s: %d point(s) change coordinates over time (e.g. %s=%r), by at most %.3g "
            "(%.2g %% of the points' extent), so they are read as moving points, whose positions "
            "are forecast too. If they are fixed sensors whose coordinates differ by rounding, "
            "give each one location (e.g. round the coordinate columns); to read them as moving "
            "without this warning, set data.source.moving=true.",
            what,
            int(moves.sum()),
            self.id_col,
            first,
            reach.max(),
            100 * reach.max() / extent,
        )


def _name_part(unit: str) -> str:
    """``unit`` as a part of a column name: ``"km/h"`` as ``"km_h"``, ``"%"`` as ``"pct"``."""
    text = re.sub(r"\W+", "_", unit.replace("%", "pct")).strip("_")
    return text or "unit"
