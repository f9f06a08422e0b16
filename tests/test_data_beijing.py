"""Tests of the Beijing Multi-Site loader: a tiny fixture in the UCI format, and the real copy."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, cache_of_version, compose_train, one_line, rebuilding_fails, run_python
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from cloudlstm.assembly.build import instantiate_datamodule
from cloudlstm.data.pipeline.datamodule import PointCloudDataModule
from cloudlstm.data.sources import beijing
from cloudlstm.data.sources.beijing import STATION_POSITIONS, BeijingSource
from cloudlstm.data.sources.times import TIMES_ZONED_KEY
from cloudlstm.data.sources.urban_air import UrbanAirSource
from cloudlstm.errors import UserError
from cloudlstm.rundir.old_configs import current_config
from tests.test_data_urban_air import http_dir, sha  # noqa: F401, F811  (fixture)

REAL = ROOT.parent / "shared" / "data" / "beijing_multisite"
needs_real = pytest.mark.skipif(
    not REAL.is_dir(), reason=f"the real Beijing Multi-Site copy is not at {REAL}"
)
UCI_COLUMNS = ["No", "year", "month", "day", "hour", "PM2.5", "PM10", "SO2", "NO2", "CO", "O3"]
UCI_COLUMNS += ["TEMP", "PRES", "DEWP", "RAIN", "wd", "WSPM", "station"]
CHANNELS = ["PM2.5", "PM10", "NO2", "CO", "O3", "SO2"]
HOURS = 120


def write_station(folder: Path, station: str, offset: float, gaps=(), drop_rows=()) -> None:
    """One PRSA file: channel c of the station is ``offset + c + 0.5 * hour``; ``gaps`` are
    (hour, column) cells written as NA, ``drop_rows`` hours with no row at all."""
    t = pd.date_range("2013-03-01", periods=HOURS, freq="h")
    df = pd.DataFrame({"No": np.arange(1, HOURS + 1), "year": t.year, "month": t.month})
    df = df.assign(day=t.day, hour=t.hour)
    for c, name in enumerate(CHANNELS):
        df[name] = offset + c + 0.5 * np.arange(HOURS)
    df = df.assign(TEMP=1.0, PRES=1000.0, DEWP=-5.0, RAIN=0.0, wd="NW", WSPM=2.0, station=station)
    df = df[UCI_COLUMNS].astype({n: object for n in CHANNELS})
    for hour, col in gaps:
        df.loc[hour, col] = "NA"
    df = df.drop(index=list(drop_rows))
    df.to_csv(folder / f"PRSA_Data_{station}_20130301-20170228.csv.gz", index=False)


@pytest.fixture
def tiny(tmp_path) -> Path:
    folder = tmp_path / "beijing"
    folder.mkdir()
    write_station(folder, "Dongsi", 100.0, gaps=[(5, "NO2"), (6, "NO2"), (0, "CO")])
    write_station(folder, "Tiantan", 200.0, drop_rows=[50, 51, HOURS - 1])
    write_station(folder, "Huairou", 300.0)
    return folder


def test_fixture_is_pivoted_and_filled(tiny, tmp_path):
    source = BeijingSource(tiny, cache_dir=tmp_path / "cache", co_units="ug/m3")  # as written
    stream = source.load()
    assert stream.values.shape == (HOURS, 3, 6) and stream.channel_names == CHANNELS
    assert stream.point_ids == ["Dongsi", "Huairou", "Tiantan"]
    lat, lon = STATION_POSITIONS["Huairou"]
    np.testing.assert_allclose(stream.coords[1], [lon, lat])
    assert stream.timestamps[0] == np.datetime64("2013-03-01T00")
    missing = {tuple(i) for i in np.argwhere(~stream.mask)}
    expected = {(5, 0, 2), (6, 0, 2), (0, 0, 3)}
    expected |= {(h, 2, c) for h in (50, 51, HOURS - 1) for c in range(6)}
    assert missing == expected
    hours = np.arange(HOURS)
    for i, offset in enumerate([100.0, 300.0]):
        for c in range(6):
            want = offset + c + 0.5 * hours
            if i == 0 and c == 3:
                want[0] = want[1]  # a leading gap takes the first reading
            if i == 0 and c == 2:
                want[5:7] = want[4]  # a gap holds the reading before it
            np.testing.assert_allclose(stream.values[:, i, c], want, rtol=1e-6)
    np.testing.assert_allclose(stream.values[HOURS - 1, 2], stream.values[HOURS - 2, 2])

    with rebuilding_fails(BeijingSource, "_build"):
        again = source.load()
    assert source.last_load_from_cache
    np.testing.assert_array_equal(again.mask, stream.mask)


def test_a_changed_source_file_invalidates_the_cache(tiny, tmp_path):
    source = BeijingSource(tiny, cache_dir=tmp_path / "cache", co_units="ug/m3")  # as written
    source.load()
    huairou = next(tiny.glob("PRSA_Data_Huairou_*"))
    written = huairou.stat().st_mtime_ns
    write_station(tiny, "Huairou", 400.0)  # corrected readings, same layout
    later = written + 10**9  # as an edit a second later (mtime ticks can be coarse)
    os.utime(huairou, ns=(later, later))
    stream = source.load()
    assert not source.last_load_from_cache
    for c in range(6):
        np.testing.assert_allclose(stream.values[:, 1, c], 400.0 + c + 0.5 * np.arange(HOURS))
    with rebuilding_fails(BeijingSource, "_build"):
        assert np.array_equal(source.load().values, stream.values)
    # a new station file, or a positions file, is a new source as well
    write_station(tiny, "Shunyi", 500.0)
    assert source.load().point_ids == ["Dongsi", "Huairou", "Shunyi", "Tiantan"]
    assert not source.last_load_from_cache
    pd.DataFrame({"station": ["Dongsi"], "latitude": [1.5], "longitude": [2.5]}).to_csv(
        tiny / "stations.csv", index=False
    )
    np.testing.assert_array_equal(source.load().coords[0], [2.5, 1.5])
    assert not source.last_load_from_cache


@pytest.mark.parametrize("change", ["flags", "twice"])
def test_a_cache_of_before_the_stricter_reading_is_not_reused(tiny, tmp_path, change):
    """A station file whose SO2 column is True/False (pandas read 1/0) or whose header
    names PM10 twice (pandas read the second as PM10.1, left unread) is refused now
    (numeric_column, read_table): a cache that the reading of before left (cache version
    3) must not stand in for the refusal."""
    stream = BeijingSource(tiny, cache_dir=tmp_path / "first").load()
    path = next(tiny.glob("PRSA_Data_Huairou_*"))
    df = pd.read_csv(path)
    if change == "flags":
        df.assign(SO2=df.index % 2 == 0).to_csv(path, index=False)
        said = r"Column 'SO2' of .* must be numeric, but holds True/False"
    else:
        text = df.assign(again=df["PM10"]).to_csv(index=False).replace(",again\n", ",PM10\n", 1)
        with gzip.open(path, "wt") as f:
            f.write(text)
        said = r"names the column\(s\) \['PM10'\] more than once"
    source = BeijingSource(tiny, cache_dir=tmp_path / "cache")
    cache_of_version(source, beijing, 3, stream)
    with pytest.raises(UserError, match=said):
        source.load()


def test_stations_subset_and_positions_file(tiny, tmp_path):
    pd.DataFrame({"station": ["Dongsi"], "latitude": [1.5], "longitude": [2.5]}).to_csv(
        tiny / "stations.csv", index=False
    )
    stream = BeijingSource(tiny, stations=["Tiantan", "Dongsi"], cache_dir=tmp_path).load()
    assert stream.point_ids == ["Dongsi", "Tiantan"]
    np.testing.assert_array_equal(stream.coords[0], [2.5, 1.5])  # the file wins
    # a latitude typed with its digits shifted is refused, naming the station
    pd.DataFrame({"station": ["Dongsi"], "latitude": [399.3], "longitude": [116.4]}).to_csv(
        tiny / "stations.csv", index=False
    )
    with pytest.raises(UserError) as refused:
        BeijingSource(tiny, cache_dir=tmp_path).load()
    assert str(refused.value) == (
        f"positions file {tiny / 'stations.csv'}: point 'Dongsi' (line 2) has "
        "latitude=399.3, outside [-90, 90] degrees (1 row(s) in all): correct it."
    )
    # a coordinate written with text, or left empty, or a station twice: one line each
    for latitude, said in (
        ("39.929287N", "Column 'latitude' of positions file .* holds e.g. '39.929287N'"),
        ("", r"point 'Dongsi' \(line 2\) has no finite coordinates"),
    ):
        (tiny / "stations.csv").write_text(f"station,latitude,longitude\nDongsi,{latitude},116.4\n")
        with pytest.raises(UserError, match=said):
            BeijingSource(tiny, cache_dir=tmp_path).load()
    (tiny / "stations.csv").write_text(
        "station,latitude,longitude\nDongsi,39.9,116.4\nDongsi,40.1,116.4\n"
    )
    with pytest.raises(UserError, match=r": the id 'Dongsi' has 2 rows \(line 2 and line 3\); a "):
        BeijingSource(tiny, cache_dir=tmp_path).load()
    with pytest.raises(ValueError, match=r"Unknown Beijing station\(s\) \['Nowhere'\]; valid"):
        BeijingSource(tiny, stations=["Nowhere"]).load()
    # no station: pandas' "No objects to concatenate"; a station twice: kept once in silence
    with pytest.raises(UserError, match=r"^data.source.stations=\[\] keeps no station: name"):
        BeijingSource(tiny, stations=[])
    with pytest.raises(UserError, match=r"names Dongsi more than once: name each station once"):
        BeijingSource(tiny, stations=["Dongsi", "Tiantan", "Dongsi"])


@pytest.mark.parametrize(
    ("column", "cell", "said"),
    [
        ("month", 13, "invalid year/month/day/hour [2013, 13, 1, 7] at line 10."),
        ("wd", "NNNW", "wind direction 'NNNW' at line 10 is not one of the compass points"),
        ("WSPM", "2 m/s", "holds e.g. '2 m/s' (1 such entries, first at line 10)."),
    ],
)
def test_a_bad_row_of_a_station_file_is_named_by_its_line(tiny, tmp_path, column, cell, said):
    """A PRSA file is a CSV: its row is named by its line, counting the header and a blank
    line, as an editor shows it; the row's position from 0 past the header named it (data
    row 7: line 10 here)."""
    path = next(tiny.glob("PRSA_Data_Dongsi_*"))
    df = pd.read_csv(path).astype({column: object})
    df.loc[7, column] = cell
    text = df.to_csv(index=False).replace("\n", "\n\n", 1)  # line 2 blank
    with gzip.open(path, "wt") as f:
        f.write(text)
    assert text.splitlines()[9].startswith("8,2013,")  # line 10: the row of No 8
    with pytest.raises(UserError) as refused:
        BeijingSource(tiny, cache_dir=tmp_path, covariates=["wind"]).load()
    assert f"file {path}" in str(refused.value) and said in str(refused.value)


def test_missing_folder_says_where_to_get_the_data(tmp_path):
    with pytest.raises(
        FileNotFoundError,
        match=r"archive\.ics\.uci\.edu.*data\.source\.root=.*BEIJING.*data\.source\.download=true",
    ):
        BeijingSource(tmp_path / "nothing").load()


def test_beijing_config(tiny, tmp_path):
    cfg = compose_train(
        tmp_path,
        [
            "data=beijing",
            f"data.source.root={tiny}",
            "data.input_steps=5",
            "data.output_steps=3",
            "data.batch_size=4",
        ],
    )
    assert cfg.data.input_steps == 5 and cfg.data.batch_size == 4
    dm = instantiate(cfg.data)
    assert type(dm) is PointCloudDataModule and isinstance(dm.source, BeijingSource)
    batch = next(iter(dm.train_dataloader()))
    assert batch["x"].shape == (4, 5, 3, 6) and batch["coords"].shape == (4, 3, 2)
    assert list((tmp_path / "data" / "beijing").glob("beijing_*/values.npy"))
    assert dm.stream.metadata["co_units"] == "mg/m3"  # the config's default
    # clock times without an offset, which a forecast's history written with one is told of
    assert dm.stream.metadata[TIMES_ZONED_KEY] is False


def test_beijing_config_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("CLOUDLSTM_BEIJING_ROOT", raising=False)
    cfg = compose_train(tmp_path, ["data=beijing"])
    assert Path(cfg.data.source.root).resolve() == REAL.resolve()
    assert (cfg.data.input_steps, cfg.data.output_steps, cfg.data.batch_size) == (12, 12, 32)
    assert cfg.data.source.co_units == "mg/m3"
    monkeypatch.setenv("CLOUDLSTM_BEIJING_ROOT", "/somewhere/else")
    assert compose_train(tmp_path, ["data=beijing"]).data.source.root == "/somewhere/else"


def test_co_units_divide_co_by_1000_with_a_cache_per_unit(tiny, tmp_path):
    """mg/m3: the files' CO / 1000, the other channels untouched; ug/m3: the files' values.
    Each unit has its own cache entry, so switching never reads the other's."""
    cache = tmp_path / "cache"
    hours = np.arange(HOURS)
    co = CHANNELS.index("CO")
    streams = {}
    for units, divisor in (("mg/m3", 1000.0), ("ug/m3", 1.0)):
        source = BeijingSource(tiny, stations=["Huairou"], cache_dir=cache, co_units=units)
        streams[units] = source.load()
        assert not source.last_load_from_cache  # the other unit's cache is not this one's
        want = (300.0 + co + 0.5 * hours) / divisor  # Huairou: offset 300, no gaps
        np.testing.assert_allclose(streams[units].values[:, 0, co], want, rtol=1e-6)
        assert streams[units].metadata["co_units"] == units
        assert streams[units].metadata["units"] == {**dict.fromkeys(CHANNELS, "ug/m3"), "CO": units}
    assert len(list(cache.glob("beijing_*"))) == 2
    others = [c for c in range(6) if c != co]
    np.testing.assert_array_equal(
        streams["mg/m3"].values[..., others], streams["ug/m3"].values[..., others]
    )
    for units, stream in streams.items():
        source = BeijingSource(tiny, stations=["Huairou"], cache_dir=cache, co_units=units)
        with rebuilding_fails(BeijingSource, "_build"):
            cached = source.load()
        np.testing.assert_array_equal(cached.values, stream.values)
        assert source.last_load_from_cache
        # recorded at every load, not in the cache: a cache from before units has them
        assert cached.metadata["units"]["CO"] == units
        for meta in cache.glob("beijing_*/meta.json"):
            assert "units" not in json.loads(meta.read_text())["metadata"]


