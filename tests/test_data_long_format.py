"""Tests of the long-format loader: pivoting, gap filling, moving points, clear errors, config."""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import shutil
import warnings

import numpy as np
import pandas as pd
import pytest
from conftest import compose_train, one_line, rebuilding_fails, run_python
from hydra.utils import instantiate
from omegaconf.errors import MissingMandatoryValue

from cloudlstm.data.pipeline.absurd_values import _as_missing
from cloudlstm.data.pipeline.datamodule import PointCloudDataModule
from cloudlstm.data.sources.long_format import LongFormatSource
from cloudlstm.data.sources.tables import fill_gaps_causally, pivot_long
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.errors import UserError

T0 = pd.Timestamp("2021-06-01 00:00")
STEP = pd.Timedelta("5min")


def truth(t: np.ndarray, point: int, channel: int) -> np.ndarray:
    """Each series is linear in time: a filled value shows which reading it was taken from."""
    return 10.0 * point + (channel + 1) * 0.5 * t


def long_table(t_steps: int = 20, n: int = 4, drop=(), empty=()) -> pd.DataFrame:
    """Rows ``timestamp, id, x, y, a, b, note``; ``drop`` = (t, point) rows left out, ``empty`` =
    (t, point, column) cells left empty. Point ``n - 1`` has rows but no values at all."""
    rows = []
    for t in range(t_steps):
        for i in range(n):
            if (t, i) in drop:
                continue
            row = {
                "timestamp": (T0 + t * STEP).isoformat(sep=" "),
                "id": f"st{i}",
                "x": float(i),
                "y": float(i * i),
                "a": truth(np.array(t), i, 0).item(),
                "b": truth(np.array(t), i, 1).item(),
                "note": "ok",
            }
            if i == n - 1:
                row["a"] = row["b"] = np.nan
            for tt, ii, col in empty:
                if (tt, ii) == (t, i):
                    row[col] = np.nan
            rows.append(row)
    return pd.DataFrame(rows)


def write(tmp_path, df: pd.DataFrame, name: str = "data.csv"):
    path = tmp_path / name
    df.to_csv(path, index=False)
    return path


def test_static_points_are_pivoted_filled_and_masked(tmp_path, caplog):
    # inner gaps (a missing row, an empty cell), a leading gap and a trailing gap
    df = long_table(drop={(5, 0), (6, 0), (0, 1), (19, 2)}, empty={(10, 2, "b")})
    path = write(tmp_path, df, "data.csv.gz")  # gzip, by suffix
    with caplog.at_level(logging.INFO, logger="cloudlstm.data.sources.tables"):
        stream = LongFormatSource(path).load()
    (dropped,) = [r for r in caplog.records if "dropping" in r.getMessage()]
    assert dropped.levelno == logging.WARNING and dropped.getMessage().endswith(": st3")
    assert stream.values.shape == (20, 3, 2)  # st3 (no value at all) is dropped
    assert stream.point_ids == ["st0", "st1", "st2"]
    assert stream.channel_names == ["a", "b"]  # "note" is not numeric
    np.testing.assert_array_equal(stream.coords, [[0, 0], [1, 1], [2, 4]])
    assert stream.metadata["step_minutes"] == 5.0
    assert stream.metadata["steps_per_day"] == 288
    assert stream.metadata["dropped_points"] == ["st3"]
    assert stream.metadata["source"] == str(path)
    assert stream.timestamps[0] == np.datetime64("2021-06-01T00:00")
    assert not stream.moving

    expected_missing = {(5, 0, 0), (5, 0, 1), (6, 0, 0), (6, 0, 1), (0, 1, 0), (0, 1, 1)}
    expected_missing |= {(19, 2, 0), (19, 2, 1), (10, 2, 1)}
    assert {tuple(i) for i in np.argwhere(~stream.mask)} == expected_missing
    t = np.arange(20)
    for i in range(3):  # each gap holds the reading before it; a leading gap the first one
        for c in range(2):
            read = pd.Series(np.where(stream.mask[:, i, c], truth(t, i, c), np.nan))
            np.testing.assert_allclose(stream.values[:, i, c], read.ffill().bfill(), atol=1e-5)
    np.testing.assert_allclose(stream.values[5:7, 0], stream.values[[4, 4], 0])  # inner: held
    np.testing.assert_allclose(stream.values[10, 2, 1], stream.values[9, 2, 1])
    np.testing.assert_allclose(stream.values[0, 1], stream.values[1, 1])  # leading: the first
    np.testing.assert_allclose(stream.values[19, 2], stream.values[18, 2])  # trailing: the last


def test_freq_is_inferred_or_given(tmp_path):
    df = long_table(t_steps=12)
    df = df[~df["timestamp"].str.endswith("00:15:00")]  # a whole step missing at every point
    path = write(tmp_path, df)
    stream = LongFormatSource(path).load()
    assert stream.num_steps == 12 and not stream.mask[3].any()
    assert LongFormatSource(path, freq="5min").load().num_steps == 12
    with pytest.raises(ValueError, match=r"not on the regular grid .* step 10min "):
        LongFormatSource(path, freq="10min").load()
    with pytest.raises(ValueError, match=r"^data\.source\.freq='often': give a positive duration"):
        LongFormatSource(path, freq="often")
    # not 60 ns, which the grid's message showed as freq=0 days 00:00:00.000000060
    with pytest.raises(UserError, match=r"^data\.source\.freq=60 has no unit: give a duration"):
        LongFormatSource(path, freq=60)


def test_explicit_value_columns_and_three_dimensions(tmp_path):
    df = long_table().assign(z=lambda d: d["x"] * 2.0)
    path = write(tmp_path, df)
    stream = LongFormatSource(path, coord_cols=["x", "y", "z"], value_cols=["b"]).load()
    assert stream.channel_names == ["b"] and stream.num_dims == 3
    np.testing.assert_array_equal(stream.coords[:, 2], 2.0 * stream.coords[:, 0])


def test_moving_points_get_a_filled_trajectory(tmp_path):
    df = long_table(n=3)
    moves = df["id"] == "st1"
    df.loc[moves, "x"] = 1.0 + 0.1 * np.arange(moves.sum())  # st1 drifts along x
    df.loc[moves & (df["timestamp"] == (T0 + 4 * STEP).isoformat(sep=" ")), "x"] = np.nan
    path = write(tmp_path, df)

    stream = LongFormatSource(path).load()
    assert stream.moving and stream.trajectory.shape == (20, 2, 2)
    drift = 1.0 + 0.1 * np.arange(20)
    drift[4] = drift[3]  # the position missing at step 4 holds the one before it
    np.testing.assert_allclose(stream.trajectory[:, 1, 0], drift)
    np.testing.assert_array_equal(stream.trajectory[:, 0], np.zeros((20, 2)))  # st0 static
    np.testing.assert_array_equal(stream.coords, stream.trajectory[0])

    with pytest.raises(ValueError, match=r"change coordinates .*'st1'.* moving=true"):
        LongFormatSource(path, moving=False).load()
    static = LongFormatSource(write(tmp_path, long_table(n=3), "static.csv"), moving=True).load()
    assert static.moving and np.ptp(static.trajectory, axis=0).max() == 0


