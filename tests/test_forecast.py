"""Forecasting new data from a run directory: ``Forecaster`` and ``predict.py``.

Tiny runs are trained on a long-format CSV (``data=points``) with missing cells and on
the moving-points generator, with ``module.save_predictions=true``; the forecast of a
test window's history, given as a long table, must equal the model's forecast of that
window inside the test loop: the same normalisation, nothing refitted on the new data.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import re
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import ROOT, TINY, compose_train, one_line, run_python
from hydra.utils import instantiate
from omegaconf import OmegaConf

from cloudlstm.cli.predict import read_history
from cloudlstm.cli.train import train
from cloudlstm.data.pipeline.datamodule import PointCloudDataModule
from cloudlstm.data.pipeline.forecast_input import TimeReading, build_input
from cloudlstm.data.pipeline.splits import seasonal_offsets
from cloudlstm.data.spec import SPEC_KEY, DataSpec
from cloudlstm.errors import UserError
from cloudlstm.forecast import FILLED_COLUMN, Forecaster

T, N, M, J = 200, 6, 4, 3
CHANNELS = ["no2", "pm25"]
IDS = [f"p{p}" for p in range(N)]  # sorted: the loader's point order
STAMPS = pd.Timestamp("2021-01-01") + pd.to_timedelta(np.arange(T), unit="h")
STEP_1H = pd.Timedelta("1h")
OFF_GRID = pd.Timedelta("7min")  # a clock that drifted: not a whole step
SPLIT = 169  # the first target step of the test window compared (the test part: [160, 200))
COORDS = np.random.default_rng(1).uniform(0, 10, (N, 2))


def raw_stream() -> tuple[np.ndarray, np.ndarray]:
    """``(values (T, N, C), observed (T, N, C))``: smooth series, 10 % of the cells missing."""
    rng = np.random.default_rng(0)
    t = np.arange(T)[:, None, None]
    phase = rng.uniform(0, 2 * np.pi, (1, N, len(CHANNELS)))
    values = 50 + 20 * np.sin(2 * np.pi * t / 24 + phase) + rng.normal(0, 2, (T, N, 2))
    observed = rng.random(values.shape) > 0.1
    observed[:, 0, 0] = True  # point 0 has a row at every step: a complete time grid
    # the compared window's first input step is complete, so each of its gaps holds a
    # reading from inside the window, as a history of those steps alone can (training holds
    # the last reading of the whole stream); its last input step too (a gap there:
    # test_predict.py's gap_run)
    observed[[SPLIT - M, SPLIT - 1]] = True
    return values, observed


def long_table(values: np.ndarray, observed: np.ndarray, steps: range) -> pd.DataFrame:
    """Rows ``timestamp, id, x, y, no2, pm25`` of ``steps`` with any observed value."""
    rows = [
        [STAMPS[t], IDS[p], *COORDS[p], *np.where(observed[t, p], values[t, p], np.nan)]
        for t in steps
        for p in range(N)
        if observed[t, p].any()
    ]
    return pd.DataFrame(rows, columns=["timestamp", "id", "x", "y", *CHANNELS])


def train_run(tmp: Path, overrides: list[str]) -> Path:
    """Train a tiny job (no logger, no figures) and return its run directory."""
    cfg = compose_train(tmp, [*overrides, "logger=none", "report.figures=false"])
    train(cfg)
    return Path(cfg.paths.output_dir)


def csv_run(tmp: Path, *extra: str) -> tuple[Path, np.ndarray, np.ndarray]:
    """A tiny CloudLSTM run on :func:`raw_stream` written as a long-format CSV in ``tmp``
    (``data=points``, ``extra`` overrides): its run directory, values and mask."""
    values, observed = raw_stream()
    long_table(values, observed, range(T)).to_csv(tmp / "stream.csv", index=False)
    keep = [o for o in TINY if not o.startswith("data.source.")]
    path = f"data.source.path={tmp / 'stream.csv'}"
    return train_run(tmp, [*keep, "data=points", path, *extra]), values, observed


def run_data(run: Path) -> tuple[PointCloudDataModule, np.ndarray]:
    """The run's datamodule (from its config.yaml) and its test-loop forecasts."""
    dm = instantiate(OmegaConf.load(run / "config.yaml").data)
    dm.setup()
    with np.load(run / "predictions.npz") as npz:
        return dm, npz["prediction"]


def window_at(dm: PointCloudDataModule, split: int) -> int:
    """The index of the test window whose target starts at step ``split``."""
    return [dm.test_dataset.time_range(i)[1] for i in range(len(dm.test_dataset))].index(split)


@pytest.fixture(scope="module")
def points_run(tmp_path_factory):
    """A tiny CloudLSTM run on the CSV, with ``predictions.npz`` of its test windows."""
    tmp = tmp_path_factory.mktemp("points")
    run, values, observed = csv_run(tmp, "module.save_predictions=true")
    dm, prediction = run_data(run)
    return run, prediction[window_at(dm, SPLIT)], values, observed


@pytest.fixture(scope="module")
def forecaster(points_run):
    return Forecaster.load(points_run[0], device="cpu")


def history(points_run, end: int = SPLIT) -> pd.DataFrame:
    """Every CSV row before step ``end``: more than the model reads."""
    _, _, values, observed = points_run
    return long_table(values, observed, range(end))


def test_forecast_equals_the_test_loop_forecast_of_the_same_window(points_run, forecaster):
    run, expected, _, observed = points_run
    out = forecaster.forecast(history(points_run))
    assert list(out.columns) == ["timestamp", "horizon", "id", "x", "y", *CHANNELS, FILLED_COLUMN]
    assert len(out) == J * N
    assert (out["timestamp"].unique() == STAMPS[SPLIT : SPLIT + J]).all()
    assert out["horizon"].tolist() == np.repeat(np.arange(1, J + 1), N).tolist()
    assert out["id"].tolist() == IDS * J
    np.testing.assert_allclose(out[["x", "y"]].to_numpy(), np.tile(COORDS, (J, 1)))
    forecast = out[CHANNELS].to_numpy().reshape(J, N, len(CHANNELS))
    np.testing.assert_allclose(forecast, expected, rtol=1e-5, atol=1e-4)
    # filled: the point's missing cells among the M input steps x C channels
    missing = (~observed[SPLIT - M : SPLIT]).sum(axis=(0, 2))
    assert out[FILLED_COLUMN].tolist() == missing.tolist() * J
    assert missing.sum() > 0  # the window has gaps, filled as in training


def test_best_checkpoint_is_the_tested_one_and_the_module_predicts_alone(points_run):
    run = points_run[0]
    best = Forecaster.load(run, device="cpu")
    tested = sorted((run / "checkpoints").glob("epoch_*.ckpt"))
    assert best.checkpoint == tested[0]
    last = Forecaster.load(run, ckpt="last", device="cpu")
    assert last.checkpoint == run / "checkpoints" / "last.ckpt"
    info = best.info
    assert info.point_ids == IDS and info.value_channels == CHANNELS
    assert info.step_minutes == 60 and info.input_offsets == list(range(-M, 0))
    assert not info.moving and info.fixed_points is None
    np.testing.assert_allclose(info.coords, COORDS)


def test_update_one_step_at_a_time_equals_the_whole_history(points_run, forecaster):
    f = Forecaster.load(points_run[0], device="cpu")
    whole = history(points_run)
    recent = whole[whole["timestamp"] >= STAMPS[SPLIT - 3 * M]]
    for _, snapshot in recent.groupby("timestamp"):
        f.update(snapshot)
    assert f._buffer["timestamp"].nunique() == M  # only what the model reads is kept
    pd.testing.assert_frame_equal(f.forecast(), forecaster.forecast(whole))


