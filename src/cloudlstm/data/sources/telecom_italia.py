"""Telecom Italia Big Data Challenge: mobile activity in the squares of the Milan grid.

The original files, one per day, ``sms-call-internet-mi-YYYY-MM-DD.txt`` (``.txt.gz`` too),
are tab-separated without header, one row per square, 10-minute interval and country code:

    square id, interval start (ms since the epoch, UTC), country code,
    SMS in, SMS out, call in, call out, Internet

An empty field means no activity (the files list only what happened); a field that is
no number within float32's range (``inf``, ``1e39``), and a row repeating the square,
interval and country code of another (a file concatenated with itself, or a day's file
copied under another day's name), and a file none of whose rows is of the day its name
says (a day's file renamed; the days are Milan's), are refused.
The grid is ``milano-grid.geojson`` (``.geojson.gz`` too): one polygon per square
(``cellId``), WGS84.
Barlacchi et al., "A multi-source dataset of urban life in the city of Milan and the
Province of Trentino", Scientific Data 2, 150055 (2015); Open Database License 1.0.

:class:`TelecomItaliaSource` sums the country codes, aggregates the 10-minute intervals to
``step`` (``1h``: the sum of the six intervals of each hour), keeps the chosen channels and
squares, and places each square at its polygon's centroid as ``(longitude, latitude)``,
the convention of every source here.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cloudlstm.data.cache import CachedSource
from cloudlstm.data.sources.bad_values import SHOWN
from cloudlstm.data.sources.cut_short import gzipped, refuse_cut_short
from cloudlstm.data.sources.tables import (
    DAMAGED,
    build_stream,
    damaged_file,
    id_text,
    line_numbers,
    parse_freq,
    pivot_long,
)
from cloudlstm.data.sources.units_option import UnitsGiven, units_option
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.errors import MissingFileError, UserError

__all__ = ["CHANNELS", "TELECOM_URL", "TelecomItaliaSource", "grid_centroids"]

log = logging.getLogger(__name__)

TELECOM_URL = "https://dataverse.harvard.edu/dataverse/bigdatachallenge"
# The activity columns of a file, in its order after square, time and country code.
CHANNELS = ("sms_in", "sms_out", "call_in", "call_out", "internet")
# A file's fields, by the column names used here.
_FIELD_NAMES = {
    "square": "square id",
    "time": "interval start",
    "country": "country code",
    **{c: c.replace("_", " ") for c in CHANNELS},
}
# what a row's first two fields must be, for a line on one that is not
_KEY_FIELDS_FIX = (
    "Each row starts with the square id and the interval start in ms since 1970, both whole "
    "numbers: give the challenge's sms-call-internet-mi files as they were published."
)
_INTERVAL = np.timedelta64(10, "m").astype("timedelta64[ns]")
_INTERVAL_MS = 600_000
_DAY_FILE = re.compile(r"^sms-call-internet-mi-(\d{4}-\d{2}-\d{2})\.txt(\.gz)?$")
_GRID_NAMES = ("milano-grid.geojson", "milano-grid.geojson.gz")
# 2: rows repeating a square, interval and country code, and fields that are no finite
# float32, are refused (a stream cached from such a file is read again, and refused)
# 3: gaps hold the last reading (2 and before: linear interpolation in time)
# 4: a series never read takes the mean of the other points' readings at each step (3: of
# their filled values)
# 5: a grid of MultiPolygons places each square at its parts' centroid (4: at an absurd
# point, its rings read as one polygon)
# 6: a row of one file repeated in another (a day's file copied under another day's name)
# is refused (5: summed twice); 7: a file none of whose rows is of the day its name says is
# refused (6: read as it was)
_VERSION = 7
# the files' days are Milan's: the file of 2013-11-01 starts at 2013-10-31 23:00 UTC
_FILES_ZONE = "Europe/Rome"
# the largest activity float32 keeps: a field beyond it would be summed into an inf
_FLOAT32_MAX = float(np.finfo(np.float32).max)


class TelecomItaliaSource(UnitsGiven, CachedSource):
    """The Milan files of the Telecom Italia Big Data Challenge.

    Args:
        root: folder of the daily ``sms-call-internet-mi-YYYY-MM-DD.txt[.gz]`` files (and
            of the grid, by default).
        channels: any of :data:`CHANNELS` (``sms_in``, ``sms_out``, ``call_in``,
            ``call_out``, ``internet``), in the order wanted.
        squares: the square ids to keep (None: every square in the files).
        step: the stream's step, a multiple of the files' 10 minutes (``1h``, ``30min``,
            ``1D``): each value is the sum of the intervals in its step.
        grid: the grid's GeoJSON (None: ``milano-grid.geojson[.gz]`` in ``root``).
        first_day, last_day: the first and last file to read (``2013-11-01``; None: from
            the first / to the last one in ``root``).
        name: the stream's name.
        cache_dir: folder of the stream cache (None: the files are read at every load).
        units: the chosen channels' units, ``{channel: unit}`` (a channel not named: not
            recorded), as :mod:`~cloudlstm.data.sources.units_option` takes it. The files
            do not say theirs.

    Times are the files' UTC: Milan's local time is an hour later in November-December
    (the file of 2013-11-01 starts at 2013-10-31 23:00 UTC), and a ``1D`` step sums UTC
    days. A square with no row in a step of complete files had no activity: 0. A step
    whose 10-minute intervals are not all in the files (the first and last steps when
    ``step`` does not divide the files' span, an outage of the whole city) is missing at
    every square: filled from the past (the last reading held, the first one before it),
    with ``mask`` False.

    Raises:
        UserError: an unknown channel, a step that is not a multiple of 10 minutes, a
            malformed file (a field that is no finite number within float32, a row
            repeating a square, interval and country code), a square without data or
            without a cell in the grid.
    """

    cache_prefix = "telecom"

    def __init__(
        self,
        root: str | os.PathLike,
        channels: Sequence[str] = CHANNELS,
        squares: Sequence[int] | None = None,
        step: str = "1h",
        grid: str | os.PathLike | None = None,
        first_day: str | None = None,
        last_day: str | None = None,
        name: str = "milan_telecom",
        cache_dir: str | os.PathLike | None = None,
        units: Mapping[str, str] | None = None,
    ) -> None:
        channels = [channels] if isinstance(channels, str) else list(channels)
        unknown = [c for c in channels if c not in CHANNELS]
        if unknown or not channels or len(set(channels)) != len(channels):
            raise UserError(
                f"data.source.channels={channels}: give one or more of {list(CHANNELS)}, each once."
            )
        self.channels = [str(c) for c in channels]
        self.given_units = units_option(units, self.channels)
        self.root = Path(root).expanduser()
        self.squares = None if squares is None else _square_ids(squares)
        self.step = parse_freq(step, "data.source.step")
        if self.step % _INTERVAL != np.timedelta64(0, "ns"):
            raise UserError(
                f"data.source.step={step!r}: the files' intervals are 10 minutes, so the step "
                "must be a multiple of 10 minutes (10min, 1h, 1D, ...)."
            )
        self.grid = None if grid is None else Path(grid)
        self.first_day = None if first_day is None else _day(first_day, "first_day")
        self.last_day = None if last_day is None else _day(last_day, "last_day")
        if self.first_day and self.last_day and self.first_day > self.last_day:
            raise UserError(
                f"data.source.first_day={self.first_day} is after data.source.last_day="
                f"{self.last_day}: swap them (first_day={self.last_day}, "
                f"last_day={self.first_day})."
            )
        self.name = str(name)
        self.cache_dir = None if cache_dir is None else Path(cache_dir)

    def __repr__(self) -> str:
        return (
            f"TelecomItaliaSource(root={str(self.root)!r}, channels={self.channels!r}, "
            f"step={str(pd.Timedelta(self.step))!r})"
        )

    def config(self) -> dict:
        """What decides the stream besides the files."""
        return {
            "version": _VERSION,
            "channels": self.channels,
            "squares": self.squares,
            "step": str(pd.Timedelta(self.step)),
            "first_day": self.first_day,
            "last_day": self.last_day,
            "name": self.name,
        }

    def physical_ranges(self) -> dict[str, tuple[float | None, float | None]]:
        """Activity cannot be negative."""
        return dict.fromkeys(self.channels, (0.0, None))

    def day_files(self) -> list[Path]:
        """The daily files to read, by date.

        Raises:
            MissingFileError: none in ``root`` (in the chosen days).
        """
        found: dict[str, Path] = {}
        if self.root.is_dir():
            # a day's .txt.gz before its .txt: a .txt beside it is most likely its own
            # decompressed copy, which a stopped gunzip leaves cut short at a line's end,
            # where the .gz's checksum finds any cut
            for path in sorted(self.root.iterdir(), key=lambda p: not p.name.endswith(".gz")):
                match = _DAY_FILE.match(path.name)
                if match and path.is_file():
                    found.setdefault(match.group(1), path)
        days = sorted(
            d
            for d in found
            if (self.first_day is None or d >= self.first_day)
            and (self.last_day is None or d <= self.last_day)
        )
        if not days:
            chosen = ""
            if self.first_day or self.last_day:
                chosen = f" from {self.first_day or 'the first'} to {self.last_day or 'the last'}"
            raise MissingFileError(
                f"No Telecom Italia files sms-call-internet-mi-YYYY-MM-DD.txt[.gz]{chosen} in "
                f"{self.root.resolve()}. Download 'Telecommunications - SMS, Call, Internet - "
                f"MI' and the Milano grid from {TELECOM_URL} into one folder and set "
                "data.source.root=/path/to/folder."
            )
        return [found[d] for d in days]

    def grid_file(self) -> Path:
        """The grid's GeoJSON.

        Raises:
            MissingFileError: it is not there.
        """
        candidates = [self.grid] if self.grid is not None else [self.root / n for n in _GRID_NAMES]
        for path in candidates:
            if path.is_file():
                return path
        raise MissingFileError(
            f"No grid file {candidates[0].resolve()}: download 'Milano Grid' "
            f"(milano-grid.geojson) from {TELECOM_URL} into data.source.root, or set "
            "data.source.grid=/path/to/milano-grid.geojson."
        )

    def input_files(self) -> list[Path]:
        """The daily files and the grid."""
        return [*self.day_files(), self.grid_file()]

    def generate(self, cache_path: Path | None = None) -> PointCloudStream:
        """Read the chosen days into one stream (see the class docstring), cached."""
        files = self.day_files()
        parts, intervals, in_files = [], [], set()
        for path in files:
            sums, seen, squares = self._read_day(path)
            parts.append(sums)
            intervals.append(seen)
            in_files.update(squares)
        _refuse_rows_in_two_files(files, intervals)
        _refuse_files_of_other_days(files, intervals)
        # a step may straddle two files (a UTC day's step over local-day files)
        sums = pd.concat(parts).groupby(["time", "square"], sort=False).sum().reset_index()
        if self.squares is not None:
            absent = sorted(set(self.squares) - set(sums["square"]))
            if absent:
                raise UserError(
                    f"data.source.squares: the square(s) {absent[:10]} have no row in the "
                    f"{len(files)} file(s) read, whose squares are {_id_set(in_files)}: choose "
                    "among those, or set data.source.squares=null for all of them."
                )
        if sums.empty:
            raise UserError(f"The Telecom Italia files in {self.root} have no rows.")
        what = f"the Telecom Italia files in {self.root}"
        grid = pivot_long(sums, "time", "square", self.step, "error", what, "data.source.step")
        values = grid.scatter(sums[self.channels].to_numpy(), np.float64)  # (T, N, C)
        complete = self._complete_steps(grid.timestamps, np.unique(np.concatenate(intervals)))
        # no row in a complete step: no activity; an incomplete step: no reading at all
        values[complete] = np.nan_to_num(values[complete], nan=0.0)
        values[~complete] = np.nan
        coords = grid_centroids(self.grid_file())
        unplaced = [p for p in grid.point_ids if p not in coords]
        if unplaced:
            raise UserError(
                f"The square(s) {unplaced[:10]} of the files have no cell in the grid "
                f"{self.grid_file()}: is it the Milano grid?"
            )
        _refuse_sums_beyond_float32(values, grid.timestamps, grid.point_ids, self.channels, what)
        stream = build_stream(
            grid.timestamps,
            grid.point_ids,
            values.astype(np.float32),
            self.channels,
            coords=np.array([coords[p] for p in grid.point_ids], dtype=np.float64),
            step=grid.step,
            name=self.name,
            source=str(self.root),
        )
        stream.metadata["incomplete_steps"] = int((~complete).sum())
        return self.cached(stream, cache_path)

    def _read_day(self, path: Path) -> tuple[pd.DataFrame, np.ndarray, list[int]]:
        """A file's sums per step and square of the chosen squares (columns ``time``,
        ``square`` and the channels), its distinct 10-minute intervals ``(I,)``
        ``datetime64[ns]`` (of every square: they tell which intervals the files hold) and
        its distinct squares (to name them when a chosen one has no row)."""
        what = f"Telecom Italia file {path}"
        rows = _read_rows(path, what)
        square, ms = (_whole_numbers(rows, column, path, what) for column in ("square", "time"))
        off = ms % _INTERVAL_MS != 0
        if off.any():
            row = int(np.flatnonzero(off)[0])
            raise UserError(
                f"{what}: the interval start {ms[row]} at {_line(path, row)} is not on the "
                "10-minute grid (ms since 1970-01-01 00:00 UTC, a multiple of 600000)."
            )
        seen = np.unique(ms).astype("datetime64[ms]").astype("datetime64[ns]")
        keep = np.ones(len(rows), dtype=bool)
        if self.squares is not None:
            keep = np.isin(square, self.squares)
        _refuse_repeated_rows(rows, square, ms, keep, path, what)
        step_ms = int(self.step / np.timedelta64(1, "ms"))
        values = _activity(rows, self.channels, keep, path, what)
        frame = pd.DataFrame(
            {
                "time": (ms[keep] // step_ms * step_ms).astype("datetime64[ms]"),
                "square": square[keep].astype(np.int64),
                **values,
            }
        )
        frame["time"] = frame["time"].astype("datetime64[ns]")
        squares = pd.unique(square).astype(np.int64).tolist()
        return frame.groupby(["time", "square"], sort=False).sum().reset_index(), seen, squares

    def _complete_steps(self, timestamps: np.ndarray, seen: np.ndarray) -> np.ndarray:
        """``(T,)`` True where the files hold every 10-minute interval of the step."""
        per_step = int(self.step // _INTERVAL)
        index = ((seen - timestamps[0]) // self.step).astype(np.int64)
        inside = (index >= 0) & (index < len(timestamps))
        counts = np.bincount(index[inside], minlength=len(timestamps))
        return counts == per_step


def grid_centroids(path: Path) -> dict[str, tuple[float, float]]:
    """Square id -> ``(longitude, latitude)`` of its polygon's centroid, from the grid's
    GeoJSON (``features[].properties.cellId``, ``geometry.coordinates[0]`` the outer
    ring). The centroid is the polygon's (area-weighted), in degrees: over one 235 m
    square the degrees are as good as plane coordinates.

    Raises:
        UserError: the file is not such a GeoJSON.
    """
    try:
        with _open_text(path) as f:
            features = json.load(f)["features"]
    except DAMAGED as err:
        raise damaged_file(path, "the grid", err) from None
    except UnicodeDecodeError as err:  # its repr holds the bytes read: a megabyte of them
        raise UserError(
            f"Cannot read the grid {path} as GeoJSON: it is not UTF-8 text (byte "
            f"{err.object[err.start : err.start + 1]!r} at position {err.start}); give the "
            "Milano grid's GeoJSON, as published or gzipped."
        ) from None
    except (ValueError, KeyError, TypeError) as err:
        raise UserError(f"Cannot read the grid {path} as GeoJSON features: {err!r}") from None
    centroids = {}
    for k, feature in enumerate(features):
        try:
            cell = feature["properties"]["cellId"]
            rings = _outer_rings(feature["geometry"])
        except (KeyError, IndexError, TypeError, ValueError):
            raise UserError(
                f"{path}: feature {k} has no properties.cellId and Polygon (or MultiPolygon) "
                "coordinates, as the Milano grid's features have."
            ) from None
        square = whole_number(cell)
        if square is None:
            raise UserError(
                f"{path}: feature {k} has the cellId {json.dumps(cell)}, not a whole number "
                '(101 or "101"); the Milano '
                "grid's cells are numbered 1-10000."
            )
        if str(square) in centroids:
            raise UserError(
                f"{path}: feature {k} has the cellId {square} of an earlier feature; each cell "
                "of the Milano grid is one feature."
            )
        centroids[str(square)] = _centroid_of_parts(rings)
    return centroids


def _outer_rings(geometry: Mapping[str, Any]) -> list[np.ndarray]:
    """The outer rings ``(V, 2)`` of a Polygon (one) or a MultiPolygon (one per part, as a
    grid saved again by a GIS may write each cell); holes are left out, as the grid has
    none.

    Raises:
        ValueError: another geometry, or coordinates that are not rings of points.
    """
    if not isinstance(geometry, Mapping):  # a feature without geometry has null
        raise TypeError(type(geometry).__name__)
    kind = geometry.get("type", "Polygon")
    if kind == "Polygon":
        polygons = [geometry["coordinates"]]
    elif kind == "MultiPolygon":
        polygons = list(geometry["coordinates"])
    else:
        raise ValueError(kind)
    # each polygon's first ring is its outer one; a point's third coordinate is a height
    rings = [np.asarray(polygon[0], dtype=np.float64) for polygon in polygons]
    if not rings or any(r.ndim != 2 or r.shape[1] < 2 or len(r) == 0 for r in rings):
        raise ValueError("not rings of points")
    return [r[:, :2] for r in rings]


def _centroid_of_parts(rings: list[np.ndarray]) -> tuple[float, float]:
    """The centroid of the polygons of outer ``rings``, each weighted by its area; the
    vertices' mean where they have none."""
    areas = np.array([abs(_signed_area(r)) for r in rings])
    centres = np.array([_centroid(r) for r in rings])
    if areas.sum() < 1e-18:
        return tuple(float(v) for v in np.concatenate(rings).mean(axis=0))
    return tuple(float(v) for v in areas @ centres / areas.sum())