@pytest.mark.parametrize(
    ("wobble", "moving", "warned"),
    [(0.0, False, False), (1e-9, False, False), (1e-3, True, True), (0.5, True, False)],
    ids=["fixed", "float-noise", "rounding", "driving"],
)
def test_how_far_a_point_moves_decides_moving_and_a_warning(
    tmp_path, caplog, wobble, moving, warned
):
    """st1's x alternates by ``wobble`` from row to row (the points span 9 in y): float
    noise is no motion, a rounding-sized change is motion said in a warning, a drive is
    motion without one."""
    df = long_table(n=4)
    at = df["id"] == "st1"
    df.loc[at, "x"] += wobble * (np.arange(at.sum()) % 2)
    with caplog.at_level(logging.WARNING, logger="cloudlstm.data.sources.long_format"):
        stream = LongFormatSource(write(tmp_path, df)).load()
    assert stream.moving is moving
    if not moving:
        np.testing.assert_array_equal(stream.coords[1], [1.0, 1.0])  # its first row's place
    said = [r.getMessage() for r in caplog.records if "change coordinates" in r.getMessage()]
    assert len(said) == int(warned)
    if warned:
        assert said[0].endswith(
            "1 point(s) change coordinates over time (e.g. id='st1'), by at most 0.001 (0.011 % "
            "of the points' extent), so they are read as moving points, whose positions are "
            "forecast too. If they are fixed sensors whose coordinates differ by rounding, give "
            "each one location (e.g. round the coordinate columns); to read them as moving "
            "without this warning, set data.source.moving=true."
        )
    if wobble:
        caplog.clear()
        forced = LongFormatSource(write(tmp_path, df, "forced.csv"), moving=True).load()
        assert forced.moving
        assert not [r for r in caplog.records if "change coordinates" in r.getMessage()]


def test_fill_gaps_causally_properties():
    rng = np.random.default_rng(0)
    values = rng.normal(size=(50, 3, 2)).astype(np.float32)
    holes = rng.random(values.shape) < 0.3
    holes[:4, 0, 0] = True  # a leading gap
    holes[-3:, 1, 0] = True  # a trailing gap
    holes[:, 2, 1] = True  # never observed: takes the other points' mean
    values[holes] = np.nan
    values[7, 0, 1] = np.inf  # not finite: a gap as NaN is
    holes[7, 0, 1] = True
    filled, mask = fill_gaps_causally(values)
    assert filled.dtype == np.float32 and np.array_equal(mask, ~holes)
    np.testing.assert_array_equal(filled[mask], values[mask])
    for i, c in [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]:
        read = pd.Series(np.where(mask[:, i, c], values[:, i, c], np.nan))
        np.testing.assert_array_equal(filled[:, i, c], read.ffill().bfill().to_numpy())
    np.testing.assert_allclose(filled[:, 2, 1], readings_mean(values[:, :2, 1]), rtol=1e-6)
    # an explicit ``observed`` makes more gaps, whatever their values
    more, more_mask = fill_gaps_causally(values, ~holes & (np.arange(50) != 20)[:, None, None])
    assert not more_mask[20].any() and np.array_equal(
        more_mask, mask & (np.arange(50) != 20)[:, None, None]
    )
    np.testing.assert_array_equal(more[20, :2], filled[19, :2])


def readings_mean(values: np.ndarray) -> np.ndarray:
    """``(T,)``: the mean of the finite entries of ``values (T, N)`` at each step, the last
    such mean at a step without any (the first before any), step by step."""
    means, last = [], None
    for row in values:
        finite = row[np.isfinite(row)]
        last = finite.mean() if len(finite) else last
        means.append(last)
    first = next(m for m in means if m is not None)
    return np.array([first if m is None else m for m in means])


def test_a_series_never_observed_takes_the_mean_of_the_readings_not_of_filled_values():
    """p1 read 100 once: held forward over its gap it made every later mean 50 too high."""
    values = np.array([[np.nan, 100.0, np.nan], [2.0, np.nan, np.nan], [np.nan, np.nan, np.nan]])
    values = np.concatenate([values, [[4.0, 6.0, np.nan]]])[:, :, None]  # (4, 3, 1)
    filled, _ = fill_gaps_causally(values)
    np.testing.assert_array_equal(filled[:, 2, 0], [100.0, 2.0, 2.0, 5.0])


def test_values_made_missing_as_absurd_are_filled_as_the_loading_fills_gaps():
    """The absurd-value check (bad_values=warn) refills a stream: the same values as a
    file without those readings gives, a series left with none its readings' mean too."""
    rng = np.random.default_rng(3)
    values = rng.normal(size=(30, 4, 2)).astype(np.float32)
    values[rng.random(values.shape) < 0.3] = np.nan
    values[:5, 0, 0] = np.nan  # a leading gap at a point that loses its first readings below
    filled, mask = fill_gaps_causally(values)
    stream = PointCloudStream(
        filled, mask, rng.uniform(size=(4, 2)), ["a", "b"], ["p0", "p1", "p2", "p3"]
    )
    absurd = mask & (rng.random(values.shape) < 0.2)
    absurd[:, 3, 1] = mask[:, 3, 1]  # every reading of one series: none left
    refilled = _as_missing(stream, np.argwhere(absurd))
    expected, expected_mask = fill_gaps_causally(np.where(absurd, np.nan, values))
    np.testing.assert_array_equal(refilled.mask, expected_mask)
    np.testing.assert_allclose(refilled.values, expected, rtol=1e-6)


def test_values_made_missing_as_absurd_refill_their_own_series_alone(monkeypatch):
    """Two absurd readings of a channel of 10,000 points refill those two series, not the
    channel's every series (ten times slower, and twice the memory, on Telecom Italia's
    grid): the refill reads the touched series alone."""
    from cloudlstm.data.pipeline import absurd_values

    rng = np.random.default_rng(4)
    values = rng.normal(size=(20, 50, 2)).astype(np.float32)
    stream = PointCloudStream(
        values,
        np.ones(values.shape, bool),
        rng.uniform(size=(50, 2)),
        ["a", "b"],
        [f"p{i}" for i in range(50)],
    )
    widths = []

    def spied(values: np.ndarray, observed: np.ndarray | None = None):
        widths.append(values.shape[1])
        return fill_gaps_causally(values, observed)

    monkeypatch.setattr(absurd_values, "fill_gaps_causally", spied)
    refilled = absurd_values._as_missing(stream, np.array([[5, 3, 0], [9, 7, 0]]))
    assert widths == [2]
    assert refilled.values[5, 3, 0] == values[4, 3, 0]  # the reading before held forward


def test_filled_values_never_depend_on_later_readings():
    """Changing the readings after step ``t`` never changes a filled value at a step <= t
    (but in a leading gap, which has nothing earlier to take)."""
    rng = np.random.default_rng(1)
    values = rng.normal(size=(40, 4, 2))
    values[rng.random(values.shape) < 0.4] = np.nan
    values[:3, 0, 0] = np.nan  # a leading gap
    filled, mask = fill_gaps_causally(values)
    first = mask.argmax(axis=0)  # (N, K): each series' first reading
    for t in range(40):
        later = values.copy()
        later[t + 1 :] = np.where(np.isfinite(later[t + 1 :]), later[t + 1 :] + 100.0, 5.0)
        again, _ = fill_gaps_causally(later)
        past = np.arange(t + 1)[:, None, None] >= first[None]  # not in a leading gap
        np.testing.assert_array_equal(again[: t + 1][past], filled[: t + 1][past])