def test_a_stream_fed_across_a_gap_forecasts_as_the_history_with_that_gap(points_run, forecaster):
    """update() keeps the last M steps: across a gap, two times some steps apart, which
    forecast() refused as a stream sampled at that interval, where the whole history with
    the same gap was forecast, its missing steps filled."""
    whole = history(points_run, end=SPLIT - 1)
    gap = whole["timestamp"].isin(STAMPS[SPLIT - 4 : SPLIT - 2])  # 2 steps not sent
    f = Forecaster.load(points_run[0], device="cpu")
    for _, snapshot in whole[~gap & (whole["timestamp"] >= STAMPS[SPLIT - 12])].groupby(
        "timestamp"
    ):
        f.update(snapshot)
    assert f._buffer["timestamp"].nunique() == 2  # SPLIT - 5 and SPLIT - 2
    pd.testing.assert_frame_equal(f.forecast(), forecaster.forecast(whole[~gap]))


def test_a_snapshot_that_drops_the_stream_or_itself_is_warned_of(points_run, caplog):
    """A time mistyped a century ahead emptied the stream in silence, and every later
    snapshot, older than it, was dropped in silence too."""
    whole = history(points_run)
    recent = whole[whole["timestamp"] >= STAMPS[SPLIT - M]]
    f = Forecaster.load(points_run[0], device="cpu")
    with caplog.at_level("WARNING", logger="cloudlstm.forecast"):
        f.update(recent)
        assert not caplog.records
        last = recent[recent["timestamp"] == STAMPS[SPLIT - 1]]
        typo = STAMPS[SPLIT - 1] + pd.DateOffset(years=100)
        f.update(last.assign(timestamp=typo))
        (dropped_stream,) = [r.getMessage() for r in caplog.records]
        caplog.clear()
        f.update(last)
        (dropped_snapshot,) = [r.getMessage() for r in caplog.records]
    first = typo - (M - 1) * pd.Timedelta(hours=1)
    assert dropped_stream == (
        f"the snapshot's times reach {typo}, more than {M} steps after the stream's last "
        f"({STAMPS[SPLIT - 1]}): the stream keeps the last {M} steps, so every earlier "
        f"reading is dropped, and a snapshot of before {first} will be too. If a time is "
        "mistyped, start the stream anew with Forecaster.load."
    )
    assert dropped_snapshot == (
        f"the snapshot's readings ({STAMPS[SPLIT - 1]}) are older than the {M} steps the "
        f"stream keeps (from {first}): they are dropped."
    )


def test_a_reading_fed_again_replaces_the_earlier_one(points_run, forecaster):
    """A stream sends a step again, corrected, or late: the last row of a time and point
    counts (two rows of one time and point made the forecast refuse the stream)."""
    whole = history(points_run)
    recent = whole[whole["timestamp"] >= STAMPS[SPLIT - M]]
    f = Forecaster.load(points_run[0], device="cpu")
    f.update(recent.assign(no2=recent["no2"] + 7.0))  # wrong readings,
    f.update(recent)  # sent again, corrected,
    f.update(recent[recent["timestamp"] == STAMPS[SPLIT - M]])  # and the oldest step late
    assert len(f._buffer) == len(recent)
    pd.testing.assert_frame_equal(f.forecast(), forecaster.forecast(whole))


def test_a_snapshot_with_two_rows_of_one_time_and_point_is_refused(points_run, forecaster):
    """Which of the two holds the reading is not known: forecast() refuses them in a
    history, and update() kept the last in silence."""
    whole = history(points_run)
    recent = whole[whole["timestamp"] >= STAMPS[SPLIT - M]]
    f = Forecaster.load(points_run[0], device="cpu")
    f.update(recent)
    newest = recent[recent["timestamp"] == STAMPS[SPLIT - 1]]
    twice = pd.concat([newest, newest.iloc[:1].assign(no2=newest["no2"].iloc[0] + 50.0)])
    with pytest.raises(UserError, match=r"^the snapshot has several rows for the same \(time, "):
        f.update(twice)
    with pytest.raises(UserError, match=r"several rows for the same \(time, point\)"):
        forecaster.forecast(pd.concat([recent, twice.iloc[-1:]]))
    assert len(f._buffer) == len(recent)  # the stream as it was
    pd.testing.assert_frame_equal(f.forecast(), forecaster.forecast(whole))


@pytest.mark.parametrize("written", ["clock", "unix"])
def test_a_snapshot_s_time_written_twice_is_said_to_be_a_clock_change_only_as_clock_time(
    points_run, written
):
    """Every point's row written twice at 02:00 of 27 October, the hour Europe's clocks
    repeat: as clock text, maybe a zone's local times; as seconds since 1970 (UTC, which no
    clock change repeats), never, where update() said so too."""
    whole = history(points_run)
    newest = whole[whole["timestamp"] == STAMPS[SPLIT - 1]]
    moment = pd.Timestamp("2024-10-27 02:00")
    seconds = (moment - pd.Timestamp("1970-01-01")) // pd.Timedelta("1s")
    time, reading = (
        (str(moment), None) if written == "clock" else (seconds, TimeReading(time_unit="s"))
    )
    twice = pd.concat([newest, newest]).assign(timestamp=time)
    f = Forecaster.load(points_run[0], device="cpu")
    with pytest.raises(UserError, match=r"^the snapshot has several rows for the same") as err:
        f.update(twice, reading=reading)
    hint = "; if the file writes the local clock times of a zone such as Europe/Berlin, that"
    assert (hint in str(err.value)) == (written == "clock"), str(err.value)


def test_a_snapshot_cell_that_is_no_number_is_refused_when_fed(points_run, forecaster, caplog):
    """It was kept: every forecast() of the next M steps then refused the stream, naming a
    row of the stream's own table ("the history: ... data row 18"), not the snapshot's."""
    whole = history(points_run)
    recent = whole[whole["timestamp"] >= STAMPS[SPLIT - M]]
    f = Forecaster.load(points_run[0], device="cpu")
    f.update(recent[recent["timestamp"] < STAMPS[SPLIT - 1]])
    newest = recent[recent["timestamp"] == STAMPS[SPLIT - 1]].reset_index(drop=True)
    typed = newest.astype({"no2": object})
    typed.loc[1, "no2"] = "n/d"  # a text pandas reads as no missing value: a bad one
    with pytest.raises(UserError, match=r"^the snapshot: 1 channel value\(s\) .* data row 1, "):
        f.update(typed)
    f.update(newest)  # the stream as it was, and the snapshot sent again
    pd.testing.assert_frame_equal(f.forecast(), forecaster.forecast(whole))
    with caplog.at_level("WARNING"):
        f.update(typed, bad_values="warn")  # missing: filled as a gap
    assert "data row 1, column 'no2': 'n/d'" in caplog.text
    gap = whole.copy()
    gap.loc[(gap["timestamp"] == STAMPS[SPLIT - 1]) & (gap["id"] == newest["id"][1]), "no2"] = None
    expected = forecaster.forecast(gap)
    pd.testing.assert_frame_equal(f.forecast(), expected)


def read_back(table: pd.DataFrame, folder: Path) -> list[pd.DataFrame]:
    """``table`` written into ``folder`` as a CSV file and, where pyarrow is installed, a
    Parquet file, each read back as ``predict.py`` reads a history."""
    written = [folder / "history.csv"]
    table.to_csv(written[0], index=False)
    if importlib.util.find_spec("pyarrow") is not None:
        written.append(folder / "history.parquet")
        table.to_parquet(written[1], index=False)
    return [read_history(path) for path in written]


