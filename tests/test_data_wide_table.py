"""Tests of the wide-table source: one row per time step, one column per point, a positions
file; CSV (gzipped too), pandas HDF5 and Parquet; its errors; the graph of the points."""

from __future__ import annotations

import gzip
import logging
import os
import pickle
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import compose_train, one_line, rebuilding_fails, run_python

from cloudlstm.data.pipeline.datamodule import PointCloudDataModule
from cloudlstm.data.pipeline.forecast_input import build_input
from cloudlstm.data.sources.graphs import read_graph
from cloudlstm.data.sources.wide_table import WideTableSource, read_positions
from cloudlstm.data.spec import DataSpec
from cloudlstm.errors import MissingFileError, MissingPackageError, UserError

T0 = pd.Timestamp("2012-03-01 00:00")
STEP = pd.Timedelta("5min")
IDS = ["773869", "767541", "767542", "717447"]
LAT = [34.15497, 34.11621, 34.11641, 34.07248]
LON = [-118.31829, -118.23799, -118.23819, -118.26772]


def speeds(steps: int = 30) -> pd.DataFrame:
    """Point ``k`` at row ``t`` reads ``60 + 10 k + 0.5 t``: every value differs, so a filled
    one shows which reading it was taken from."""
    t = np.arange(steps)[:, None]
    k = np.arange(len(IDS))[None, :]
    return pd.DataFrame(60.0 + 10 * k + 0.5 * t, columns=IDS)


def held(table: pd.DataFrame, observed: np.ndarray) -> np.ndarray:
    """``table``'s values as the loaders fill the gaps (``observed`` False): each column holds
    its last reading, a leading gap takes the first one."""
    return table.where(observed).ffill().bfill().to_numpy()


def write_locations(folder, ids=IDS, name="graph_sensor_locations.csv"):
    """DCRNN's form: ``index,sensor_id,latitude,longitude``."""
    rows = pd.DataFrame(
        {"index": range(len(ids)), "sensor_id": ids, "latitude": LAT[: len(ids)]}
    ).assign(longitude=LON[: len(ids)])
    rows.to_csv(folder / name, index=False)
    return folder / name


@pytest.fixture
def los(tmp_path):
    """T-GCN's form: no time column, a 0 for a missing reading, gzipped."""
    table = speeds()
    table.iloc[3, 1] = 0.0  # a missing reading (METR-LA's 0)
    table.iloc[10, 2] = np.nan  # an empty cell
    table.to_csv(tmp_path / "los_speed.csv.gz", index=False)
    write_locations(tmp_path)
    return tmp_path


def source(folder, **kwargs) -> WideTableSource:
    args = {
        "path": "los_speed.csv.gz",
        "positions": "graph_sensor_locations.csv",
        "root": folder,
        "start": "2012-03-01 00:00",
        "step": "5min",
        "missing_value": 0,
        "channel": "speed",
    }
    return WideTableSource(**{**args, **kwargs})


def test_csv_without_times_gets_them_from_start_and_step(los, tmp_path):
    stream = source(los, cache_dir=tmp_path / "cache").load()
    assert stream.values.shape == (30, 4, 1) and stream.channel_names == ["speed"]
    assert stream.point_ids == IDS  # the table's column order
    assert stream.timestamps[0] == np.datetime64("2012-03-01T00:00")
    assert stream.timestamps[-1] == np.datetime64("2012-03-01T02:25")
    assert stream.metadata["step_minutes"] == 5.0 and stream.metadata["steps_per_day"] == 288
    # (longitude, latitude), as data=beijing's stations
    np.testing.assert_allclose(stream.coords, np.column_stack([LON, LAT]))
    assert {tuple(i) for i in np.argwhere(~stream.mask)} == {(3, 1, 0), (10, 2, 0)}
    np.testing.assert_allclose(
        stream.values[..., 0], held(speeds(), stream.mask[..., 0]), rtol=1e-6
    )
    assert stream.values[3, 1, 0] == pytest.approx(70 + 1.0)  # the reading before it, held


def test_the_units_option_is_recorded_at_every_load_and_checked_first(los, tmp_path):
    """data.source.units goes into the stream's metadata (then the data summary), from the
    cache too; a key other than the one channel is refused before the file is read."""
    cache = tmp_path / "cache"
    assert "units" not in source(los, cache_dir=cache).load().metadata  # null: none
    for _ in range(2):  # built, then from the cache
        loaded = source(los, cache_dir=cache, units={"speed": "mph"})
        assert loaded.load().metadata["units"] == {"speed": "mph"}
    assert loaded.last_load_from_cache
    with pytest.raises(UserError) as err:
        source(los, path="absent.csv", units={"speeds": "mph"})
    assert str(err.value) == (
        "data.source.units names 'speeds', no channel of the data (did you mean speed?); its "
        "channels are ['speed']: give the unit of each by its channel's name."
    )


def test_the_cache_is_reused_and_a_changed_file_read_again(los, tmp_path):
    made = source(los, cache_dir=tmp_path / "cache")
    made.load()
    with rebuilding_fails(WideTableSource, "generate"):
        again = source(los, cache_dir=tmp_path / "cache")
        again.load()
    assert again.last_load_from_cache
    table = speeds()
    table.iloc[0, 0] = 99.0
    table.to_csv(los / "los_speed.csv.gz", index=False)
    os.utime(los / "los_speed.csv.gz", ns=(1, 1))  # another signature even within a second
    changed = source(los, cache_dir=tmp_path / "cache")
    assert changed.load().values[0, 0, 0] == 99.0 and not changed.last_load_from_cache


def test_csv_with_a_written_index_reads_its_times_and_fills_missing_rows(tmp_path):
    """Milan's form: the header's first cell is empty (``DataFrame.to_csv``), the times in
    that column; a missing hour is a gap on the grid."""
    table = speeds(12).rename(columns=dict(zip(IDS, ["23", "292", "357", "520"], strict=True)))
    table.index = pd.date_range("2013-11-04", periods=12, freq="h")
    table.drop(table.index[[4]]).to_csv(tmp_path / "traffic.csv")
    pd.DataFrame({"cellId": [23, 292, 357, 520], "lon": LON, "lat": LAT}).to_csv(
        tmp_path / "centroids.csv", index=False
    )
    stream = WideTableSource(tmp_path / "traffic.csv", tmp_path / "centroids.csv").load()
    assert stream.values.shape == (12, 4, 1) and stream.point_ids == ["23", "292", "357", "520"]
    assert stream.channel_names == ["value"] and stream.metadata["step_minutes"] == 60.0
    assert (~stream.mask).sum() == 4 and not stream.mask[4].any()
    np.testing.assert_allclose(
        stream.values[..., 0], held(speeds(12), stream.mask[..., 0]), rtol=1e-6
    )
    np.testing.assert_allclose(stream.coords, np.column_stack([LON, LAT]))


def test_the_table_records_whether_it_wrote_its_times_with_an_offset(los, tmp_path):
    """As data=points does, so that a forecast's history written the other way is warned of
    (DataSpec.times_zoned); times counted from data.source.start are written as it is. They
    recorded nothing, and a METR-LA history written with offsets shifted every time feature
    by the offset without a word."""
    places = pd.DataFrame({"id": IDS, "x": [0.0, 1, 2, 3], "y": [5.0, 4, 3, 2]})
    places.to_csv(tmp_path / "places.csv", index=False)
    times = pd.date_range(T0, periods=6, freq="10min", tz="UTC").tz_convert("+01:00")
    for name, written, zoned in (("local", times.tz_localize(None), False), ("zoned", times, True)):
        speeds(6).assign(timestamp=written.astype(str)).to_csv(
            tmp_path / f"{name}.csv", index=False
        )
        stream = WideTableSource(tmp_path / f"{name}.csv", tmp_path / "places.csv").load()
        assert stream.metadata["times_zoned"] is zoned
    assert source(los).load().metadata["times_zoned"] is False
    zoned_start = source(los, start="2012-03-01 00:00-08:00", cache_dir=tmp_path / "cache")
    assert zoned_start.load().metadata["times_zoned"] is True
    assert zoned_start.cache_key != source(los, cache_dir=tmp_path / "cache").cache_key