def test_a_gap_across_a_windows_last_input_step_holds_the_reading_before_it():
    """Input steps 0-3, targets 4-6 of a window: readings 11.014 at step 2 and 9.466 at
    step 4, none at step 3. The input's step 3 takes 11.014 (linear interpolation in time
    would take their mean 10.24 there, half of the first target)."""
    series = np.array([12.0, 11.5, 11.014, np.nan, 9.466, 9.0, 8.5])[:, None, None]
    filled, mask = fill_gaps_causally(series)
    assert filled[3, 0, 0] == 11.014 and not mask[3, 0, 0]
    other_future = series.copy()
    other_future[4:] = [[[50.0]], [[60.0]], [[70.0]]]
    assert fill_gaps_causally(other_future)[0][3, 0, 0] == 11.014


def test_pivot_long_averages_duplicates_when_asked():
    df = pd.DataFrame(
        {
            "t": pd.to_datetime(["2020-01-01 00:00", "2020-01-01 00:00", "2020-01-01 01:00"]),
            "id": [7, 7, 7],
            "v": [1.0, np.nan, 4.0],
        }
    )
    df.loc[len(df)] = [pd.Timestamp("2020-01-01 01:00"), 7, 6.0]
    grid = pivot_long(df, "t", "id", "1h", duplicates="mean")
    np.testing.assert_array_equal(grid.scatter(df[["v"]].to_numpy())[:, 0, 0], [1.0, 5.0])
    with pytest.raises(ValueError, match=r"several rows .* id='7'"):
        pivot_long(df, "t", "id", "1h")


# ---------------------------------------------------------------- clear errors
def test_missing_file_names_path_and_config_key(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.csv.*data\.source\.path="):
        LongFormatSource(tmp_path / "nope.csv").load()
    with pytest.raises(FileNotFoundError, match=r"nope\.csv.*data\.source\.path="):
        LongFormatSource(tmp_path / "nope.csv", cache_dir=tmp_path).load()  # cached too


def test_missing_columns_list_expected_and_found(tmp_path):
    path = write(tmp_path, long_table().rename(columns={"timestamp": "time"}))
    with pytest.raises(ValueError) as err:
        LongFormatSource(path).load()
    msg = str(err.value)
    assert "lacks column(s) ['timestamp']" in msg and "found ['time'," in msg
    assert "'timestamp' -> 'time'?" in msg and "time_col" in msg
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['pm10'\]"):
        LongFormatSource(path, time_col="time", value_cols=["a", "pm10"]).load()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"coord_cols": ["x"]},
            "data.source.coord_cols=[x] names 1 coordinate column(s): a point's place takes "
            "2 or 3 (x,y[,z] or lon,lat), e.g. data.source.coord_cols=[x,y].",
        ),
        ({"coord_cols": ["x", "y", "a", "b"]}, "names 4 coordinate column(s)"),
        (
            {"coord_cols": ["x", "x"]},
            "data.source.coord_cols=[x,x] names x twice: name each column once.",
        ),
        ({"covariate_cols": ["b", "b"]}, "data.source.covariate_cols=[b,b] names b twice"),
        ({"value_cols": ["a", "b", "a"]}, "data.source.value_cols=[a,b,a] names a twice"),
        (
            {"value_cols": ["a", "x"]},
            "data.source.coord_cols and data.source.value_cols both name the column 'x': a "
            "column is either a coordinate or a channel to forecast, not both; name it in one "
            "of them.",
        ),
        (
            {"value_cols": ["a"], "covariate_cols": ["a"]},
            "data.source.value_cols and data.source.covariate_cols both name the column 'a'",
        ),
        ({"id_col": "x"}, "data.source.id_col and data.source.coord_cols both name the col"),
        ({"time_col": "id"}, "data.source.time_col and data.source.id_col both name the col"),
        (
            {"value_cols": []},
            "data.source.value_cols=[] names no column to forecast: name them (e.g. "
            "data.source.value_cols=[pm25]), or give null to forecast every other column",
        ),
    ],
    ids=[
        "1-d",
        "4-d",
        "coord-twice",
        "covariate-twice",
        "value-twice",
        "value-is-coord",
        "value-is-covariate",
        "id-is-coord",
        "time-is-id",
        "no-values",
    ],
)
def test_column_options_give_each_column_one_role(tmp_path, options, message):
    """A column named twice was read twice (an input doubled; a value channel doubled
    failed deep in the metrics), or in two roles (a coordinate also forecast); one column
    made a 1-D cloud that forecast the other coordinate; [] read every column, as null."""
    path = write(tmp_path, long_table())
    with pytest.raises(UserError) as err:
        LongFormatSource(path, **options).load()
    assert message in str(err.value)


def test_a_value_column_named_twice_is_one_line_from_train_py(tmp_path):
    path = write(tmp_path, long_table(t_steps=30))
    proc = run_python(
        "train.py",
        "data=points",
        f"data.source.path={path}",
        "data.source.value_cols=[a,a]",
        f"hydra.run.dir={tmp_path / 'run'}",
        "logger=none",
        "debug=fdr",
    )
    assert one_line(proc) == "data.source.value_cols=[a,a] names a twice: name each column once."


def test_the_units_option_reaches_the_data_summary(tmp_path):
    """data.source.units is recorded in data_summary.json, for a channel and a covariate,
    as Beijing's units are, so that eval.py can compare them."""
    from conftest import build_datamodule

    df = long_table(t_steps=40).assign(temp=20.0)
    path = write(tmp_path, df)
    job = ["data=points", f"data.source.path={path}", "data.source.covariate_cols=[temp]"]
    job += ["data.input_steps=4", "data.output_steps=2", "data.source.units={a: ppb, temp: C}"]
    written = tmp_path / "data_summary.json"
    build_datamodule(compose_train(tmp_path, job), tmp_path)
    assert json.loads(written.read_text())["source_metadata"]["units"] == {"a": "ppb", "temp": "C"}
    build_datamodule(compose_train(tmp_path, job[:-1]), tmp_path)  # the default, null
    assert "units" not in json.loads(written.read_text())["source_metadata"]


def test_units_naming_no_channel_of_the_file_are_refused_once_it_is_read(tmp_path):
    """With value_cols: null the channels are known once the file is read; a cached stream
    is checked alike."""
    path = write(tmp_path, long_table())
    for _ in range(2):  # built, then from the cache
        source = LongFormatSource(path, units={"a": "ppb", "note": "ppb"}, cache_dir=tmp_path)
        with pytest.raises(UserError) as err:
            source.load()
        assert str(err.value) == (
            "data.source.units names 'note', no channel of the data; its channels are "
            "['a', 'b']: give the unit of each by its channel's name."
        )
    assert source.last_load_from_cache


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("data.source.units={a: 5}", "data.source.units gives a the unit 5, which names no unit"),
        ("data.source.units=ppb", "data.source.units='ppb' is no mapping of channels to units"),
    ],
)
def test_a_unit_that_is_no_text_is_one_line_from_train_py(tmp_path, given, message):
    """A number would be recorded as a unit that no evaluation's text could match."""
    path = write(tmp_path, long_table(t_steps=30))
    proc = run_python(
        "train.py",
        "data=points",
        f"data.source.path={path}",
        given,
        f"hydra.run.dir={tmp_path / 'run'}",
        "logger=none",
        "debug=fdr",
    )
    assert one_line(proc).startswith(message)