def test_unknown_co_units_is_one_user_error(tiny, tmp_path):
    with pytest.raises(
        UserError, match=r"^data\.source\.co_units='ppm' is not one of mg/m3, ug/m3 \("
    ):
        BeijingSource(tiny, co_units="ppm")
    cfg = compose_train(
        tmp_path, ["data=beijing", f"data.source.root={tiny}", "data.source.co_units=mg"]
    )
    with pytest.raises(UserError, match=r"data\.source\.co_units='mg' is not one of") as err:
        instantiate_datamodule(cfg)
    assert "\n" not in str(err.value)


def test_a_reading_outside_its_physical_range_is_one_line(tiny, tmp_path):
    """A negative concentration or a pressure of 500 hPa cannot be real: the source's
    physical ranges refuse them; data.valid_ranges replaces a range or turns it off."""
    path = tiny / "PRSA_Data_Tiantan_20130301-20170228.csv.gz"
    df = pd.read_csv(path)
    df.loc[7, "PM2.5"] = -3.0
    df.loc[9, "PRES"] = 500.0
    df.to_csv(path, index=False)
    weather = "data.source.covariates=[PRES,wind]"
    cfg = compose_train(tmp_path, ["data=beijing", f"data.source.root={tiny}", weather])
    with pytest.raises(UserError) as err:
        _ = instantiate_datamodule(cfg).stream
    assert str(err.value) == (
        "stream 'beijing_multisite': 2 value(s) lie outside their channel's valid range, in "
        "'PM2.5' (1), 'PRES' (1): channel 'PM2.5', point Tiantan, time 2013-03-01 07:00:00 "
        "(step 7): -3 (valid range >= 0); channel 'PRES', point Tiantan, time 2013-03-01 "
        "09:00:00 (step 9): 500 (valid range [850, 1100]). Correct or remove them, or change "
        "the range if they are real readings: 'data.valid_ranges={PM2.5:[lo,hi]}' (null for an "
        "open end; {PM2.5:null}: no check)."
    )
    cfg = compose_train(
        tmp_path,
        [
            "data=beijing",
            f"data.source.root={tiny}",
            weather,
            "data.valid_ranges={PM2.5:null,PRES:[400,1100]}",
        ],
    )
    stream = instantiate_datamodule(cfg).stream
    assert stream.values[9, 2, 6] == 500.0  # Tiantan's PRES
    assert [stream.metadata["units"][c] for c in stream.channel_names[6:]] == ["hPa", "m/s", "m/s"]