def test_a_history_with_offsets_for_times_counted_from_a_clock_start_is_warned_of(los, caplog):
    dm = PointCloudDataModule(source(los), input_steps=4, output_steps=1, batch_size=4)
    dm.setup()
    info = DataSpec.from_datamodule(dm)
    history = speeds(12).assign(timestamp=pd.date_range(T0, periods=12, freq=STEP))
    history["timestamp"] = history["timestamp"].dt.tz_localize("America/Los_Angeles")
    with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.forecast_input"):
        build_input(history, info)
    assert "the training file wrote clock times without one" in caplog.text


def test_a_named_time_column_and_x_y_positions(tmp_path):
    table = speeds(6).assign(timestamp=pd.date_range(T0, periods=6, freq="10min"))
    table.to_csv(tmp_path / "wide.csv", index=False)
    places = pd.DataFrame({"id": IDS, "x": [0.0, 1, 2, 3], "y": [5.0, 4, 3, 2], "z": 1.0})
    places.to_csv(tmp_path / "places.csv", index=False)
    stream = WideTableSource(tmp_path / "wide.csv", tmp_path / "places.csv").load()
    assert stream.values.shape == (6, 4, 1) and stream.metadata["step_minutes"] == 10.0
    np.testing.assert_array_equal(stream.coords[:, 2], 1.0)  # x, y, z
    picked = WideTableSource(
        tmp_path / "wide.csv", tmp_path / "places.csv", position_cols=["id", "y", "x"]
    ).load()
    np.testing.assert_array_equal(picked.coords, places[["y", "x"]].to_numpy())


@pytest.mark.parametrize(
    ("position_cols", "message"),
    [
        (
            ["id", "x"],
            "data.source.position_cols=[id,x] names 1 coordinate column(s): a point's place "
            "takes 2 or 3 (x,y[,z] or lon,lat), e.g. data.source.position_cols=[id,x,y].",
        ),
        (["id", "x", "y", "z", "x"], "names 4 coordinate column(s)"),
        (["id", "x", "x"], "data.source.position_cols=[id,x,x] names x twice: name each column"),
        (["x", "x", "y"], "data.source.position_cols=[x,x,y] names x twice"),
    ],
)
def test_position_columns_are_an_id_and_two_or_three_coordinates(tmp_path, position_cols, message):
    speeds(6).to_csv(tmp_path / "wide.csv", index=False)
    places = pd.DataFrame({"id": IDS, "x": [0.0, 1, 2, 3], "y": [5.0, 4, 3, 2], "z": 1.0})
    places.to_csv(tmp_path / "places.csv", index=False)
    with pytest.raises(UserError) as err:
        WideTableSource(tmp_path / "wide.csv", tmp_path / "places.csv", position_cols=position_cols)
    assert message in str(err.value)
    with pytest.raises(UserError) as err:
        read_positions(tmp_path / "places.csv", position_cols)
    assert message in str(err.value)


def test_a_start_with_an_offset_for_clock_times_is_named_as_written(tmp_path):
    """A start with an offset is compared in UTC: the line named a start of 08:00 that the
    user never wrote, against a file of clock times starting at 00:00."""
    speeds(6).assign(time=pd.date_range(T0, periods=6, freq="5min").astype(str)).to_csv(
        tmp_path / "clock.csv", index=False
    )
    write_locations(tmp_path)
    with pytest.raises(UserError) as err:
        source(tmp_path, path="clock.csv", start="2012-03-01 00:00-08:00").load()
    assert str(err.value) == (
        f"file {tmp_path / 'clock.csv'} starts at 2012-03-01 00:00:00, not at "
        "data.source.start='2012-03-01 00:00-08:00' (2012-03-01 08:00:00 in UTC, as a start "
        "with an offset is compared): the file writes clock times without an offset, "
        "compared as written; write the start so too (data.source.start='2012-03-01 "
        "00:00:00'), or set data.source.start=null to take the file's times."
    )
    stream = source(tmp_path, path="clock.csv", start="2012-03-01 00:00:00").load()
    assert stream.timestamps[0] == np.datetime64(T0)
    # a file of offsets is read as UTC: the start with an offset matches it there
    utc = pd.date_range(T0, periods=6, freq="5min", tz="UTC").tz_convert("-08:00")
    speeds(6).assign(time=utc.astype(str)).to_csv(tmp_path / "zoned.csv", index=False)
    zoned = source(tmp_path, path="zoned.csv", start="2012-02-29 16:00-08:00").load()
    assert zoned.timestamps[0] == np.datetime64(T0)
    with pytest.raises(UserError, match=r"start='2012-03-01 00:00-08:00' \(2012-03-01 08:00:00 "):
        source(tmp_path, path="zoned.csv", start="2012-03-01 00:00-08:00").load()


def test_pandas_hdf5_as_dcrnn_distributes_metr_la(tmp_path):
    pytest.importorskip("tables", reason="PyTables is not installed")
    table = speeds()
    table.index = pd.date_range(T0, periods=len(table), freq="5min")
    table.iloc[7, 3] = 0.0
    table.to_hdf(tmp_path / "metr-la.h5", key="df")
    write_locations(tmp_path)
    # the same config as the week's CSV: start and step agree with the file's own times
    stream = source(tmp_path, path="metr-la.h5").load()
    assert stream.values.shape == (30, 4, 1) and stream.point_ids == IDS
    assert stream.timestamps[0] == np.datetime64(T0) and not stream.mask[7, 3, 0]
    np.testing.assert_allclose(
        stream.values[..., 0], held(speeds(), stream.mask[..., 0]), rtol=1e-6
    )
    with pytest.raises(UserError, match=r"starts at 2012-03-01 00:00:00, not at .*start=null"):
        source(tmp_path, path="metr-la.h5", start="2017-01-01").load()

    table.to_hdf(tmp_path / "two.h5", key="speed")
    table.to_hdf(tmp_path / "two.h5", key="other")
    with pytest.raises(UserError, match=r"tables \['other', 'speed'\]: .*data\.source\.key=other,"):
        source(tmp_path, path="two.h5").load()
    assert source(tmp_path, path="two.h5", key="speed").load().num_points == 4
    with pytest.raises(UserError, match=r"has no table 'nope'"):
        source(tmp_path, path="two.h5", key="nope").load()
    (tmp_path / "junk.h5").write_bytes(b"not an hdf5 file")
    with pytest.raises(UserError, match=r"Cannot read the wide table .*junk\.h5"):
        source(tmp_path, path="junk.h5").load()


def test_parquet_with_a_datetime_index(tmp_path):
    table = speeds()
    table.index = pd.date_range(T0, periods=len(table), freq="5min")
    write_locations(tmp_path)
    try:
        table.to_parquet(tmp_path / "speed.parquet")
    except ImportError:
        (tmp_path / "speed.parquet").write_bytes(b"PAR1")
        with pytest.raises(MissingPackageError, match="pip install pyarrow"):
            source(tmp_path, path="speed.parquet").load()
        pytest.skip("no Parquet engine (pyarrow) installed: checked its message only")
    stream = source(tmp_path, path="speed.parquet").load()
    np.testing.assert_allclose(
        stream.values[..., 0], held(speeds(), stream.mask[..., 0]), rtol=1e-6
    )


def test_times_written_as_text_in_an_index_are_read_as_the_times(tmp_path):
    """A Parquet or HDF5 table whose index holds the times as text (not a DatetimeIndex):
    the index was dropped unread, so the rows after an outage were counted from
    data.source.start as if none were missing."""
    write_locations(tmp_path)
    table = speeds()
    table.index = pd.date_range(T0, periods=len(table), freq="5min").strftime("%Y-%m-%d %H:%M")
    table.index.name = "time"
    outage = table.drop(table.index[10:13])  # three rows absent: a gap, not a shift
    outage.to_parquet(tmp_path / "text.parquet")
    outage.to_hdf(tmp_path / "text.h5", key="speed")
    for name in ("text.parquet", "text.h5"):
        stream = source(tmp_path, path=name).load()
        assert stream.values.shape == (30, 4, 1) and stream.timestamps[0] == np.datetime64(T0)
        assert not stream.mask[10:13].any() and stream.mask[13:].all()
        np.testing.assert_allclose(
            stream.values[..., 0], held(speeds(), stream.mask[..., 0]), rtol=1e-6
        )