def test_unparsable_timestamp_shows_the_value(tmp_path):
    df = long_table()
    df.loc[7, "timestamp"] = "yesterday-ish"
    with pytest.raises(ValueError, match="line 9, 'yesterday-ish', is not a date/time"):
        LongFormatSource(write(tmp_path, df)).load()
    df.loc[7, "timestamp"] = np.nan
    with pytest.raises(ValueError, match=r"1 empty timestamp\(s\) \(first at line 9\)"):
        LongFormatSource(write(tmp_path, df)).load()


@pytest.mark.parametrize(
    ("cell", "unit", "said"),
    [
        ("yesterday-ish", None, "line 11, 'yesterday-ish', is not a date/time"),
        (np.nan, None, "has 1 empty timestamp(s) (first at line 11); every row needs a time."),
        ("3024-06-01 00:05:00", None, "line 11, '3024-06-01 00:05:00', is beyond the dates"),
        ("soon", "s", "line 11 holds 'soon', not a number of s since 1970-01-01"),
    ],
    ids=["not-a-date", "empty", "beyond-2262", "not-a-number"],
)
def test_a_time_that_cannot_be_read_is_named_by_its_line(tmp_path, cell, unit, said):
    """A CSV's time is named by its line, counting the header, a blank line and the lines
    of a quoted field (a note over two lines), gzipped too: its position from 0 past the
    header named it (data row 7, line 11 here)."""
    df = long_table()
    if unit:
        seconds = pd.to_datetime(df["timestamp"]).astype("int64") // 10**9
        df["timestamp"] = seconds.astype(object)
    df.loc[2, "note"] = "checked\ntwice"  # quoted, lines 5-6
    df.loc[7, "timestamp"] = cell
    text = df.to_csv(index=False).replace("\n", "\n\n", 1)  # line 2 blank
    with gzip.open(path := tmp_path / "data.csv.gz", "wt") as f:
        f.write(text)
    assert text.splitlines()[10].startswith(f"{'' if pd.isna(cell) else cell},st3,")
    with pytest.raises(UserError) as refused:
        LongFormatSource(path, time_unit=unit).load()
    assert f"column 'timestamp' of file {path}" in str(refused.value)
    assert said in str(refused.value)


def test_a_row_after_a_long_text_cell_is_named_by_its_line(tmp_path):
    """A note of 200,000 characters (the csv module's limit is 131,072) is one field, as
    pandas reads it: counting the lines stopped there with a traceback."""
    df = long_table()
    df.loc[2, "note"] = "checked, " * 22_000
    df.loc[7, "timestamp"] = "yesterday-ish"
    path = write(tmp_path, df)
    with pytest.raises(UserError, match=r"column 'timestamp' of file .*: line 9, 'yesterday-ish',"):
        LongFormatSource(path).load()


def test_duplicate_rows_are_shown(tmp_path):
    df = long_table()
    df = pd.concat([df, df.iloc[[9]]], ignore_index=True)
    stamp = df.loc[9, "timestamp"]
    with pytest.raises(ValueError, match=rf"several rows .*{stamp}.*id='st1'"):
        LongFormatSource(write(tmp_path, df)).load()


def test_two_offsets_that_name_one_moment_are_shown_as_written(tmp_path):
    """Times with UTC offsets are read in UTC: a row whose offset is wrong lands on another
    row's moment, and the line named that moment in UTC, a time the file nowhere writes."""
    df = long_table()
    local = [(T0 + t * STEP).tz_localize("Europe/Paris").isoformat() for t in range(20)]
    df["timestamp"] = np.repeat(local, 4)
    df.loc[9, "timestamp"] = df.loc[9, "timestamp"].replace("+02:00", "+01:00")  # a typo
    colliding = df.loc[9 + 12 * 4, "timestamp"]  # the moment an hour later, in summer time
    with pytest.raises(ValueError) as err:
        LongFormatSource(write(tmp_path, df)).load()
    assert str(err.value).endswith(
        f": line 11 and line 59 of point 'st1' write {df.loc[9, 'timestamp']} and {colliding}, "
        "one moment (2021-05-31 23:10:00 UTC: a time with an offset is read in UTC). Correct "
        "the offset that is wrong, or keep one row per time and point."
    )


@pytest.mark.parametrize(
    ("column", "value", "limit"), [("lat", 340.0, 90), ("Longitude", -181.5, 180)]
)
def test_a_latitude_or_longitude_out_of_degrees_is_refused_naming_the_row(
    tmp_path, column, value, limit
):
    """coord_cols named as degrees: a mistyped 340 for 34 was scaled with the others, and
    squeezed every other point's coordinate to about one value in silence."""
    df = long_table().rename(columns={"x": "lon", "y": "lat"})
    df = df.assign(lon=df["lon"] + 116.0, lat=df["lat"] * 0.1 + 39.0).rename(
        columns={"lon": "Longitude"} if column == "Longitude" else {}
    )
    cols = ["Longitude" if column == "Longitude" else "lon", "lat"]
    df.loc[9, column] = value
    path = write(tmp_path, df)
    with pytest.raises(UserError) as refused:
        LongFormatSource(path, coord_cols=cols).load()
    assert str(refused.value).endswith(
        f": line 11 (id='st1') has {column}={value:g}, outside [-{limit}, {limit}] degrees "
        "(1 row(s) in all): correct it."
    )
    df.loc[9, column] = df.loc[5, column]  # corrected (st1's other rows), it is read
    assert LongFormatSource(write(tmp_path, df), coord_cols=cols).load().num_points == 3
    # a plane coordinate has no such range
    plane = long_table().assign(x=lambda d: d["x"] * 1e3 + 500.0)
    assert LongFormatSource(write(tmp_path, plane)).load().num_points == 3


def test_bad_coordinates(tmp_path):
    df = long_table()
    df.loc[5, "y"] = np.inf
    with pytest.raises(ValueError, match=r"infinite coordinates \(first at line 7, id='st1'\)"):
        LongFormatSource(write(tmp_path, df)).load()
    df = long_table()
    df.loc[df["id"] == "st2", ["x", "y"]] = np.nan
    with pytest.raises(ValueError, match=r"\['st2'\] have no coordinates"):
        LongFormatSource(write(tmp_path, df)).load()
    df.loc[df["id"] == "st2", "x"] = 1.0  # its x, never its y: named
    with pytest.raises(ValueError, match=r"\['st2'\] have no y in any row \(coordinate col"):
        LongFormatSource(write(tmp_path, df)).load()
    df["x"] = df["x"].astype(object)
    df.loc[df["id"] == "st2", "x"] = "left"
    with pytest.raises(
        ValueError, match="Column 'x' .* must be numeric, but holds e.g. 'left'"
    ) as err:
        LongFormatSource(write(tmp_path, df)).load()
    assert str(err.value).endswith(  # not the readings' "leave missing readings empty"
        "Write coordinates as plain numbers, without units or text (a row may leave them empty "
        "where the point's other rows give them)."
    )