def _signed_area(ring: np.ndarray) -> float:
    """A ring's area by the shoelace formula, positive counter-clockwise."""
    x, y = ring[:, 0], ring[:, 1]
    return float((x * np.roll(y, -1) - np.roll(x, -1) * y).sum() / 2)


def _open_text(path: Path) -> io.TextIOBase:
    """``path`` opened as UTF-8 text, through gzip where its first bytes are gzip's, whatever
    its name says (a browser may save the gzipped grid as ``milano-grid.geojson``)."""
    if gzipped(path):
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def whole_number(value: Any) -> int | None:
    """``value`` as a square id: a whole number (``101``, ``101.0``) or its digits as text
    (``"101"``); None for anything else (``101.5``, ``"c101"``, ``"101.0"``, None, a
    boolean), which truncating to an int would turn into another square, or fail on."""
    if isinstance(value, str):
        return int(value) if re.fullmatch(r"\s*[+-]?[0-9]+\s*", value) else None
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)) and np.isfinite(value) and value.is_integer():
        return int(value)
    return None


def _centroid(ring: np.ndarray) -> tuple[float, float]:
    """The centroid of a polygon's ring ``(V, 2)`` (closed or not; shoelace formula); the
    vertices' mean for a degenerate one."""
    x, y = ring[:, 0], ring[:, 1]
    x1, y1 = np.roll(x, -1), np.roll(y, -1)
    cross = x * y1 - x1 * y
    area = _signed_area(ring)
    if abs(area) < 1e-18:
        return float(x.mean()), float(y.mean())
    cx = ((x + x1) * cross).sum() / (6 * area)
    cy = ((y + y1) * cross).sum() / (6 * area)
    return float(cx), float(cy)