def test_an_index_that_holds_no_times_is_refused_not_dropped(tmp_path):
    """Row labels that are not times are named; row numbers (0, 1, 2, ...) are no times."""
    write_locations(tmp_path)
    table = speeds(6)
    table.index = pd.Index([f"row {k}" for k in range(6)], name="label")
    table.to_parquet(tmp_path / "labels.parquet")
    with pytest.raises(UserError) as err:
        source(tmp_path, path="labels.parquet").load()
    message = str(err.value)
    assert message.startswith("Cannot parse the timestamps in the index 'label' of file ")
    assert message.endswith(
        "If the index holds no times, write the table without it "
        "(DataFrame.reset_index(drop=True) before saving it) or name the time column "
        "(data.source.time_col)."
    )
    table.index = pd.MultiIndex.from_arrays([range(6), range(6)], names=["day", "hour"])
    table.to_hdf(tmp_path / "levels.h5", key="speed")
    with pytest.raises(UserError, match=r"levels\.h5 has an index of 2 levels \['day', 'hour'\]"):
        source(tmp_path, path="levels.h5").load()
    table.index = pd.Index(range(6)).astype("int64")  # row numbers, not a RangeIndex
    table.to_parquet(tmp_path / "numbered.parquet")
    stream = source(tmp_path, path="numbered.parquet").load()
    assert stream.timestamps[0] == np.datetime64(T0) and stream.num_steps == 6


def test_row_numbers_written_by_to_csv_are_skipped_not_read_as_times(tmp_path, caplog):
    """``DataFrame.to_csv`` writes the row numbers as a first column without a name, which
    was taken for the times (refused as numbers, or read as 1970's first seconds with
    data.source.time_unit=s): skipped, with an INFO line, as data=points skips it."""
    write_locations(tmp_path)
    speeds().to_csv(tmp_path / "numbered.csv")  # ",773869,..." then "0,60.0,..."
    with caplog.at_level(logging.INFO, logger="cloudlstm.data.sources.tables"):
        stream = source(tmp_path, path="numbered.csv").load()
    assert stream.point_ids == IDS and stream.timestamps[0] == np.datetime64(T0)
    np.testing.assert_allclose(
        stream.values[..., 0], held(speeds(), stream.mask[..., 0]), rtol=1e-6
    )
    assert "skipping column(s) without a name ['Unnamed: 0']" in caplog.text
    timed = speeds(6)
    timed.insert(0, "timestamp", pd.date_range(T0, periods=6, freq="10min"))
    timed.to_csv(tmp_path / "numbered_times.csv")  # ",timestamp,773869,..."
    stream = source(tmp_path, path="numbered_times.csv", step=None).load()
    assert stream.point_ids == IDS and stream.metadata["step_minutes"] == 10.0
    for unit in (None, "s"):
        with pytest.raises(UserError, match=r"numbered\.csv has no time column: give the first"):
            source(tmp_path, path="numbered.csv", start=None, step=None, time_unit=unit).load()


# ---------------------------------------------------------------------------- errors
def test_missing_files_say_where_to_get_them(los):
    hint = "Get them from example.org."
    with pytest.raises(MissingFileError, match=r"nope\.csv.*data\.source\.root.*example\.org"):
        source(los, path="nope.csv", missing_hint=hint).load()
    with pytest.raises(MissingFileError, match=r"data\.source\.positions=where\.csv"):
        source(los, positions="where.csv").load()
    # a path of its own, which the root does not prefix, is named as given, without the root
    elsewhere = los.parent / "elsewhere" / "speed.csv"
    message = re.escape(f"No file {elsewhere} (data.source.path={elsewhere}): set data.source.root")
    with pytest.raises(MissingFileError, match=message):
        source(los, path=str(elsewhere)).load()
    (los / "table.xlsx").write_bytes(b"")
    with pytest.raises(UserError, match=r"unknown table format \(suffix '\.xlsx'\)"):
        source(los, path="table.xlsx").load()


def test_columns_and_positions_must_match(los):
    write_locations(los, IDS[:3], "three.csv")
    with pytest.raises(UserError, match=r"1 point column\(s\) have no position .*'717447'"):
        source(los, positions="three.csv").load()
    table = speeds()[IDS[:3]]
    table.to_csv(los / "three_columns.csv", index=False)
    with pytest.raises(UserError, match=r"1 position\(s\) have no column .*'717447'"):
        source(los, path="three_columns.csv").load()
    (los / "headless.csv").write_text("773869,34.1,-118.3\n767541,34.2,-118.2\n")
    with pytest.raises(UserError, match=r"cannot tell .* no header row: add one"):
        source(los, positions="headless.csv").load()
    pd.DataFrame({"sensor_id": IDS, "latitude": LAT, "longitude": ["x", 1, 2, 3]}).to_csv(
        los / "text.csv", index=False
    )
    with pytest.raises(UserError, match=r"Column 'longitude' .* must be numeric.*'x'"):
        source(los, positions="text.csv").load()
    pd.DataFrame({"sensor_id": IDS[:2] * 2, "latitude": 1.0, "longitude": 2.0}).to_csv(
        los / "twice.csv", index=False
    )
    with pytest.raises(UserError) as twice:
        read_positions(los / "twice.csv")
    assert str(twice.value) == (
        f"positions file {los / 'twice.csv'}: the id '773869' has 2 rows (line 2 and line 4) "
        "(2 ids are repeated: ['773869', '767541']); a positions file has one row per point: "
        "keep one of each."
    )


@pytest.mark.parametrize(
    ("name", "rows"),
    [
        ("twice.csv", "line 3, line 5 and line 6"),
        ("twice.parquet", "data row 0, data row 2 and data row 3"),
    ],
)
def test_an_id_on_several_rows_of_a_positions_file_names_them(los, name, rows):
    """The rows of a repeated id are named as the user finds them: a CSV's lines (the
    blank line 2 counted), a Parquet file's data rows. The line named no row at all."""
    table = pd.DataFrame(
        {"sensor_id": [IDS[0], IDS[1], IDS[0], IDS[0]], "latitude": LAT, "longitude": 1.0}
    )
    if name.endswith(".csv"):
        (los / name).write_text(table.to_csv(index=False).replace("\n", "\n\n", 1))
    else:
        table.to_parquet(los / name, index=False)
    with pytest.raises(UserError) as refused:
        source(los, positions=name).load()
    assert str(refused.value) == (
        f"positions file {los / name}: the id '773869' has 3 rows ({rows}); a "
        "positions file has one row per point: keep one of each."
    )


def test_a_time_column_of_a_name_not_looked_for_is_named_as_such(tmp_path):
    """``time_utc`` is none of the names looked for, so it read as a point without a
    position, and the line gave no hint that it holds the times."""
    times = pd.date_range(T0, periods=6, freq="5min").strftime("%Y-%m-%d %H:%M")
    speeds(6).assign(time_utc=times).to_csv(tmp_path / "wide.csv", index=False)
    locations = write_locations(tmp_path)
    with pytest.raises(UserError) as err:
        WideTableSource(tmp_path / "wide.csv", locations).load()
    assert str(err.value).endswith(
        "Give every column a row of the positions file. Column 'time_utc' holds times: if it "
        "is the table's time column, name it (data.source.time_col=time_utc)."
    )
    named = WideTableSource(tmp_path / "wide.csv", locations, time_col="time_utc").load()
    assert named.point_ids == IDS and named.metadata["step_minutes"] == 5.0
    # a point's readings are no times: the line stays as it was
    write_locations(tmp_path, IDS[:3], "three.csv")
    with pytest.raises(UserError) as err:
        WideTableSource(tmp_path / "wide.csv", tmp_path / "three.csv", time_col="time_utc").load()
    assert "holds times" not in str(err.value)


