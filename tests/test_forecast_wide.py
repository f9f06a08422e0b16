"""Forecasting with a run trained on a wide table (``data=metr_la``'s form: one column per
sensor, 0 for a missing reading) from a recent file of the same form: the forecast the
long format gives, the training files' missing value read as missing, and one line for
what a wide history cannot give."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import TINY, compose_train, one_line, run_python
from test_forecast import read_back

from cloudlstm.cli.predict import read_history
from cloudlstm.cli.train import train
from cloudlstm.data.pipeline.wide_history import long_history
from cloudlstm.errors import UserError
from cloudlstm.forecast import FILLED_COLUMN, Forecaster

STEPS, START, STEP = 200, pd.Timestamp("2012-03-01"), pd.Timedelta("5min")
IDS = ["773869", "767541", "767542", "717447", "717446", "717445"]
LON = np.linspace(-118.32, -118.22, len(IDS))
LAT = np.array([34.15, 34.11, 34.12, 34.07, 34.09, 34.13])
TIMES = START + STEP * np.arange(STEPS)


def speeds() -> pd.DataFrame:
    """Smooth speeds, one column per sensor, no time column (T-GCN's ``los_speed.csv``)."""
    t = np.arange(STEPS)[:, None]
    phase = np.arange(len(IDS))[None, :]
    return pd.DataFrame(60 + 8 * np.sin(2 * np.pi * t / 48 + phase), columns=IDS)


def wide_data(folder: Path) -> Path:
    """``folder`` holding the wide speed table and the sensors' positions, as data=metr_la
    reads them."""
    speeds().to_csv(folder / "los_speed.csv.gz", index=False)
    locations = {"sensor_id": IDS, "latitude": LAT, "longitude": LON}
    pd.DataFrame(locations).to_csv(folder / "graph_sensor_locations.csv", index=False)
    return folder


@pytest.fixture(scope="module")
def forecaster(tmp_path_factory) -> Forecaster:
    """A tiny CloudLSTM run on the wide table through ``data=metr_la``."""
    folder = wide_data(tmp_path_factory.mktemp("wide"))
    keep = [o for o in TINY if not o.startswith("data.source.")]
    overrides = [*keep, "data=metr_la", f"data.source.root={folder}", "data.input_steps=4"]
    cfg = compose_train(folder, [*overrides, "logger=none", "report.figures=false"])
    train(cfg)
    return Forecaster.load(Path(cfg.paths.output_dir), device="cpu")


def wide(rows: slice) -> pd.DataFrame:
    """The rows' speeds with their times in a column."""
    return speeds().iloc[rows].assign(timestamp=TIMES[rows])


def long(table: pd.DataFrame) -> pd.DataFrame:
    """The same readings in the long format, each sensor at its coordinates."""
    rows = table.melt(id_vars="timestamp", var_name="id", value_name="speed")
    place = dict(zip(IDS, zip(LON, LAT, strict=True), strict=True))
    return rows.assign(x=[place[i][0] for i in rows.id], y=[place[i][1] for i in rows.id])


RECENT = slice(STEPS - 10, STEPS)


def test_a_wide_history_forecasts_as_the_long_format(forecaster):
    expected = forecaster.forecast(long(wide(RECENT)))
    pd.testing.assert_frame_equal(forecaster.forecast(wide(RECENT)), expected)
    assert expected.horizon.max() == 3 and set(expected.id) == set(IDS)


def test_a_wide_history_with_its_sensor_ids_as_numbers_forecasts_as_with_text(forecaster):
    """A table pivoted from ids read as numbers has int columns: the forecast failed with
    "keywords must be strings"."""
    history = wide(RECENT)
    numbered = history.rename(columns={i: int(i) for i in IDS})
    pd.testing.assert_frame_equal(forecaster.forecast(numbered), forecaster.forecast(history))


def test_a_wide_history_without_a_sensors_column_says_it_is_not_forecast(forecaster, caplog):
    """Its column left out, the sensor was left out of the forecast without a word."""
    history = wide(RECENT).drop(columns=IDS[2])
    with caplog.at_level(logging.WARNING, logger="cloudlstm.data.pipeline.wide_history"):
        forecast = forecaster.forecast(history)
    assert set(forecast.id) == set(IDS) - {IDS[2]}
    assert [r.getMessage() for r in caplog.records if "no column" in r.getMessage()] == [
        f"the history has no column for 1 of the 6 training point(s) ({IDS[2]}), which are "
        "not forecast: add their columns (empty cells where they have no readings) to "
        "forecast them."
    ]


@pytest.mark.parametrize("empty", [np.nan, "n/a", " NA ", "", "null"])
def test_an_empty_column_of_no_training_point_is_left_out_with_a_warning(forecaster, caplog, empty):
    """A sensor without readings, which training dropped, written in the history as in the
    training file: its empty column was refused as a point the model was not trained on,
    and so was a column of missing-value texts (``n/a``, as a DataFrame or a Parquet file
    holds them), which training reads as empty."""
    history = wide(RECENT).assign(s999=empty)
    with caplog.at_level(logging.WARNING, logger="cloudlstm.data.pipeline.wide_history"):
        forecast = forecaster.forecast(history)
    pd.testing.assert_frame_equal(forecast, forecaster.forecast(wide(RECENT)))
    assert [r.getMessage() for r in caplog.records] == [
        "the history: column(s) s999 hold no reading and are no training point (training "
        "drops a point without readings): left out."
    ]
    with pytest.raises(UserError, match=r"column\(s\) s999 are not points the model was"):
        forecaster.forecast(history.assign(s999=1.0))  # with readings: a new point
    caplog.clear()
    stream = Forecaster.load(forecaster.checkpoint.parents[1], device="cpu")
    for step in range(len(history)):  # a snapshot's empty column alike
        stream.update(history.iloc[[step]])
    pd.testing.assert_frame_equal(stream.forecast(), forecast)


@pytest.mark.parametrize(
    ("repeat", "named"),
    [
        (lambda t: pd.concat([t, t[[IDS[0]]]], axis=1), IDS[0]),  # a table joined twice
        (lambda t: t.rename(columns={IDS[0]: int(IDS[0])}).assign(**{IDS[0]: 1.0}), IDS[0]),
        (lambda t: pd.concat([t, t[["timestamp"]]], axis=1), "timestamp"),
        (lambda t: pd.concat([long(t), long(t)[["speed"]]], axis=1), "speed"),
    ],
    ids=["point", "point as a number and as text", "times", "long format's channel"],
)
def test_a_history_or_snapshot_naming_a_column_twice_is_one_line(forecaster, repeat, named):
    """A column twice in a DataFrame given to forecast() or update() failed deep in pandas
    ("arg must be a list, tuple, 1-d array, or Series", "id_vars cannot contain duplicate
    columns"), where the wide training table is refused so in one line."""
    table = repeat(wide(RECENT))
    message = rf"^{{}} names the column\(s\) \['{named}'\] more than once: keep one of each\.$"
    with pytest.raises(UserError, match=message.format("the history")):
        forecaster.forecast(table)
    stream = Forecaster.load(forecaster.checkpoint.parents[1], device="cpu")
    with pytest.raises(UserError, match=message.format("the snapshot")):
        stream.update(table.iloc[:1])


def test_wide_rows_fed_one_step_at_a_time_forecast_as_the_whole(forecaster):
    expected = forecaster.forecast(wide(RECENT))
    stream = Forecaster.load(forecaster.checkpoint.parents[1], device="cpu")
    for row in range(RECENT.start, RECENT.stop):
        stream.update(wide(slice(row, row + 1)).set_index("timestamp"))  # times as the index
    pd.testing.assert_frame_equal(stream.forecast(), expected)


@pytest.mark.skipif(importlib.util.find_spec("tables") is None, reason="needs PyTables")
def test_an_h5_history_with_its_times_in_the_index(forecaster, tmp_path):
    """DCRNN's metr-la.h5: a DatetimeIndex, one column per sensor, read by predict.py."""
    table = speeds().iloc[RECENT].set_axis(TIMES[RECENT])
    table.to_hdf(tmp_path / "recent.h5", key="df")
    done = run_python(
        "predict.py",
        f"run={forecaster.checkpoint.parents[1]}",
        f"data.path={tmp_path / 'recent.h5'}",
        f"out={tmp_path / 'forecast.csv'}",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    written = pd.read_csv(tmp_path / "forecast.csv", dtype={"id": str})
    expected = forecaster.forecast(wide(RECENT))
    assert np.allclose(written.speed, expected.speed, rtol=1e-5)


def test_times_in_an_unnamed_first_column_as_pandas_writes_an_index(forecaster, tmp_path):
    """Milan's shared table: ``to_csv`` of a frame indexed by time, header ``,23,292,...``;
    a recent file of that form is read by its first column's times, as training read it."""
    table = speeds().iloc[RECENT].set_axis(TIMES[RECENT])
    table.to_csv(tmp_path / "recent.csv")
    history = read_history(tmp_path / "recent.csv")
    assert history.columns[0] == "Unnamed: 0"
    expected = forecaster.forecast(wide(RECENT))
    pd.testing.assert_frame_equal(forecaster.forecast(history), expected)


def test_row_numbers_written_by_to_csv_are_no_times_nor_a_point(forecaster, tmp_path):
    """``wide.to_csv(path)`` with the default index: header ``,<sensors...>,timestamp``
    and rows numbered 0, 1, 2, ... The numbers were refused as a column of no training
    point; they are skipped, and the times read from their column."""
    wide(RECENT).reset_index(drop=True).to_csv(tmp_path / "recent.csv")
    history = read_history(tmp_path / "recent.csv")
    assert history.columns[0] == "Unnamed: 0"
    expected = forecaster.forecast(wide(RECENT))
    pd.testing.assert_frame_equal(forecaster.forecast(history), expected)


def test_a_history_names_its_times_as_the_training_table_did(tmp_path):
    """A run trained with ``data.source.time_col=ts`` reads a wide history's ``ts`` column;
    the description stores the name, and a history without it is refused naming it."""
    folder = tmp_path / "files"
    folder.mkdir()
    speeds().assign(ts=TIMES).to_csv(folder / "speeds.csv", index=False)
    locations = {"sensor_id": IDS, "latitude": LAT, "longitude": LON}
    pd.DataFrame(locations).to_csv(folder / "graph_sensor_locations.csv", index=False)
    keep = [o for o in TINY if not o.startswith("data.source.")]
    source = [f"data.source.root={folder}", "data.source.path=speeds.csv"]
    source.append("data.source.time_col=ts")
    overrides = [*keep, "data=metr_la", *source, "data.input_steps=4"]
    cfg = compose_train(tmp_path, [*overrides, "logger=none", "report.figures=false"])
    train(cfg)
    run = Forecaster.load(Path(cfg.paths.output_dir), device="cpu")
    assert run.info.wide_time_col == "ts"
    history = wide(RECENT).rename(columns={"timestamp": "ts"})
    got = run.forecast(history)
    pd.testing.assert_frame_equal(got, run.forecast(long(wide(RECENT))))
    with pytest.raises(UserError, match="add a column 'ts' of the rows' times"):
        run.forecast(history.rename(columns={"ts": "when"}))


def test_the_training_files_missing_value_is_missing_in_a_history(forecaster):
    """METR-LA writes 0 for no reading: a 0 is forecast from as an empty cell is, filled."""
    zero, empty = wide(RECENT), wide(RECENT)
    zero.loc[zero.index[-2], IDS[1]] = 0.0
    empty.loc[empty.index[-2], IDS[1]] = np.nan
    got, expected = forecaster.forecast(zero), forecaster.forecast(empty)
    pd.testing.assert_frame_equal(got, expected)
    filled = got[got.horizon == 1].set_index("id")[FILLED_COLUMN]
    assert filled[IDS[1]] == 1 and filled.drop(IDS[1]).eq(0).all()


def test_a_missing_value_text_is_missing_in_a_wide_history_and_a_wide_snapshot(
    forecaster, tmp_path
):
    """``n/a`` in a wide DataFrame (or a Parquet file's text columns) was refused as no
    number, where the CSV file of the same table read it as missing."""
    text, empty = wide(RECENT).astype({IDS[1]: str}), wide(RECENT)
    text.loc[text.index[-2], IDS[1]] = "n/a"
    empty.loc[empty.index[-2], IDS[1]] = np.nan
    expected = forecaster.forecast(empty)
    for given in [text, *read_back(text, tmp_path)]:
        pd.testing.assert_frame_equal(forecaster.forecast(given), expected)
    stream = Forecaster.load(forecaster.checkpoint.parents[1], device="cpu")
    for step in range(len(text)):
        stream.update(text.iloc[[step]])
    pd.testing.assert_frame_equal(stream.forecast(), expected)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.assign(other=1.0), "column(s) other are not points the model was trained on"),
        (lambda t: t.drop(columns="timestamp"), "is a wide table (one column per point) without"),
    ],
)
def test_what_a_wide_history_cannot_give_is_one_line(forecaster, change, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        forecaster.forecast(change(wide(RECENT)))
    assert "\n" not in str(err.value)


def test_a_bad_cell_of_a_wide_history_is_named_by_its_row_and_point_column(forecaster):
    """Not by the melted rows' numbers and a channel column ('speed') the file lacks."""
    table = wide(RECENT).astype({IDS[2]: object})
    table.loc[table.index[-1], IDS[2]] = "12 km/h"
    with pytest.raises(UserError) as err:
        forecaster.forecast(table, what="recent.csv")
    assert str(err.value).startswith(
        f"recent.csv: 1 channel value(s) are not finite numbers: data row 9, column "
        f"'{IDS[2]}': '12 km/h'. Leave missing readings empty"
    )
    empty = wide(RECENT)
    empty.loc[empty.index[-1], IDS[2]] = np.nan
    warned = forecaster.forecast(table, bad_values="warn")  # missing, as an empty cell
    pd.testing.assert_frame_equal(warned, forecaster.forecast(empty))


def test_a_point_column_of_true_false_in_a_wide_history_is_refused(forecaster, tmp_path):
    """Read as speeds of 1 and 0 without a word, as a DataFrame, a CSV file (whose reader
    makes True/False booleans) and with an empty cell (objects) alike."""
    table = wide(RECENT)
    cells = np.resize(np.array([True, False], dtype=object), len(table))
    table[IDS[2]] = cells.astype(bool)
    gap = table.assign(**{IDS[2]: [None, *cells[1:]]})
    table.to_csv(tmp_path / "recent.csv", index=False)
    message = (
        f"recent.csv: point column(s) {IDS[2]} hold True/False, not readings of 'speed': "
        "write each point's readings as numbers (0 and 1 where they are yes/no), or leave "
        "those columns out."
    )
    for given in (table, gap, read_history(tmp_path / "recent.csv")):
        for mode in ("error", "warn"):
            with pytest.raises(UserError) as err:
                forecaster.forecast(given, what="recent.csv", bad_values=mode)
            assert str(err.value) == message


def test_a_complex_point_column_or_true_false_among_numbers_is_refused(forecaster):
    """A wide history's point column of complex numbers read their real parts (a mere
    ComplexWarning), and one True among speeds read as 1: refused as training refuses them,
    in a history and a snapshot alike, naming the column (and the row of the True)."""
    table = wide(RECENT).reset_index(drop=True)
    complex_ = table.assign(**{IDS[2]: table[IDS[2]] + 1j})
    mixed = table.astype({IDS[2]: object})
    mixed.loc[3, IDS[2]] = True
    texted = mixed.copy()
    texted[IDS[2]] = texted[IDS[2]].where(texted.index != 4, "abc")
    for given, said in (
        (complex_, f"column {IDS[2]!r} holds complex numbers (e.g. "),
        (mixed, f"column {IDS[2]!r} holds True/False among numbers (e.g. True at data row 3; "),
        (
            texted,
            f"column {IDS[2]!r} holds True/False among numbers and text (e.g. True at data row "
            "3; 1 such cell(s)), which would read as 1 and 0, and text that is no number (e.g. "
            "'abc' at data row 4): ",
        ),
    ):
        for mode in ("error", "warn"):
            with pytest.raises(UserError) as err:
                forecaster.forecast(given, what="recent.csv", bad_values=mode)
            assert str(err.value).startswith(f"recent.csv: {said}"), str(err.value)
        with pytest.raises(UserError) as err:
            forecaster.update(given)
        assert str(err.value).startswith(f"the snapshot: {said}"), str(err.value)


def test_a_value_out_of_range_in_a_wide_history_is_named_by_point_and_time_alone(forecaster):
    """As docs/forecasting.md says: not by its step of the window read ('step 3'), a
    number the user's table holds nowhere."""
    table = wide(RECENT)
    table.loc[table.index[-1], IDS[2]] = -5.0  # data=metr_la: speeds are >= 0
    with pytest.raises(UserError) as err:
        forecaster.forecast(table, what="recent.csv")
    assert (
        f"channel 'speed', point {IDS[2]}, time {pd.Timestamp(TIMES[-1])}: -5 (valid range >= 0)"
        in str(err.value)
    )


def test_a_time_in_two_rows_of_a_wide_history_is_named_as_such(forecaster):
    table = wide(RECENT)
    with pytest.raises(UserError) as err:
        forecaster.forecast(pd.concat([table, table.iloc[-1:]]), what="recent.csv")
    # 16:35 of 1 March repeats in no zone when its clocks go back: no word of clock changes
    assert str(err.value) == (
        f"recent.csv writes the time {pd.Timestamp(TIMES[-1])} in 2 rows (data rows 9, 10): a "
        "wide table holds one row per time, so keep one of each."
    )
    with pytest.raises(UserError, match=r"\(data rows 8, 10\), and 1 other time\(s\) so: a wide"):
        forecaster.forecast(pd.concat([table, table.iloc[-2:]]), what="recent.csv")


def test_a_long_history_without_columns_names_few_of_many_found(forecaster):
    table = wide(RECENT).rename(columns=lambda c: f"s{c}")
    many = table.assign(**{f"extra{i}": 0.0 for i in range(30)})
    with pytest.raises(UserError, match=r"\.\.\. \(37 in all\)"):
        forecaster.forecast(many)


def test_point_columns_in_another_case_are_named_so(forecaster):
    """Sensors trained as ``s773869`` given as ``S773869``: a wide table written otherwise,
    not a long one without its id column (ids are matched as written, never folded)."""
    info = dataclasses.replace(forecaster.info, point_ids=[f"s{i}" for i in IDS])
    table = wide(RECENT).rename(columns=lambda c: c if c == "timestamp" else f"S{c}")
    with pytest.raises(UserError) as err:
        long_history(table, info, "history")
    assert str(err.value) == (
        "history has no id column, and its column(s) S773869, S767541, S767542, S717447, "
        "S717446 ... (6 in all) are no training point's id. All 6 differ from an id of the "
        "training points only in case (e.g. 'S773869' and 's773869'): ids are matched as "
        "written, so write them alike in both."
    )
    some = table.rename(columns={"S773869": "s773869"})
    with pytest.raises(
        UserError,
        match=r"column\(s\) S767541, .* are not points the model .*"
        r" All 5 differ from an id of the training points only in case",
    ):
        long_history(some, info, "history")


FLOAT_HINT = (
    "from an id of the training points only by a '.0' (e.g. '773869.0' and '773869'), as "
    "pandas writes a column of whole numbers that had an empty cell: ids are matched as "
    "written, so write them alike in both (as integers: in pandas, astype('Int64'))."
)


def test_sensor_ids_written_as_floats_are_named_so_in_a_wide_or_long_history_file(
    forecaster, tmp_path, caplog
):
    """A history file whose sensor ids pandas wrote as floats (``773869.0``) was read as a
    long table without its id column (all columns so), refused without a word of the
    ``.0`` (some), or forecast as new sites in silence (the long format)."""
    path = tmp_path / "recent.csv"
    floats = wide(RECENT).rename(columns=lambda c: c if c == "timestamp" else f"{c}.0")
    floats.to_csv(path, index=False)
    with pytest.raises(UserError) as err:
        long_history(read_history(path), forecaster.info, "history")
    assert str(err.value) == (
        "history has no id column, and its column(s) 773869.0, 767541.0, 767542.0, "
        f"717447.0, 717446.0 ... (6 in all) are no training point's id. All 6 differ {FLOAT_HINT}"
    )
    wide(RECENT).rename(columns={"773869": "773869.0"}).to_csv(path, index=False)
    with pytest.raises(UserError) as err:
        long_history(read_history(path), forecaster.info, "history")
    said = str(err.value)
    assert "column(s) 773869.0 are not points" in said, said
    assert said.endswith(f"speed). It differs {FLOAT_HINT}"), said
    rows = long(wide(RECENT))
    rows.assign(id=rows["id"].replace("773869", "773869.0")).to_csv(path, index=False)
    with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.forecast_input"):
        forecaster.forecast(read_history(path))
    warned = [r.getMessage() for r in caplog.records if "only by a '.0'" in r.getMessage()]
    assert warned == [
        f"the history has new point(s) forecast as new sites. It differs {FLOAT_HINT}"
    ]


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory) -> Path:
    """A tiny MLP run on the wide table: a model tied to its training points, in order."""
    folder = wide_data(tmp_path_factory.mktemp("mlp"))
    keep = [o for o in TINY if not o.startswith(("data.source.", "model."))]
    overrides = [*keep, "data=metr_la", f"data.source.root={folder}", "data.input_steps=4"]
    cfg = compose_train(folder, [*overrides, "model=mlp", "logger=none", "report.figures=false"])
    train(cfg)
    return Path(cfg.paths.output_dir)