@pytest.mark.parametrize("text", ["n/a", "NA", "null", " N/A "])
def test_a_missing_value_text_is_missing_in_a_csv_a_parquet_file_a_dataframe_and_a_snapshot(
    points_run, forecaster, tmp_path, text
):
    """pandas' missing-value texts: a CSV history read them as missing, as training reads
    its CSV files, while the same cell in a DataFrame given to forecast() or update(), or
    in a Parquet file's text column, was refused as no number. All four forecast as an
    empty cell does."""
    whole = history(points_run)
    cell = (whole["timestamp"] == STAMPS[SPLIT - 1]) & (whole["id"] == IDS[1])
    expected = forecaster.forecast(whole.assign(no2=whole["no2"].mask(cell)))
    table = whole.astype({"no2": str})
    table.loc[cell, "no2"] = text
    for given in [table, *read_back(table, tmp_path)]:
        pd.testing.assert_frame_equal(forecaster.forecast(given), expected)
    f = Forecaster.load(points_run[0], device="cpu")
    recent = table[table["timestamp"] >= STAMPS[SPLIT - M]]
    f.update(recent[recent["timestamp"] < STAMPS[SPLIT - 1]])
    f.update(recent[recent["timestamp"] == STAMPS[SPLIT - 1]])
    pd.testing.assert_frame_equal(f.forecast(), expected)


def test_a_refused_snapshot_leaves_the_stream_as_it_was(points_run, forecaster):
    """A snapshot off the step grid, in another time zone, is refused; the stream keeps its
    rows and its zone, so the next forecast is the one before."""
    recent = history(points_run)
    recent = recent[recent["timestamp"] >= STAMPS[SPLIT - M]]
    in_rome = recent.assign(
        timestamp=recent["timestamp"].dt.tz_localize("UTC").dt.tz_convert("Europe/Rome")
    )
    f = Forecaster.load(points_run[0], device="cpu")
    f.update(in_rome)
    before = f.forecast()
    last = recent[recent["timestamp"] == STAMPS[SPLIT - 1]]
    drifted = last.assign(
        timestamp=(last["timestamp"] + OFF_GRID).dt.tz_localize("UTC").dt.tz_convert("Asia/Tokyo")
    )
    with pytest.raises(UserError, match=r"^the stream fed to update\(\): timestamp .* is not a"):
        f.update(drifted)
    pd.testing.assert_frame_equal(f.forecast(), before)
    assert str(before["timestamp"].dt.tz) == "Europe/Rome"


@pytest.mark.parametrize("zoned_first", [True, False], ids=["offsets-first", "clock-first"])
def test_a_snapshot_on_another_clock_than_the_stream_is_refused(points_run, zoned_first):
    """Times with a UTC offset are read in UTC, times without one as written: a stream fed
    one way, then the other, would hold steps an offset apart; the snapshot that changes
    the form is refused, and the stream keeps its rows."""
    recent = history(points_run)
    recent = recent[recent["timestamp"] >= STAMPS[SPLIT - M]]
    in_rome = recent.assign(
        timestamp=recent["timestamp"].dt.tz_localize("UTC").dt.tz_convert("Europe/Rome")
    )
    first, then = (in_rome, recent) if zoned_first else (recent, in_rome)
    last = recent["timestamp"] == STAMPS[SPLIT - 1]
    f = Forecaster.load(points_run[0], device="cpu")
    f.update(first[~last])
    held = f._buffer.copy()
    this, before = ("without", "with") if zoned_first else ("with", "without")
    with pytest.raises(
        UserError,
        match=rf"^the snapshot's times are written {this} a UTC offset, the stream's before "
        rf"it {before} one: .* Write every snapshot's times one way",
    ):
        f.update(then[last])
    pd.testing.assert_frame_equal(f._buffer, held)
    f.update(first[last])  # the same form goes on
    assert f._buffer["timestamp"].nunique() == M


def test_two_offsets_naming_one_moment_in_a_history_are_shown_as_written(forecaster, points_run):
    """A row whose offset is wrong lands on the next row's moment: the line shows both as
    the file writes them, where it showed that moment in UTC alone."""
    recent = history(points_run)
    recent = recent[recent["timestamp"] >= STAMPS[SPLIT - M]].reset_index(drop=True)
    local = recent["timestamp"].dt.tz_localize("UTC").dt.tz_convert("Europe/Rome")
    written = local.map(lambda t: t.isoformat())
    p0 = recent.index[recent["id"] == IDS[0]]
    wrong, next_hour = p0[-2], p0[-1]  # p0 reads both of the last two steps
    assert recent.loc[next_hour, "timestamp"] - recent.loc[wrong, "timestamp"] == STEP_1H
    written[wrong] = written[wrong].replace("+01:00", "+00:00")  # an hour later, in UTC
    with pytest.raises(UserError) as err:
        forecaster.forecast(recent.assign(timestamp=written), what="recent.csv")
    assert str(err.value) == (
        f"recent.csv: data row {wrong} and data row {next_hour} of point 'p0' write "
        f"{written[wrong]} "
        f"and {written[next_hour]}, one moment ({STAMPS[SPLIT - 1]} UTC: a time with an "
        "offset is read in UTC). Correct the offset that is wrong, or keep one row per time "
        "and point."
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"run_dir": None}, "run_dir is None, not a path: give a run directory's path"),
        ({"run_dir": 3}, "run_dir is 3, not a path"),
        ({"ckpt": None}, 'ckpt is None, not a path: give "best", "last" or the path of a .ckpt'),
    ],
    ids=["no run", "a number", "no checkpoint"],
)
def test_a_load_argument_that_is_no_path_is_named(points_run, kwargs, message):
    with pytest.raises(UserError, match=rf"^Forecaster\.load: {re.escape(message)}"):
        Forecaster.load(**{"run_dir": points_run[0], **kwargs})


@pytest.mark.parametrize("given", [{"timestamp": ["2021-01-01"]}, [1, 2, 3]], ids=["dict", "list"])
def test_a_history_that_is_no_dataframe_is_one_line(forecaster, given):
    kind = type(given).__name__
    with pytest.raises(
        UserError,
        match=rf"^the history is a {kind}, not a pandas DataFrame of readings \(columns "
        r"\['timestamp', 'id', 'x', 'y', 'no2', 'pm25'\]\): give pd\.DataFrame\(rows\)",
    ):
        forecaster.forecast(given)
    with pytest.raises(UserError, match=rf"^the snapshot is a {kind}, not a pandas DataFrame"):
        forecaster.update(given)


def test_a_reading_that_is_no_time_reading_is_one_line(points_run, forecaster):
    """A time format given where a TimeReading is asked for is named, with the fix."""
    with pytest.raises(UserError) as err:
        forecaster.forecast(history(points_run), reading="%Y-%m-%d %H:%M")
    assert str(err.value) == (
        "reading='%Y-%m-%d %H:%M' is a str, not a TimeReading: give "
        "TimeReading(time_format=...) or TimeReading(time_unit=...), or leave it out to read "
        "the times as the training data's were."
    )
    given = TimeReading(time_format="%Y-%m-%d %H:%M:%S")  # the right type is read
    assert len(forecaster.forecast(history(points_run), reading=given))


def written_day_first(points_run) -> pd.DataFrame:
    """The M steps read, 3 h earlier (all on 7 January), their times written day first:
    ``07/01/2021 18:00``, which pandas reads as 1 July."""
    recent = history(points_run)
    recent = recent[recent["timestamp"] >= STAMPS[SPLIT - M]]
    earlier = recent["timestamp"] - pd.Timedelta(hours=3)
    return recent.assign(timestamp=earlier.dt.strftime("%d/%m/%Y %H:%M"))