def test_ids_that_differ_in_case_alone_are_named_so(los):
    """Columns S001 for the positions' s001 read as points without a position, no more."""
    lower = ["s001", "s002", "s003", "s004"]
    locations = write_locations(los, lower, "lower.csv")
    speeds().set_axis([i.upper() for i in lower], axis=1).to_csv(los / "upper.csv", index=False)
    with pytest.raises(UserError) as err:
        source(los, path="upper.csv", positions="lower.csv").load()
    assert str(err.value).endswith(
        "(its ids: e.g. ['s001', 's002', 's003']). Give every column a row of the positions "
        "file. All 4 differ from an id of the positions file only in case (e.g. 'S001' and "
        "'s001'): ids are matched as written, so write them alike in both."
    )
    speeds().set_axis(["S001", "x2", "x3", "x4"], axis=1).to_csv(los / "one.csv", index=False)
    with pytest.raises(UserError, match=r"file\. 1 of them differs from an id of the positions"):
        source(los, path="one.csv", positions=locations.name).load()
    write_locations(los, IDS, "other.csv")
    with pytest.raises(UserError) as err:
        source(los, path="upper.csv", positions="other.csv").load()
    assert "only in case" not in str(err.value)
    dcrnn_pickle(los / "upper.pkl", [i.upper() for i in IDS[:2]] + ["A9", "B9"], WEIGHTS)
    with pytest.raises(UserError, match=r"graph of these points\. 2 of them differ from an id"):
        source(los, graph="upper.pkl").adjacency(["a9", "b9", "c9"])


def test_unreadable_values_are_named_or_missing_with_warn(los, caplog):
    """Named by the file's line where it has no times (they were named by data row, from 0
    past the header: line 7 was "data row 5"); a blank line is counted, as an editor does."""
    table = speeds().astype(object)
    table.iloc[5, 2] = "55 mph"
    table.iloc[12, 0] = "n/d"
    text = table.to_csv(index=False).replace("\n", "\n\n", 3)  # lines 2, 4, 6 blank
    with gzip.open(los / "los_speed.csv.gz", "wt") as f:
        f.write(text)
    with pytest.raises(UserError) as err:
        source(los).load()
    assert str(err.value).startswith(
        f"file {los / 'los_speed.csv.gz'}: 2 channel value(s) are not finite numbers: "
        "line 10, column '767542': '55 mph'; line 17, column '773869': 'n/d'."
    )
    assert text.splitlines()[9].split(",")[2] == "55 mph"  # line 10, from 1
    stream = source(los, bad_values="warn").load()
    assert not stream.mask[5, 2, 0] and "bad_values=warn" in caplog.text


@pytest.mark.parametrize("gap", [False, True], ids=["bool", "with-empty-cells"])
def test_a_point_column_of_true_false_is_refused_not_read_as_1_0(los, gap):
    """A wide table's cells are readings: a column of True/False (a status column joined
    by mistake; with empty cells pandas keeps it as objects) was read as speeds of 1 and
    0 without a word."""
    table = speeds()
    cells = np.resize(np.array([True, False], dtype=object), len(table))
    cells[4] = None if gap else cells[4]
    table[IDS[2]] = cells
    table.to_csv(los / "los_speed.csv.gz", index=False)
    message = (
        f"file {los / 'los_speed.csv.gz'}: point column(s) {IDS[2]} hold True/False, not "
        "readings of 'speed': write each point's readings as numbers (0 and 1 where they are "
        "yes/no), or leave those columns out."
    )
    with pytest.raises(UserError) as err:
        source(los).load()
    assert str(err.value) == message


def metr_la_file(folder: Path, table: pd.DataFrame) -> Path:
    """``table`` with its times as the index in a pandas HDF5 file, as DCRNN's ``metr-la.h5``
    (fixed format, which keeps a column of mixed objects as they are), beside the sensors'
    positions; its path."""
    pytest.importorskip("tables", reason="PyTables is not installed")
    table.index = pd.date_range(T0, periods=len(table), freq="5min")
    with warnings.catch_warnings():  # PerformanceWarning: the mixed objects are pickled
        warnings.simplefilter("ignore")
        table.to_hdf(folder / "metr-la.h5", key="df")
    write_locations(folder)
    return folder / "metr-la.h5"


def test_a_complex_point_column_is_refused_naming_it(tmp_path):
    """An HDF5 file keeps a complex column: its real parts were read as speeds, the
    imaginary ones lost with a mere ComplexWarning."""
    table = speeds()
    table[IDS[2]] = table[IDS[2]] + 1j
    path = metr_la_file(tmp_path, table)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even a warning on the way
        with pytest.raises(UserError) as err:
            source(tmp_path, path="metr-la.h5").load()
    assert str(err.value) == (
        f"file {path}: column {IDS[2]!r} holds complex numbers (e.g. (80+1j) at time "
        "2012-03-01 00:00:00), whose imaginary parts would be lost: give real numbers (the "
        "real part or the magnitude, whichever the column means)."
    )


@pytest.mark.parametrize("text", [False, True], ids=["numbers", "numbers-and-text"])
def test_a_point_column_of_true_false_among_numbers_is_refused_naming_a_row(tmp_path, text):
    """Only a column of True/False alone was refused: one True among speeds read as 1. One
    beside text too ("abc") was said to be among numbers: the line names the text."""
    table = speeds().astype({IDS[2]: object})
    table.loc[4, IDS[2]] = True
    among, beside = "numbers", ""
    if text:
        table.loc[6, IDS[2]] = "abc"
        among = "numbers and text"
        beside = ", and text that is no number (e.g. 'abc' at time 2012-03-01 00:30:00)"
    path = metr_la_file(tmp_path, table)
    for mode in ("error", "warn"):
        with pytest.raises(UserError) as err:
            source(tmp_path, path="metr-la.h5", bad_values=mode).load()
        assert str(err.value) == (
            f"file {path}: column {IDS[2]!r} holds True/False among {among} (e.g. True at time "
            f"2012-03-01 00:20:00; 1 such cell(s)), which would read as 1 and 0{beside}: write "
            "every cell as a number, or leave it empty where there is no reading."
        )


def test_a_row_after_a_quoted_field_over_several_lines_is_named_by_its_own_line(los):
    """A quoted field that goes on over lines is one row of the file: each line of it was
    counted as a row, and a line of blanks alone, which pandas skips, as a row too, so a
    cell further down was named by a line before its own (line 7 for line 10)."""
    table = speeds(8).astype(object)
    table.iloc[1, 0] = "61\n62\n(two readings)"  # quoted: lines 3-5
    table.iloc[5, 2] = "55 mph"
    text = table.to_csv(index=False).replace("\n62.0,", "\n   \n62.0,", 1)  # line 8 blanks
    (los / "quoted.csv").write_text(text)
    with pytest.raises(UserError) as err:
        source(los, path="quoted.csv").load()
    assert str(err.value).startswith(
        f"file {los / 'quoted.csv'}: 2 channel value(s) are not finite numbers: line 3, column "
        "'773869': '61\\n62\\n(two readings)'; line 10, column '767542': '55 mph'."
    )
    assert text.splitlines()[9].split(",")[2] == "55 mph"  # line 10, from 1


def test_a_row_after_a_quoted_blank_field_is_named_by_its_own_line(los):
    """A line whose one field is quoted blanks (``"  "``) is a row to pandas (its first cell
    blank, missing), where a line of blanks alone is none: it was counted as such a line,
    so a cell further down was named by the line after its own (line 9 for line 8)."""
    table = speeds(8).astype(object)
    table.iloc[5, 2] = "55 mph"
    text = table.to_csv(index=False).replace("\n61.0,", '\n"  "\n61.0,', 1)  # line 4
    (los / "quoted.csv").write_text(text)
    read = pd.read_csv(los / "quoted.csv")
    assert len(read) == 9 and read.iloc[2, 0] == "  "  # pandas keeps it as a row
    with pytest.raises(UserError) as err:
        source(los, path="quoted.csv").load()
    assert str(err.value).startswith(
        f"file {los / 'quoted.csv'}: 1 channel value(s) are not finite numbers: line 8, "
        "column '767542': '55 mph'."
    )
    assert text.splitlines()[7].split(",")[2] == "55 mph"  # line 8, from 1