def old_beijing_config(cfg: DictConfig) -> DictConfig:
    """``cfg`` with its data node as a run saved before the ``source`` node wrote it: the
    old ``BeijingDataModule`` with the source's keys at the top of ``data``."""
    data = OmegaConf.to_container(cfg.data, resolve=True)
    source = data.pop("source")
    source.pop("_target_")
    for newer in ("covariates", "download", "url", "sha256"):  # older than these keys too
        source.pop(newer)
    data.pop("time_features")
    data = {**data, **source, "_target_": "cloudlstm.data.sources.beijing.BeijingDataModule"}
    return OmegaConf.merge(OmegaConf.masked_copy(cfg, ["paths"]), {"data": data})


def test_a_run_saved_before_co_units_keeps_its_ug_m3(tiny, tmp_path):
    """eval.py on an older run's config (no co_units): CO in the units its checkpoint's
    scaler and weights were trained in, not the mg/m3 default."""
    cfg = compose_train(tmp_path, ["data=beijing", f"data.source.root={tiny}"])
    old = old_beijing_config(cfg)
    with open_dict(old.data):
        del old.data.co_units
    current = current_config(old)
    assert instantiate_datamodule(current).source.co_units == "ug/m3"
    assert current.data.source.co_units == "ug/m3"  # recorded in the evaluation's config.yaml
    assert "co_units" not in old.data  # the run's own config is not changed
    new_style = current_config(old_beijing_config(cfg))
    assert instantiate_datamodule(new_style).source.co_units == "mg/m3"
    assert instantiate_datamodule(cfg).source.co_units == "mg/m3"