def test_eval_reads_the_training_columns_given_in_another_order_in_the_training_order(
    mlp_run, tmp_path
):
    """eval.py on the same sensors' columns reversed: a model tied to its points refused
    them as "other points", where predict.py reads them by id; now they are put in the
    training order, and score as the training table does."""
    from cloudlstm.cli.evaluate import evaluate
    from tests.test_eval import compose_eval

    reversed_ = tmp_path / "reversed.csv.gz"
    speeds()[IDS[::-1]].to_csv(reversed_, index=False)
    saving = "module.save_predictions=true"
    same = evaluate(compose_eval(mlp_run, tmp_path / "same", saving))
    rev = compose_eval(mlp_run, tmp_path / "rev", f"data.source.path={reversed_}", saving)
    other = evaluate(rev)
    assert other["data"]["points_digest"] == same["data"]["points_digest"]
    assert other["test"]["overall"] == same["test"]["overall"]
    # the saved N axis names its points: the training order, not the file's columns
    trained = json.loads((mlp_run / "data_summary.json").read_text())["point_ids"]
    assert sorted(trained) == sorted(IDS) and trained != IDS[::-1]
    assert other["data"]["point_ids"] == trained
    with np.load(tmp_path / "rev" / "predictions.npz") as npz:
        assert npz["point_ids"].tolist() == trained