@pytest.mark.parametrize("form", ["csv", "parquet-column", "parquet-index", "h5"])
def test_an_unreadable_value_is_named_by_the_time_its_row_writes(tmp_path, form):
    """A table with times: the cell's time and its point's column, as the user finds the
    cell in the file, where its position named it (data row 5)."""
    write_locations(tmp_path)
    table = speeds(8).astype(object)
    table.iloc[5, 2] = "55 mph"
    times = pd.date_range("2012-03-01 00:00", periods=8, freq=STEP)
    written = times.strftime("%d/%m/%Y %H:%M")  # as the file writes them
    path = tmp_path / {"csv": "t.csv", "h5": "t.h5"}.get(form, "t.parquet")
    if form == "csv":
        table.assign(time=written)[["time", *IDS]].to_csv(path, index=False)
    elif form == "parquet-column":
        table.assign(time=written).astype({c: str for c in IDS}).to_parquet(path)
    elif form == "parquet-index":
        table.set_index(times).astype(str).to_parquet(path)
    else:
        table.set_index(times).astype(str).to_hdf(path, key="speed")
    day_first = {} if form.endswith("index") or form == "h5" else {"time_format": "%d/%m/%Y %H:%M"}
    wide = WideTableSource(path, tmp_path / "graph_sensor_locations.csv", **day_first)
    with pytest.raises(UserError) as err:
        wide.load()
    when = written[5] if day_first else times[5]
    assert (
        f"1 channel value(s) are not finite numbers: time {when}, column '767542': '55 mph'."
        in str(err.value)
    )


def test_an_unreadable_value_of_a_parquet_table_without_times_is_named_by_its_data_row(tmp_path):
    """A Parquet file has no lines: its data rows, from 0, as pandas shows them."""
    write_locations(tmp_path)
    table = speeds(8).astype(str)
    table.iloc[5, 2] = "55 mph"
    table.to_parquet(tmp_path / "t.parquet")
    wide = WideTableSource(
        tmp_path / "t.parquet",
        tmp_path / "graph_sensor_locations.csv",
        start="2012-03-01",
        step="5min",
    )
    with pytest.raises(UserError, match=r"numbers: data row 5, column '767542': '55 mph'\."):
        wide.load()


def test_times_must_lie_on_a_regular_grid(tmp_path):
    write_locations(tmp_path)
    table = speeds(6)
    table.insert(0, "time", pd.date_range(T0, periods=6, freq="5min"))
    table.loc[5, "time"] = T0 + pd.Timedelta("27min")
    table.to_csv(tmp_path / "off.csv", index=False)
    with pytest.raises(
        UserError, match=r"00:27:00 is not on the regular grid .*data\.source\.step"
    ):
        source(tmp_path, path="off.csv", start=None, step=None).load()
    table.loc[5, "time"] = T0 + pd.Timedelta("5min")
    table.to_csv(tmp_path / "twice.csv", index=False)
    with pytest.raises(UserError, match=r"the time 2012-03-01 00:05:00 has several rows"):
        source(tmp_path, path="twice.csv", start=None, step=None).load()
    speeds(6).to_csv(tmp_path / "no_times.csv", index=False)
    with pytest.raises(UserError, match=r"has no time column: .*data\.source\.start="):
        source(tmp_path, path="no_times.csv", start=None).load()
    with pytest.raises(UserError, match=r"^data\.source\.step='soon': give a positive duration"):
        source(tmp_path, step="soon")
    with pytest.raises(UserError, match=r"^data\.source\.missing_value='none' is not a number"):
        source(tmp_path, missing_value="none")
    assert source(tmp_path, missing_value="0").missing_value == 0.0
    with pytest.raises(UserError, match=r"data\.source\.start='someday' is not a date"):
        source(tmp_path, start="someday")
    for unnamed in ("", " ", None):  # `data.source.channel=` on the command line
        with pytest.raises(UserError, match=r"data\.source\.channel=.*: give the channel a name"):
            source(tmp_path, channel=unnamed)


@pytest.mark.parametrize(
    ("cell", "said"),
    [
        ("soon", "line 9, 'soon', is not a date/time"),
        ("", "has 1 empty timestamp(s) (first at line 9)"),
        ("2012-03-01 00:20", "has several rows (line 8 and line 9)"),
    ],
)
def test_a_time_of_a_csv_table_is_named_by_its_line(tmp_path, cell, said):
    """A time that cannot be read, or that another row writes too, is named by its line,
    a blank line and a quoted time over two lines counted (it was "data row 5", its
    position from 0 past the header)."""
    write_locations(tmp_path)
    table = speeds(8).astype(object)
    table.insert(0, "time", pd.date_range(T0, periods=8, freq=STEP).strftime("%Y-%m-%d %H:%M"))
    table.loc[1, "time"] = "2012-03-01\n00:05"  # quoted, lines 4-5: read as a space would
    table.loc[5, "time"] = cell
    text = table.to_csv(index=False).replace("\n", "\n\n", 1)  # line 2 blank
    (tmp_path / "times.csv").write_text(text)
    assert text.splitlines()[8].startswith(f"{cell},")  # line 9
    with pytest.raises(UserError, match=re.escape(said)):
        source(tmp_path, path="times.csv", start=None, step=None).load()


def test_local_times_over_the_autumn_clock_change_say_which_hour_repeats(tmp_path):
    """Local clock times write 02:00 twice the night the clocks go back: the line says so,
    as data=points does, and names both rows by their lines (it named the second by its
    position from 0 past the header, "data row 3")."""
    write_locations(tmp_path)
    table = speeds(6)
    local = pd.date_range("2024-10-27 00:00", periods=6, freq="h", tz="Europe/Berlin")
    table.insert(0, "time", local.strftime("%Y-%m-%d %H:%M"))
    table.to_csv(tmp_path / "local.csv", index=False)
    with pytest.raises(UserError) as err:
        source(tmp_path, path="local.csv", start=None, step=None).load()
    assert str(err.value).endswith(
        "the time 2024-10-27 02:00:00 has several rows (line 4 and line 5); a wide table "
        "has one row per time step; if the file writes the local clock times of a zone such "
        "as Europe/Berlin, that is the hour which repeats when its clocks go back: write the "
        "times in UTC or with their offset (2024-10-27T02:00:00+01:00 the second time), "
        "which are read as UTC."
    )


def _hours(start: str, zone: str | None = None) -> list[str]:
    """Six hourly times from ``start`` as a file writes them: clock times, or (``zone``)
    that zone's with their offsets."""
    if zone is None:
        return list(pd.date_range(start, periods=6, freq="h").strftime("%Y-%m-%d %H:%M"))
    return [t.isoformat() for t in pd.date_range(start, periods=6, freq="h", tz=zone)]


@pytest.mark.parametrize(
    ("times", "hint"),
    [
        (  # New York's clocks repeat 01:00
            pd.date_range("2024-11-03", periods=6, freq="h", tz="America/New_York").strftime(
                "%Y-%m-%d %H:%M"
            ),
            "; if the file writes the local clock times of a zone such as America/New_York, "
            "that is the hour which repeats when its clocks go back: write the times in UTC "
            "or with their offset (2024-11-03T01:00:00-05:00 the second time), which are "
            "read as UTC.",
        ),
        (_hours("2024-07-01 10:00"), "."),  # 11:00 written twice: no clocks repeat it
        (_hours("2024-10-27 00:00", "Europe/Berlin"), "."),  # with offsets: read as UTC
    ],
)
def test_the_clock_change_is_named_only_where_the_repeated_time_is_its_hour(tmp_path, times, hint):
    """The autumn clock change's hint was added to any one time written in two rows: to a
    time no zone's clocks repeat, and to one written twice with its offset (read as UTC,
    which repeats none: 01:00 UTC, 02:00+01:00 as written, was said to be the repeated
    hour). It names a zone whose clocks repeat the time, and the offset of its second."""
    write_locations(tmp_path)
    times = list(times)
    if len(set(times)) == len(times):
        times[2] = times[1]  # a row written twice by hand
    table = speeds(6)
    table.insert(0, "time", times)
    table.to_csv(tmp_path / "twice.csv", index=False)
    with pytest.raises(UserError) as err:
        source(tmp_path, path="twice.csv", start=None, step=None).load()
    assert str(err.value).endswith(
        f"has several rows (line 3 and line 4); a wide table has one row per time step{hint}"
    )