def _read_rows(path: Path, what: str) -> pd.DataFrame:
    """A file's rows as numbers (columns 0-7), or as text when some field is not a number
    (so that :func:`_whole_numbers` and :func:`_activity` name it as written).

    Raises:
        UserError: the file cannot be read, or a row has fewer fields than the format's.
    """
    kwargs: dict[str, Any] = {"sep": "\t", "header": None}
    refuse_cut_short(path, "the Telecom Italia file", "\t")
    # by its first bytes, as the grid: a browser may save a day's .txt.gz as .txt
    opener = gzip.open if gzipped(path) else open
    try:
        # read once: the rows' fields are counted in the bytes that pandas then parses
        with opener(path, "rb") as f:
            data = f.read()
        try:
            rows = pd.read_csv(io.BytesIO(data), dtype=np.float64, **kwargs)
        except ValueError:  # a field that is not a number: read as text to name it
            rows = pd.read_csv(io.BytesIO(data), dtype=str, **kwargs)
    except (pd.errors.ParserError, UnicodeDecodeError) as err:
        raise UserError(f"Cannot read {what} as tab-separated values: {err}") from None
    except DAMAGED as err:
        raise damaged_file(path, "the Telecom Italia file", err) from None
    except pd.errors.EmptyDataError:
        raise UserError(f"{what} is empty.") from None
    if rows.shape[1] != len(_FIELD_NAMES):
        raise UserError(
            f"{what} has {rows.shape[1]} tab-separated field(s) per row, not "
            f"{len(_FIELD_NAMES)} ({', '.join(_FIELD_NAMES.values())})."
        )
    _refuse_short_rows(data, what)
    rows.columns = list(_FIELD_NAMES)
    return rows


