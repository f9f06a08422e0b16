"""A history given to ``Forecaster`` or ``predict.py`` is checked as training data is: cells
that are no finite number, values outside their channel's valid range, and absurd values
(robust z-score beyond the run's ``data.max_abs_z`` against the training median and spread,
stored in the checkpoint) are refused in one line, or with ``bad_values=warn`` treated as
missing (``src/cloudlstm/data/pipeline/absurd_values.py``)."""

from __future__ import annotations

import logging
import subprocess

import numpy as np
import pandas as pd
import pytest

from cloudlstm.data.sources.tables import file_row_names
from cloudlstm.errors import UserError
from cloudlstm.forecast import Forecaster
from tests.conftest import run_python
from tests.test_forecast import CHANNELS, SPLIT, STAMPS, csv_run, long_table

TRAIN_END = 144  # of T = 200 steps: the last 40 test, the last 16 of the rest validation
RANGES = "data.valid_ranges={no2:[0,null]}"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny CloudLSTM run on a CSV whose no2 readings are declared non-negative."""
    return csv_run(tmp_path_factory.mktemp("values"), RANGES)


@pytest.fixture(scope="module")
def forecaster(run):
    return Forecaster.load(run[0], device="cpu")


def history(run) -> pd.DataFrame:
    """The rows of the 10 steps before the test window at SPLIT, every cell filled."""
    _, values, observed = run
    return long_table(values, np.ones_like(observed), range(SPLIT - 10, SPLIT))


def with_cell(
    table: pd.DataFrame, value: float, row: int = 57, column: str = "no2"
) -> pd.DataFrame:
    """``table`` with one cell changed: by default one of the last step's, which the model
    reads (10 steps of 6 points: rows 54 to 59)."""
    assert len(table) == 60
    changed = table.copy()
    changed.loc[row, column] = value
    return changed


def test_the_checkpoint_holds_the_training_median_and_spread(run, forecaster):
    _, values, observed = run
    reference = forecaster.info.value_reference
    assert reference["max_abs_z"] == 1e4
    for c, name in enumerate(CHANNELS):
        seen = values[:TRAIN_END, :, c][observed[:TRAIN_END, :, c]]
        seen = seen.astype(np.float32).astype(np.float64)  # as the loader reads the CSV
        median = np.median(seen)
        spread = np.median(np.abs(seen - median)) / 0.6745  # the normal's MAD
        stored = reference["channels"][name]
        assert stored["median"] == pytest.approx(median, rel=1e-9)
        assert stored["spread"] == pytest.approx(spread, rel=1e-9)
    assert reference["channels"]["no2"]["range"] == [0.0, None]
    assert reference["channels"]["pm25"]["range"] is None


def test_an_absurd_value_is_refused_in_one_line_naming_it(run, forecaster):
    table = history(run)
    with pytest.raises(UserError) as err:
        forecaster.forecast(with_cell(table, 1e30))
    message = str(err.value)
    assert "\n" not in message
    point, time = table.loc[57, "id"], table.loc[57, "timestamp"]
    assert message.startswith(
        "the history: 1 value(s) lie more than 10000 typical spreads from their channel's "
        f"training median (robust z-score), in 'no2' (1): channel 'no2', point {point}, "
        f"time {time}"
    )
    assert ": 1e+30 (" in message
    # the Python argument, not predict.py's option
    assert "set bad_values=warn" in message and "data.source.bad_values" not in message
    assert "data.max_abs_z" in message
    # a large, real reading (three times the training maximum) passes
    assert len(forecaster.forecast(with_cell(table, 3 * run[1].max()))) == 3 * 6


def test_an_absurd_value_s_time_is_named_in_the_history_s_zone(run, forecaster):
    table = with_cell(history(run), 1e30)
    utc = table.loc[57, "timestamp"]
    rome = table.assign(
        timestamp=table["timestamp"].dt.tz_localize("UTC").dt.tz_convert("Europe/Rome")
    )
    with pytest.raises(UserError) as err:
        forecaster.forecast(rome)
    local = utc.tz_localize("UTC").tz_convert("Europe/Rome")
    assert f", time {local} (data row 57): " in str(err.value) and "+01:00" in str(local)


@pytest.mark.parametrize(
    ("cell", "words"),
    [
        (np.inf, "1 channel value(s) are not finite numbers: data row 57, column 'no2': inf"),
        (1e39, "1 channel value(s) are not finite numbers"),  # beyond float32
        (-5.0, "1 value(s) lie outside their channel's valid range, in 'no2' (1)"),
    ],
    ids=["inf", "beyond-float32", "out-of-range"],
)
def test_values_training_would_refuse_are_refused(run, forecaster, cell, words):
    with pytest.raises(UserError, match="^the history: ") as err:
        forecaster.forecast(with_cell(history(run), cell))
    assert words in str(err.value) and "\n" not in str(err.value)


def test_bad_values_warn_treats_them_as_missing(run, forecaster, caplog):
    table = history(run)
    gap = forecaster.forecast(with_cell(table, np.nan))
    with caplog.at_level(logging.WARNING):
        for cell in (1e30, np.inf, -5.0):
            warned = forecaster.forecast(with_cell(table, cell), bad_values="warn")
            pd.testing.assert_frame_equal(warned, gap)
    assert caplog.text.count("They count as missing") == 3


def test_a_snapshot_value_training_would_refuse_is_refused_when_fed(run, forecaster, caplog):
    """It was kept: every forecast() of the next steps then refused the stream, naming a
    point and time in it, and fixing the snapshot could not undo it. update() and
    forecast() name the value alike, by its row: here the index label of a slice."""
    table = history(run)
    last = table["timestamp"] == table["timestamp"].max()  # rows 54 to 59
    f = Forecaster.load(run[0], device="cpu")
    f.update(table[~last])
    point, time = table.loc[57, "id"], table.loc[57, "timestamp"]
    cell = f"channel 'no2', point {point}, time {time} (row with index 57): "
    for value, words in ((-5.0, "outside their channel's valid range"), (1e30, "spreads")):
        with pytest.raises(UserError) as err:
            f.update(with_cell(table, value)[last])
        assert str(err.value).startswith("the snapshot: 1 value(s) lie ")
        assert words in str(err.value) and cell in str(err.value)
        assert "set bad_values=warn" in str(err.value) and "\n" not in str(err.value)
        with pytest.raises(UserError) as err:
            forecaster.forecast(with_cell(table, value)[12:])  # index 12 on
        assert cell in str(err.value)
    f.update(table[last])  # the stream as it was, and the snapshot sent again
    pd.testing.assert_frame_equal(f.forecast(), forecaster.forecast(table))
    with caplog.at_level(logging.WARNING):
        f.update(with_cell(table, -5.0)[last].reset_index(drop=True), bad_values="warn")
    assert f"point {point}, time {time} (data row 3): -5 (valid range >= 0)" in caplog.text
    pd.testing.assert_frame_equal(f.forecast(), forecaster.forecast(with_cell(table, np.nan)))


def test_a_text_cell_s_refusal_names_the_python_argument(run, forecaster):
    """forecast() named predict.py's data.source.bad_values=warn, which Python takes as
    bad_values="warn"."""
    table = history(run)
    table["no2"] = table["no2"].astype(object)
    table.loc[57, "no2"] = "oops"
    with pytest.raises(UserError) as err:
        forecaster.forecast(table)
    message = str(err.value)
    assert "'oops'" in message and message.endswith(
        "or set bad_values=warn to treat them as missing."
    )
    assert len(forecaster.forecast(table, bad_values="warn")) == 3 * 6


def test_a_slice_s_coordinate_is_named_by_its_index_label(run, forecaster):
    """As its bad cells are: the label ``.loc`` finds, where it named the row's position
    in the slice (``data row 45`` for the label 57)."""
    with pytest.raises(UserError) as err:
        forecaster.forecast(with_cell(history(run), np.inf, column="x")[12:])
    assert "(row with index 57): a coordinate must be a finite number" in str(err.value)


@pytest.mark.parametrize("mode", ["error", "warn"])
def test_a_history_file_s_lines_are_read_once_for_the_values_a_message_names(
    run, forecaster, tmp_path, caplog, mode
):
    """Three absurd values of a CSV history, named by their lines (a blank line before
    them counted): the file was read through once for each value the message named."""
    table = history(run)
    table.loc[[55, 56, 57], "no2"] = 1e30
    text = table.to_csv(index=False).replace("\n", "\n\n", 1)  # line 2 blank
    (path := tmp_path / "recent.csv").write_text(text)
    lines = file_row_names(path, None)
    asked: list[list[int]] = []

    def counted(positions: list[int]) -> list[str]:
        asked.append(list(positions))
        return list(lines(positions))

    with caplog.at_level(logging.WARNING):
        if mode == "error":
            with pytest.raises(UserError) as err:
                forecaster.forecast(pd.read_csv(path), row_names=counted)
            message = str(err.value)
        else:
            forecaster.forecast(pd.read_csv(path), bad_values="warn", row_names=counted)
            message = caplog.text
    assert asked == [[55, 56, 57]]  # one read of the file for the three
    for row in (55, 56, 57):
        assert f"point {table.loc[row, 'id']}, time {table.loc[row, 'timestamp']} " in message
        assert f"(line {row + 3}): 1e+30 (" in message
        assert text.splitlines()[row + 2].split(",")[-2] == "1e+30"  # no2


def test_a_history_file_s_lines_are_named_from_its_path_given_as_text(run, forecaster, tmp_path):
    """``file_row_names`` takes the path as ``pd.read_csv`` was given it, a string, as
    docs/forecasting.md shows it used."""
    path = str(tmp_path / "recent.csv")
    with_cell(history(run), 1e30).to_csv(path, index=False)
    with pytest.raises(UserError) as err:
        forecaster.forecast(pd.read_csv(path), row_names=file_row_names(path, None))
    assert "(line " in str(err.value)


def predict(*args: str) -> subprocess.CompletedProcess:
    return run_python("predict.py", *args)


def test_predict_py_refuses_an_absurd_history_in_one_line(run, forecaster, tmp_path):
    data = tmp_path / "recent.csv"
    with_cell(history(run), 1e30).to_csv(data, index=False)
    done = predict(f"run={run[0]}", f"data.path={data}", f"out={tmp_path / 'f.csv'}")
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    lines = [x for x in done.stderr.splitlines() if "typical spreads" in x]
    assert len(lines) == 1 and lines[0].startswith(f"data.path={data}: 1 value(s) lie more")
    assert not (tmp_path / "f.csv").exists()

    done = predict(
        f"run={run[0]}", f"data.path={data}", f"out={tmp_path / 'f.csv'}",
        "data.source.bad_values=warn",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    written = pd.read_csv(tmp_path / "f.csv", parse_dates=["timestamp"])
    expected = forecaster.forecast(with_cell(history(run), np.nan))
    pd.testing.assert_frame_equal(written, expected, check_dtype=False, atol=1e-5)
    assert STAMPS[SPLIT - 1] < written["timestamp"].min()


def test_a_time_mistyped_a_century_ahead_is_named(run, forecaster, caplog):
    """The last step's rows written 2126 for 2026: every earlier reading lies beyond the
    steps the model reads, and the forecast stands on that one step. The warning names the
    jump, where before it said only that some read steps had no reading."""
    table = history(run)
    last = table["timestamp"] == table["timestamp"].max()
    ahead = table.copy()
    ahead.loc[last, "timestamp"] = ahead.loc[last, "timestamp"] + pd.DateOffset(years=100)
    for given, jumps in ((table, False), (ahead, True)):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            forecaster.forecast(given)
        said = [r.getMessage() for r in caplog.records if " jumps from " in r.getMessage()]
        if not jumps:
            assert said == []
            continue
        older = table.loc[~last, "timestamp"].max()
        newer = ahead.loc[last, "timestamp"].max()
        assert len(said) == 1 and said[0].startswith(f"the history jumps from {older} to {newer}, ")
        assert "If a time is mistyped, correct it." in said[0]


def test_a_time_that_is_no_date_among_datetimes_is_named_by_its_row(run, forecaster):
    """A time column of datetimes with one text cell, which no format reads: the cell is
    named by its row, as any other unreadable time is, where the line named its value
    alone."""
    table = history(run)
    table["timestamp"] = pd.to_datetime(table["timestamp"]).astype(object)
    table.loc[57, "timestamp"] = "yesterday"
    with pytest.raises(UserError) as err:
        forecaster.forecast(table[12:])
    assert "row with index 57, 'yesterday', is not a date/time" in str(err.value)
