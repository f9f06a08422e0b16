"""Tests of the Urban Air loader (on fixture files in the raw format) and of the downloader."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import logging
import tarfile
import threading
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import cache_of_version, compose_train, rebuilding_fails
from hydra.utils import instantiate

from cloudlstm.data.cache import DROPPED_POINTS
from cloudlstm.data.pipeline.datamodule import PointCloudDataModule
from cloudlstm.data.pipeline.held_out import DROPPED_WHY
from cloudlstm.data.sources import urban_air
from cloudlstm.data.sources.download import download_and_extract
from cloudlstm.data.sources.urban_air import UrbanAirSource
from cloudlstm.errors import DownloadError, UserError

HOURS = 100
RAW = ["PM25_Concentration", "PM10_Concentration", "NO2_Concentration"]
RAW += ["CO_Concentration", "O3_Concentration", "SO2_Concentration"]
# station -> (district, latitude, longitude); cluster 1 = cities 1, 2; cluster 2 = city 3
STATIONS = {
    1001: (101, 39.9, 116.4),
    1002: (101, 40.0, 116.3),
    1003: (102, 39.1, 117.2),
    1004: (102, 39.2, 117.1),  # listed but never reports
    2001: (201, 22.5, 114.0),
    2002: (201, 22.6, 114.1),
}


def level(station: int, hour: np.ndarray, channel: int) -> np.ndarray:
    """Every value differs, so a filled one shows which reading it was taken from."""
    return (station % 100) * 10.0 + channel + 0.25 * hour


def write_urban_air(folder: Path) -> Path:
    """The four raw files, in the archive's format, with gaps and one duplicate reading."""
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(
        {
            "city_id": [1, 2, 3],
            "name_chinese": ["北京", "天津", "深圳"],
            "name_english": ["BeiJing", "TianJin", "ShenZhen"],
            "cluster_id": [1, 1, 2],
        }
    ).to_csv(folder / "city.csv", index=False)
    pd.DataFrame(
        {
            "district_id": [101, 102, 201],
            "name_chinese": ["东城", "和平", "福田"],
            "name_english": ["DongCheng", "HePing", "FuTian"],
            "city_id": [1, 2, 3],
        }
    ).to_csv(folder / "district.csv", index=False)
    pd.DataFrame(
        {
            "station_id": list(STATIONS),
            "name_chinese": [f"站{s}" for s in STATIONS],
            "name_english": [f"Station {s}" for s in STATIONS],
            "latitude": [v[1] for v in STATIONS.values()],
            "longitude": [v[2] for v in STATIONS.values()],
            "district_id": [v[0] for v in STATIONS.values()],
        }
    ).to_csv(folder / "station.csv", index=False)
    rows = []
    for s in STATIONS:
        if s == 1004:
            continue
        for h in range(HOURS):
            if s == 1002 and h in (10, 11, 12):  # an outage: no rows
                continue
            stamp = pd.Timestamp("2014-05-01") + pd.Timedelta(hours=h)
            rows.append(
                [s, stamp.strftime("%Y-%m-%d %H:%M:%S")]
                + [level(s, np.array(h), c).item() for c in range(6)]
            )
    df = pd.DataFrame(rows, columns=["station_id", "time", *RAW]).astype({RAW[2]: object})
    df.loc[(df["station_id"] == 1001) & (df["time"] == "2014-05-01 05:00:00"), RAW[2]] = "NULL"
    df = pd.concat([df, df.iloc[[3]]], ignore_index=True)  # a repeated reading
    df.to_csv(folder / "airquality.csv", index=False)
    return folder


def refusal_beside_cache(source: UrbanAirSource, stream, version: int) -> str:
    """The message of ``source``'s refusal of its files, with the cache of ``stream`` that
    the reading of cache ``version`` left where it looks: it must not stand in for it."""
    cache_of_version(source, urban_air, version, stream)
    with pytest.raises(UserError) as err:
        source.load()
    return str(err.value)