def test_dates_read_month_first_are_warned_of_and_a_time_reading_reads_them(
    points_run, forecaster, caplog
):
    """forecast() and update() read day-first dates month first, as predict.py does; they
    said nothing where predict.py warns. The warning names the reading that fixes it."""
    day_first = written_day_first(points_run)
    fix = "reading=TimeReading(time_format='%d/%m/%Y %H:%M')"
    with caplog.at_level("WARNING", logger="cloudlstm.data.sources.times"):
        out = forecaster.forecast(day_first)
    assert [r.getMessage() for r in caplog.records] == [
        "column 'timestamp' of the history: read month first ('%m/%d/%Y %H:%M': "
        f"'07/01/2021 18:00' is 2021-07-01 18:00); if the dates are day first, give {fix}."
    ]
    assert out["timestamp"].iloc[0] == pd.Timestamp("2021-07-01 22:00")
    caplog.clear()
    reading = TimeReading(time_format="%d/%m/%Y %H:%M")
    with caplog.at_level("WARNING", logger="cloudlstm.data.sources.times"):
        out = forecaster.forecast(day_first, reading=reading)
        f = Forecaster.load(points_run[0], device="cpu")
        for _, snapshot in day_first.groupby("timestamp"):
            f.update(snapshot, reading=reading)
    assert not caplog.records
    assert out["timestamp"].iloc[0] == pd.Timestamp("2021-01-07 22:00")
    pd.testing.assert_frame_equal(f.forecast(), out)
    with caplog.at_level("WARNING", logger="cloudlstm.data.sources.times"):
        Forecaster.load(points_run[0], device="cpu").update(day_first.iloc[:1])
    assert "the snapshot: read month first" in caplog.text and fix in caplog.text


def test_a_stream_reads_its_later_snapshots_as_its_time_reading_said(points_run, caplog):
    """A reading given with a stream's first snapshot holds for the later ones: each had
    been read alone, the ambiguous ones month first (warned of at every call) and the
    stream then refused once a day above 12 made its steps irregular."""
    day_first = written_day_first(points_run)
    reading = TimeReading(time_format="%d/%m/%Y %H:%M")
    given, once = (Forecaster.load(points_run[0], device="cpu") for _ in range(2))
    with caplog.at_level("WARNING", logger="cloudlstm.data.sources.times"):
        for n, (_, snapshot) in enumerate(day_first.groupby("timestamp", sort=False)):
            given.update(snapshot, reading=reading)
            once.update(snapshot, reading=reading if n == 0 else None)
    assert not caplog.records
    pd.testing.assert_frame_equal(once.forecast(), given.forecast())


def test_a_time_reading_s_fixes_name_it_as_python_writes_it(points_run, forecaster):
    """A history's unreadable times are one line whose fix is the Python argument, not
    predict.py's data.source option."""
    day_first = written_day_first(points_run)
    numbers = day_first.assign(timestamp=np.arange(len(day_first)) * 3600)
    with pytest.raises(UserError) as err:
        forecaster.forecast(numbers)
    assert str(err.value) == (
        "column 'timestamp' of the history holds numbers (e.g. 0), not dates: say what they "
        "count with reading=TimeReading(time_unit='s') (seconds since 1970-01-01 UTC; or ms, "
        "us, ns), or, for dates written as digits (20240131), give their format: "
        "reading=TimeReading(time_format='%Y%m%d')."
    )
    with pytest.raises(UserError) as err:
        forecaster.forecast(day_first, reading=TimeReading(time_format="%Y-%m-%d %H:%M"))
    assert str(err.value).startswith(  # a slice's row by its index label, as .loc finds it
        "Cannot parse the timestamps in column 'timestamp' of the history: row with index "
        f"{day_first.index[0]}, '07/01/2021 18:00', does not match "
        "reading=TimeReading(time_format='%Y-%m-%d %H:%M'): "
        "correct the format"
    )


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"time_unit": "hours"}, "TimeReading.time_unit='hours': give what the time column's"),
        ({"time_format": "dd/mm/yyyy"}, "TimeReading.time_format='dd/mm/yyyy' has no strftime"),
        ({"time_format": "%Y", "time_unit": "s"}, "TimeReading.time_format='%Y' and time_unit"),
    ],
    ids=["unit", "format", "both"],
)
def test_a_time_reading_pandas_cannot_follow_is_refused_when_made(given, message):
    """A unit pandas does not count in was a TypeError at the forecast; with both settings
    the format was not read, without a word."""
    with pytest.raises(UserError, match=rf"^{re.escape(message)}"):
        TimeReading(**given)


def test_new_point_and_missing_snapshot_rows_for_cloudlstm(points_run, forecaster):
    df = history(points_run)
    new = df[df["id"] == "p0"].assign(id="q9", x=5.0, y=5.0, no2=lambda d: d["no2"] + 3.0)
    last = STAMPS[SPLIT - 1]
    df = pd.concat([df, new])
    df = df[~((df["timestamp"] == last) & (df["id"] == "p3"))]  # p3 missing from the snapshot
    out = forecaster.forecast(df)
    assert out["id"].tolist() == [*IDS, "q9"] * J
    assert np.isfinite(out[CHANNELS].to_numpy()).all()
    filled = out.groupby("id")[FILLED_COLUMN].first()
    assert filled["p3"] >= len(CHANNELS)  # its last step was filled
    np.testing.assert_allclose(out.loc[out["id"] == "q9", ["x", "y"]].to_numpy(), 5.0)


@pytest.mark.parametrize(
    ("x", "y", "lacks"),
    [
        (np.nan, np.nan, r"have no coordinates in any row \(columns \['x', 'y'\]\)"),
        # a history of fewer coordinates than the run's (2-D rows for a run of 3-D ones)
        (5.0, np.nan, r"have no y in any row \(coordinate columns \['x', 'y'\], all needed\)"),
        ([5.0, np.nan] * 100, [np.nan, 5.0] * 100, r"have no row that gives all of their coo"),
    ],
    ids=["none", "no-y", "never-together"],
)
def test_a_new_point_that_cannot_be_placed_is_told_what_it_lacks(
    points_run, forecaster, x, y, lacks
):
    """Not "no coordinates" for a point whose x is in every row."""
    df = history(points_run)
    rows = df[df["id"] == "p0"]
    n = len(rows)
    new = rows.assign(id="q9", x=np.resize(x, n), y=np.resize(y, n))
    with pytest.raises(UserError, match=rf"^the history: new point\(s\) \['q9'\] {lacks}") as err:
        forecaster.forecast(pd.concat([df, new]))
    assert str(err.value).endswith("give each new point its location.")


def test_a_z_column_given_to_a_run_of_2d_positions_is_warned_of(points_run, forecaster, caplog):
    """Two new sites apart only in z get one forecast: said, not dropped unsaid; an empty
    z column (a table's spare column: NaN, blanks or missing-value texts, as a Parquet file
    or a DataFrame keeps them) is not warned of."""
    df = history(points_run)
    rows = df[df["id"] == "p0"]
    sites = pd.concat([rows.assign(id="low", z=0.0), rows.assign(id="high", z=900.0)])
    with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.forecast_input"):
        out = forecaster.forecast(pd.concat([df.assign(z=np.nan), sites]))
    warned = [r.getMessage() for r in caplog.records if "does not read" in r.getMessage()]
    assert warned == [
        "the history has coordinate column(s) z that the run does not read: it places points "
        "by its 2-D training coordinates x, y alone, so points apart only in z get one "
        "forecast. Leave it out, or train a run on those coordinates (data.source.coord_cols)."
    ]
    by_id = out.set_index(["horizon", "id"])[CHANNELS]
    np.testing.assert_array_equal(by_id.xs("low", level="id"), by_id.xs("high", level="id"))
    for spare in (np.nan, "n/a", " ", np.resize(["NA", None, ""], len(df))):
        caplog.clear()
        with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.forecast_input"):
            forecaster.forecast(df.assign(z=spare))
        assert not [r for r in caplog.records if "does not read" in r.getMessage()]