def _refuse_short_rows(data: bytes, what: str) -> None:
    """Refuse a row with fewer tab-separated fields than the format's: pandas reads the
    fields left out as empty ones, which mean no activity, so a row cut short (or a field
    lost in an edit) would count as none."""
    tabs = len(_FIELD_NAMES) - 1
    lines = data.count(b"\n") + (not data.endswith(b"\n"))
    if data.count(b"\t") >= tabs * lines:  # no row short of tabs (one with more: pandas refuses)
        return
    for number, line in enumerate(io.BytesIO(data), start=1):
        fields = line.count(b"\t") + 1
        if line.rstrip(b"\r\n") and fields <= tabs:
            raise UserError(
                f"{what}: line {number} has {fields} tab-separated field(s), "
                f"not {len(_FIELD_NAMES)} ({', '.join(_FIELD_NAMES.values())}); a row leaves "
                "a field of no activity empty, not out. Correct or remove the line, or get "
                "the file again."
            )


def _whole_numbers(rows: pd.DataFrame, column: str, path: Path, what: str) -> np.ndarray:
    """``(R,)`` int64: the key field ``column`` (``square``, ``time``) of every row.

    Raises:
        UserError: a field that is empty, text or not whole, named by its line.
    """
    values = pd.to_numeric(rows[column], errors="coerce").to_numpy(np.float64, na_value=np.nan)
    bad = ~np.isfinite(values) | (values != np.round(values))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        cell = _plain(rows[column].iloc[row])  # 1.5, not np.float64(1.5)
        raise UserError(
            f"{what}: the {_FIELD_NAMES[column]} at {_line(path, row)} is {cell!r}, not a "
            f"whole number ({int(bad.sum())} such field(s)). {_KEY_FIELDS_FIX}"
        )
    return values.astype(np.int64)