@pytest.fixture
def raw(tmp_path) -> Path:
    return write_urban_air(tmp_path / "urban_air")


def test_cluster_a_is_pivoted_filled_and_cached(raw, tmp_path, caplog):
    source = UrbanAirSource(raw, cluster="A", cache_dir=tmp_path / "cache")
    with caplog.at_level(logging.INFO):
        stream = source.load()
    assert not source.last_load_from_cache
    assert "1004" in caplog.text and "dropping 1 point" in caplog.text
    assert stream.values.shape == (HOURS, 3, 6)
    assert stream.point_ids == ["1001", "1002", "1003"]
    assert stream.channel_names == ["PM2.5", "PM10", "NO2", "CO", "O3", "SO2"]
    np.testing.assert_array_equal(stream.coords, [[116.4, 39.9], [116.3, 40.0], [117.2, 39.1]])
    assert stream.metadata["step_minutes"] == 60 and stream.metadata["dropped_points"] == ["1004"]
    assert stream.name == "urban_air_A"
    # the archive's units (CO in mg/m3), which a run's data summary records
    assert stream.metadata["units"] == {
        **dict.fromkeys(stream.channel_names, "ug/m3"),
        "CO": "mg/m3",
    }
    hours = np.arange(HOURS)
    for i, s in enumerate([1001, 1002, 1003]):
        for c in range(6):
            want = level(s, hours, c)
            if (i, c) == (0, 2):
                want[5] = want[4]  # a gap holds the reading before it
            if i == 1:
                want[10:13] = want[9]
            np.testing.assert_allclose(stream.values[:, i, c], want, rtol=1e-6)
    missing = {tuple(i) for i in np.argwhere(~stream.mask)}
    assert missing == {(5, 0, 2)} | {(h, 1, c) for h in (10, 11, 12) for c in range(6)}

    with rebuilding_fails(UrbanAirSource, "_build"):
        again = source.load()
    assert source.last_load_from_cache
    np.testing.assert_array_equal(again.values, stream.values)
    np.testing.assert_array_equal(again.timestamps, stream.timestamps)
    assert again.metadata == stream.metadata and again.point_ids == stream.point_ids

    late = pd.Timestamp("2014-05-01") + pd.Timedelta(hours=HOURS)
    with (raw / "airquality.csv").open("a") as fh:  # a changed raw file invalidates the cache
        fh.write(f"1001,{late},1,1,1,1,1,1\n")
    assert source.load().num_steps == HOURS + 1 and not source.last_load_from_cache


def test_a_station_without_a_position_is_dropped_named_and_recorded(raw, tmp_path, caplog):
    """It was dropped with a count alone, recorded nowhere, and unsaid from the cache on:
    as the stations without readings, its id is warned of and kept in the metadata (which
    the data summary holds), and every load from the cache warns again."""
    stations = pd.read_csv(raw / "station.csv")
    stations.loc[stations["station_id"] == 1003, "latitude"] = np.nan
    stations.to_csv(raw / "station.csv", index=False)
    source = UrbanAirSource(raw, cluster="A", cache_dir=tmp_path / "cache")
    for cached in (False, True):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            stream = source.load()
        assert source.last_load_from_cache is cached
        assert stream.point_ids == ["1001", "1002"]
        assert stream.metadata["dropped_points_without_position"] == ["1003"]
        assert stream.metadata["dropped_points"] == ["1004"]
        assert [r.getMessage() for r in caplog.records] == [
            "urban_air_A: dropping 1 point(s) without a position: 1003",
            "urban_air_A: dropping 1 point(s) with no data at all: 1004",
        ]