def test_a_column_the_run_does_not_read_is_warned_of_once(points_run, forecaster, caplog):
    """A channel ``extra`` the run was not trained on was dropped unsaid: it is named, once,
    with the forecast as without it; an empty one (a table's spare column) is not."""
    df = history(points_run)
    with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.forecast_input"):
        out = forecaster.forecast(df.assign(extra=1.5, note="ok"))
    warned = [r.getMessage() for r in caplog.records if "does not read" in r.getMessage()]
    assert warned == [
        "the history has column(s) extra, note that the run does not read: its forecast "
        f"stands on the channel(s) {', '.join(CHANNELS)} alone. Leave them out, or train a run "
        "that reads them (data.source.value_cols, data.source.covariate_cols)."
    ]
    pd.testing.assert_frame_equal(out, forecaster.forecast(df))
    caplog.clear()
    with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.forecast_input"):
        forecaster.forecast(df.assign(extra=np.nan))
    assert not [r for r in caplog.records if "does not read" in r.getMessage()]


def test_a_history_file_naming_a_column_twice_is_refused(tmp_path):
    """predict.py read the first ``no2`` and left the second (pandas' ``no2.1``) unread."""
    table = long_table(*raw_stream(), range(M)).assign(again=1.0)
    path = tmp_path / "recent.csv"
    path.write_text(table.to_csv(index=False).replace(",again", ",no2", 1))
    with pytest.raises(UserError) as err:
        read_history(path)
    assert str(err.value) == (
        f"The history file {path} names the column(s) ['no2'] more than once: keep one of each."
    )


@pytest.mark.parametrize("blank", ["", "  "])
def test_an_id_of_blanks_alone_is_empty_not_a_new_point(points_run, forecaster, blank):
    """Forecast as the new point "" (its id stripped) at the row's coordinates."""
    df = history(points_run).reset_index(drop=True)
    df.loc[len(df) - 1, "id"] = blank
    with pytest.raises(UserError) as err:
        forecaster.forecast(df)
    assert str(err.value) == (
        f"the history: column 'id' has 1 empty point id(s) (first at data row {len(df) - 1}): "
        "give every row its point."
    )


def test_an_id_column_of_lists_is_one_line(points_run, forecaster):
    """A list per id (a Parquet file's list column) failed in a traceback: unhashable."""
    df = history(points_run)
    with pytest.raises(UserError) as err:
        forecaster.forecast(df.assign(id=[[i] for i in df["id"]]))
    assert str(err.value) == (
        f"the history: column 'id' holds list cells, not point ids (e.g. ['p0'] at data row "
        f"0; {len(df)} such rows): write one id per row, as text or a number."
    )


def test_a_coordinate_column_of_true_false_is_refused(points_run, forecaster):
    """Read as x = 1 and x = 0: a new site was placed there without a word."""
    df = history(points_run)
    flags = np.resize(np.array([True, False], dtype=object), len(df))
    with pytest.raises(UserError) as err:
        forecaster.forecast(df.assign(x=flags))
    assert str(err.value).startswith(
        "Column 'x' of the history must be numeric, but holds True/False. Write coordinates"
    )


def hdf_history(table: pd.DataFrame, folder: Path) -> pd.DataFrame:
    """``table`` written as a pandas HDF5 file (fixed format, which keeps a column of mixed
    objects or complex numbers as they are) and read back as ``predict.py`` reads a
    history."""
    pytest.importorskip("tables", reason="PyTables is not installed")
    with warnings.catch_warnings():  # PerformanceWarning: mixed objects are pickled
        warnings.simplefilter("ignore")
        table.to_hdf(folder / "history.h5", key="rows")
    return read_history(folder / "history.h5")


def newest_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``table``'s last step, numbered from 0: a snapshot."""
    return table[table["timestamp"] == STAMPS[SPLIT - 1]].reset_index(drop=True)


@pytest.mark.parametrize("column", ["no2", "x"])
def test_a_complex_column_of_a_history_or_snapshot_is_refused_naming_it(
    points_run, forecaster, tmp_path, column
):
    """A DataFrame (or an HDF5 file) with a complex column: its real part was read, the
    imaginary one lost with a mere ComplexWarning."""
    whole = history(points_run)
    given = whole.assign(**{column: whole[column] + 1j})
    said = f"column {column!r} holds complex numbers (e.g. "
    for table in (given, hdf_history(given, tmp_path)):
        with pytest.raises(UserError) as err:
            forecaster.forecast(table)
        assert str(err.value).startswith(f"the history: {said}"), str(err.value)
        assert str(err.value).endswith(
            "whose imaginary parts would be lost: give real numbers "
            "(the real part or the magnitude, whichever the column "
            "means)."
        )
    f = Forecaster.load(points_run[0], device="cpu")
    for mode in ("error", "warn"):
        with pytest.raises(UserError, match=rf"^the snapshot: {re.escape(said)}"):
            f.update(newest_rows(given), bad_values=mode)


@pytest.mark.parametrize("text", [False, True], ids=["numbers", "numbers-and-text"])
@pytest.mark.parametrize("column", ["no2", "x"])
def test_true_false_among_numbers_in_a_history_or_snapshot_is_refused_naming_a_row(
    points_run, forecaster, tmp_path, column, text
):
    """One True among a column's numbers (a DataFrame built by hand, or an HDF5 file) was
    read as 1: only a column of True/False alone was refused. One beside text too ("abc")
    was said to be among numbers: the line names the text."""
    given = history(points_run).astype({column: object})
    last = given.index[-1]  # a row of the steps read
    given.loc[last, column] = True
    among, beside = "numbers", ""
    if text:  # the row before: of the last step too
        given.loc[given.index[-2], column] = "abc"
        among = "numbers and text"
        beside = ", and text that is no number (e.g. 'abc' at data row {text_row})"
    said = (
        f"column {column!r} holds True/False among {among} (e.g. True at data row {{row}}; 1 "
        f"such cell(s)), which would read as 1 and 0{beside}: write every cell as a number, "
        "or leave it empty where there is no reading."
    )
    for table in (given, hdf_history(given, tmp_path)):
        for mode in ("error", "warn"):
            with pytest.raises(UserError) as err:
                forecaster.forecast(table, bad_values=mode)
            assert str(err.value) == "the history: " + said.format(
                row=last, text_row=given.index[-2]
            )
    snapshot = newest_rows(given)
    f = Forecaster.load(points_run[0], device="cpu")
    with pytest.raises(UserError) as err:
        f.update(snapshot)
    rows = len(snapshot)
    assert str(err.value) == "the snapshot: " + said.format(row=rows - 1, text_row=rows - 2)


def test_a_latitude_out_of_range_in_a_history_or_snapshot_is_refused_as_in_training(points_run):
    """Training refuses a latitude beyond ±90 (a 341.0 typed for 34.1); a history's was
    min-max scaled with the others, and the point forecast far outside the area."""
    f = Forecaster.load(points_run[0], device="cpu")
    f.module.use_spec(dataclasses.replace(f.info, coord_cols=["lon", "lat"]))  # as if so named
    given = history(points_run).rename(columns={"x": "lon", "y": "lat"})
    last = given.index[-1]
    given.loc[last, "lat"] = 341.0
    point = given.loc[last, "id"]
    said = "has lat=341, outside [-90, 90] degrees (1 row(s) in all): correct it."
    with pytest.raises(UserError) as err:
        f.forecast(given)
    assert str(err.value) == f"the history: data row {last} (id={point!r}) {said}"
    snapshot = newest_rows(given)
    with pytest.raises(UserError) as err:
        f.update(snapshot)
    assert str(err.value) == f"the snapshot: data row {len(snapshot) - 1} (id={point!r}) {said}"
    f.update(snapshot.assign(lat=snapshot["lat"].where(snapshot["lat"] < 90, 3.4)))  # fixed


