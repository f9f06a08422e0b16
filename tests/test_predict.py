"""``predict.py``'s faults of input and of the machine, each one line without a traceback,
and what it writes: a tiny CloudLSTM run on a long-format CSV (``data=points``) forecasts
histories written by each test."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import ROOT, TINY, one_line, run_python, subprocess_env
from tests.test_faults_disk_full import file_size_limit
from tests.test_forecast import (
    CHANNELS,
    SPLIT,
    J,
    N,
    T,
    csv_run,
    long_table,
    raw_stream,
    run_data,
    train_run,
    window_at,
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny CloudLSTM run on static points, its values and mask."""
    return csv_run(tmp_path_factory.mktemp("predict"))


def history(run) -> pd.DataFrame:
    """The rows of the 10 steps before SPLIT, every cell filled (6 points: 60 rows)."""
    _, values, observed = run
    return long_table(values, np.ones_like(observed), range(SPLIT - 10, SPLIT))


def predict(run, table: pd.DataFrame, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """``predict.py`` on ``table`` written as a CSV in ``tmp_path``."""
    data = tmp_path / "recent.csv"
    table.to_csv(data, index=False)
    return run_python(str(ROOT / "predict.py"), f"run={run[0]}", f"data.path={data}", *args)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here")
def test_a_device_this_machine_lacks_is_one_line(run, tmp_path):
    line = one_line(predict(run, history(run), tmp_path, "device=cuda"))
    assert line.startswith("device=cuda, but torch finds no GPU (torch ")
    assert line.endswith("or forecast on the CPU: device=cpu.")
    line = one_line(predict(run, history(run), tmp_path, "device=foo"))
    assert line.startswith("device=foo is no device to forecast on: give one of cpu, cuda, mps")
    assert "(this machine has cpu" in line


def test_a_write_without_room_leaves_the_earlier_forecast_and_no_part(run, tmp_path):
    """``ulimit -f``: one line naming the file; the forecast written there before stays."""
    data, target = tmp_path / "recent.csv", tmp_path / "out" / "forecast.csv"
    history(run).to_csv(data, index=False)
    target.parent.mkdir()
    target.write_text("an earlier forecast\n")
    done = subprocess.run(
        [sys.executable, "predict.py", f"run={run[0]}", f"data.path={data}", f"out={target}"],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=file_size_limit(1000),  # the forecast's 18 rows are larger
    )
    line = one_line(done)
    assert line.startswith(f"Cannot write {target}: it would exceed this process's file size")
    assert target.read_text() == "an earlier forecast\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["forecast.csv"]  # no part


@pytest.mark.parametrize("out", ["forecast.csv.gz", "forecast.csv.zip", "forecast.parquet"])
def test_the_forecast_replaces_an_earlier_one_in_the_format_its_name_says(run, tmp_path, out):
    if out.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    target = tmp_path / "out" / out
    target.parent.mkdir()
    target.write_text("an earlier forecast\n")
    done = predict(run, history(run), tmp_path, f"out={target}")
    assert done.returncode == 0, done.stderr
    written = pd.read_parquet(target) if out.endswith(".parquet") else pd.read_csv(target)
    assert len(written) == 3 * 6 and "filled_inputs" in written
    if out.endswith(".zip"):  # the member is named as the file, not as a temporary one
        assert zipfile.ZipFile(target).namelist() == ["forecast.csv"]
    assert sorted(p.name for p in target.parent.iterdir()) == [out]


def test_a_file_that_is_no_checkpoint_gets_a_fix_for_forecasting(run, tmp_path):
    line = one_line(predict(run, history(run), tmp_path, f"ckpt={tmp_path / 'recent.csv'}"))
    assert line.startswith(f"{tmp_path / 'recent.csv'} is not a checkpoint: training writes")
    assert line.endswith(
        "Forecast with another checkpoint of the run: ckpt=best, ckpt=last or the path of a "
        ".ckpt that training wrote."
    )
    assert "resume=" not in line


def test_a_checkpoint_of_another_run_is_refused_and_a_copy_of_its_own_is_not(run, tmp_path):
    """Runs of the same model and sizes, one with a quantile head, one on other data, one
    with another seed: their checkpoints loaded into the run silently, forecasting with
    their head and scaler under the run's name. A copy of the run's own checkpoint
    elsewhere still forecasts."""
    (tmp_path / "q").mkdir()
    quantiles = csv_run(tmp_path / "q", "module.quantiles=[0.1,0.5,0.9]")[0]
    values, observed = raw_stream()
    (tmp_path / "other").mkdir()
    long_table(values * 2 + 10, observed, range(T)).to_csv(tmp_path / "other.csv", index=False)
    keep = [o for o in TINY if not o.startswith("data.source.")]
    other = train_run(
        tmp_path / "other", [*keep, "data=points", f"data.source.path={tmp_path / 'other.csv'}"]
    )
    # the same model, sizes and data, another seed: nothing in the file differs, its folder
    (tmp_path / "seed").mkdir()
    seed = csv_run(tmp_path / "seed", "seed=7")[0]
    mine = run[0]
    for theirs, why in [
        (quantiles, f"is no checkpoint of the run {mine}: it differs from the run's in "
         "module.quantiles, so its forecast would not be the run's"),
        (other, f"is no checkpoint of the run {mine}: it differs from the run's in data "
         "description (scaler, value_reference), so its forecast would not be the run's"),
        (seed, f"is a checkpoint of the run {seed}, not of {mine}: its forecast would be "
         f"filed under {mine}'s name and config"),
    ]:  # fmt: skip
        ckpt = theirs / "checkpoints" / "last.ckpt"
        line = one_line(predict(run, history(run), tmp_path, f"ckpt={ckpt}"))
        assert line == (
            f"{ckpt} {why}. Give run={theirs} (the checkpoint's run), or a checkpoint of "
            f"{mine}: ckpt=best, ckpt=last."
        )
    copy = tmp_path / "kept.ckpt"
    shutil.copyfile(run[0] / "checkpoints" / "last.ckpt", copy)
    out = tmp_path / "f.csv"
    done = predict(run, history(run), tmp_path, f"ckpt={copy}", f"out={out}")
    assert done.returncode == 0, done.stderr
    assert len(pd.read_csv(out)) == J * N


def test_torch_threads_caps_the_forecast_and_is_checked(run, tmp_path):
    done = predict(run, history(run), tmp_path, "torch_threads=1", f"out={tmp_path / 'f.csv'}")
    assert done.returncode == 0, done.stderr
    assert len(pd.read_csv(tmp_path / "f.csv")) == 3 * 6
    line = one_line(predict(run, history(run), tmp_path, "torch_threads=0"))
    assert line == (
        "torch_threads=0: give a number of threads >= 1, or null for torch's default (one per "
        "core)."
    )


def new_point(table: pd.DataFrame, x: float | list[float]) -> pd.DataFrame:
    """``table`` with a point ``new`` at y=5 and x ``x`` (one value, or one per step), its
    readings those of p0."""
    rows = table[table["id"] == "p0"].assign(id="new", x=x, y=5.0)
    return pd.concat([table, rows], ignore_index=True)  # rows 60 to 69, one per step


def changed(table: pd.DataFrame, rows: list[int] | slice, column: str, value) -> pd.DataFrame:
    table = table.copy()
    table.loc[rows, column] = value
    return table


def p2_moving(table: pd.DataFrame, by: float) -> pd.DataFrame:
    """``table`` with p2's x growing by ``by`` at each step."""
    p2 = table["id"] == "p2"
    return changed(table, p2, "x", table.loc[p2, "x"] + by * np.arange(p2.sum()))


LAST = pd.Timestamp("2021-01-01") + pd.Timedelta(hours=SPLIT - 1)  # the history's last step
FIRST = LAST - pd.Timedelta(hours=3)  # the first of the 4 steps the model reads


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (  # a training point's inf: not its training coordinates instead
            lambda t: changed(t, [57], "x", np.inf),
            f"point p3 has x=inf at {LAST} (line 59): a coordinate must be a finite number",
        ),
        (  # a new point's inf in its last row: not its other rows' position instead
            lambda t: changed(new_point(t, 3.0), [69], "x", -np.inf),
            f"point new has x=-inf at {LAST} (line 71): a coordinate must be a finite",
        ),
        (  # every x inf: named, not "no coordinates"
            lambda t: new_point(t, np.inf),
            f"point new has x=inf at {FIRST} (line 68; 4 such cells in the steps read): a",
        ),
        (  # finite, but no float32 once scaled
            lambda t: new_point(t, 1e300),
            f"point new has x=1e+300 at {FIRST} (line 68; 4 such cells in the steps read), "
            "which the model cannot place: scaled as the run's coordinates were (x ",
        ),
        (
            lambda t: p2_moving(t, 0.5),
            f"point p2 moves between {FIRST} (x=",
        ),
        (
            lambda t: new_point(t, [3.0] * 9 + [4.0]),
            f"point new moves between {FIRST} (x=3, y=5) and {LAST} (x=4, y=5), but the run "
            "was trained on points that stay in place: give one position per point, or train "
            "on moving points (data.source.moving=true).",
        ),
    ],
    ids=[
        "inf-training-point",
        "inf-last-row",
        "inf-every-row",
        "beyond-float32",
        "p2-moves",
        "new-point-moves",
    ],
)
def test_a_coordinate_the_model_cannot_take_is_one_line(run, tmp_path, change, message):
    done = predict(run, change(history(run)), tmp_path)
    line = one_line(done)
    assert line.startswith(f"data.path={tmp_path / 'recent.csv'}: ")
    assert message in line