def _line(path: Path, row: int) -> str:
    """The line of a day file (no header) that holds its data row ``row``."""
    (number,) = line_numbers(path, [row], header=False, sep="\t")
    return f"line {number}"


def _activity(
    rows: pd.DataFrame, channels: list[str], keep: np.ndarray, path: Path, what: str
) -> dict[str, np.ndarray]:
    """The fields of ``channels`` in the kept rows (``keep``, ``(R,)`` bool), as float64 to
    sum, 0 where empty: an empty field is no activity.

    Raises:
        UserError: a field that is not a number (text), or not a finite one within float32
            (``inf``, ``1e39``): summed, it would overflow the stream's float32 to an inf,
            read as a missing step. Named by their lines of the file ``path``.
    """
    index = np.flatnonzero(keep)
    columns, shown, count = {}, [], 0
    for name in channels:
        written = rows[name].notna().to_numpy()[keep]
        fields = pd.to_numeric(rows[name], errors="coerce").to_numpy(np.float64, na_value=np.nan)
        fields = fields[keep]
        with np.errstate(invalid="ignore"):  # NaN (an empty field) compares False
            bad = np.flatnonzero((np.isnan(fields) & written) | (np.abs(fields) > _FLOAT32_MAX))
        count += len(bad)
        shown += [(int(index[r]), name, _plain(rows[name].iloc[index[r]])) for r in bad[:SHOWN]]
        columns[name] = np.nan_to_num(fields, nan=0.0)
    if count:
        raise _bad_fields(count, sorted(shown)[:SHOWN], path, what)
    return columns


