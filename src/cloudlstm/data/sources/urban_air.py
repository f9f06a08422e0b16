"""The MSR Urban Air data (Zheng et al., KDD 2015): 6 pollutants at 437 stations, hourly, 1 year.

The CloudLSTM paper uses its two city clusters: A = Beijing-Tianjin (274 stations) and
B = Shenzhen-Guangzhou (163). The raw archive holds ``airquality.csv`` (readings),
``station.csv`` (positions and district), ``district.csv`` (district -> city) and
``city.csv`` (city -> cluster); a station belongs to a cluster through its district's city.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from cloudlstm.data.cache import DROPPED_POINTS, CachedSource, warn_dropped_points
from cloudlstm.data.sources.download import check_download, check_url_read, data_folder
from cloudlstm.data.sources.tables import (
    build_stream,
    check_columns,
    file_row_names,
    numeric_column,
    pivot_long,
    read_table,
)
from cloudlstm.data.sources.times import parse_times
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.errors import MissingFileError, UserError

__all__ = ["CHANNELS", "CLUSTERS", "URBAN_AIR_URL", "UrbanAirSource"]

log = logging.getLogger(__name__)

# The archive linked from https://www.microsoft.com/en-us/research/project/urban-air/
URBAN_AIR_URL = "https://www.microsoft.com/en-us/research/uploads/prod/2016/02/Data-1.zip"
# Output channel name -> raw column of airquality.csv
CHANNELS = {
    "PM2.5": "PM25_Concentration",
    "PM10": "PM10_Concentration",
    "NO2": "NO2_Concentration",
    "CO": "CO_Concentration",
    "O3": "O3_Concentration",
    "SO2": "SO2_Concentration",
}
# The unit of each channel as the archive gives it (its readme): CO in mg/m³, the others
# in µg/m³; what the data summary records (CachedSource.units)
UNITS = {**dict.fromkeys(CHANNELS, "ug/m3"), "CO": "mg/m3"}
# cluster name -> cluster_id of city.csv (None = every station)
CLUSTERS: dict[str, int | None] = {"A": 1, "B": 2, "all": None}
RAW_FILES = ("airquality.csv", "station.csv", "district.csv", "city.csv")
# the stream's metadata key of the stations dropped for having no position
UNPLACED_KEY = "dropped_points_without_position"
# Bump when the preprocessing changes, so stale cache files are not reused.
# 2: gaps hold the last reading (1: linear interpolation); 3: a series never read takes
# the mean of the other points' readings at each step (2: of their filled values); 4: the
# stations without a position are recorded in the metadata; 5: a file whose header names a
# column twice is refused (4: the second read as another, pandas' PM25_Concentration.1);
# 6: a reading or position column of True/False, or of complex numbers, is refused (5: read
# as 1/0, or its real part), and so is a position written as text (5: a traceback); 7: a
# reading of text other than NULL ("True") is refused (6: read as missing)
_VERSION = 7
# a station's position, as station.csv must write it
POSITION_FIX = (
    "Write latitude and longitude as plain numbers (a station without a position may leave "
    "them empty: it is left out)."
)
# a reading, as airquality.csv must write it
READINGS_FIX = "Write each reading as a number (a missing one empty or NULL, as the archive does)."


def _csv(path: Path, columns: list[str]) -> pd.DataFrame:
    """Read ``columns`` of a raw file; ``*_id`` columns become nullable integers (or strings
    when not numeric), so ids compare equal across files."""
    # utf-8-sig drops a byte-order mark; only the Chinese name columns could fail to decode.
    df = read_table(path, "the Urban Air file", encoding="utf-8-sig", encoding_errors="replace")
    df.columns = [str(c).strip() for c in df.columns]
    check_columns(df, columns, f"Urban Air file {path}", "Is this the MSR Urban Air data?")
    df = df[columns]
    for col in (c for c in columns if c.endswith("_id")):
        ids = df[col]
        # an empty cell turns an integer column to float: Int64 keeps 1001 (not 1001.0)
        ids = ids.astype("Int64") if pd.api.types.is_numeric_dtype(ids) else ids.str.strip()
        df = df.assign(**{col: ids})
    return df


def _file_lines(df: pd.DataFrame, path: Path) -> Callable[[list[int]], list[str]]:
    """How messages name rows of ``df`` (by their positions in it), rows of the raw file
    ``path`` that its index numbers: by their lines in that file."""
    lines = file_row_names(path, None)
    return lambda kept: list(lines([int(df.index[k]) for k in kept]))


def _numbers(df: pd.DataFrame, cols: list[str], path: Path) -> pd.DataFrame:
    """``df``, rows of the raw file ``path`` (its index their positions there), with the
    position columns ``cols`` as float64: empty cells NaN, anything else that is no number
    refused in one line naming its line (:func:`~cloudlstm.data.sources.tables.
    numeric_column`)."""
    at, what = _file_lines(df, path), f"Urban Air file {path}"
    return df.assign(**{c: numeric_column(df, c, what, POSITION_FIX, at) for c in cols})


def _readings(readings: pd.DataFrame, path: Path) -> pd.DataFrame:
    """The channel columns of ``readings`` (rows of airquality.csv, its index their
    positions there) as float64 numbers: an empty cell or ``NULL`` (the archive's) is
    missing; any other text (``True``, ``n.d.``), a column of True/False, complex numbers
    or True/False among numbers is refused in one line naming its line
    (:func:`~cloudlstm.data.sources.tables.numeric_column`): read as missing, or as 1/0 by
    ``pd.to_numeric``, a reading the file does hold would be lost without a word."""
    at, what = _file_lines(readings, path), f"Urban Air file {path}"
    columns = {c: numeric_column(readings, c, what, READINGS_FIX, at) for c in CHANNELS.values()}
    return pd.DataFrame(columns, index=readings.index)


def _holds_raw(folder: Path) -> bool:
    """Whether ``folder`` holds the four raw files."""
    return all((folder / f).is_file() for f in RAW_FILES)


class UrbanAirSource(CachedSource):
    """Loader of the MSR Urban Air data for one city cluster.

    Args:
        root: folder holding the four raw CSV files (directly or in one subfolder, as the
            official archive unpacks into ``Data/``).
        cluster: ``"A"`` (Beijing-Tianjin, cluster_id 1), ``"B"`` (Shenzhen-Guangzhou,
            cluster_id 2) or ``"all"``.
        download: fetch and unpack ``url`` into ``root`` when the files are missing.
        url, sha256: the archive and its optional SHA-256 checksum (another url without
            ``download`` is refused: :func:`~cloudlstm.data.sources.download.check_url_read`).
        cache_dir: folder of the stream cache (default ``<root>/cache``).

    Readings are placed on an hourly grid (times floored to the hour, repeated readings
    averaged), gaps are filled from the past (each series holds its last
    reading, a leading gap takes the first one; ``mask`` False there), stations without any
    reading are dropped. Coordinates are ``(longitude, latitude)``; channels
    ``PM2.5, PM10, NO2, CO, O3, SO2``. The stream is cached, keyed by the cluster and the
    raw files' signatures.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        cluster: str = "A",
        download: bool = False,
        url: str = URBAN_AIR_URL,
        sha256: str | None = None,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        names = {k.lower(): k for k in CLUSTERS}
        if str(cluster).lower() not in names:
            raise UserError(
                f"Unknown Urban Air cluster {cluster!r}; valid: {list(CLUSTERS)} (A = "
                "Beijing-Tianjin, B = Shenzhen-Guangzhou). Set data.source.cluster=A, B or all."
            )
        self.cluster = names[str(cluster).lower()]
        self.root = Path(root).expanduser()
        self.download = check_download(download)
        check_url_read(str(url), URBAN_AIR_URL, self.download)
        self.url = str(url)
        self.sha256 = sha256
        self.cache_dir = Path(cache_dir) if cache_dir is not None else self.root / "cache"

    def __repr__(self) -> str:
        return f"UrbanAirSource(root={str(self.root)!r}, cluster={self.cluster!r})"

    def raw_dir(self) -> Path:
        """The folder with the raw files (downloading them first if allowed and needed)."""
        found = data_folder(self.root, _holds_raw, self.download, self.url, self.sha256)
        if found is None:
            raise MissingFileError(
                f"Urban Air files {list(RAW_FILES)} not found in {self.root.resolve()} (nor in "
                f"a subfolder). Get the archive from {self.url} (project page: "
                "https://www.microsoft.com/en-us/research/project/urban-air/) and unpack it "
                "there, or point to it with data.source.root=/path/to/folder, or let it be "
                "fetched with data.source.download=true."
            )
        return found

    @property
    def cache_prefix(self) -> str:
        return f"urban_air_{self.cluster}"

    @property
    def stream_name(self) -> str:
        """The stream's name, which its warnings and summaries give."""
        return f"urban_air_{self.cluster}"

    def config(self) -> dict:
        """What determines the stream besides the raw files: the cluster."""
        return {"version": _VERSION, "cluster": self.cluster}

    def physical_ranges(self) -> dict[str, tuple[float | None, float | None]]:
        """Concentrations cannot be negative: a reading below 0 is refused at load
        (:mod:`cloudlstm.data.pipeline.absurd_values`)."""
        return dict.fromkeys(CHANNELS, (0.0, None))

    def units(self) -> dict[str, str]:
        """Each channel's unit (:data:`UNITS`)."""
        return dict(UNITS)

    def input_files(self) -> list[Path]:
        """The four raw files (downloaded first when allowed and missing)."""
        folder = self.raw_dir()
        return [folder / f for f in RAW_FILES]

    def generate(self, cache_path: Path | None = None) -> PointCloudStream:
        """The cluster's stream from the raw files, cached at ``cache_path``."""
        return self.cached(self._build(self.raw_dir()), cache_path)

    def _stations(self, folder: Path) -> pd.DataFrame:
        """Stations of the chosen cluster: station_id, longitude, latitude."""
        stations = _csv(
            folder / "station.csv", ["station_id", "latitude", "longitude", "district_id"]
        )
        if self.cluster == "all":
            return stations
        districts = _csv(folder / "district.csv", ["district_id", "city_id"])
        cities = _csv(folder / "city.csv", ["city_id", "cluster_id"])
        city = stations["district_id"].map(districts.set_index("district_id")["city_id"])
        cluster_id = city.map(cities.set_index("city_id")["cluster_id"])
        return stations[cluster_id == CLUSTERS[self.cluster]]

    def _build(self, folder: Path) -> PointCloudStream:
        stations = self._stations(folder).drop_duplicates("station_id")
        stations = _numbers(stations, ["latitude", "longitude"], folder / "station.csv")
        no_pos = stations[stations[["latitude", "longitude"]].isna().any(axis=1)]
        unplaced = [str(s) for s in no_pos["station_id"]]
        warn_dropped_points(self.stream_name, unplaced, DROPPED_POINTS[UNPLACED_KEY])
        stations = stations.drop(no_pos.index)
        if stations.empty:
            raise UserError(f"Urban Air: no station of cluster {self.cluster} in {folder}.")
        path = folder / "airquality.csv"
        readings = _csv(path, ["station_id", "time", *CHANNELS.values()])
        readings = readings[readings["station_id"].isin(stations["station_id"])]
        reporting = set(readings["station_id"].unique())
        absent = [str(s) for s in stations["station_id"] if s not in reporting]
        if absent:
            log.info("Urban Air: %d station(s) have no reading at all: %s", len(absent), absent)
        if readings.empty:
            raise UserError(f"Urban Air: {path} has no reading of cluster {self.cluster}.")
        times = parse_times(
            readings["time"],
            f"column 'time' of {path}",
            options=None,
            row_names=_file_lines(readings, path),  # the cluster's rows, by their file lines
        )
        readings = readings.assign(time=times.astype("datetime64[h]").astype("datetime64[ns]"))
        grid = pivot_long(readings, "time", "station_id", "1h", duplicates="mean", what=str(path))
        values = _readings(readings, path)
        ids = grid.point_ids + absent
        coords = stations.set_index(stations["station_id"].astype(str)).loc[ids]
        t = len(grid.timestamps)
        empty = np.full((t, len(absent), len(CHANNELS)), np.nan, dtype=np.float32)
        stream = build_stream(
            grid.timestamps,
            ids,
            np.concatenate([grid.scatter(values.to_numpy(), dtype=np.float32), empty], axis=1),
            list(CHANNELS),
            coords=coords[["longitude", "latitude"]].to_numpy(dtype=np.float64),
            step=grid.step,
            name=self.stream_name,
            source=str(folder),
        )
        stream.metadata[UNPLACED_KEY] = unplaced  # kept in the cache and the data summary
        return stream