def test_a_column_named_twice_in_the_header_is_refused_not_renamed(tmp_path):
    """pandas renames the second ``a`` to ``a.1``, which was trained on as a channel of its
    own; a file that names its columns ``a`` and ``a.1`` itself is read."""
    df = long_table()
    path = tmp_path / "twice.csv"
    path.write_text(df.to_csv(index=False).replace(",b,", ",a,", 1))
    with pytest.raises(UserError) as err:
        LongFormatSource(path).load()
    assert str(err.value) == (
        f"The long-format file {path} names the column(s) ['a'] more than once: keep one of each."
    )
    path.write_text(df.to_csv(index=False).replace(",b,", ",a.1,", 1))
    assert LongFormatSource(path).load().channel_names == ["a", "a.1"]


def test_an_id_of_blanks_alone_is_empty_not_a_point(tmp_path):
    """A CSV cell of blanks was the point "" (its id stripped), trained on as any other."""
    df = long_table()
    df.loc[5, "id"] = "  "
    path = write(tmp_path, df)
    with pytest.raises(UserError) as err:
        LongFormatSource(path).load()
    assert str(err.value) == f"file {path}: column 'id' is empty at line 7."


def test_an_id_column_of_lists_is_refused_not_read_as_their_text(tmp_path):
    """A Parquet file's list column as the ids: each point was named by its list's text,
    ``['st0']``, without a word."""
    pytest.importorskip("pyarrow")
    df = long_table()
    path = tmp_path / "lists.parquet"
    df.assign(id=[[i] for i in df["id"]]).to_parquet(path)
    with pytest.raises(UserError) as err:
        LongFormatSource(path).load()
    assert str(err.value) == (
        f"file {path}: column 'id' holds ndarray cells, not point ids (e.g. array(['st0'], "
        f"dtype=object) at data row 0; {len(df)} such rows): write one id per row, as text or "
        "a number."
    )


@pytest.mark.parametrize("gap", [False, True], ids=["bool", "with-empty-cells"])
def test_a_coordinate_column_of_true_false_is_refused_not_read_as_1_0(tmp_path, gap):
    """pandas reads a CSV column of True/False as booleans (objects, with empty cells),
    which were placed at x = 1 and x = 0 without a word."""
    df = long_table().astype({"x": object})
    df["x"] = np.resize(np.array([True, False], dtype=object), len(df))
    if gap:
        df.loc[5, "x"] = None
    with pytest.raises(UserError) as err:
        LongFormatSource(write(tmp_path, df)).load()
    assert str(err.value).startswith(
        f"Column 'x' of file {tmp_path / 'data.csv'} must be numeric, but holds True/False. "
        "Write coordinates as plain numbers"
    )


def write_hdf(tmp_path, df: pd.DataFrame) -> str:
    """``df`` as a pandas HDF5 file (fixed format, which keeps a column of mixed objects as
    they are), its path."""
    pytest.importorskip("tables", reason="PyTables is not installed")
    path = tmp_path / "data.h5"
    with warnings.catch_warnings():  # PerformanceWarning: the mixed objects are pickled
        warnings.simplefilter("ignore")
        df.to_hdf(path, key="rows")
    return path


@pytest.mark.parametrize(
    ("column", "at"), [("a", "point st0, time 2021-06-01 00:00:00"), ("x", "data row 0")]
)
def test_a_complex_channel_or_coordinate_column_is_refused_naming_it(tmp_path, column, at):
    """An HDF5 file keeps a complex column (an FFT's output): a channel read its real part,
    the imaginary one lost with a mere ComplexWarning, and a coordinate alike."""
    df = long_table()
    df[column] = df[column] + 2j
    path = write_hdf(tmp_path, df)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even a warning on the way
        with pytest.raises(UserError) as err:
            LongFormatSource(path).load()
    assert str(err.value) == (
        f"file {path}: column {column!r} holds complex numbers (e.g. {df[column][0].item()!r} "
        f"at {at}), whose imaginary parts would be lost: give real numbers (the real part or "
        "the magnitude, whichever the column means)."
    )


@pytest.mark.parametrize(
    ("column", "at"), [("a", "point st2, time 2021-06-01 00:05:00"), ("x", "data row 6")]
)
def test_true_false_among_numbers_is_refused_naming_a_row(tmp_path, column, at):
    """A column of objects holding True among numbers (a DataFrame built by hand, kept so
    in an HDF5 file) read True as 1: only a column of True/False alone was refused."""
    df = long_table().astype({column: object})
    df.loc[6, column] = True
    path = write_hdf(tmp_path, df)
    for mode in ("error", "warn"):  # no reading to count as missing
        with pytest.raises(UserError) as err:
            LongFormatSource(path, bad_values=mode).load()
        assert str(err.value) == (
            f"file {path}: column {column!r} holds True/False among numbers (e.g. True at "
            f"{at}; 1 such cell(s)), which would read as 1 and 0: write every cell as a "
            "number, or leave it empty where there is no reading."
        )


# the names of data rows 0, 6 and 7 of long_table() in a channel's and a coordinate's line
ROW_NAMES = {
    "a": {r: f"point st{r % 4}, time 2021-06-01 00:{5 * (r // 4):02d}:00" for r in (0, 6, 7)},
    "x": {r: f"data row {r}" for r in (0, 6, 7)},
}


@pytest.mark.parametrize(
    ("column", "numbers"), [("a", True), ("x", True), ("x", False)], ids=["a", "x", "x-text"]
)
def test_true_false_among_text_is_refused_as_such(tmp_path, column, numbers):
    """True beside text ("abc"), with numbers or without, was said to be "among numbers":
    the line names the text as text, and a cell of it. (A channel of text with a True is
    a label column, skipped as such.)"""
    df = long_table().astype({column: object})
    if not numbers:
        df[column] = pd.Series("abc", index=df.index, dtype=object)
    df.loc[6, column] = True
    df.loc[7, column] = "abc"
    path = write_hdf(tmp_path, df)
    among, text_row = ("numbers and text", 7) if numbers else ("text", 0)
    for mode in ("error", "warn"):
        with pytest.raises(UserError) as err:
            LongFormatSource(path, bad_values=mode).load()
        assert str(err.value) == (
            f"file {path}: column {column!r} holds True/False among {among} (e.g. True at "
            f"{ROW_NAMES[column][6]}; 1 such cell(s)), which would read as 1 and 0, and text "
            f"that is no number (e.g. 'abc' at {ROW_NAMES[column][text_row]}): write every "
            "cell as a number, or leave it empty where there is no reading."
        )


@pytest.mark.parametrize("empty", ["n/a", " ", "NULL"])
def test_a_coordinate_left_empty_as_text_reads_as_empty_in_a_csv_and_a_parquet_file(
    tmp_path, empty
):
    """A row may leave its coordinates empty where the point's other rows give them; one
    left empty as blanks (a CSV's " ") or a missing-value text (a Parquet file's "n/a") was
    refused as a coordinate that is no number, though a reading so written is missing."""
    pytest.importorskip("pyarrow")
    df = long_table().astype({"x": object})
    df.loc[[5, 9], "x"] = empty  # st1 at t = 1 and 2
    expected = LongFormatSource(write(tmp_path, long_table(), "whole.csv")).load()
    parquet = tmp_path / "data.parquet"
    df.astype({"x": str}).to_parquet(parquet)
    for path in (write(tmp_path, df), parquet):
        stream = LongFormatSource(path).load()
        np.testing.assert_array_equal(stream.coords, expected.coords)
        np.testing.assert_array_equal(stream.values, expected.values)