def _bad_fields(count: int, shown: list[tuple[int, str, Any]], path: Path, what: str) -> UserError:
    """The line on ``count`` fields that are no finite float32, the first ones ``shown``
    (data row, column, field), each named by its line of the file ``path``, in the words
    of the wide table's cells (:func:`~cloudlstm.data.sources.bad_values.channel_values`),
    whose fix does not hold here: it reads an empty cell as missing, not as no activity,
    and names ``data.source.bad_values``, which this source has not."""
    more = f" (first {len(shown)})" if count > len(shown) else ""
    rows = sorted({row for row, _, _ in shown})
    line = dict(zip(rows, line_numbers(path, rows, header=False, sep="\t"), strict=True))
    cells = "; ".join(f"line {line[row]}, column {col!r}: {cell!r}" for row, col, cell in shown)
    return UserError(
        f"{what}: {count} channel value(s) are not finite numbers{more}: {cells}. A field "
        f"holds the activity as a number within float32's range (at most "
        f"{_FLOAT32_MAX:.4g}), or is empty for no activity: correct the "
        f"cell{'s' if count > 1 else ''}, or get the file again."
    )


def _refuse_repeated_rows(
    rows: pd.DataFrame, square: np.ndarray, ms: np.ndarray, keep: np.ndarray, path: Path, what: str
) -> None:
    """Refuse kept rows (``keep``) that repeat a square, interval start and country code:
    the country codes of a square and interval are summed, so a repeated row (a file
    concatenated with itself) would count its activity twice, without a word.

    Raises:
        UserError: naming the first repeated row's line, the line it repeats, its key and
            how many rows repeat one.
    """
    if keep.sum() < 2:
        return
    country = rows["country"].to_numpy()[keep]
    keys = _row_keys(square[keep].astype(np.int64), ms[keep], country)
    # a stable sort is timsort, linear on the original files, whose rows are in key order
    ordered = np.sort(keys, kind="stable")
    if not (ordered[1:] == ordered[:-1]).any():
        return
    repeated = pd.Series(keys).duplicated().to_numpy()
    again = int(np.flatnonzero(repeated)[0])
    first = int(np.flatnonzero(keys == keys[again])[0])
    index = np.flatnonzero(keep)
    lines = line_numbers(path, [int(index[first]), int(index[again])], header=False, sep="\t")
    ms_again = int(ms[index[again]])
    start = pd.Timestamp(ms_again, unit="ms").strftime("%Y-%m-%d %H:%M")
    code = "empty" if pd.isna(country[again]) else id_text(country[again])
    raise UserError(
        f"{what}: line {lines[1]} repeats line {lines[0]}: square {int(square[index[again]])}, "
        f"interval start {ms_again} ({start} UTC), country code {code} "
        f"({int(repeated.sum())} repeated row(s) in all); a day file has one row per square, "
        "interval and country code, and a repeated one would count its activity again. "
        "Remove the repeated rows, or get the file again."
    )