def test_holding_out_a_station_without_a_position_names_why_it_is_not_there(raw, tmp_path):
    """It was refused as "not points of" the data, which the station list shows it is."""
    stations = pd.read_csv(raw / "station.csv")
    stations.loc[stations["station_id"] == 1003, "latitude"] = np.nan
    stations.to_csv(raw / "station.csv", index=False)
    source = UrbanAirSource(raw, cluster="A", cache_dir=tmp_path / "cache")
    held = PointCloudDataModule(source, input_steps=3, output_steps=2, holdout_points=["1003"])
    with pytest.raises(UserError) as err:
        held.setup()
    assert str(err.value) == (
        "data.holdout_points names 1003, point(s) of stream 'urban_air_A' that the loading "
        "dropped for having no position (as its warning said): it has no place in the "
        "cloud; name points with positions, or give theirs in the file."
    )
    assert set(DROPPED_WHY) == set(DROPPED_POINTS)  # every drop a stream records is named


def test_a_time_that_cannot_be_read_is_named_by_its_line(raw, tmp_path):
    """Named by its line of airquality.csv, not by its position among the cluster's rows
    ("data row 3": the cluster's rows start at line 299)."""
    path = raw / "airquality.csv"
    df = pd.read_csv(path).astype({"time": object})
    first_b = int(np.flatnonzero(df["station_id"] == 2001)[0])
    df.loc[first_b + 3, "time"] = "2014-05-01 25:00:00"
    df.to_csv(path, index=False)
    line = first_b + 3 + 2  # from 1, after the header
    assert path.read_text().splitlines()[line - 1].startswith("2001,2014-05-01 25:00:00,")
    with pytest.raises(
        UserError,
        match=rf"^Cannot parse the timestamps in column 'time' of "
        rf".*airquality\.csv: line {line}, '2014-05-01 25:00:00', ",
    ):
        UrbanAirSource(raw, cluster="B", cache_dir=tmp_path).load()


def test_a_cache_of_before_a_header_naming_a_column_twice_was_refused_is_not_reused(raw, tmp_path):
    """A column named twice in airquality.csv's header is refused now (read_table): pandas
    read the second as another (PM25_Concentration.1), which the loader left unread. A
    cache that reading left (cache version 4) must not stand in for the refusal."""
    stream = UrbanAirSource(raw, cluster="A", cache_dir=tmp_path / "first").load()
    path = raw / "airquality.csv"
    df = pd.read_csv(path)
    df.assign(again=df[RAW[0]]).to_csv(path, index=False)
    path.write_text(path.read_text().replace(",again\n", f",{RAW[0]}\n", 1))
    source = UrbanAirSource(raw, cluster="A", cache_dir=tmp_path / "cache")
    cache_of_version(source, urban_air, 4, stream)
    with pytest.raises(UserError, match=rf"names the column\(s\) \['{RAW[0]}'\] more than once"):
        source.load()


@pytest.mark.parametrize("change", ["reading", "position", "position-text"])
def test_true_false_in_a_reading_or_position_column_is_refused_not_read_as_1_0(
    raw, tmp_path, change
):
    """A reading column of True/False (the file's ``True``, pandas' booleans) was read as
    1/0 by ``pd.to_numeric``, and a latitude column so as positions 1 and 0; a latitude
    written as text was a traceback. A cache that the reading of before left (cache
    version 5) must not stand in for the refusal."""
    stream = UrbanAirSource(raw, cluster="A", cache_dir=tmp_path / "first").load()
    if change == "reading":
        path = raw / "airquality.csv"
        df = pd.read_csv(path)
        df.assign(**{RAW[5]: df.index % 2 == 0}).to_csv(path, index=False)
        said = (
            f"Column {RAW[5]!r} of Urban Air file {path} must be numeric, but holds "
            "True/False. Write each reading as a number (a missing one empty or NULL, as the "
            "archive does)."
        )
    else:
        path = raw / "station.csv"
        df = pd.read_csv(path)
        if change == "position":
            df["latitude"] = df.index % 2 == 0
            held = "True/False"
        else:
            df["latitude"] = df["latitude"].astype(object)
            df.loc[1, "latitude"] = "40.0 N"
            held = "e.g. '40.0 N' (1 such entries, first at line 3)"
        df.to_csv(path, index=False)
        said = (
            f"Column 'latitude' of Urban Air file {path} must be numeric, but holds {held}. "
            "Write latitude and longitude as plain numbers (a station without a position may "
            "leave them empty: it is left out)."
        )
    source = UrbanAirSource(raw, cluster="A", cache_dir=tmp_path / "cache")
    assert refusal_beside_cache(source, stream, 5) == said