def test_a_new_point_whose_rows_end_before_the_steps_read_is_warned_of(
    points_run, forecaster, caplog
):
    """A site whose readings stopped before the M steps read is left out, as a training
    point is: said, not dropped unsaid."""
    df = history(points_run)
    stopped = df[(df["id"] == "p0") & (df["timestamp"] < STAMPS[SPLIT - M])]
    with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.forecast_input"):
        out = forecaster.forecast(pd.concat([df, stopped.assign(id="q9", x=5.0)]))
    assert out["id"].unique().tolist() == IDS
    warned = [r.getMessage() for r in caplog.records if "new point" in r.getMessage()]
    assert warned == [
        f"the history has rows of 1 new point(s) (q9) only before its last {M} steps, which "
        "are not forecast: add their rows there (empty readings where they have none) to "
        "forecast them."
    ]


def test_a_new_point_differing_from_a_training_point_in_case_alone_is_warned_of(
    points_run, forecaster, caplog
):
    """P1 beside the training point p1 is forecast as a new site (ids are matched as
    written), and said so with the likely cause, not in silence."""
    df = history(points_run)
    recased = df[df["id"] == "p1"].assign(id="P1")
    with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.forecast_input"):
        out = forecaster.forecast(pd.concat([df[df["id"] != "p1"], recased]))
    assert "P1" in out["id"].unique().tolist()
    warned = [r.getMessage() for r in caplog.records if "only in case" in r.getMessage()]
    assert warned == [
        "the history has new point(s) forecast as new sites. It differs from an id of the "
        "training points only in case (e.g. 'P1' and 'p1'): ids are matched as written, so "
        "write them alike in both."
    ]


def test_a_training_point_given_elsewhere_is_warned_of(points_run, forecaster, caplog):
    """p1 with x and y swapped is forecast where the history puts it, said once; its
    training coordinates (as a CSV writes them) are not warned of."""
    df = history(points_run)
    p1 = df["id"] == "p1"
    swapped = df.copy()
    swapped.loc[p1, ["x", "y"]] = df.loc[p1, ["y", "x"]].to_numpy()
    logger = "cloudlstm.data.pipeline.forecast_input"
    with caplog.at_level("WARNING", logger=logger):
        out = forecaster.forecast(swapped)
    warned = [r.getMessage() for r in caplog.records if "elsewhere" in r.getMessage()]
    x, y = COORDS[1]
    assert warned == [
        f"the history places 1 training point(s) elsewhere than training did, e.g. p1 at "
        f"x={y:g}, y={x:g}, trained at x={x:g}, y={y:g}: they are forecast where the history "
        "places them. If they did not move, give their training coordinates (columns "
        "swapped? other units?)."
    ]
    np.testing.assert_allclose(out.loc[out["id"] == "p1", ["x", "y"]].to_numpy()[0], [y, x])
    caplog.clear()
    written = pd.read_csv(io.StringIO(df.to_csv(index=False)))
    with caplog.at_level("WARNING", logger=logger):
        forecaster.forecast(written)
    assert not [r for r in caplog.records if "elsewhere" in r.getMessage()]


def test_a_point_without_readings_of_its_own_is_forecast_with_one_warning(
    points_run, forecaster, caplog
):
    """p3's rows are there, every reading empty: forecast from the other points, said once;
    a point with gaps only is not named."""
    df = history(points_run)
    recent = df["timestamp"] >= STAMPS[SPLIT - M]
    df.loc[recent & (df["id"] == "p3"), CHANNELS] = np.nan
    with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.forecast_input"):
        out = forecaster.forecast(df)
    warned = [r.getMessage() for r in caplog.records if "of their own" in r.getMessage()]
    assert len(warned) == 1
    assert re.search(
        r"has 1 point\(s\) without a reading of their own in the \d+ steps read "
        r"\(.* to .*\): p3\. Their inputs are the other points. mean",
        warned[0],
    )
    filled = out.groupby("id")[FILLED_COLUMN].first()
    assert filled["p3"] == M * len(CHANNELS)
    assert np.isfinite(out[CHANNELS].to_numpy()).all()
    caplog.clear()
    with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.forecast_input"):
        forecaster.forecast(history(points_run))  # gaps, but every point read
    assert not [r for r in caplog.records if "of their own" in r.getMessage()]


def test_steps_without_any_reading_are_forecast_with_one_warning(points_run, forecaster, caplog):
    """The whole network silent for 2 of the 4 steps read: they hold the readings before,
    said once; a history with scattered gaps is not warned of."""
    df = history(points_run)
    silent = df[~df["timestamp"].isin(STAMPS[[SPLIT - 3, SPLIT - 2]])]
    with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.forecast_input"):
        out = forecaster.forecast(silent)
    warned = [r.getMessage() for r in caplog.records if "at any point in" in r.getMessage()]
    assert warned == [
        "the history has no reading at any point in 2 of the 4 steps the model reads "
        "(2021-01-07 22:00:00, 2021-01-07 23:00:00): they hold the readings of the steps "
        "before, so the forecast stands on 2 step(s) of readings."
    ]
    assert (out[FILLED_COLUMN] >= 2 * len(CHANNELS)).all()
    caplog.clear()
    with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.forecast_input"):
        forecaster.forecast(df)  # 10 % of the cells missing, no step silent
    assert not [r for r in caplog.records if "at any point in" in r.getMessage()]


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory, points_run):
    """A tiny ConvLSTM (a grid model) on the same CSV; trained only, not tested."""
    tmp = tmp_path_factory.mktemp("grid")
    csv = points_run[0].parent / "stream.csv"
    keep = [o for o in TINY if not o.startswith(("data.source.", "model.", "trainer.max"))]
    return train_run(
        tmp,
        [
            *keep,
            "data=points",
            f"data.source.path={csv}",
            "model=convlstm",
            "model.hidden_channels=2",
            "model.num_layers=1",
            "trainer.max_epochs=1",
            "test=false",
        ],
    )


def test_grid_model_forecasts_its_points_and_refuses_new_ones(grid_run, points_run):
    f = Forecaster.load(grid_run, device="cpu")
    assert f.checkpoint.name.startswith("epoch_")  # no metrics.json checkpoint: the best file
    df = history(points_run)
    assert f.forecast(df)["id"].tolist() == IDS * J
    new = df[df["id"] == "p0"].assign(id="q9", x=5.0)
    with pytest.raises(UserError, match=r"q9.*ConvLSTM cannot forecast them: it is a grid model"):
        f.forecast(pd.concat([df, new]))
    recent = df["timestamp"] >= STAMPS[SPLIT - M]
    with pytest.raises(UserError) as err:
        f.forecast(df[~(recent & (df["id"] == "p2"))])
    assert "exactly its 6 training points" in str(err.value)
    assert str(err.value).endswith(
        f"has no row of p2 in the last {M} steps. Give each a row there (readings left empty "
        "are filled from the other points, with a warning), or train a point model (e.g. "
        "model=cloudlstm)."
    )
    # the fix as given: p2's rows there, every reading of them empty
    emptied = df.assign(**{c: df[c].where(~(recent & (df["id"] == "p2"))) for c in CHANNELS})
    assert f.forecast(emptied)["id"].tolist() == IDS * J


@pytest.fixture(scope="module")
def moving_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("moving")
    keep = [o for o in TINY if not o.startswith("data.source.")]
    run = train_run(
        tmp,
        [
            *keep,
            "data=synthetic_moving",
            "data.source.num_points=8",
            "data.source.num_steps=150",
            "module.save_predictions=true",
        ],
    )
    return run, *run_data(run)