def test_a_fixed_point_model_names_a_wide_historys_missing_column_a_column(mlp_run):
    """A wide table's points are its columns: one left out was called a missing "row"."""
    f = Forecaster.load(mlp_run, device="cpu")
    with pytest.raises(UserError) as err:
        f.forecast(wide(RECENT).drop(columns=IDS[4]))
    assert str(err.value).endswith(
        f"has no column of {IDS[4]}. Give each a column (readings left empty are filled from "
        "the other points, with a warning), or train a point model (e.g. model=cloudlstm)."
    )
    # the fix as given: its column there, every cell empty
    emptied = wide(RECENT).assign(**{IDS[4]: np.nan})
    assert sorted(set(f.forecast(emptied)["id"])) == sorted(IDS)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (  # a cell that is no number: by its line and point column
            lambda t: t.astype({IDS[2]: object}).assign(**{IDS[2]: [*[60.0] * 9, "12 km/h"]}),
            f"1 channel value(s) are not finite numbers: line 12, column '{IDS[2]}': '12 km/h'.",
        ),
        (  # a time in two rows: both lines
            lambda t: pd.concat([t, t.iloc[-1:]]),
            f"writes the time {pd.Timestamp(TIMES[-1])} in 2 rows (line 12, line 13): a wide",
        ),
        (  # a time that cannot be read: its row's line, not a melted row's number
            lambda t: t.astype({"timestamp": object}).assign(
                timestamp=[*map(str, TIMES[RECENT][:3]), "yesterday", *map(str, TIMES[-6:])]
            ),
            "line 6, 'yesterday'",
        ),
    ],
    ids=["text-cell", "time-in-two-rows", "unreadable-time"],
)
def test_a_bad_cell_of_a_wide_history_file_is_named_by_its_line(
    forecaster, tmp_path, change, message
):
    """predict.py on a wide CSV with a blank line (which pandas skips) before data row 2: the
    line an editor shows, where it named the row's position (data row 9 on line 12)."""
    lines = change(wide(RECENT)).to_csv(index=False).splitlines(keepends=True)
    path = tmp_path / "recent.csv"
    path.write_text("".join([*lines[:3], "\n", *lines[3:]]))
    done = run_python("predict.py", f"run={forecaster.checkpoint.parents[1]}", f"data.path={path}")
    line = one_line(done)
    assert f"data.path={path}" in line and message in line, line