# ---------------------------------------------------------------- the real data
@needs_real
def test_real_data(tmp_path):
    source = BeijingSource(REAL, cache_dir=tmp_path, co_units="ug/m3")  # the files' units
    stream = source.load()
    assert not source.last_load_from_cache
    assert stream.values.shape == (35064, 12, 6)
    assert stream.timestamps[-1] == np.datetime64("2017-02-28T23")
    # a few per cent of the readings are NA (UCI), CO the most often
    assert 0.01 < stream.missing_fraction < 0.05
    per_channel = 1.0 - stream.mask.mean(axis=(0, 1))
    assert stream.channel_names[int(per_channel.argmax())] == "CO"
    assert np.isfinite(stream.values).all()
    # every filled value lies between the observed values around its gap
    flat = stream.values.reshape(len(stream.values), -1).astype(np.float64)
    seen = pd.DataFrame(np.where(stream.mask.reshape(flat.shape), flat, np.nan))
    before, after = seen.ffill().to_numpy(), seen.bfill().to_numpy()
    lo = np.fmin(before, after)
    hi = np.fmax(before, after)
    filled = ~stream.mask.reshape(flat.shape)
    assert np.all(flat[filled] >= lo[filled] - 1e-3) and np.all(flat[filled] <= hi[filled] + 1e-3)

    with rebuilding_fails(BeijingSource, "_build"):
        again = source.load()
    assert source.last_load_from_cache
    np.testing.assert_array_equal(again.values, stream.values)

    # mg/m3: CO of the same order as the other pollutants' values
    co = stream.channel_names.index("CO")
    mg = BeijingSource(REAL, cache_dir=tmp_path).load().values  # the default
    np.testing.assert_allclose(mg[..., co], stream.values[..., co] / 1000, rtol=1e-6)
    assert 0.1 < np.median(mg[..., co]) < 10


