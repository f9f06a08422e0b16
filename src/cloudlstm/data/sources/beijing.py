"""UCI Beijing Multi-Site Air-Quality data: 12 stations, hourly, 2013-03-01 to 2017-02-28.

One file per station, ``PRSA_Data_<Station>_20130301-20170228.csv`` (or ``.csv.gz``), with
columns ``year, month, day, hour``, the six pollutants ``PM2.5, PM10, SO2, NO2, CO, O3``,
weather columns and ``station``; missing readings are ``NA``. The UCI archive has no station
positions: they come from ``stations.csv`` (``station, latitude, longitude``) in the same
folder when present, else from :data:`STATION_POSITIONS` (the same national stations'
positions in the MSR Urban Air station list).

Units: the files give every pollutant in µg/m³, so CO (hundreds to thousands) is about ten
times the others and dominates their joint MAE (77 % of the six-pollutant MAE); the Urban Air
data of the paper gives CO in mg/m³. ``co_units="mg/m3"`` (the default) divides CO by 1000
at load; ``"ug/m3"`` keeps the files' units. The stream cache is keyed by the unit. A run
saved before the option existed was trained in µg/m³: its config lacks ``co_units``, and
``eval.py`` keeps its units (:func:`cloudlstm.assembly.build.instantiate_datamodule`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cloudlstm.data.cache import CachedSource
from cloudlstm.data.covariates import COVARIATES_KEY
from cloudlstm.data.sources.bad_values import RowNames
from cloudlstm.data.sources.degrees import check_degrees
from cloudlstm.data.sources.download import check_download, check_url_read, data_folder
from cloudlstm.data.sources.tables import (
    build_stream,
    check_columns,
    file_row_names,
    numeric_column,
    pivot_long,
    read_table,
)
from cloudlstm.data.sources.times import TIMES_ZONED_KEY
from cloudlstm.data.sources.wide_table import read_positions
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.errors import MissingFileError, UserError

__all__ = [
    "BEIJING_ARCHIVE",
    "BEIJING_NAME",
    "BEIJING_URL",
    "BeijingSource",
    "STATION_POSITIONS",
]

log = logging.getLogger(__name__)

BEIJING_URL = "https://archive.ics.uci.edu/dataset/501/beijing+multi+site+air+quality+data"
# The archive behind that page: a zip holding a zip of the folder of the 12 station files
BEIJING_ARCHIVE = (
    "https://archive.ics.uci.edu/static/public/501/beijing+multi+site+air+quality+data.zip"
)
BEIJING_NAME = "beijing_multisite"  # the stream's name, in its data summary
# Same channel names and order as the Urban Air loader.
CHANNELS = ("PM2.5", "PM10", "NO2", "CO", "O3", "SO2")
# station -> (latitude, longitude), WGS84
STATION_POSITIONS: dict[str, tuple[float, float]] = {
    "Aotizhongxin": (39.982053, 116.3974),
    "Changping": (40.216999, 116.23),
    "Dingling": (40.292, 116.22),
    "Dongsi": (39.929287, 116.416883),
    "Guanyuan": (39.929302, 116.351029),
    "Gucheng": (39.914409, 116.184239),
    "Huairou": (40.328, 116.628),
    "Nongzhanguan": (39.937119, 116.460742),
    "Shunyi": (40.127, 116.655),
    "Tiantan": (39.886491, 116.407355),
    "Wanliu": (39.987313, 116.287451),
    "Wanshouxigong": (39.878193, 116.351974),
}
# Weather columns a run may read as measured covariates (data.source.covariates): each
# named column is one input channel; "wind" is two, the wind vector (wind_u eastward,
# wind_v northward, m/s) from the speed WSPM and the direction wd it blows from.
COVARIATES = ("TEMP", "PRES", "DEWP", "RAIN", "WSPM", "wind")
# The channels' physical ranges (None: an open end), checked at every load
# (cloudlstm.data.pipeline.absurd_values): concentrations, rain and wind speed cannot be
# negative; the air pressure (hPa) and the temperature and dew point (deg C) have the
# bounds of weather near the ground: the files hold 982-1043 hPa, -20..42 and -43..29 deg C.
# The wind vector (wind_u, wind_v) has none of its own.
PHYSICAL_RANGES: dict[str, tuple[float | None, float | None]] = {
    **dict.fromkeys(CHANNELS, (0.0, None)),
    "TEMP": (-60.0, 60.0),
    "PRES": (850.0, 1100.0),
    "DEWP": (-60.0, 60.0),
    "RAIN": (0.0, None),
    "WSPM": (0.0, None),
}
# The units of the channels: the files' (the pollutants in µg/m³, CO as co_units says);
# wind_u and wind_v are WSPM split by the direction
UNITS = {
    **dict.fromkeys(CHANNELS, "ug/m3"),
    "TEMP": "degC",
    "PRES": "hPa",
    "DEWP": "degC",
    "RAIN": "mm",
    "WSPM": "m/s",
    "wind_u": "m/s",
    "wind_v": "m/s",
}
# wd: the 16 compass points, clockwise from north
_COMPASS = [
    "N",
    "NNE",
    "NE",
    "ENE",
    "E",
    "ESE",
    "SE",
    "SSE",
    "S",
    "SSW",
    "SW",
    "WSW",
    "W",
    "WNW",
    "NW",
    "NNW",
]
_TIME = ["year", "month", "day", "hour"]
# 2: gaps hold the last reading (1: linear interpolation); 3: a series never read takes
# the mean of the other points' readings at each step (2: of their filled values); 4: a
# file whose header names a column twice (3: the second read as another, pandas' PM2.5.1),
# or a reading column of True/False (3: read as 1/0), complex numbers or True/False among
# numbers, is refused (read_table, numeric_column)
_VERSION = 4
# data.source.co_units -> the divisor of the files' CO (µg/m³)
CO_UNITS: dict[str, float] = {"mg/m3": 1000.0, "ug/m3": 1.0}


def _station_files(folder: Path) -> dict[str, Path]:
    """Station name -> its ``PRSA_Data_<Station>_*.csv[.gz]`` file in ``folder``."""
    return {
        path.name.split("_")[2]: path
        for path in sorted(folder.glob("PRSA_Data_*.csv*"))
        if path.name.endswith((".csv", ".csv.gz"))
    }


class BeijingSource(CachedSource):
    """Loader of the UCI Beijing Multi-Site Air-Quality data.

    Args:
        root: folder with the ``PRSA_Data_*.csv[.gz]`` files, directly or in one subfolder
            as UCI's archive unpacks them (and optionally ``stations.csv``).
        stations: names of the stations to keep (default: every file in ``root``).
        cache_dir: folder of the stream cache (default ``<root>/cache``).
        co_units: ``"mg/m3"`` (CO divided by 1000) or ``"ug/m3"`` (the files' units): see
            the module docstring.
        covariates: weather columns read as measured covariates (input-only channels after
            the pollutants), any of :data:`COVARIATES`; gaps are filled like the
            pollutants'.
        download: fetch and unpack ``url`` into ``root`` when the files are missing.
        url, sha256: the archive (UCI's, :data:`BEIJING_ARCHIVE`) and its optional SHA-256.

    Raises:
        UserError: an unknown ``co_units`` or covariate, a ``url`` other than UCI's without
            ``download`` (:func:`~cloudlstm.data.sources.download.check_url_read`).

    Same preprocessing as :class:`~cloudlstm.data.sources.urban_air.UrbanAirSource`: an hourly grid
    from ``year/month/day/hour``, gaps filled from the past (each series holds its last
    reading, a leading gap takes the first one) with ``mask`` False, channels
    ``PM2.5, PM10, NO2, CO, O3, SO2``, coordinates ``(longitude, latitude)``. The stream is
    cached, keyed by the stations, the unit and the files' signatures: the cold load takes
    ~2 s, a cached one ~0.03 s.
    """

    cache_prefix = "beijing"

    def __init__(
        self,
        root: str | os.PathLike,
        stations: Sequence[str] | None = None,
        cache_dir: str | os.PathLike | None = None,
        co_units: str = "mg/m3",
        covariates: Sequence[str] = (),
        download: bool = False,
        url: str = BEIJING_ARCHIVE,
        sha256: str | None = None,
    ) -> None:
        covariates = [covariates] if isinstance(covariates, str) else list(covariates or [])
        unknown = [c for c in covariates if c not in COVARIATES]
        if unknown or len(set(covariates)) != len(covariates):
            raise UserError(
                f"data.source.covariates={covariates}: each must be one of "
                f"{list(COVARIATES)}, at most once."
            )
        self.covariates = [str(c) for c in covariates]
        if co_units not in CO_UNITS:
            raise UserError(
                f"data.source.co_units={co_units!r} is not one of {', '.join(CO_UNITS)} (mg/m3 "
                "divides the files' CO, in ug/m3, by 1000)."
            )
        self.co_units = co_units
        self.root = Path(root).expanduser()
        if isinstance(stations, str):
            stations = [stations]
        self.stations = None if stations is None else _checked_stations(stations)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else self.root / "cache"
        self.download = check_download(download)
        check_url_read(str(url), BEIJING_ARCHIVE, self.download)
        self.url = str(url)
        self.sha256 = sha256

    def __repr__(self) -> str:
        return (
            f"BeijingSource(root={str(self.root)!r}, stations={self.stations!r}, "
            f"co_units={self.co_units!r}, covariates={self.covariates!r})"
        )

    def files(self) -> dict[str, Path]:
        """Station name -> its data file, for the chosen stations (downloading them first
        where allowed and needed)."""
        folder = data_folder(
            self.root, lambda f: bool(_station_files(f)), self.download, self.url, self.sha256
        )
        found = {} if folder is None else _station_files(folder)
        if not found:
            raise MissingFileError(
                f"No Beijing Multi-Site files (PRSA_Data_<Station>_*.csv or .csv.gz) in "
                f"{self.root.resolve()} (nor in a subfolder). Download the data from "
                f"{BEIJING_URL}, unpack the CSVs into one folder and set "
                "data.source.root=/path/to/folder (or the environment variable "
                "CLOUDLSTM_BEIJING_ROOT), or let them be fetched with data.source.download=true."
            )
        if self.stations is None:
            return found
        unknown = [s for s in self.stations if s not in found]
        if unknown:
            raise UserError(
                f"Unknown Beijing station(s) {unknown}; valid: {sorted(found)}. "
                "Fix data.source.stations."
            )
        return {s: found[s] for s in self.stations}

    def config(self) -> dict:
        """What determines the stream besides the files: the stations and CO's unit (each
        unit has its own cache, so switching it never reads the other's)."""
        config = {"version": _VERSION, "stations": self.stations, "co_units": self.co_units}
        if self.covariates:  # without any, the key (and the cache) of before they existed
            config["covariates"] = self.covariates
        return config

    @property
    def covariate_channels(self) -> list[str]:
        """The covariates' channel names (``wind`` is ``wind_u, wind_v``)."""
        return [n for c in self.covariates for n in (["wind_u", "wind_v"] if c == "wind" else [c])]

    def physical_ranges(self) -> dict[str, tuple[float | None, float | None]]:
        """The valid range of each channel read (:data:`PHYSICAL_RANGES`)."""
        read = [*CHANNELS, *self.covariate_channels]
        return {name: r for name, r in PHYSICAL_RANGES.items() if name in read}

    def units(self) -> dict[str, str]:
        """Each channel read's unit (:data:`UNITS`; CO's is ``co_units``)."""
        read = [*CHANNELS, *self.covariate_channels]
        return {name: self.co_units if name == "CO" else UNITS[name] for name in read}

    def input_files(self) -> list[Path]:
        """The chosen stations' files, and ``stations.csv`` when there is one."""
        paths = list(self.files().values())
        positions = self.root / "stations.csv"
        return [*paths, positions] if positions.is_file() else paths

    def generate(self, cache_path: Path | None = None) -> PointCloudStream:
        """Read every chosen station's file into one stream, cached at ``cache_path``."""
        return self.cached(self._build(self.files()), cache_path)

    def _positions(self, names: list[str]) -> np.ndarray:
        """``(N, 2)`` (longitude, latitude) of the named stations."""
        table = dict(STATION_POSITIONS)
        path = self.root / "stations.csv"
        if path.is_file():
            # as every positions file is read: a text, empty or repeated entry is one line
            ids, coords = read_positions(path, ["station", "latitude", "longitude"])
            table.update({i: (lat, lon) for i, (lat, lon) in zip(ids, coords, strict=True)})
        missing = [n for n in names if n not in table]
        if missing:
            raise UserError(
                f"No position for Beijing station(s) {missing}: add rows "
                f"'station,latitude,longitude' for them to {path}."
            )
        coords = np.array([[table[n][1], table[n][0]] for n in names], dtype=np.float64)
        check_degrees(
            coords, ["longitude", "latitude"], lambda k: f"station {names[k]!r}", str(path)
        )
        return coords

    def _read(self, station: str, path: Path) -> pd.DataFrame:
        df = read_table(path, "the Beijing Multi-Site file")
        check_columns(df, [*_TIME, *CHANNELS], str(path), "Is this a PRSA_Data_*.csv from UCI?")
        what = f"file {path}"
        lines = file_row_names(path, None)  # a row by its line in the file
        time = pd.to_datetime(df[_TIME], errors="coerce")
        if time.isna().any():
            row = int(np.flatnonzero(time.isna().to_numpy())[0])
            bad = df.loc[row, _TIME].tolist()
            raise UserError(f"{what}: invalid year/month/day/hour {bad} at {lines([row])[0]}.")
        cols = {c: numeric_column(df, c, what, row_names=lines) for c in CHANNELS}
        cols["CO"] = cols["CO"] / CO_UNITS[self.co_units]
        for name in self.covariates:
            cols.update(
                _wind(df, what, lines)
                if name == "wind"
                else {name: numeric_column(df, name, what, row_names=lines)}
            )
        return pd.DataFrame({"time": time, "station": station, **cols})

    def _build(self, files: dict[str, Path]) -> PointCloudStream:
        rows = pd.concat([self._read(s, p) for s, p in files.items()], ignore_index=True)
        grid = pivot_long(rows, "time", "station", "1h", duplicates="mean", what=str(self.root))
        channels = [*CHANNELS, *self.covariate_channels]
        stream = build_stream(
            grid.timestamps,
            grid.point_ids,
            grid.scatter(rows[channels].to_numpy(), dtype=np.float32),
            channels,
            coords=self._positions(grid.point_ids),
            step=grid.step,
            name=BEIJING_NAME,
            source=str(self.root),
        )
        stream.metadata["co_units"] = self.co_units  # in the data summary of metrics.json
        # the files' year, month, day and hour: Beijing's clock, without an offset, which a
        # forecast's history written with one is warned of (forecast_input.warn_other_clock)
        stream.metadata[TIMES_ZONED_KEY] = False
        if self.covariates:
            stream.metadata[COVARIATES_KEY] = self.covariate_channels
        return stream


def _wind(df: pd.DataFrame, what: str, lines: RowNames) -> dict[str, pd.Series]:
    """The wind vector (m/s) the speed ``WSPM`` and the direction ``wd`` (where it blows
    from, a compass point) describe: ``wind_u`` towards the east, ``wind_v`` the north.

    Raises:
        UserError: a direction that is not one of the 16 compass points, or a speed that is
            no number, its row named as ``lines`` names it (its line in the file).
    """
    check_columns(df, ["wd", "WSPM"], what, "")
    heading = df["wd"].map({p: i * 22.5 for i, p in enumerate(_COMPASS)})
    bad = heading.isna() & df["wd"].notna()
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise UserError(
            f"{what}: wind direction {df['wd'].iloc[row]!r} at {lines([row])[0]} is not one of "
            f"the compass points {' '.join(_COMPASS)}."
        )
    speed = numeric_column(df, "WSPM", what, row_names=lines)
    towards = np.deg2rad(heading.to_numpy(dtype=float) + 180.0)
    return {"wind_u": speed * np.sin(towards), "wind_v": speed * np.cos(towards)}


def _checked_stations(stations: Sequence[Any]) -> list[str]:
    """``data.source.stations`` as names, refused when empty or when one is named twice
    (its file would be read twice, a point of its own each time)."""
    names = [str(s) for s in stations]
    if not names:
        raise UserError(
            "data.source.stations=[] keeps no station: name at least one, or give null for "
            "every station in the folder."
        )
    twice = sorted({s for s in names if names.count(s) > 1})
    if twice:
        raise UserError(
            f"data.source.stations names {', '.join(twice)} more than once: name each station once."
        )
    return names