def with_bad_cells(cells: dict[tuple[int, str], object]) -> pd.DataFrame:
    """``long_table()`` with ``{(data row, column): cell}`` written over it."""
    df = long_table()
    df[["a", "b"]] = df[["a", "b"]].astype(object)
    for (row, col), cell in cells.items():
        df.loc[row, col] = cell
    return df


def cell_row(row: int) -> str:
    """How a bad cell's row of :func:`long_table` is named: by its point and time as the
    file writes them, where a user finds it."""
    df = long_table()
    return f"point {df.loc[row, 'id']}, time {df.loc[row, 'timestamp']}"


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize("value_cols", [None, ["a", "b"]])
def test_text_or_inf_in_a_channel_is_an_error_naming_point_time_and_column(
    tmp_path, value_cols, suffix
):
    """They were named by their data row, counted from 0 past the header: line 7 of the
    CSV was "data row 5"."""
    # rows are t * 4 + point; point 3 has no values at all, so rows 5 and 9 are st1's
    df = with_bad_cells({(5, "a"): "12 ug/m3", (9, "b"): "inf"})
    path = write(tmp_path, df, "data.csv")
    if suffix == ".parquet":  # the cells as text, as a table built so would write them
        path = tmp_path / "data.parquet"
        df.astype({"a": str, "b": str}).replace("nan", None).to_parquet(path)
    cells = f"{cell_row(5)}, column 'a': '12 ug/m3'; {cell_row(9)}, column 'b': "
    with pytest.raises(UserError) as err:
        LongFormatSource(path, value_cols=value_cols).load()
    assert f"2 channel value(s) are not finite numbers: {cells}" in str(err.value)
    assert cell_row(5) == "point st1, time 2021-06-01 00:05:00"
    with pytest.raises(UserError, match=r"data\.source\.bad_values=warn"):
        LongFormatSource(path, value_cols=value_cols).load()


@pytest.mark.parametrize("value_cols", [None, ["a", "b"]])
def test_missing_value_texts_of_a_parquet_file_are_gaps_as_in_a_csv_file(tmp_path, value_cols):
    """pandas' missing-value texts ("n/a", "NA", "null") of a channel: the CSV reader makes
    them empty, while a Parquet file's text column kept them and they were refused as no
    number. The two files train on one stream."""
    pytest.importorskip("pyarrow")
    df = with_bad_cells({(5, "a"): "n/a", (9, "b"): "NA", (13, "a"): " null "})
    csv = write(tmp_path, df, "data.csv")
    parquet = tmp_path / "data.parquet"
    df.astype({"a": str, "b": str}).replace("nan", None).to_parquet(parquet)
    from_csv = LongFormatSource(csv, value_cols=value_cols).load()
    from_parquet = LongFormatSource(parquet, value_cols=value_cols).load()
    np.testing.assert_array_equal(from_parquet.values, from_csv.values)
    np.testing.assert_array_equal(from_parquet.mask, from_csv.mask)
    assert np.isnan(from_csv.values).sum() == 0 and (~from_csv.mask).sum() >= 3