@pytest.mark.parametrize(
    "change",
    [
        lambda t: p2_moving(t, 1e-9),  # float noise is no motion
        lambda t: changed(new_point(t, 3.0), [69], "x", np.nan),  # missing: its other rows
        lambda t: changed(t, [57], "x", np.nan),  # missing: its training coordinates
    ],
    ids=["float-noise", "new-point-missing-x", "training-point-missing-x"],
)
def test_missing_coordinates_and_float_noise_are_forecast(run, tmp_path, change):
    done = predict(run, change(history(run)), tmp_path, f"out={tmp_path / 'f.csv'}")
    assert done.returncode == 0, done.stderr
    assert len(pd.read_csv(tmp_path / "f.csv")) % 3 == 0


def restamped(table: pd.DataFrame, first: str, write) -> pd.DataFrame:
    """``table``'s 10 hourly steps moved to start at ``first`` (UTC), each time written
    by ``write(timestamp, step)``."""
    hours = (table["timestamp"] - table["timestamp"].min()) // pd.Timedelta(hours=1)
    stamps = pd.Timestamp(first, tz="UTC") + pd.to_timedelta(hours, unit="h")
    return table.assign(timestamp=[write(t, h) for t, h in zip(stamps, hours, strict=True)])


def day_first(table: pd.DataFrame) -> pd.DataFrame:
    """``table``'s times on 5 March 2021, written day first: 05/03/2021 10:00."""
    return restamped(table, "2021-03-05 10:00", lambda t, _: t.strftime("%d/%m/%Y %H:%M"))