@pytest.mark.parametrize(
    ("layout", "cause"),
    [
        (
            "trailing",
            "(each ends in a delimiter ','), so every column would be read one place "
            "off; remove the ',' that ends each data row.",
        ),
        (
            "r",
            "(the header has no name for the first column, as R's write.table writes it), "
            "so every column would be read one place off; add the first column's name at the "
            "header's start (e.g. time,...; R: write.csv, or write.table with col.names=NA).",
        ),
    ],
)
def test_data_rows_with_a_field_more_than_the_header_are_refused(tmp_path, layout, cause):
    """pandas takes a row's extra first field for its label and lays the header's names
    one column off: point 773869 read 767541's values (each row ending in a delimiter), or
    the times were dropped (R's write.table). The first point's values 0, 1, 2, ... make
    that label a RangeIndex in pandas 3, as if there were none."""
    write_locations(tmp_path)
    values = np.arange(6)[:, None] + 10 * np.arange(len(IDS))[None, :]  # point 0: 0, 1, 2
    times = pd.date_range(T0, periods=6, freq="5min").strftime("%Y-%m-%d %H:%M")
    if layout == "trailing":
        rows = [",".join(map(str, row)) + "," for row in values]
    else:
        rows = [f"{t}," + ",".join(map(str, row)) for t, row in zip(times, values, strict=True)]
    path = tmp_path / "shifted.csv"
    path.write_text("\n".join([",".join(IDS), *rows]) + "\n")
    with pytest.raises(UserError) as err:
        source(tmp_path, path="shifted.csv", missing_value=None).load()
    prefix = f"Cannot read the wide table {path}: its data rows have one field more than its "
    assert str(err.value) == f"{prefix}header {cause}"


def test_a_positions_file_whose_rows_end_in_a_delimiter_is_named_so(los):
    """Its ids were read from the x column and its x from the y column."""
    rows = [f"{i},{x},{y}," for i, x, y in zip(IDS, LON, LAT, strict=True)]
    (los / "trailing.csv").write_text("\n".join(["sensor_id,longitude,latitude", *rows]))
    with pytest.raises(UserError) as err:
        source(los, positions="trailing.csv").load()
    assert str(err.value) == (
        f"Cannot read the positions file {los / 'trailing.csv'}: its data rows have one field "
        "more than its header (each ends in a delimiter ','), so every column would be read "
        "one place off; remove the ',' that ends each data row."
    )


@pytest.mark.parametrize("step", [5, "5", 5.0, " 5 "])
def test_a_step_without_a_unit_is_refused_not_read_as_nanoseconds(los, step):
    """Hydra passes ``data.source.step=5`` as 5, which pandas reads as 5 ns: a run trained
    on steps of 0 days 00:00:00.000000005."""
    with pytest.raises(UserError) as err:
        source(los, step=step)
    assert str(err.value) == (
        f"data.source.step={str(step).strip()} has no unit: give a duration such as 5min or "
        "1h (data.source.step=5min)."
    )
    for written in ("5min", "300s"):
        stream = source(los, step=written).load()
        assert stream.timestamps[1] - stream.timestamps[0] == np.timedelta64(5, "m")


def test_a_start_given_as_a_number_is_refused_not_read_as_nanoseconds(los):
    """pandas reads 1330560000 as nanoseconds since 1970: 1970-01-01 00:00:01.33."""
    with pytest.raises(UserError) as err:
        source(los, start=1330560000)
    assert str(err.value) == (
        "data.source.start=1330560000 is a number, not a date: write the date quoted, e.g. "
        "'2012-03-01 00:00' (1330560000 as Unix time in s)."
    )
    with pytest.raises(UserError, match=r"^data\.source\.start=2012 is a number, not a date: "
                       r"write the date quoted, e\.g\. '2012-03-01 00:00'\.$"):  # fmt: skip
        source(los, start=2012)
    for written in ("2012-03-01", "20120301"):  # text of digits is a date, as pandas reads it
        assert source(los, start=written).load().timestamps[0] == np.datetime64(T0)


def test_repeated_columns_and_covariates_are_refused(tmp_path):
    write_locations(tmp_path)
    (tmp_path / "twice.csv").write_text("773869,773869\n1,2\n3,4\n")
    with pytest.raises(UserError, match=r"names the column\(s\) \['773869'\] more than once"):
        source(tmp_path, path="twice.csv").load()
    with pytest.raises(UserError, match=r"covariate_cols=\['temp'\]: a wide table holds one"):
        source(tmp_path, covariate_cols=["temp"])


# ---------------------------------------------------------------------------- graph
def dcrnn_pickle(path, ids, matrix):
    """DCRNN's ``adj_mx.pkl``: ``(sensor_ids, sensor_id_to_ind, adj_mx)``."""
    with path.open("wb") as f:
        pickle.dump((list(ids), {s: i for i, s in enumerate(ids)}, matrix), f, protocol=2)


def test_ids_written_as_floats_are_named_as_such_not_matched(los):
    """pandas writes an id column that had an empty cell as floats (773869.0): the line
    showed both forms without a word. They are named, not matched: a float id beyond 2**53
    may be another id rounded."""
    places = pd.DataFrame({"sensor_id": [*map(float, IDS), np.nan], "x": range(5), "y": 0.0})
    places.dropna().to_csv(los / "floats.csv", index=False)
    fix = (
        "as pandas writes a column of whole numbers that had an empty cell: ids are matched "
        "as written, so write them alike in both (as integers: in pandas, astype('Int64'))."
    )
    with pytest.raises(UserError) as err:
        source(los, positions="floats.csv").load()
    assert str(err.value).endswith(
        "All 4 differ from an id of the positions file only by a '.0' (e.g. '773869' and "
        f"'773869.0'), {fix}"
    )
    dcrnn_pickle(los / "adj_mx.pkl", [f"{i}.0" for i in IDS[:3]] + IDS[3:], WEIGHTS)
    with pytest.raises(UserError) as err:
        source(los, graph="adj_mx.pkl").adjacency(IDS)
    assert str(err.value).endswith(
        f"All 3 differ from an id of the graph only by a '.0' (e.g. '773869' and '773869.0'), {fix}"
    )


WEIGHTS = np.array(
    [[1.0, 0.5, 0.0, 0.2], [0.3, 1.0, 0.7, 0.0], [0.0, 0.6, 1.0, 0.9], [0.1, 0.0, 0.8, 1.0]]
)


def test_a_dcrnn_pickle_is_reordered_to_the_streams_points(los):
    order = [2, 0, 3, 1]  # the pickle lists the sensors in another order
    shuffled = WEIGHTS[np.ix_(order, order)].astype(np.float32)
    dcrnn_pickle(los / "adj_mx.pkl", [IDS[i] for i in order], shuffled)
    made = source(los, graph="adj_mx.pkl")
    np.testing.assert_allclose(made.adjacency(IDS), WEIGHTS, rtol=1e-6)
    np.testing.assert_allclose(made.adjacency(IDS[::-1]), WEIGHTS[::-1, ::-1], rtol=1e-6)
    assert source(los).adjacency(IDS) is None
    with pytest.raises(UserError, match=r"1 point\(s\) of the data are not in the graph.*'x9'"):
        made.adjacency([*IDS[:3], "x9"])


def test_a_csv_adjacency_follows_the_tables_column_order(los):
    pd.DataFrame(WEIGHTS).to_csv(los / "los_adj.csv.gz", header=False, index=False)
    made = source(los, graph="los_adj.csv.gz")
    np.testing.assert_array_equal(made.adjacency(IDS[1:]), WEIGHTS[1:, 1:])  # a dropped point
    pd.DataFrame(WEIGHTS, columns=IDS).to_csv(los / "header.csv", index=False)
    with pytest.raises(UserError, match=r"is 5 x 4, not a square matrix \(a header row\?"):
        source(los, graph="header.csv").adjacency(IDS)
    pd.DataFrame(WEIGHTS, columns=list("abcd")).to_csv(los / "names.csv", index=False)
    with pytest.raises(
        UserError, match=r"row 0, column 0 \(line 1\) is 'a', not a number \(a header"
    ):
        source(los, graph="names.csv").adjacency(IDS)
    pd.DataFrame(WEIGHTS[:3, :3]).to_csv(los / "small.csv", header=False, index=False)
    with pytest.raises(UserError, match=r"is 3 x 3, but the data file has 4 point columns"):
        source(los, graph="small.csv").adjacency(IDS)