def test_bad_values_warn_counts_them_and_treats_them_as_gaps(tmp_path, caplog):
    bad = {(5, "a"): "error", (9, "b"): "-inf", (13, "a"): "n.a.", (17, "b"): "1e40"}
    bad |= {(21, "a"): "x", (25, "a"): "y", (29, "b"): "z"}  # st1 at t = 1..7
    with caplog.at_level(logging.WARNING, logger="cloudlstm.data.sources.bad_values"):
        stream = LongFormatSource(write(tmp_path, with_bad_cells(bad)), bad_values="warn").load()
    assert "7 channel value(s) are not finite numbers (first 5)" in caplog.text
    assert f"{cell_row(5)}, column 'a': 'error'; {cell_row(9)}, column 'b': '-inf'" in caplog.text
    assert f"{cell_row(21)}, column 'a': 'x'" in caplog.text and cell_row(25) not in caplog.text
    assert stream.channel_names == ["a", "b"]  # "a" and "b" hold mostly numbers: channels
    gaps = {(row // 4, 1, "ab".index(col)) for row, col in bad}
    assert {tuple(i) for i in np.argwhere(~stream.mask)} == gaps
    t = np.arange(20)
    for c in range(2):  # filled like missing rows: the reading before each gap held
        read = pd.Series(np.where(stream.mask[:, 1, c], truth(t, 1, c), np.nan))
        np.testing.assert_allclose(stream.values[:, 1, c], read.ffill().bfill(), atol=1e-4)


def test_bad_values_mode_is_checked(tmp_path):
    with pytest.raises(UserError, match=r"bad_values='skip'.*\['error', 'warn'\]"):
        LongFormatSource(write(tmp_path, long_table()), bad_values="skip")


def test_text_columns_are_not_channels(tmp_path):
    with pytest.raises(ValueError, match="no numeric value column"):
        LongFormatSource(
            write(tmp_path, long_table()[["timestamp", "id", "x", "y", "note"]])
        ).load()


@pytest.mark.parametrize(
    ("unit", "name"), [(" ppb", "b_ppb"), ("%", "b_pct"), (" km/h", "b_km_h"), (" °C", "b_C")]
)
def test_a_channel_with_its_unit_in_every_cell_is_refused_not_left_out(tmp_path, unit, name):
    """Such a column is no number, so it was skipped like a label column: the forecast had
    one channel less, and only an INFO line said so."""
    df = long_table()
    df["b"] = [f"{v:.2f}{unit}" if v == v else None for v in df["b"]]  # NaN cells stay empty
    path = write(tmp_path, df)
    with pytest.raises(UserError) as refused:
        LongFormatSource(path).load()
    cell = df["b"].dropna().iloc[0]
    assert str(refused.value) == (
        f"File {path}: column 'b' holds numbers with a unit (e.g. {cell!r}), so it is not read "
        f"as a channel. Write the numbers alone (the unit in the column's name: {name}), or "
        "set data.source.value_cols to the channel columns to forecast without it."
    )
    # named away, it is not read
    assert LongFormatSource(path, value_cols=["a"]).load().channel_names == ["a"]


def test_a_channel_of_values_too_small_for_float32_is_refused_not_read_as_zeros(tmp_path):
    """2e-199 read as 0: the channel was said not to vary, the data blamed."""
    df = long_table()
    df["b"] = df["b"] * 1e-200
    path = write(tmp_path, df)
    with pytest.raises(UserError) as refused:
        LongFormatSource(path).load()
    small = (df["b"].notna() & (df["b"] != 0)).to_numpy()  # a 0 stays a 0
    row = int(small.argmax())
    assert str(refused.value).startswith(
        f"file {path}: column 'b' holds values too small to keep (e.g. {df['b'][row]:g} at "
        f"{cell_row(row)}; {int(small.sum())} in all): below 1.18e-38, which float32 "
        "keeps, they would read as 0. Give the channel in a smaller unit"
    )


def test_a_channel_with_thousands_separators_is_refused_not_left_out(tmp_path):
    df = long_table()
    df["b"] = [f"{1000 * v + 17_675:,.0f}" if v == v else None for v in df["b"]]
    path = write(tmp_path, df)
    with pytest.raises(UserError) as refused:
        LongFormatSource(path).load()
    cell = next(c for c in df["b"].dropna() if "," in c)
    assert str(refused.value) == (
        f"File {path}: column 'b' writes numbers with thousands separators (e.g. {cell!r}), "
        "so it is not read as a channel. Write them without separators, or set "
        "data.source.value_cols to the channel columns to forecast without it."
    )


@pytest.mark.parametrize(
    ("written", "says"),
    [("{:,.0f}", "writes numbers with thousands separators"), ("{:.0f} ppb", "with a unit")],
    ids=["thousands", "unit"],
)
def test_a_text_channel_mostly_n_a_is_refused_from_parquet_as_from_csv(tmp_path, written, says):
    """A channel written as text (``"17,675"``, ``"12 ppb"``) whose other cells are ``n/a``:
    the CSV file's reader makes them empty and the column was refused, while a Parquet
    file's ``n/a`` counted as text, so the few numbers fell below the share of a channel
    and the column was left out of the forecast with an INFO line."""
    pytest.importorskip("pyarrow")
    df = long_table()
    df["b"] = [written.format(1000 * v) if i % 6 == 0 else "n/a" for i, v in enumerate(df["b"])]
    csv = write(tmp_path, df)
    parquet = tmp_path / "data.parquet"
    df.to_parquet(parquet)
    for path in (csv, parquet):
        with pytest.raises(UserError, match=f"^File {re.escape(str(path))}: column 'b' .*{says}"):
            LongFormatSource(path).load()


def test_a_channel_mostly_marked_missing_in_text_is_refused_and_read_when_named(tmp_path):
    """'--' in 60 % of its cells: it was left out of the forecast with an INFO line."""
    df = long_table()
    df["b"] = [v if i % 5 < 2 and v == v else "--" for i, v in enumerate(df["b"])]
    path = write(tmp_path, df)
    with pytest.raises(UserError) as refused:
        LongFormatSource(path).load()
    share = pd.to_numeric(df["b"], errors="coerce").notna().mean()
    assert 0.25 <= share <= 0.5
    assert str(refused.value) == (
        f"File {path}: column 'b' holds numbers in {share:.0%} of its filled cells and text "
        "in the others (e.g. '--'), so it is not read as a channel. To forecast it, list it "
        "in data.source.value_cols with data.source.bad_values=warn (its text cells read as "
        "missing), or set data.source.value_cols to the channel columns to forecast without it."
    )
    # read as the message says: its '--' cells are missing, its numbers kept
    stream = LongFormatSource(path, value_cols=["a", "b"], bad_values="warn").load()
    assert stream.channel_names == ["a", "b"]
    assert 0 < stream.mask[..., 1].mean() < 0.5
    assert LongFormatSource(path, value_cols=["a"]).load().channel_names == ["a"]


@pytest.mark.parametrize(
    "cells",
    [
        ["12 Main St", "5 Oak Ave", "9 Elm Rd"],
        ["10:00", "11:00", "12:00"],
        ["ok", "ok", "bad"],
        ["north", "south", "east", "west", "4"],  # numbers in under a quarter of its cells
    ],
    ids=["addresses", "times", "words", "few numbers"],
)
def test_a_label_column_with_numbers_in_it_is_still_left_out(tmp_path, cells):
    df = long_table()
    df["note"] = [cells[i % len(cells)] for i in range(len(df))]
    assert LongFormatSource(write(tmp_path, df)).load().channel_names == ["a", "b"]


@pytest.mark.parametrize("gaps", [False, True], ids=["bool", "with-empty-cells"])
def test_a_true_false_column_is_a_label_unless_named(tmp_path, caplog, gaps):
    """pandas counts True/False as numbers: a "sensor_ok" flag was forecast as a 0/1
    channel without a word. It is left out, said at INFO, and read as 0/1 when named."""
    df = long_table()
    # an empty cell makes the column object-typed: True, False and NaN
    df["sensor_ok"] = [None if gaps and i % 4 == 0 else i % 3 != 0 for i in range(len(df))]
    path = write(tmp_path, df)
    with caplog.at_level("INFO", logger="cloudlstm.data.sources.long_format"):
        assert LongFormatSource(path).load().channel_names == ["a", "b"]
    assert (
        f"{path}: skipping True/False column(s) ['sensor_ok']; list them in "
        "data.source.value_cols (or covariate_cols) to read them as 0/1."
    ) in caplog.text
    named = LongFormatSource(path, value_cols=["a", "sensor_ok"]).load()
    assert named.channel_names == ["a", "sensor_ok"]
    read = named.values[..., 1][named.mask[..., 1]]
    assert set(np.unique(read)) == {0.0, 1.0}


@pytest.mark.parametrize("value_cols", [None, ["a", "b"]], ids=["found", "named"])
def test_a_file_of_columns_without_rows_says_so(tmp_path, value_cols):
    """Its empty columns read as not numeric: the line told to set value_cols."""
    path = write(tmp_path, long_table().iloc[:0])
    with pytest.raises(
        UserError, match=r"^[Ff]ile .*data\.csv has no rows, only its columns: give "
    ):
        LongFormatSource(path, value_cols=value_cols).load()


def test_a_path_in_the_home_folder_is_found(tmp_path, monkeypatch):
    """``data.source.path='~/data.csv'`` (quoted: Hydra's grammar reads ~ only so) was
    looked for under the working folder, in a folder named ~."""
    write(tmp_path, long_table())
    monkeypatch.setenv("HOME", str(tmp_path))
    source = LongFormatSource("~/data.csv")
    assert source.path == tmp_path / "data.csv"
    assert source.load().num_points == 3  # long_table's last point has no values


def test_one_mistyped_coordinate_is_warned_of_where_it_makes_the_points_moving(tmp_path, caplog):
    """One coordinate wrong in one row of 80 turns static points into moving ones (their
    positions forecast and scored too); the data say so in a warning naming the point and
    the time. Points that move at most steps are no typo, and get no such warning."""
    df = long_table()
    df.loc[(df["id"] == "st1") & (df["timestamp"] == df["timestamp"].iloc[40]), "x"] = 99.0
    with caplog.at_level(logging.WARNING):
        stream = LongFormatSource(write(tmp_path, df)).load()
    assert stream.moving
    warned = [r.getMessage() for r in caplog.records if "usual place" in r.getMessage()]
    assert (
        len(warned) == 1
        and "1 point(s) leave their usual place at only a few steps " in (warned[0])
    )
    assert f"id='st1' at {pd.Timestamp(df['timestamp'].iloc[40])}: x=99, y=" in warned[0]
    caplog.clear()
    moving = long_table()
    moving["x"] = moving["x"] + np.arange(len(moving)) * 0.1  # every point, every step
    with caplog.at_level(logging.WARNING):
        assert LongFormatSource(write(tmp_path, moving, "fleet.csv")).load().moving
    assert "usual place" not in caplog.text


def test_a_point_that_never_reads_a_channel_is_warned_of(tmp_path, caplog):
    """Its series of that channel is the other points' mean at each step: training said
    nothing of it, where predict.py warns of such a history."""
    df = long_table(n=5)  # st4 reads nothing and is dropped (warned of apart)
    df.loc[df["id"] == "st1", "b"] = np.nan
    with caplog.at_level(logging.WARNING):
        LongFormatSource(write(tmp_path, df)).load()
    warned = [
        r.getMessage() for r in caplog.records if "no reading of some channel" in r.getMessage()
    ]
    assert (
        len(warned) == 1
        and "1 point(s) have no reading of some channel in any step (st1: b)" in (warned[0])
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        LongFormatSource(write(tmp_path, long_table(), "full.csv")).load()
    assert "no reading of some channel" not in caplog.text


def test_parquet(tmp_path):
    df = long_table()
    df["timestamp"] = pd.to_datetime(df["timestamp"])
    path = tmp_path / "data.parquet"
    try:
        df.to_parquet(path)
    except ImportError:
        path.write_bytes(b"PAR1 not really")
        with pytest.raises(ImportError, match="pip install pyarrow"):
            LongFormatSource(path).load()
        return
    assert LongFormatSource(path).load().values.shape == (20, 3, 2)


def test_parquet_without_pyarrow_is_a_user_error(tmp_path, monkeypatch):
    import importlib.util

    from cloudlstm.errors import MissingPackageError, UserError

    path = tmp_path / "data.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(MissingPackageError, match="pip install pyarrow") as err:
        LongFormatSource(path).load()
    assert isinstance(err.value, UserError) and isinstance(err.value, ImportError)


def test_too_few_steps_is_refused_by_the_datamodule(tmp_path):
    source = LongFormatSource(write(tmp_path, long_table(t_steps=8)))
    dm = PointCloudDataModule(source, input_steps=4, output_steps=3)
    with pytest.raises(ValueError, match="needs its history \\+ output_steps"):
        dm.setup()


# ---------------------------------------------------------------- Hydra config
def test_points_config_builds_a_datamodule(tmp_path):
    path = write(tmp_path, long_table(t_steps=100, drop={(3, 1)}))
    cfg = compose_train(
        tmp_path,
        [
            "data=points",
            f"data.source.path={path}",
            "data.source.coord_cols=[y,x]",
            "data.source.freq=5min",
            "data.input_steps=4",
            "data.output_steps=2",
            "data.batch_size=5",
        ],
    )
    dm = instantiate(cfg.data)
    assert type(dm) is PointCloudDataModule and isinstance(dm.source, LongFormatSource)
    batch = next(iter(dm.train_dataloader()))
    assert batch["x"].shape == (5, 4, 3, 2) and batch["y"].shape == (5, 2, 3, 2)
    assert batch["coords"].shape == (5, 3, 2)
    assert dm.stream.coords[2].tolist() == [4.0, 2.0]  # columns in the order given

    cfg = compose_train(tmp_path, ["data=points"])
    with pytest.raises(MissingMandatoryValue, match="data.source.path"):
        instantiate(cfg.data)
    from cloudlstm.cli.train import train  # what the user sees from train.py

    with pytest.raises(ValueError, match=r"needs data\.source\.path; give it on the command line"):
        train(cfg)


# ---------------------------------------------------------------- cache
def test_files_alike_in_name_size_and_time_are_cached_apart(tmp_path):
    """Two sites' exports unpacked from one archive: the same name, size and time, other
    readings. Each is its own stream, not the first one's from the cache."""
    sites = []
    for site, offset in (("a", 0.0), ("b", 1.0)):  # 1.5 and 2.5 are as long as text
        folder = tmp_path / site
        folder.mkdir()
        df = long_table()
        df["a"] = 1.5 + offset
        sites.append(write(folder, df))
    os.utime(sites[1], ns=(sites[0].stat().st_mtime_ns,) * 2)
    assert sites[0].name == sites[1].name and sites[0].stat().st_size == sites[1].stat().st_size
    streams = [LongFormatSource(p, cache_dir=tmp_path / "cache").load() for p in sites]
    assert np.unique(streams[0].values[..., 0]).tolist() == [1.5]
    assert np.unique(streams[1].values[..., 0]).tolist() == [2.5]
    moved = tmp_path / "moved" / sites[0].name
    moved.parent.mkdir()
    shutil.copy2(sites[0], moved)  # the same readings elsewhere: the same stream
    source = LongFormatSource(moved, cache_dir=tmp_path / "cache")
    source.load()
    assert source.last_load_from_cache


def test_a_cache_dir_caches_the_stream_until_the_file_changes(tmp_path):
    path = write(tmp_path, long_table(drop={(5, 0)}))
    source = LongFormatSource(path, cache_dir=tmp_path / "cache")
    stream = source.load()
    assert not source.last_load_from_cache and stream.memory_mapped
    assert source.cache_path.name.startswith("points_")
    with rebuilding_fails(LongFormatSource, "generate"):
        again = source.load()
    assert source.last_load_from_cache
    np.testing.assert_array_equal(again.values, stream.values)
    np.testing.assert_array_equal(again.mask, stream.mask)
    # another reading of the same file, or an edited file, is another stream
    assert LongFormatSource(path, cache_dir=tmp_path / "cache", freq="5min").cache_path != (
        source.cache_path
    )
    df = long_table()
    df["a"] += 1.0
    written = path.stat().st_mtime_ns
    df.to_csv(path, index=False)
    os.utime(path, ns=(written + 10**9, written + 10**9))  # mtime ticks can be coarse
    edited = source.load()
    assert not source.last_load_from_cache
    seen = stream.mask[:, 0, 0]  # the edited file has no gap at step 5
    np.testing.assert_allclose(
        edited.values[seen, 0, 0], stream.values[seen, 0, 0] + 1.0, rtol=1e-6
    )


def test_a_point_without_data_is_warned_of_by_every_run_the_cache_serves(tmp_path, caplog):
    """Every source reads its stream back from the cache: each run leaves the point out, so
    each says so, not only the run that built the cache."""
    path = write(tmp_path, long_table())  # st3 has rows but no reading
    for built in (True, False):
        caplog.clear()
        source = LongFormatSource(path, cache_dir=tmp_path / "cache")
        with caplog.at_level(logging.WARNING, logger="cloudlstm.data"):
            stream = source.load()
        assert source.last_load_from_cache is not built and "st3" not in stream.point_ids
        dropped = [r.getMessage() for r in caplog.records if "no data at all" in r.getMessage()]
        assert dropped == [f"{stream.name}: dropping 1 point(s) with no data at all: st3"]


def test_a_cell_of_blanks_alone_is_missing_as_an_empty_cell_is(tmp_path):
    """' ' in a CSV (or '' in a DataFrame built from records) was refused as a bad value by
    a line that said to leave missing readings empty."""
    from cloudlstm.data.sources.bad_values import channel_values

    records = pd.DataFrame({"a": ["1.5", "", "  ", None, "2"], "b": [1.0, 2, 3, 4, 5]})
    values = channel_values(records, ["a", "b"], "records")
    np.testing.assert_array_equal(np.isnan(values[:, 0]), [False, True, True, True, False])
    df = long_table()
    df["a"] = df["a"].astype(object)
    df.loc[1, "a"] = " "  # data row 1: st1 at step 0
    stream = LongFormatSource(write(tmp_path, df, "blank.csv")).load()
    assert not stream.mask[0, 1, 0] and stream.mask[1, 1, 0]  # a gap, filled