def test_dates_read_month_first_are_warned_of_and_time_format_reads_them(run, tmp_path):
    out = tmp_path / "f.csv"
    done = predict(run, day_first(history(run)), tmp_path, f"out={out}")
    assert done.returncode == 0, done.stderr
    assert (
        "read month first ('%m/%d/%Y %H:%M': '05/03/2021 10:00' is 2021-05-03 10:00); if the "
        "dates are day first, give data.source.time_format='%d/%m/%Y %H:%M'."
    ) in done.stdout + done.stderr
    assert pd.read_csv(out)["timestamp"][0] == "2021-05-03 20:00:00"
    done = predict(
        run,
        day_first(history(run)),
        tmp_path,
        f"out={out}",
        "data.source.time_format='%d/%m/%Y %H:%M'",
    )
    assert done.returncode == 0, done.stderr
    assert "month first" not in done.stdout + done.stderr
    assert pd.read_csv(out)["timestamp"][0] == "2021-03-05 20:00:00"
    line = one_line(predict(run, history(run), tmp_path, "data.source.time_format=dmY"))
    assert line.startswith("data.source.time_format='dmY' has no strftime code")


def test_times_given_as_numbers_are_read_with_time_unit_as_the_message_says(run, tmp_path):
    """A run that read dates, a history whose times are Unix seconds: the line's fix,
    ``data.source.time_unit=s``, is one predict.py takes."""
    seconds = restamped(history(run), "2021-03-05 10:00", lambda t, _: int(t.timestamp()))
    line = one_line(predict(run, seconds, tmp_path))
    assert "data.source.time_unit=s" in line
    out = tmp_path / "f.csv"
    done = predict(run, seconds, tmp_path, f"out={out}", "data.source.time_unit=s")
    assert done.returncode == 0, done.stderr
    assert pd.read_csv(out)["timestamp"][0].startswith("2021-03-05 20:00:00")