def uci_archive(tiny: Path, archive: Path) -> None:
    """``archive`` as UCI's: a zip holding a zip of the folder of the station files."""
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as zf:
        for path in sorted(tiny.glob("PRSA_Data_*")):
            zf.write(path, f"PRSA_Data_20130301-20170228/{path.name}")
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("PRSA2017_Data_20130301-20170228.zip", inner.getvalue())


def test_download_fetches_and_unpacks_ucis_zip_of_a_zip(tiny, http_dir, tmp_path):  # noqa: F811
    served, url = http_dir
    uci_archive(tiny, served / "beijing.zip")
    root = tmp_path / "fetched"
    source = BeijingSource(
        root, download=True, url=f"{url}/beijing.zip", sha256=sha(served / "beijing.zip")
    )
    stream = source.load()
    assert stream.point_ids == ["Dongsi", "Huairou", "Tiantan"]
    assert (
        root / "PRSA_Data_20130301-20170228" / "PRSA_Data_Dongsi_20130301-20170228.csv.gz"
    ).is_file()
    expected = BeijingSource(tiny, cache_dir=tmp_path / "cache").load()
    np.testing.assert_array_equal(stream.values, expected.values)
    (served / "beijing.zip").unlink()  # found in the subfolder: nothing is fetched again
    assert BeijingSource(root, download=True, url=f"{url}/beijing.zip").load().num_points == 3