@pytest.mark.parametrize("labels", [IDS, range(4)], ids=["ids", "row-numbers"])
def test_a_csv_adjacency_with_labels_as_to_csv_writes_them_says_so(los, labels):
    """DataFrame(adj, index=ids, columns=ids).to_csv() read as a 5 x 5 matrix, its ids as
    weights: refused as the wrong size, or as the corner's NaN, not as the labels."""
    labelled = pd.DataFrame(WEIGHTS, index=list(labels), columns=list(labels))
    labelled.to_csv(los / "labelled.csv")
    with pytest.raises(UserError) as err:
        source(los, graph="labelled.csv").adjacency(IDS)
    shown = [str(label) for label in labels][:3]
    assert str(err.value) == (
        f"data.source.graph={los / 'labelled.csv'}: its first row and first column hold the "
        f"same 4 labels after an empty corner (e.g. {shown}), as DataFrame.to_csv writes a "
        "matrix's columns and index: a CSV adjacency is the bare weights, in the order of the "
        "table's point columns; save it with to_csv(header=False, index=False), or give "
        "DCRNN's adj_mx.pkl."
    )
    labelled.to_csv(los / "index.csv", header=False)
    with pytest.raises(UserError, match=r"is 4 x 5, not a square matrix \(an index column, as"):
        source(los, graph="index.csv").adjacency(IDS)


@pytest.mark.parametrize("header", [True, False], ids=["header", "no-header"])
def test_a_list_of_edges_as_the_graph_is_named_as_such(los, header):
    """DCRNN's distances_la_2012.csv (from, to, cost) given as the graph: said to be a list
    of edges, not a matrix with a header row or of the wrong shape."""
    edges = pd.DataFrame(
        [
            (a, b, 100.0 * (k + 1))
            for k, (a, b) in enumerate(zip(IDS, IDS[1:] + IDS[:1], strict=True))
        ]
        + [(IDS[0], IDS[2], 50.0)],
        columns=["from", "to", "cost"],
    )
    edges.to_csv(los / "distances.csv", header=header, index=False)
    with pytest.raises(UserError, match=r"\(a list of edges, .* distances_la_2012\.csv\? .*adj_mx"):
        source(los, graph="distances.csv").adjacency(IDS)


@pytest.mark.parametrize(
    ("matrix", "words"),
    [
        (WEIGHTS[:3], r"is 3 x 4, not a square matrix"),
        (np.where(np.eye(4) > 0, np.nan, WEIGHTS), r"4 weight\(s\) are not finite, e.g. nan"),
        (WEIGHTS - 0.5, r"weight\(s\) are negative, e.g. -0.5 at row 0, column 2"),
    ],
)
def test_a_graph_must_be_square_finite_and_non_negative(los, matrix, words):
    pd.DataFrame(matrix).to_csv(los / "bad.csv", header=False, index=False)
    with pytest.raises(UserError, match=words):
        read_graph(los / "bad.csv", IDS)


def test_text_in_a_csv_graph_is_named_by_its_line(los):
    """The matrix's row and column, and the line an editor finds it on: a blank line is no
    row of the matrix (row 2 is on line 4)."""
    text = pd.DataFrame(WEIGHTS).astype(object).to_csv(header=False, index=False)
    lines = text.splitlines()
    lines[2] = lines[2].replace(lines[2].split(",")[1], "strong", 1)
    (los / "gaps.csv").write_text("\n".join([*lines[:2], "", *lines[2:]]) + "\n")
    with pytest.raises(
        UserError, match=r"the cell at row 2, column 1 \(line 4\) is 'strong', not a"
    ):
        read_graph(los / "gaps.csv", IDS)


@pytest.mark.parametrize("diagonal", [0.0, 1.0])
def test_a_graph_without_edges_is_refused(los, diagonal):
    """A graph of zeros (the wrong file, a threshold too high) trained STGCN and DCRNN on
    no edges at all, without a word; self-loops alone are no edges either."""
    dcrnn_pickle(los / "zeros.pkl", IDS, np.eye(4, dtype=np.float32) * diagonal)
    with pytest.raises(UserError) as err:
        source(los, graph="zeros.pkl").adjacency(IDS)
    assert str(err.value) == (
        f"data.source.graph={los / 'zeros.pkl'}: its 4 x 4 weights have no edge between two "
        "distinct points (every weight off the diagonal is 0): a graph without edges is most "
        "likely the wrong file, or one thresholded too high; give the graph of the points, or "
        "leave data.source.graph out."
    )
    one_edge = np.zeros((4, 4))
    one_edge[2, 1] = 0.3
    pd.DataFrame(one_edge).to_csv(los / "one_edge.csv", header=False, index=False)
    np.testing.assert_array_equal(source(los, graph="one_edge.csv").adjacency(IDS), one_edge)


def test_points_without_an_edge_among_them_are_warned_of(los, caplog):
    """The graph has edges, but none among the points the data keep (a part of the graph):
    the graph models would see no neighbour."""
    pd.DataFrame(WEIGHTS).to_csv(los / "adj.csv", header=False, index=False)
    made = source(los, graph="adj.csv")
    with caplog.at_level("WARNING", logger="cloudlstm.data.sources.graphs"):
        made.adjacency([IDS[0], IDS[1]])  # 0.5 and 0.3 between them
        assert caplog.records == []
        made.adjacency([IDS[0], IDS[2]])  # 0 both ways
    [record] = caplog.records
    assert record.getMessage() == (
        f"data.source.graph={los / 'adj.csv'}: the graph has no edge among the 2 points of the "
        "data (of its 4 nodes), so the models that read the graph see no neighbour; choose "
        "points that are connected, or all of the graph's."
    )


def test_a_dcrnn_pickle_of_a_sparse_matrix_is_read(los):
    sparse = pytest.importorskip("scipy.sparse")
    for kind in (sparse.csr_matrix, sparse.coo_matrix, sparse.csr_array):
        dcrnn_pickle(los / "sparse.pkl", IDS, kind(WEIGHTS.astype(np.float32)))
        np.testing.assert_allclose(
            source(los, graph="sparse.pkl").adjacency(IDS), WEIGHTS, rtol=1e-6
        )


def test_a_csv_adjacency_separated_by_tabs_or_semicolons(los):
    for sep in ("\t", ";"):
        pd.DataFrame(WEIGHTS).to_csv(los / "adj.csv", sep=sep, header=False, index=False)
        np.testing.assert_array_equal(source(los, graph="adj.csv").adjacency(IDS), WEIGHTS)
    # decimal commas put a comma in the first row: the tabs are then named, not the row
    (los / "commas.csv").write_text("\n".join("\t".join(["0,5"] * 4) for _ in range(4)) + "\n")
    with pytest.raises(UserError) as err:
        source(los, graph="commas.csv").adjacency(IDS)
    assert str(err.value).endswith(
        "the cell at row 0, column 1 (line 1) is '5\\t0', not a number (it holds tabs: a file "
        "separated by tabs is read as such where its first row has no comma; write its "
        "decimals with a dot)."
    )


def test_graph_files_that_are_not_graphs(los):
    with pytest.raises(MissingFileError, match=r"data\.source\.graph=.*nowhere\.pkl: no such"):
        read_graph(los / "nowhere.pkl", IDS)
    (los / "graph.json").write_text("{}")
    with pytest.raises(UserError, match=r"unknown graph format \(suffix '\.json'\)"):
        read_graph(los / "graph.json", IDS)
    with (los / "list.pkl").open("wb") as f:
        pickle.dump([1, 2], f)
    with pytest.raises(UserError, match=r"holds a list, not DCRNN's triple"):
        read_graph(los / "list.pkl", IDS)
    dcrnn_pickle(los / "short.pkl", IDS[:3], WEIGHTS)
    with pytest.raises(UserError, match=r"does not give each of the 3 sensor_ids one row"):
        read_graph(los / "short.pkl", None)
    (los / "junk.pkl").write_bytes(b"junk")
    with pytest.raises(UserError, match=r"Cannot read data\.source\.graph=.*junk\.pkl as a pickle"):
        read_graph(los / "junk.pkl", IDS)
    np.save(los / "adj.npy", WEIGHTS)
    ids, matrix = read_graph(los / "adj.npy", IDS)
    assert ids == IDS and np.array_equal(matrix, WEIGHTS)