@pytest.mark.parametrize(
    ("write", "first"),
    [
        (lambda t, _: t.tz_convert("+01:00").isoformat(), "2021-03-05 21:00:00+01:00"),
        # the clocks change: UTC, said so
        (
            lambda t, h: t.tz_convert("+01:00" if h < 5 else "+02:00").isoformat(),
            "2021-03-05 20:00:00+00:00",
        ),
        (lambda t, _: t.strftime("%Y-%m-%d %H:%M"), "2021-03-05 20:00:00"),  # no zone
    ],
    ids=["one-offset", "two-offsets", "no-zone"],
)
def test_forecast_times_are_in_the_history_s_time_zone(run, tmp_path, write, first):
    table = restamped(history(run), "2021-03-05 10:00", write)
    out = tmp_path / "f.csv"
    done = predict(run, table, tmp_path, f"out={out}")
    assert done.returncode == 0, done.stderr
    times = pd.read_csv(out)["timestamp"]
    assert times[0] == first and times.iloc[-1].endswith(first[19:])
    # the run's file wrote clock times: an offset on the history's is said, once
    said = "writes its times with a zone or UTC offset, read as UTC, but the training file"
    assert (done.stdout + done.stderr).count(said) == (first[19:] != "")


def test_forecaster_gives_the_zone_of_the_times_fed_to_update(run):
    from cloudlstm.forecast import Forecaster

    f = Forecaster.load(run[0], device="cpu")
    table = restamped(history(run), "2021-03-05 10:00", lambda t, _: t.tz_convert("+01:00"))
    for _, snapshot in table.groupby("timestamp"):
        f.update(snapshot)
    times = f.forecast()["timestamp"]
    assert times[0] == pd.Timestamp("2021-03-05 21:00", tz="+01:00")
    assert str(times.dt.tz) == "UTC+01:00"


def test_a_training_point_left_out_of_a_long_history_is_warned_of(run, tmp_path):
    """A long-format file without p2's rows: p2 was left out of the forecast without a word,
    where a wide table without its column is warned of."""
    out = tmp_path / "f.csv"
    table = history(run)
    done = predict(run, table[table["id"] != "p2"], tmp_path, f"out={out}")
    assert done.returncode == 0, done.stderr
    assert (
        f"{tmp_path / 'recent.csv'} has no row in its last 4 steps for 1 of the {N} training "
        "point(s) (p2), which are not forecast: add their rows (empty readings where they "
        "have none) to forecast them."
    ) in done.stdout + done.stderr
    assert "p2" not in set(pd.read_csv(out)["id"])
    done = predict(run, table, tmp_path, f"out={out}")
    assert done.returncode == 0, done.stderr
    assert "training point(s)" not in done.stdout + done.stderr


def test_out_dash_prints_the_forecast_alone_for_a_pipe(run, tmp_path):
    """``out=-``: standard output is the CSV alone (the log goes to standard error), the same
    forecast as a file holds, and nothing is written into the run."""
    to_file = predict(run, history(run), tmp_path, f"out={tmp_path / 'f.csv'}")
    assert to_file.returncode == 0, to_file.stderr
    before = sorted(run[0].rglob("*"))
    piped = predict(run, history(run), tmp_path, "out=-")
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == (tmp_path / "f.csv").read_text(), piped.stderr
    assert sorted(run[0].rglob("*")) == before


def test_a_reader_that_stops_early_ends_the_forecast_quietly(run, tmp_path):
    data = tmp_path / "recent.csv"
    history(run).to_csv(data, index=False)
    cmd = [sys.executable, "predict.py", f"run={run[0]}", f"data.path={data}", "out=-"]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()  # as `| head` does once it has its lines
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 1, err  # as `yes | head` ends
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert "Error executing job" not in err, err  # Hydra's report of a failed job