def test_files_unpacked_by_hand_into_a_subfolder_are_found(tiny, tmp_path):
    root = tmp_path / "unpacked"
    (root / "PRSA_Data_20130301-20170228").mkdir(parents=True)
    for path in tiny.glob("PRSA_Data_*"):
        shutil.copy(path, root / "PRSA_Data_20130301-20170228" / path.name)
    assert sorted(BeijingSource(root).files()) == ["Dongsi", "Huairou", "Tiantan"]


@pytest.mark.parametrize("source", [BeijingSource, UrbanAirSource])
def test_a_download_switch_that_is_no_boolean_is_one_line(tmp_path, source):
    """Urban Air took bool("no"), true: it fetched in silence."""
    with pytest.raises(UserError, match=r"^data.source.download='no': use true or false.$"):
        source(tmp_path, download="no")


@pytest.fixture
def beijing_run(tiny, tmp_path) -> Path:
    """A linear run trained on ``tiny`` (CO in mg/m3, the default)."""
    from cloudlstm.cli.train import train

    job = ["data=beijing", f"data.source.root={tiny}", "data.input_steps=4"]
    job += ["data.output_steps=3", "data.batch_size=4", "model=linear", "trainer=cpu"]
    job += ["trainer.max_steps=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1"]
    job += ["logger=none", "report.figures=false", "trainer.enable_progress_bar=false"]
    cfg = compose_train(tmp_path, job)
    train(cfg)
    return Path(cfg.paths.output_dir)