def _refuse_rows_in_two_files(files: list[Path], intervals: list[np.ndarray]) -> None:
    """Refuse a row of one file that another file repeats (square, interval start and
    country code): a day's file copied under another day's name would count its activity
    twice, without a word. Only files that share an interval (``intervals``: each file's
    distinct ones) are read again to compare their rows: the daily files share none.

    Raises:
        UserError: naming both files, the first repeated row's lines and key.
    """
    first_file: dict[int, int] = {}  # an interval (ns) -> the first file that holds it
    for k, seen in enumerate(intervals):
        shared: dict[int, list[int]] = {}  # an earlier file -> the intervals k shares with it
        for start in seen.astype(np.int64).tolist():
            j = first_file.setdefault(start, k)
            if j != k:
                shared.setdefault(j, []).append(start // 1_000_000)
        for j, starts in shared.items():
            _refuse_shared_rows(files[j], files[k], starts)


def _refuse_files_of_other_days(files: list[Path], intervals: list[np.ndarray]) -> None:
    """Refuse a day file none of whose rows is of the day its name says, in Milan's time
    (:data:`_FILES_ZONE`, the files' days): a file renamed to another day was read without
    a word, that day missing and ``first_day``/``last_day`` choosing it by the wrong day.
    ``intervals``: each file's distinct interval starts ``(I,)`` ``datetime64[ns]`` UTC.

    Raises:
        UserError: naming the file, the day its name says and the day(s) its rows hold.
    """
    for path, seen in zip(files, intervals, strict=True):
        named = _DAY_FILE.match(path.name).group(1)
        days = pd.DatetimeIndex(seen).tz_localize("UTC").tz_convert(_FILES_ZONE)
        held = sorted(set(days.strftime("%Y-%m-%d")))
        if not held or named in held:
            continue
        span = held[0] if len(held) == 1 else f"{held[0]} to {held[-1]}"
        first, last = (pd.Timestamp(t).strftime("%Y-%m-%d %H:%M") for t in (seen.min(), seen.max()))
        raise UserError(
            f"Telecom Italia file {path} is named for {named}, but its rows are of {span} "
            f"(interval starts {first} to {last} UTC; a file's day is Milan's): is it another "
            f"day's file renamed? Get the file of {named} again, or give this one its own "
            "day's name."
        )


def _refuse_shared_rows(first: Path, second: Path, starts: list[int]) -> None:
    """Refuse rows of ``second`` that repeat rows of ``first`` in the intervals ``starts``
    (ms) that both hold (see :func:`_refuse_rows_in_two_files`)."""
    keys = [_interval_rows(path, starts) for path in (first, second)]
    both = keys[0].merge(keys[1], on=["square", "time", "country"], suffixes=("_a", "_b"))
    if both.empty:
        return
    row = both.sort_values("row_b").iloc[0]
    (line_a,) = line_numbers(first, [int(row["row_a"])], header=False, sep="\t")
    (line_b,) = line_numbers(second, [int(row["row_b"])], header=False, sep="\t")
    start = pd.Timestamp(int(row["time"]), unit="ms").strftime("%Y-%m-%d %H:%M")
    code = "empty" if row["country"] < 0 else id_text(row["country"])
    raise UserError(
        f"Telecom Italia file {second} repeats rows of {first}: line {line_b} repeats line "
        f"{line_a} (square {int(row['square'])}, interval start {int(row['time'])}, {start} "
        f"UTC, country code {code}; {len(both)} repeated row(s) in all). Each row belongs in "
        "one day's file, and a repeated one would count its activity again: is one file a "
        "copy of another day's? Get the day's own file again, or remove the copy."
    )


def _interval_rows(path: Path, starts: list[int]) -> pd.DataFrame:
    """The rows of the day file ``path`` in the intervals ``starts`` (ms): their square,
    interval start, country code (-1: empty) and data row (``row``)."""
    what = f"Telecom Italia file {path}"
    rows = _read_rows(path, what)
    keys = pd.DataFrame(
        {
            "square": _whole_numbers(rows, "square", path, what),
            "time": _whole_numbers(rows, "time", path, what),
            "country": pd.to_numeric(rows["country"], errors="coerce").fillna(-1),
            "row": np.arange(len(rows)),
        }
    )
    return keys[keys["time"].isin(starts)]


def _row_keys(square: np.ndarray, ms: np.ndarray, country: np.ndarray) -> np.ndarray:
    """``(R,)`` int64 numbers, equal for rows of one square, interval start and country
    code, increasing with them (the order of the original files' rows): one number per
    row sorts faster than the three columns hash, on files of millions of rows."""
    codes = pd.factorize(country, sort=True, use_na_sentinel=False)[0]
    parts = (square - square.min(), (ms - ms.min()) // _INTERVAL_MS, codes)
    try:
        return np.ravel_multi_index(parts, [int(p.max()) + 1 for p in parts])
    except ValueError:  # more combinations than an int64 counts: number them by hashing
        frame = pd.DataFrame(dict(enumerate(parts)))
        return frame.groupby([0, 1, 2], sort=False).ngroup().to_numpy(dtype=np.int64)


def _refuse_sums_beyond_float32(
    values: np.ndarray, timestamps: np.ndarray, point_ids: list[str], channels: list[str], what: str
) -> None:
    """Refuse a step's sum ``values (T, N, C)`` beyond float32, each field within it: the
    stream's float32 would hold an inf, read as a missing step.

    Raises:
        UserError: naming the first such step, square and channel.
    """
    with np.errstate(invalid="ignore"):  # NaN: an incomplete step
        beyond = np.abs(values) > _FLOAT32_MAX
    if beyond.any():
        t, n, c = np.argwhere(beyond)[0]
        raise UserError(
            f"In {what}, the {channels[c]} of square {point_ids[n]} sums to {values[t, n, c]:g} "
            f"in the step of {pd.Timestamp(timestamps[t])} UTC ({int(beyond.sum())} such "
            f"sum(s)), beyond float32's {_FLOAT32_MAX:.4g}: its fields are absurd; correct "
            "them, or get the files again."
        )


def _plain(cell: Any) -> Any:
    """A numpy scalar as a Python one, so that messages show ``inf``, not ``np.float64(inf)``."""
    return cell.item() if isinstance(cell, np.generic) else cell


def _id_set(ids: set[int]) -> str:
    """Square ids in a few words: ``1-10000`` where they run without a gap, else the
    first ones and their count."""
    ordered = sorted(ids)
    if len(ordered) > 2 and ordered[-1] - ordered[0] + 1 == len(ordered):
        return f"{ordered[0]}-{ordered[-1]}"
    if len(ordered) <= 10:
        return ", ".join(map(str, ordered))
    return f"{', '.join(map(str, ordered[:10]))}, ... ({len(ordered)} squares up to {ordered[-1]})"


def _square_ids(squares: Sequence[Any]) -> list[int]:
    """The square ids of ``data.source.squares``, sorted: whole numbers, each named once."""
    if isinstance(squares, (str, int, float)):
        squares = [squares]
    squares = list(squares)
    ids = [whole_number(s) for s in squares]
    bad = [s for s, i in zip(squares, ids, strict=True) if i is None or i < 1]  # cells count from 1
    if bad:
        raise UserError(
            f"data.source.squares={squares}: {bad[0]!r} is not a square id; give whole "
            "numbers (1-10000)."
        )
    if not ids:
        raise UserError("data.source.squares=[]: give square ids, or null for every square.")
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise UserError(
            f"data.source.squares names {', '.join(map(str, twice))} twice: name each once."
        )
    return sorted(ids)


def _day(value: Any, option: str) -> str:
    try:
        return pd.Timestamp(str(value)).strftime("%Y-%m-%d")
    except ValueError:
        raise UserError(
            f"data.source.{option}={value!r} is not a date such as 2013-11-01."
        ) from None