def test_an_empty_history_is_one_line_with_a_fix(run, tmp_path):
    """The line was pandas' "No columns to parse from file", without a fix."""
    (empty := tmp_path / "empty.csv").write_text("")
    proc = run_python(str(ROOT / "predict.py"), f"run={run[0]}", f"data.path={empty}")
    assert one_line(proc) == (
        f"The history file {empty} is empty, without even a header row: write the header row "
        "of its columns and its rows into it, or name the file that holds them."
    )


@pytest.mark.parametrize(
    ("empty", "line"),
    [
        ("run=", "run= is empty: give run=<run dir>."),
        ("ckpt=", "ckpt= is empty: give ckpt=best, last or the path of a .ckpt."),
        ("data.path=", "predict.py needs data.path: `"),
    ],
)
def test_an_empty_value_is_named_as_empty(run, tmp_path, empty, line):
    """An empty value names no path: it was read as the current folder ('. is not a run
    directory', 'data.path=<cwd> is a folder ...')."""
    data = tmp_path / "recent.csv"
    history(run).to_csv(data, index=False)
    args = {"run": f"run={run[0]}", "data.path": f"data.path={data}"}
    args[empty.rstrip("=")] = empty
    assert one_line(run_python(str(ROOT / "predict.py"), *args.values())).startswith(line)


def test_a_run_whose_model_cannot_be_imported_is_one_line(run, tmp_path):
    """A run's config.yaml naming a model class since renamed, or of a package not installed
    here: predict.py's line names the setting, where it was a traceback."""
    moved = tmp_path / "moved_run"
    shutil.copytree(run[0], moved)
    config = moved / "config.yaml"
    config.write_text(config.read_text().replace("cloudlstm.models.", "mymodels.", 1))
    line = one_line(predict((moved, *run[1:]), history(run), tmp_path))
    assert line.startswith("model._target_='mymodels."), line
    assert "cannot be imported: there is no module mymodels." in line


def test_an_out_that_is_an_input_is_refused_and_left_as_it_was(run, tmp_path):
    """out= naming the history file, or the run's training file, wrote the forecast over
    the readings."""
    data = tmp_path / "recent.csv"
    history(run).to_csv(data, index=False)
    trained_on = Path(OmegaConf.load(run[0] / "config.yaml").data.source.path)
    for out, name in ((data, "data.path"), (trained_on, "the run's data.source.path")):
        before = out.read_bytes()
        done = run_python(
            str(ROOT / "predict.py"), f"run={run[0]}", f"data.path={data}", f"out={out}"
        )
        assert one_line(done) == (
            f"out={out} is {name} ({data if out == data else trained_on}): the forecast would "
            "be written over it. Name another file."
        )
        assert out.read_bytes() == before


@pytest.fixture(scope="module")
def gap_run(tmp_path_factory):
    """A tiny linear-model run on the CSV of :func:`~tests.test_forecast.raw_stream`, but point 2's
    pm25 missing at the last input step of the window whose targets start at SPLIT, read the
    step before and, far off, at SPLIT itself: its run directory, the test loop's saved
    forecast of that window, values and mask."""
    tmp = tmp_path_factory.mktemp("gap")
    values, observed = raw_stream()
    observed[SPLIT - 2 : SPLIT + 1, 2, 1] = [True, False, True]
    values[SPLIT, 2, 1] = values[SPLIT - 2, 2, 1] + 30.0
    long_table(values, observed, range(T)).to_csv(tmp / "stream.csv", index=False)
    keep = [o for o in TINY if not o.startswith(("data.source.", "model.", "report."))]
    csv = f"data.source.path={tmp / 'stream.csv'}"
    overrides = [*keep, "data=points", csv, "model=linear", "module.save_predictions=true"]
    run = train_run(tmp, overrides)
    dm, prediction = run_data(run)
    return run, prediction[window_at(dm, SPLIT)], values, observed