def test_moving_points_get_forecast_positions(moving_run):
    run, dm, prediction = moving_run
    source = dm.source.load()  # the raw stream: values and the trajectory
    window = 2
    _, split, _ = dm.test_dataset.time_range(window)
    steps = range(split - M - 2, split)
    df = pd.DataFrame(
        [
            [source.timestamps[t], pid, *source.trajectory[t, p], *source.values[t, p]]
            for t in steps
            for p, pid in enumerate(source.point_ids)
        ],
        columns=["timestamp", "id", "x", "y", *source.channel_names],
    )
    out = Forecaster.load(run, device="cpu").forecast(df)
    n = source.num_points
    expected = prediction[window]  # (J, N, C + 2): values, then pos_x, pos_y
    forecast = out[[*source.channel_names, "x", "y"]].to_numpy().reshape(J, n, -1)
    np.testing.assert_allclose(forecast, expected, rtol=1e-5, atol=1e-4)
    assert not np.allclose(forecast[0, :, -2:], source.trajectory[split - 1])  # they move


def test_input_steps_follow_the_stored_offsets():
    """Seasonal input: the model reads the steps the offsets name, reaching back a day."""
    offsets = seasonal_offsets(2, steps_per_day=24, days=1, every_minutes=360)
    info = DataSpec(
        scaler={"mean": [0.0], "std": [1.0]},
        channel_names=["v"],
        value_channels=["v"],
        point_ids=["a", "b"],
        coords=[[0.0, 0.0], [1.0, 1.0]],
        coord_lo=[0.0, 0.0],
        coord_span=[1.0, 1.0],
        coord_degenerate=[False, False],
        input_offsets=offsets.tolist(),
        output_steps=1,
        step_minutes=60.0,
        steps_per_day=24,
        moving=False,
        time_col="timestamp",
        id_col="id",
        coord_cols=["x", "y"],
        model="Persistence",
        fixed_points=None,
    )
    steps = np.arange(30)
    df = pd.DataFrame(
        [[STAMPS[t], pid, c, c, float(t)] for t in steps for c, pid in enumerate("ab")],
        columns=["timestamp", "id", "x", "y", "v"],
    )
    window = build_input(df, info)
    assert window.x[:, 0, 0].tolist() == (30 + offsets).tolist()  # value = step index
    with pytest.raises(UserError, match=r"covers 23 step\(s\) of 1h .* needs 24 \(6 input steps"):
        build_input(df[df["timestamp"] > STAMPS[6]], info)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda df: df[df["timestamp"] >= STAMPS[SPLIT - 3]], r"covers 3 step\(s\) of 1h.*needs 4"),
        (lambda df: df.drop(columns="pm25"), r"lacks column\(s\) \['pm25'\]. Expected .*found"),
        (
            lambda df: df.assign(timestamp=STAMPS[0] + (df["timestamp"] - STAMPS[0]) / 2),
            r"sampled every 30min, but the model was trained on data every 1h",
        ),
        (
            lambda df: df[df["timestamp"].isin(STAMPS[::2])],
            r"sampled every 2h, but the model was trained on data every 1h",
        ),
        (
            lambda df: df.replace({"timestamp": {STAMPS[SPLIT - 2]: STAMPS[SPLIT - 2] + OFF_GRID}}),
            r"timestamp 2021-01-07 23:07:00 is not a whole number of 1h steps after its first, "
            r"2021-01-01 00:00:00 \(1 such timestamp\(s\)\), but the model was trained on data "
            r"every 1h: resample the history onto that grid\.$",
        ),
        (
            lambda df: df.assign(timestamp=df["timestamp"] + OFF_GRID),
            r"its times are 7min after the training data's grid \(every 1h from 2021-01-01 "
            r"00:00:00\): its first, 2021-01-01 00:07:00, falls between 2021-01-01 00:00:00 and "
            r"2021-01-01 01:00:00\. Resample the history onto the training grid\.$",
        ),
        (
            lambda df: df.iloc[:0],
            r"has no rows, only its columns: give the readings of the "
            r"last 4 steps\.$",
        ),
        (
            lambda df: df.assign(pm25=np.nan),
            r"has no reading of 'pm25' at any point in the 4 steps read \(.* to .*\): the "
            r"forecast would start from invented values",
        ),
        (
            lambda df: df.assign(x=df["x"].astype(object).where(df["id"] != "p1", "east")),
            r"Column 'x' .* holds e\.g\. 'east' .*\. Write coordinates as plain numbers",
        ),
    ],
    ids=[
        "too-little-history",
        "missing-channel",
        "other-interval",
        "every-other-step",
        "a-step-off-the-grid",
        "every-time-shifted",
        "header-only",
        "channel-never-read",
        "text-in-a-coordinate",
    ],
)
def test_history_errors_say_what_is_expected(points_run, forecaster, change, message):
    with pytest.raises(UserError, match=message):
        forecaster.forecast(change(history(points_run)))


def in_rome(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its times written in Rome's zone (UTC+01:00 in January)."""
    local = df["timestamp"].dt.tz_localize("UTC").dt.tz_convert("Europe/Rome")
    return df.assign(timestamp=local)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda df: df[df["timestamp"] >= STAMPS[SPLIT - 3]],
            r"covers 3 step\(s\) of 1h \(2021-01-07 23:00:00\+01:00 to 2021-01-08 "
            r"01:00:00\+01:00\), but the model needs 4: give at least 4 steps, i\.e\. from "
            r"2021-01-07 22:00:00\+01:00 on\.$",
        ),
        (
            lambda df: df.replace({"timestamp": {STAMPS[SPLIT - 2]: STAMPS[SPLIT - 2] + OFF_GRID}}),
            r"timestamp 2021-01-08 00:07:00\+01:00 is not a whole number of 1h steps after its "
            r"first, 2021-01-01 01:00:00\+01:00",
        ),
        (
            lambda df: df.assign(pm25=np.nan),
            r"in the 4 steps read \(2021-01-07 22:00:00\+01:00 to 2021-01-08 01:00:00\+01:00\)",
        ),
    ],
    ids=["too-little-history", "a-step-off-the-grid", "channel-never-read"],
)
def test_history_errors_name_times_as_the_history_writes_them(
    points_run, forecaster, change, message
):
    """A history written in Rome's time is told of its times in Rome's time, as its file
    has them, not in the UTC they are read in."""
    with pytest.raises(UserError, match=message):
        forecaster.forecast(in_rome(change(history(points_run))))


def test_a_history_with_missing_steps_is_not_another_interval(points_run, forecaster):
    """Most early steps missing (the commonest gap 2 h) is still 1-hour data, filled."""
    df = history(points_run)
    early = df["timestamp"] < STAMPS[SPLIT - 2 * M]
    sparse = df[~early | df["timestamp"].isin(STAMPS[::2])]
    out = forecaster.forecast(sparse)
    pd.testing.assert_frame_equal(out, forecaster.forecast(df))  # the model reads the end


def test_run_directory_and_checkpoint_errors(points_run, tmp_path):
    run = points_run[0]
    with pytest.raises(UserError, match="does not exist"):
        Forecaster.load(tmp_path / "nope")
    empty = tmp_path / "untrained"
    empty.mkdir()
    (empty / "config.yaml").write_text((run / "config.yaml").read_text())
    with pytest.raises(UserError, match=r"No checkpoint 'best' in .*no \.ckpt files"):
        Forecaster.load(empty)
    old = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    del old[SPEC_KEY]
    torch.save(old, tmp_path / "old.ckpt")
    with pytest.raises(UserError, match="written before checkpoints stored it. Retrain"):
        Forecaster.load(run, ckpt=tmp_path / "old.ckpt")


def predict(*args: str) -> subprocess.CompletedProcess:
    return run_python(str(ROOT / "predict.py"), *args)