def test_eval_refuses_a_run_evaluated_in_other_co_units(beijing_run, tmp_path):
    """eval.py data.source.co_units=ug/m3 on a run of mg/m3: CO read 1000 times too large
    by the training scaler, scored in silence (the CO MAE 1000 times the run's). Refused
    from the configs, before the data are read (minutes for Beijing on a fresh cache), so
    a folder without the files is never reached; it was, and only then were units told."""
    from cloudlstm.cli.evaluate import evaluate
    from tests.test_eval import compose_eval

    gone = f"data.source.root={tmp_path / 'gone'}"
    with pytest.raises(
        UserError,
        match=r"^\S+ was trained with data.source.co_units=mg/m3, and this evaluation gives "
        r"data.source.co_units=ug/m3: .* Evaluate it with data.source.co_units=mg/m3 \(leave "
        r"out the override that changes it\), or train a model for these units\.$",
    ):
        evaluate(compose_eval(beijing_run, tmp_path / "ug", "data.source.co_units=ug/m3", gone))
    evaluate(compose_eval(beijing_run, tmp_path / "mg", "data.source.co_units=mg/m3"))  # its own


class BeijingInPpb(BeijingSource):
    """The Beijing files with NO2 converted to ppb (at 25 °C, 1.88 µg/m³ per ppb): a source
    that converts, with no setting of units to tell."""

    def _read(self, station: str, path: Path) -> pd.DataFrame:
        frame = super()._read(station, path)
        return frame.assign(NO2=frame["NO2"] / 1.88)

    def units(self) -> dict[str, str]:
        return {**super().units(), "NO2": "ppb"}


def test_eval_refuses_other_units_by_any_route(beijing_run, tmp_path):
    """Units are compared as the sources record them, not by a setting's name: a source
    that converts NO2 to ppb is refused, naming the channel and both units."""
    from cloudlstm.cli.evaluate import evaluate
    from tests.test_eval import compose_eval

    trained = json.loads((beijing_run / "data_summary.json").read_text())
    assert trained["source_metadata"]["units"]["NO2"] == "ug/m3"  # recorded at training
    other = f"data.source._target_={__name__}.BeijingInPpb"
    with pytest.raises(
        UserError,
        match=r"^\S+ was trained on NO2 in ug/m3, and these data give it in ppb: .* Evaluate "
        r"it on data in ug/m3 \(give NO2 in ug/m3\), or train a model for these units\.$",
    ):
        evaluate(compose_eval(beijing_run, tmp_path / "ppb", other))


def test_eval_compares_the_units_of_a_summary_without_them(beijing_run, tmp_path):
    """A Beijing run trained before the units were recorded wrote CO's alone (co_units),
    and one from before co_units none (the files' ug/m3): both are still compared."""
    from cloudlstm.assembly.evaluated_data import check_same_units
    from cloudlstm.cli.evaluate import evaluate
    from tests.test_eval import compose_eval

    path = beijing_run / "data_summary.json"
    summary = json.loads(path.read_text())
    units = summary["source_metadata"]["units"]
    del summary["source_metadata"]["units"]
    path.write_text(json.dumps(summary))
    # a co_units override is refused from the configs first: the summaries alone here
    now = {**summary, "source_metadata": {"units": {**units, "CO": "ug/m3"}}}
    with pytest.raises(UserError, match=r"trained on CO in mg/m3, and these data give it in ug"):
        check_same_units(summary, now, ["data.source.co_units=ug/m3"], beijing_run)
    del summary["source_metadata"]["co_units"]
    path.write_text(json.dumps(summary))
    with pytest.raises(UserError, match=r"trained on CO in ug/m3, and these data give it in mg"):
        evaluate(compose_eval(beijing_run, tmp_path / "mg", "data.source.co_units=mg/m3"))


def test_summaries_without_units_have_nothing_to_compare():
    """Runs of data whose units no source records (synthetic data, tables), and runs
    trained before units were recorded, evaluate as before."""
    from cloudlstm.assembly.evaluated_data import check_same_units

    now = {"name": "x", "source_metadata": {"units": {"CO": "ug/m3"}}}
    check_same_units(None, now, [], "run")
    check_same_units({"name": "x", "source_metadata": {}}, now, [], "run")
    check_same_units({"name": "x", "source_metadata": {"units": {"PM10": "mg/m3"}}}, now, [], "r")
    check_same_units(now, {"name": "x", "source_metadata": {}}, [], "run")