@pytest.mark.parametrize("text", ["True", "False", "n.d."])
def test_text_in_a_reading_is_refused_by_its_line_not_read_as_missing(raw, tmp_path, text):
    """A reading written as text other than NULL (``True`` among numbers and NULLs, which
    a CSV column of both reads as text, or any word) counted as missing without a word; a
    cache that the reading of before left (cache version 6) must not stand in for the
    refusal. NULL and empty cells stay missing (the fixture holds a NULL)."""
    stream = UrbanAirSource(raw, cluster="A", cache_dir=tmp_path / "first").load()
    path = raw / "airquality.csv"
    said = (
        f"Column {RAW[2]!r} of Urban Air file {path} must be numeric, but holds e.g. {text!r} "
        "(1 such entries, first at line 9). Write each reading as a number (a missing one "
        "empty or NULL, as the archive does)."
    )
    df = pd.read_csv(path, dtype={RAW[2]: object})
    df.loc[7, RAW[2]] = text  # line 9
    df.loc[8, RAW[2]] = None  # empty: missing, as ever
    df.to_csv(path, index=False)
    source = UrbanAirSource(raw, cluster="A", cache_dir=tmp_path / "cache")
    assert refusal_beside_cache(source, stream, 6) == said


def test_other_clusters(raw, tmp_path):
    b = UrbanAirSource(raw, cluster="B", cache_dir=tmp_path).load()
    assert b.point_ids == ["2001", "2002"] and b.missing_fraction == 0
    assert UrbanAirSource(raw, cluster="all", cache_dir=tmp_path).load().num_points == 5
    assert UrbanAirSource(raw, cluster="b", cache_dir=tmp_path).cluster == "B"
    valid = r"Unknown Urban Air cluster 'C'; valid: \['A', 'B', 'all'\]"
    with pytest.raises(ValueError, match=valid):
        UrbanAirSource(raw, cluster="C")