def test_a_gap_at_the_last_input_step_is_forecast_by_predict_as_the_test_loop_did(
    gap_run, tmp_path
):
    """The test loop's input never sees the window's targets: its filled last input step
    holds the reading before the gap, as ``predict.py``'s history (which has no future) does;
    both forecast the same."""
    run, tested, values, observed = gap_run
    data, out = tmp_path / "recent.csv", tmp_path / "forecast.csv"
    long_table(values, observed, range(SPLIT)).to_csv(data, index=False)  # up to SPLIT - 1
    done = run_python(str(ROOT / "predict.py"), f"run={run}", f"data.path={data}", f"out={out}")
    assert done.returncode == 0, done.stderr
    forecast = pd.read_csv(out)
    assert forecast.loc[forecast["id"] == "p2", "filled_inputs"].tolist() >= [1] * J
    forecast = forecast[CHANNELS].to_numpy().reshape(J, N, len(CHANNELS))
    np.testing.assert_allclose(forecast, tested, rtol=1e-5, atol=1e-4)


def written_with(table: pd.DataFrame, path: Path, before: int, kind: str) -> None:
    """``table`` written as a CSV at ``path``, with ``kind`` before its data row ``before``:
    a ``blank`` line, which pandas skips, or a ``quoted`` field of two lines (in a column
    ``note``) in the row before it; either puts that row and those after one line further
    on than their position says (row r on line r + 3, not r + 2)."""
    if kind == "quoted":
        table = table.assign(note="")
        table.loc[before - 1, "note"] = "read twice,\nthen sent"
    text = table.to_csv(index=False)
    if kind == "blank":
        lines = text.splitlines(keepends=True)
        text = "".join([*lines[: before + 1], "\n", *lines[before + 1 :]])
    path.write_text(text)


def predict_file(run, path: Path) -> str:
    """The one line ``predict.py`` stops with on the history file ``path``."""
    return one_line(run_python(str(ROOT / "predict.py"), f"run={run[0]}", f"data.path={path}"))


@pytest.mark.parametrize("kind", ["blank", "quoted"])
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (  # a cell that is no number
            lambda t: changed(t.astype({"no2": object}), [57], "no2", "n/d"),
            "1 channel value(s) are not finite numbers: line 60, column 'no2': 'n/d'.",
        ),
        (  # an absurd value: by its point and time, and its line
            lambda t: changed(t, [57], "no2", 1e30),
            f"channel 'no2', point p3, time {LAST} (line 60): 1e+30 (",
        ),
        (  # a coordinate the model cannot place
            lambda t: changed(t, [57], "x", np.inf),
            f"point p3 has x=inf at {LAST} (line 60): a coordinate must be a finite number",
        ),
        (  # a time that cannot be read
            lambda t: changed(t.astype({"timestamp": object}), [30], "timestamp", "yesterday"),
            "line 33, 'yesterday'",
        ),
        (  # an empty point id
            lambda t: changed(t, [30], "id", np.nan),
            "column 'id' has 1 empty point id(s) (first at line 33): give every row its point.",
        ),
    ],
    ids=["text-cell", "absurd-value", "infinite-coordinate", "unreadable-time", "empty-id"],
)
def test_a_bad_cell_of_a_history_file_is_named_by_its_line(run, tmp_path, kind, change, message):
    """A blank line or a quoted field of two lines before it: the line an editor shows, where
    predict.py named the row's position (data row 57 on line 60)."""
    path = tmp_path / "recent.csv"
    written_with(change(history(run)), path, 10, kind)
    line = predict_file(run, path)
    assert line.startswith(f"data.path={path}: ") or f"of data.path={path}: " in line, line
    assert message in line, line


def test_two_offsets_naming_one_moment_in_a_history_file_are_named_by_their_lines(run, tmp_path):
    """Both rows by their lines, the blank line before them counted."""
    table = restamped(history(run), "2021-03-05 10:00", lambda t, _: t.isoformat())
    wrong, next_hour = 48, 54  # p0's rows of the last two steps
    moment = pd.Timestamp(table.loc[next_hour, "timestamp"])
    table.loc[wrong, "timestamp"] = moment.tz_convert("+01:00").isoformat()  # an hour wrong
    path = tmp_path / "recent.csv"
    written_with(table, path, 10, "blank")
    line = predict_file(run, path)
    assert f"data.path={path}: line 51 and line 57 of point 'p0' write " in line, line