def test_a_checksum_without_a_download_is_refused_in_one_line(tmp_path):
    """data.source.sha256 checks only the archive a download fetches: with
    data.source.download=false it was ignored without a word."""
    run = f"hydra.run.dir={tmp_path / 'run'}"
    proc = run_python(
        "train.py", "data=beijing", f"data.source.root={tmp_path}", "data.source.sha256=abc", run
    )
    assert one_line(proc) == (
        "data.source.sha256=abc checks the archive that data.source.download=true fetches, "
        "and data.source.download=false fetches none: set data.source.download=true, or "
        "leave data.source.sha256 out (eval.py, whose run's config.yaml holds it: add "
        "data.source.sha256=null to its command)."
    )


@pytest.mark.parametrize("data", ["beijing", "airq"])
def test_a_url_without_a_download_is_refused_in_one_line(tmp_path, data):
    """data.source.url is fetched only with data.source.download=true: without it another
    url was ignored without a word, and the files in data.source.root were read."""
    url = "data.source.url=https://example.org/other.zip"
    proc = run_python("train.py", f"data={data}", url, f"hydra.run.dir={tmp_path / 'run'}")
    assert one_line(proc) == (
        f"{url} names the archive that data.source.download=true fetches where the files are "
        "missing, and data.source.download=false fetches none: set data.source.download=true, "
        "or leave data.source.url out."
    )
    assert not (tmp_path / "run").exists()


def test_a_url_at_its_default_or_with_a_download_is_not_refused(tmp_path):
    """The config's own url is no user's setting; another one is what a download fetches."""
    default = OmegaConf.load(ROOT / "conf" / "data" / "beijing.yaml").source.url
    for job in (
        [f"data.source.url={default}"],
        ["data.source.url=https://example.org/other.zip", "data.source.download=true"],
    ):
        instantiate_datamodule(compose_train(tmp_path, ["data=beijing", *job]))


@pytest.mark.parametrize("source", [BeijingSource, UrbanAirSource])
def test_a_url_without_a_download_is_refused_wherever_it_comes_from(tmp_path, source):
    """A url that an experiment's config or a source built in Python sets, not the command,
    was ignored without a word: only the command's was refused."""
    url = "https://example.org/other.zip"
    refusal = (
        rf"^data\.source\.url={re.escape(url)} names the archive .* leave data\.source\.url out\.$"
    )
    with pytest.raises(UserError, match=refusal):
        source(tmp_path, url=url)
    source(tmp_path, url=url, download=True)
    data = "beijing" if source is BeijingSource else "airq"
    cfg = compose_train(tmp_path, [f"data={data}", f"data.source.root={tmp_path}"])
    cfg.data.source.url = url  # as an experiment's config sets it
    with pytest.raises(UserError, match=refusal):
        instantiate_datamodule(cfg)


def test_eval_of_a_run_whose_config_holds_download_options(beijing_run, tmp_path):
    """A run's config.yaml that holds a url and a checksum without a download (saved before
    they were refused) is evaluated: its url is not the eval command's, and the checksum's
    line says how to leave it out there, where "leave it out" alone could not be done."""
    from cloudlstm.cli.evaluate import evaluate
    from tests.test_eval import compose_eval

    saved = beijing_run / "config.yaml"
    text = saved.read_text()
    edited = re.sub(r"(?m)^(    url: ).*$", r"\1https://example.org/other.zip", text)
    edited = edited.replace("    sha256: null\n", "    sha256: abc\n")
    assert edited.count("example.org") == 1 and "sha256: abc" in edited
    saved.write_text(edited)
    with pytest.raises(UserError, match=r"add data\.source\.sha256=null to its command\)\.$"):
        evaluate(compose_eval(beijing_run, tmp_path / "held"))
    evaluate(compose_eval(beijing_run, tmp_path / "null", "data.source.sha256=null"))
    other = "data.source.url=https://example.org/third.zip"
    with pytest.raises(UserError, match=rf"^{other} names the archive .* leave data\.source\.url"):
        evaluate(compose_eval(beijing_run, tmp_path / "url", "data.source.sha256=null", other))