def test_the_graph_reaches_the_datas_description(los):
    dcrnn_pickle(los / "adj_mx.pkl", IDS, WEIGHTS)
    datamodule = PointCloudDataModule(
        source(los, graph="adj_mx.pkl"), input_steps=3, output_steps=2, batch_size=4
    )
    spec = datamodule.spec
    assert spec.adjacency == WEIGHTS.tolist()
    stored = spec.to_dict()
    assert DataSpec.from_dict(stored).adjacency == WEIGHTS.tolist()
    del stored["adjacency"]  # a checkpoint written before the field existed
    assert DataSpec.from_dict(stored).adjacency is None

    subset = PointCloudDataModule(
        source(los, graph="adj_mx.pkl"), input_steps=3, output_steps=2, num_points=2
    )
    kept = [IDS.index(p) for p in subset.spec.point_ids]
    assert subset.spec.adjacency == WEIGHTS[np.ix_(kept, kept)].tolist()
    plain = PointCloudDataModule(source(los), input_steps=3, output_steps=2)
    assert plain.spec.adjacency is None


def test_a_point_without_data_is_warned_of_also_when_the_cache_is_read(los, tmp_path, caplog):
    """The warning came only from the run that built the cache; later runs left the point
    out without a word."""
    whole = source(los, cache_dir=tmp_path / "whole", name="los")
    with caplog.at_level(logging.WARNING, logger="cloudlstm.data"):
        whole.load()
        whole.load()
    assert whole.last_load_from_cache and not caplog.records  # no point dropped, no warning
    table = speeds()
    table[IDS[2]] = np.nan  # no reading at all
    table.to_csv(los / "los_speed.csv.gz", index=False)
    warning = f"los: dropping 1 point(s) with no data at all: {IDS[2]}"
    for built in (True, False):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="cloudlstm.data"):
            made = source(los, cache_dir=tmp_path / "cache", name="los")
            stream = made.load()
        assert made.last_load_from_cache is not built
        assert stream.point_ids == [IDS[0], IDS[1], IDS[3]]
        assert [r.getMessage() for r in caplog.records] == [warning]


def test_text_in_a_coordinate_says_coordinates_are_numbers_not_to_leave_them_empty(los):
    """The line said to leave missing readings empty, and an empty coordinate is refused."""
    pd.DataFrame({"sensor_id": IDS, "latitude": LAT, "x": 0.0, "y": 1.0}).assign(
        x=["east", 1, 2, 3]
    ).to_csv(path := los / "text.csv", index=False)
    with pytest.raises(UserError) as err:
        read_positions(path)
    assert str(err.value) == (
        f"Column 'x' of positions file {path} must be numeric, but holds e.g. 'east' (1 such "
        "entries, first at line 2). Coordinates must be numbers: write each one without "
        "units or text."
    )
    pd.DataFrame({"sensor_id": IDS, "x": [None, 1, 2, 3], "y": 1.0}).to_csv(path, index=False)
    with pytest.raises(UserError, match=r"point '773869' \(line 2\) has no finite coord"):
        read_positions(path)


@pytest.mark.parametrize(
    ("column", "cell", "said"),
    [
        ("sensor_id", "", "column 'sensor_id' is empty at line 6."),
        ("latitude", "", "point '767542' (line 6) has no finite coordinates"),
        ("latitude", "34.1N", "holds e.g. '34.1N' (1 such entries, first at line 6)."),
        ("latitude", "341.16", "point '767542' (line 6) has latitude=341.16, outside"),
    ],
    ids=["empty-id", "empty-coordinate", "text", "degrees"],
)
def test_a_bad_row_of_a_positions_file_is_named_by_its_line(los, column, cell, said):
    """A positions file is a file of lines too: its row is named by its line, a blank line
    and a quoted name over two lines counted (it was "data row 2", its position from 0 past
    the header)."""
    table = pd.DataFrame({"sensor_id": IDS, "name": "road", "latitude": LAT, "longitude": LON})
    table = table.astype(object)
    table.loc[1, "name"] = "Figueroa St\nnorth"  # quoted, lines 4-5
    table.loc[2, column] = cell
    text = table.to_csv(index=False).replace("\n", "\n\n", 1)  # line 2 blank
    (path := los / "places.csv").write_text(text)
    assert text.splitlines()[5].split(",")[list(table.columns).index(column)] == cell  # line 6
    with pytest.raises(UserError) as err:
        read_positions(path)
    assert f"positions file {path}" in str(err.value) and said in str(err.value)


@pytest.mark.parametrize(("col", "value", "limit"), [("latitude", 340.0, 90), ("lon", -218.3, 180)])
def test_degrees_out_of_their_range_are_refused_naming_the_point(los, col, value, limit):
    """A latitude of 340 for 34 was scaled with the others, squeezing every other point's
    latitude to about one value, without a word."""
    names = {"latitude": ("latitude", "longitude"), "lon": ("lat", "lon")}[col]
    table = pd.DataFrame({"sensor_id": IDS, names[0]: 34.1, names[1]: -118.3})
    table.loc[2, col] = value
    table.to_csv(path := los / "places.csv", index=False)
    with pytest.raises(UserError) as err:
        read_positions(path)
    assert str(err.value) == (
        f"positions file {path}: point {IDS[2]!r} (line 4) has {col}={value:g}, outside "
        f"[-{limit}, {limit}] degrees (1 row(s) in all): correct it."
    )
    table.loc[2, col] = value / 10 if col == "latitude" else -118.2
    table.to_csv(path, index=False)
    assert read_positions(path)[0] == IDS  # within range: read


def test_a_key_for_a_table_that_is_no_hdf5_file_is_refused_in_one_line(los):
    """Only an HDF5 file holds several tables: data.source.key was not read for a CSV or a
    Parquet file, and train.py ran on without a word."""
    run = f"hydra.run.dir={los / 'run'}"
    proc = run_python(
        "train.py", "data=metr_la", f"data.source.root={los}", "data.source.key=speed", run
    )
    assert one_line(proc) == (
        f"data.source.key='speed' names a table of an HDF5 file, but data.source.path="
        f"{(los / 'los_speed.csv.gz').resolve()} is no HDF5 file (.h5, .hdf5), which holds one "
        "table: leave data.source.key out (eval.py, whose run's config.yaml holds it: add "
        "data.source.key=null to its command), or give the .h5 file."
    )
    assert not (los / "run").exists()


def test_eval_of_a_run_whose_config_holds_a_key_for_a_csv_says_how_to_drop_it(los, tmp_path):
    """A run's config.yaml holding data.source.key for a table that is no HDF5 file (saved
    before the key was refused, or a run of an .h5 tested on a CSV) is refused by eval.py
    with the override that drops it: "leave data.source.key out" could not be done there."""
    from cloudlstm.cli.evaluate import evaluate
    from cloudlstm.cli.train import train
    from tests.test_eval import compose_eval

    job = ["data=metr_la", f"data.source.root={los}", "data.input_steps=2"]  # T=30
    job += ["data.output_steps=1", "data.batch_size=2", "model=linear", "trainer=cpu"]
    job += ["trainer.max_steps=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1"]
    job += ["logger=none", "report.figures=false", "trainer.enable_progress_bar=false"]
    cfg = compose_train(tmp_path / "train", job)
    train(cfg)
    run = Path(cfg.paths.output_dir)
    saved = run / "config.yaml"
    assert "    key: null\n" in saved.read_text()
    saved.write_text(saved.read_text().replace("    key: null\n", "    key: speed\n"))
    with pytest.raises(UserError, match=r"add data\.source\.key=null to its command\), or give"):
        evaluate(compose_eval(run, tmp_path / "held"))
    evaluate(compose_eval(run, tmp_path / "null", "data.source.key=null"))