def test_missing_files_say_where_to_get_them(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        UrbanAirSource(tmp_path / "empty").load()
    msg = str(err.value)
    assert "airquality.csv" in msg and "Data-1.zip" in msg
    assert "data.source.root=" in msg and "data.source.download=true" in msg


def test_renamed_column_is_reported(raw, tmp_path):
    df = pd.read_csv(raw / "station.csv").rename(columns={"longitude": "lng"})
    df.to_csv(raw / "station.csv", index=False)
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['longitude'\].*'lng'"):
        UrbanAirSource(raw, cache_dir=tmp_path).load()


# ---------------------------------------------------------------- downloads
class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep the test output clean
        pass


@pytest.fixture
def http_dir(tmp_path):
    """A local HTTP server in a thread, serving ``tmp_path / "served"``: yields (folder, url)."""
    served = tmp_path / "served"
    served.mkdir()
    handler = functools.partial(_Quiet, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def zip_folder(folder: Path, archive: Path, prefix: str) -> None:
    with zipfile.ZipFile(archive, "w") as zf:
        for f in sorted(folder.iterdir()):
            zf.write(f, f"{prefix}/{f.name}")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_download_end_to_end_from_http(http_dir, tmp_path):
    served, url = http_dir
    zip_folder(write_urban_air(tmp_path / "fixture"), served / "Data-1.zip", "Data")
    root = tmp_path / "downloaded"
    source = UrbanAirSource(
        root, cluster="A", download=True, url=f"{url}/Data-1.zip", sha256=sha(served / "Data-1.zip")
    )
    dm = PointCloudDataModule(source, input_steps=4, output_steps=2)
    assert dm.num_points == 3 and (root / "Data" / "airquality.csv").is_file()
    assert (root / ".Data-1.zip.done").is_file()
    (served / "Data-1.zip").unlink()  # a second call must not fetch again
    assert download_and_extract(f"{url}/Data-1.zip", root) == root


def test_download_tar_and_file_url(tmp_path):
    src = tmp_path / "payload.txt"
    src.write_text("hello")
    archive = tmp_path / "pack.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(src, "inner/payload.txt")
    dest = download_and_extract(archive.as_uri(), tmp_path / "out")
    assert (dest / "inner" / "payload.txt").read_text() == "hello"


def test_checksum_mismatch_deletes_the_file(http_dir, tmp_path):
    served, url = http_dir
    (served / "x.zip").write_bytes(b"not what you expected")
    with pytest.raises(ValueError, match=r"expected SHA-256 0{64}, got [0-9a-f]{64}"):
        download_and_extract(f"{url}/x.zip", tmp_path / "out", sha256="0" * 64)
    assert not (tmp_path / "out" / "x.zip").exists()
    assert not (tmp_path / "out" / ".x.zip.done").exists()
    with pytest.raises(DownloadError, match="Could not download .*missing.zip"):
        download_and_extract(f"{url}/missing.zip", tmp_path / "out")


def test_a_download_folder_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(DownloadError) as err:
        download_and_extract("file:///x.zip", tmp_path / "file" / "sub")
    assert str(err.value) == (
        f"Cannot make the folder {tmp_path / 'file' / 'sub'} to download file:///x.zip into "
        "(Not a directory): give data.source.root=<a folder you can write>."
    )


def test_a_damaged_archive_is_one_line_and_fetched_anew_by_the_next_run(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("a.txt", "hello world " * 1000)
    good = buf.getvalue()
    damaged = bytearray(good)
    damaged[60:80] = bytes(20)  # inside the member's compressed data
    served = tmp_path / "data.zip"
    served.write_bytes(bytes(damaged))
    with pytest.raises(DownloadError) as err:
        download_and_extract(served.as_uri(), tmp_path / "out")
    assert str(err.value) == (
        f"The archive {tmp_path / 'out' / 'data.zip'} from {served.as_uri()} is damaged (Bad "
        "CRC-32 for file 'a.txt'): run again to download it anew, or unpack a good copy into "
        "that folder by hand."
    )
    served.write_bytes(good)
    download_and_extract(served.as_uri(), tmp_path / "out")
    assert (tmp_path / "out" / "a.txt").read_text() == "hello world " * 1000


def test_archive_escaping_the_folder_is_refused(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("../evil.txt", "gotcha")
    (tmp_path / "evil.zip").write_bytes(buf.getvalue())
    dest = tmp_path / "a" / "b"
    with pytest.raises(ValueError, match=r"outside the destination.*'\.\./evil\.txt'"):
        download_and_extract((tmp_path / "evil.zip").as_uri(), dest)
    assert not (tmp_path / "a" / "evil.txt").exists()


# ---------------------------------------------------------------- Hydra config
def test_airq_config(raw, tmp_path):
    cfg = compose_train(
        tmp_path,
        [
            "data=airq",
            f"data.source.root={raw}",
            "data.source.cluster=B",
            "data.input_steps=4",
            "data.output_steps=3",
            "data.batch_size=4",
        ],
    )
    assert cfg.data.source.cache_dir == f"{tmp_path}/data/urban_air/cache"
    dm = instantiate(cfg.data)
    assert type(dm) is PointCloudDataModule and isinstance(dm.source, UrbanAirSource)
    assert dm.num_points == 2
    batch = next(iter(dm.train_dataloader()))
    assert batch["x"].shape == (4, 4, 2, 6) and batch["y"].shape == (4, 3, 2, 6)
    assert list((tmp_path / "data" / "urban_air" / "cache").glob("urban_air_B_*/values.npy"))