@pytest.mark.parametrize("out", ["forecast.csv", "forecast.parquet"])
def test_predict_py_writes_the_forecast_and_prints_its_path(points_run, forecaster, tmp_path, out):
    run = points_run[0]
    data = tmp_path / "recent.csv"
    history(points_run).to_csv(data, index=False)
    done = predict(f"run={run}", f"data.path={data}", f"out={out}")
    parquet = out.endswith(".parquet")
    if parquet and not any(importlib.util.find_spec(m) for m in ("pyarrow", "fastparquet")):
        assert done.returncode != 0 and "pip install pyarrow" in done.stderr
        return
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip().splitlines()[-1])
    assert path.parent.parent == run / "predict" and path.name == out
    written = pd.read_parquet(path) if parquet else pd.read_csv(path, parse_dates=["timestamp"])
    expected = forecaster.forecast(history(points_run))
    pd.testing.assert_frame_equal(written, expected, check_dtype=False, atol=1e-5)


def test_predict_py_takes_the_history_as_train_py_names_it(points_run, forecaster, tmp_path):
    data = tmp_path / "recent.csv"
    history(points_run).to_csv(data, index=False)
    target = tmp_path / "f.csv"
    done = predict(f"run={points_run[0]}", f"data.source.path={data}", f"out={target}")
    assert done.returncode == 0, done.stderr
    written = pd.read_csv(target, parse_dates=["timestamp"])
    expected = forecaster.forecast(history(points_run))
    pd.testing.assert_frame_equal(written, expected, check_dtype=False, atol=1e-5)
    # both keys, naming two files: which one was meant is not guessed
    done = predict(f"run={points_run[0]}", f"data.source.path={data}", f"data.path={target}")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "data.path and data.source.path name different files" in done.stderr


def test_predict_py_writes_where_out_says_when_it_names_a_folder(points_run, tmp_path):
    data = tmp_path / "recent.csv"
    history(points_run).to_csv(data, index=False)
    target = tmp_path / "elsewhere" / "f.csv"
    done = predict(f"run={points_run[0]}", f"data.path={data}", f"out={target}")
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip().splitlines()[-1]) == target and target.is_file()


def test_out_is_a_file_name_in_the_run_or_a_path_of_its_own(tmp_path, monkeypatch):
    from cloudlstm.cli.predict import output_path

    run = tmp_path / "run"
    bare = output_path("f.csv", run)
    assert bare.name == "f.csv" and bare.parent.parent == run / "predict"
    monkeypatch.chdir(tmp_path)
    assert output_path("./f.csv", run) == tmp_path / "f.csv"  # relative to where it runs
    assert output_path("sub/f.parquet", run) == tmp_path / "sub" / "f.parquet"
    assert output_path("/tmp/x/f.csv", run) == Path("/tmp/x/f.csv")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run=/no/such/run", "data.path=x.csv"], "Run directory /no/such/run does not exist."),
        (["run=RUN", "data.path=SHORT"], "covers 2 step(s) of 1h"),
        (["run=RUN", "data.path=FULL", "out=TMP/f.xlsx"], "out=TMP/f.xlsx: name a .csv (.csv"),
        (
            ["run=RUN", "data.path=FULL", "out=FULL/f.csv"],
            "out=FULL/f.csv: cannot write FULL/f.csv (FULL is a file, not a folder)",
        ),
        (
            ["run=RUN", "data.path=FULL", "+data.source.freq=1h"],
            "predict.py +data.source.freq=1h: nothing reads it; predict.py forecasts with the "
            "run's model and data settings as its checkpoint holds them",
        ),
        (  # Hydra's words: "the config has no setting model"
            ["run=RUN", "data.path=FULL", "model.k=5"],
            "predict.py model.k=5: nothing reads it; predict.py forecasts with the run's model",
        ),
        (
            ["run=RUN", "data.path=FULL", "model=convlstm"],
            "predict.py model=convlstm: predict.py forecasts with the run's model",
        ),
        (["run=RUN", "data.path=FULL", "+data=beijing"], "predict.py +data=beijing: predict"),
        (
            ["run=RUN", "data.path=FULL", "hydra.run.dir=FULL/run"],
            "Cannot make the directory FULL/run: FULL is a file, not a folder. Name a folder "
            "you can write with hydra.run.dir=<dir>.",
        ),
    ],
    ids=[
        "no-run",
        "short-history",
        "not-a-table",
        "below-a-file",
        "added-data-key",
        "a-model-setting",
        "another-model",
        "added-data-group",
        "run-dir-below-a-file",
    ],
)
def test_predict_py_errors_are_one_line(points_run, tmp_path, args, message):
    short, full = tmp_path / "short.csv", tmp_path / "full.csv"
    history(points_run)[lambda df: df["timestamp"] >= STAMPS[SPLIT - 2]].to_csv(short, index=False)
    history(points_run).to_csv(full, index=False)
    places = {"RUN": points_run[0], "SHORT": short, "FULL": full, "TMP": tmp_path}

    def placed(text: str) -> str:
        for name, path in places.items():
            text = text.replace(name, str(path))
        return text

    args, message = [placed(a) for a in args], placed(message)
    outputs = points_run[0] / "predict"
    before = sorted(outputs.iterdir()) if outputs.is_dir() else []
    done = predict(*args)
    assert done.returncode != 0
    assert message in one_line(done)
    assert "Traceback" not in done.stdout
    assert (sorted(outputs.iterdir()) if outputs.is_dir() else []) == before  # nothing written


def test_a_bad_cell_is_named_by_its_index_label_in_a_history_and_a_snapshot(points_run):
    """A slice of a larger table (index 5000 on) was named by its index label in
    forecast()'s message but by its position in update()'s: a user looking the cell up
    with ``.loc`` found it in one and another row in the other."""
    whole = history(points_run)
    recent = whole[whole["timestamp"] >= STAMPS[SPLIT - M]].astype({"no2": object})
    recent.index = pd.RangeIndex(5000, 5000 + len(recent))
    newest = recent[recent["timestamp"] == STAMPS[SPLIT - 1]].copy()
    label = newest.index[1]  # in the snapshot, at position 1
    recent.loc[label, "no2"] = newest.loc[label, "no2"] = "n/d"
    cell = f"row with index {label}, column 'no2': 'n/d'"
    f = Forecaster.load(points_run[0], device="cpu")
    with pytest.raises(UserError, match="^the history: .*" + re.escape(cell)):
        f.forecast(recent)
    f.update(recent[recent["timestamp"] < STAMPS[SPLIT - 1]])
    with pytest.raises(UserError, match="^the snapshot: .*" + re.escape(cell)):
        f.update(newest)


@pytest.mark.parametrize("doc", ["README.md", "docs/forecasting.md"])
def test_the_docs_forecasting_snippet_runs_as_written(points_run, tmp_path, monkeypatch, doc):
    """The ```python example of forecasting (README.md, docs/forecasting.md) runs, its run
    directory the one trained here, ``recent.csv`` a history and ``readings`` its time
    steps: both of its forecasts are the forecast of that history."""
    text = (ROOT / doc).read_text()
    (snippet,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "Forecaster" in b]
    placeholder = re.search(r'Forecaster\.load\("([^"]+)"\)', snippet).group(1)
    whole = history(points_run)
    monkeypatch.chdir(tmp_path)
    whole.to_csv("recent.csv", index=False)
    readings = [snapshot for _, snapshot in pd.read_csv("recent.csv").groupby("timestamp")]
    scope = {"readings": readings}
    exec(snippet.replace(placeholder, str(points_run[0])), scope)
    expected = Forecaster.load(points_run[0], device="cpu").forecast(pd.read_csv("recent.csv"))
    pd.testing.assert_frame_equal(scope["forecast"], expected)
