"""SIGTERM before training has begun (``timeout``, a batch system's preemption, ``kill``
while torch is imported or the data read) stops ``train.py`` with one line and status 143,
as Ctrl-C does (tests/test_ctrl_c_at_start.py); SIGTERM during training saves ``last.ckpt``
at its step (tests/test_preemption.py). ``eval.py`` and ``predict.py`` likewise, at any
moment outside Lightning's test (tests/test_eval.py), their lines saying what they wrote."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cloudlstm.rundir.stops import CTRL_C_EXIT_CODE, EXIT_CODE
from tests.conftest import ROOT, TINY, as_in_a_terminal, run_python, subprocess_env
from tests.test_ctrl_c_at_start import INSTALLED_PROGRAM, python_c
from tests.test_forecast import SPLIT, csv_run, long_table
from tests.test_preemption import start, wait_for

# a SIGTERM sent as the import of the module named by the first argument begins
TERM_AT = """
import os, runpy, signal, sys

AT = sys.argv.pop(1)

class TermAt:
    def find_spec(self, name, path, target=None):
        if name == AT:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGTERM)
        return None

sys.meta_path.insert(0, TermAt())
"""
STOPPED_AT_START = (
    "cloudlstm-train: stopped by SIGTERM before training began, having saved nothing: run "
    "the same command again to start it (or to continue it, where its run directory holds "
    "checkpoints).\n"
)


@pytest.mark.parametrize("module", ["torch._C", "lightning.pytorch"])
def test_sigterm_while_torch_loads_is_one_line_and_143(tmp_path, module):
    """A fresh Python, signalled inside torch's import (its extension module) or
    Lightning's: the import ends, then the program stops with its line; before, the
    process died at once without a word."""
    args = [*TINY, "logger=none", f"hydra.run.dir={tmp_path / 'run'}"]
    proc = python_c(TERM_AT + INSTALLED_PROGRAM, module, "cloudlstm-train", *args)
    assert (proc.returncode, proc.stderr) == (EXIT_CODE, STOPPED_AT_START)


def test_ctrl_c_while_torch_loads_says_what_sigterm_says_with_130(tmp_path):
    """Ctrl-C there said only ``cloudlstm-train: stopped by Ctrl-C.``: now SIGTERM's line,
    naming Ctrl-C (that nothing was saved, and the command that starts the run)."""
    from tests.test_ctrl_c_at_start import PRESS_AT

    args = [*TINY, "logger=none", f"hydra.run.dir={tmp_path / 'run'}"]
    proc = python_c(PRESS_AT + INSTALLED_PROGRAM, "torch._C", "cloudlstm-train", *args)
    said = STOPPED_AT_START.replace("by SIGTERM", "by Ctrl-C")
    assert (proc.returncode, proc.stderr) == (CTRL_C_EXIT_CODE, said)


@pytest.mark.parametrize(
    ("signum", "by", "status"),
    [(signal.SIGTERM, "SIGTERM", EXIT_CODE), (signal.SIGINT, "Ctrl-C", CTRL_C_EXIT_CODE)],
)
def test_a_signal_while_the_run_is_built_names_the_command_that_starts_it(
    tmp_path, signum, by, status
):
    """Signalled with the data read and the Trainer being built: the run's line, on the
    console and in its log, with the command that starts it; that command trains it.
    Ctrl-C said only ``train.py: stopped by Ctrl-C.``, on the console alone."""
    run_dir, log = tmp_path / "run", tmp_path / "train.log"
    gate = [
        "+callbacks.gate._target_=tests.kill_callback.WaitWhenBuilt",
        "+callbacks.gate.until=${paths.output_dir}/go",
    ]
    args = [*TINY, "logger=none", *gate, f"hydra.run.dir={run_dir}"]
    proc = start([*args, f"paths.data_dir={tmp_path / 'data'}"], log)
    wait_for(run_dir / "go.waiting", proc, log)
    proc.send_signal(signum)
    assert proc.wait(timeout=300) == status, log.read_text()[-3000:]

    out = log.read_text()
    assert "Traceback" not in out
    (line,) = [x for x in out.splitlines() if f"stopped by {by}" in x]
    assert f"Run stopped by {by} before training (no checkpoint yet). Run dir {run_dir}" in line
    assert line.endswith("starts it (resume=auto).")
    assert line[line.index("Run stopped") :] in (run_dir / "train.log").read_text()
    assert not (run_dir / "checkpoints").exists()

    (run_dir / "go").touch()
    command = shlex.split(line.split("`")[1])
    assert command[:2] == ["python", "train.py"], line
    done = run_python(*command[1:], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (run_dir / "metrics.json").is_file()


def test_sigterm_after_a_sweeps_job_does_not_say_nothing_was_saved(tmp_path):
    """Signalled once the sweep's job has finished, as its comparison begins: the line says
    that the jobs had begun and their run directories keep what they saved; it said that
    the sweep had saved nothing, beside the job's metrics.json."""
    sweep = tmp_path / "sweep"
    args = ["-m", "seed=0", *TINY, "logger=none", f"hydra.sweep.dir={sweep}"]
    args.append(f"paths.data_dir={tmp_path / 'data'}")
    proc = python_c(
        TERM_AT + INSTALLED_PROGRAM, "cloudlstm.cli.compare.command", "cloudlstm-train", *args
    )
    assert proc.returncode == EXIT_CODE, proc.stderr[-3000:]
    assert (sweep / "0" / "metrics.json").is_file()
    assert "Traceback" not in proc.stderr
    assert "saved nothing" not in proc.stderr
    assert proc.stderr.endswith(
        "cloudlstm-train: stopped by SIGTERM outside a training, after its jobs had begun: "
        "their run directories keep what each saved (metrics.json where it finished).\n"
    )


# ``python <script> <args>`` as the shell runs it (its name is the program's in its lines)
RUN_SCRIPT = """
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
# a signal (SIGTERM, or that named by the environment's SIGNAL_AFTER) sent as the function
# named by the first argument (module:function) returns
TERM_AFTER = """
import importlib, os, runpy, signal, sys

module_name, name = sys.argv.pop(1).split(":")
module = importlib.import_module(module_name)
done = getattr(module, name)
signum = getattr(signal, os.environ.get("SIGNAL_AFTER", "SIGTERM"))

def then_signal(*args, **kwargs):
    result = done(*args, **kwargs)
    os.kill(os.getpid(), signum)
    return result

setattr(module, name, then_signal)
"""
BEFORE_THE_FORECAST = (
    "predict.py: stopped by SIGTERM before the forecast was written: run the same command again.\n"
)


@pytest.fixture(scope="module")
def csv_trained(tmp_path_factory):
    """A tiny CloudLSTM run on a long-format CSV, its values and mask (tests/test_forecast.py)."""
    return csv_run(tmp_path_factory.mktemp("trained"))


def eval_args(trained, out: Path) -> list[str]:
    return [str(ROOT / "eval.py"), f"run={trained[0]}", f"hydra.run.dir={out}"]


def predict_args(trained, tmp_path: Path, out: Path) -> list[str]:
    """``predict.py`` of the run on a history written in ``tmp_path``, forecast to ``out``."""
    _, values, observed = trained
    data = tmp_path / "recent.csv"
    long_table(values, np.ones_like(observed), range(SPLIT - 10, SPLIT)).to_csv(data, index=False)
    return [str(ROOT / "predict.py"), f"run={trained[0]}", f"data.path={data}", f"out={out}"]


def test_sigterm_while_eval_py_loads_torch_is_one_line_and_143(csv_trained, tmp_path):
    """eval.py died at once without a word."""
    out = tmp_path / "eval"
    proc = python_c(TERM_AT + RUN_SCRIPT, "torch._C", *eval_args(csv_trained, out))
    assert (proc.returncode, proc.stderr) == (
        EXIT_CODE,
        "eval.py: stopped by SIGTERM before evaluating, having written no results: run the "
        "same command again.\n",
    )
    assert not (out / "metrics.json").exists()


def start_eval(args: list[str], log: Path) -> subprocess.Popen:
    """``python eval.py <args>`` started as from a terminal (Ctrl-C stops it), its stdout and
    stderr into ``log``."""
    with log.open("w") as written:
        return subprocess.Popen(
            [sys.executable, *args], cwd=ROOT, env=subprocess_env(), stdout=written,
            stderr=subprocess.STDOUT, preexec_fn=as_in_a_terminal,
        )  # fmt: skip


@pytest.mark.parametrize(
    ("signum", "by", "status"),
    [(signal.SIGTERM, "SIGTERM", EXIT_CODE), (signal.SIGINT, "Ctrl-C", CTRL_C_EXIT_CODE)],
)
def test_a_signal_while_an_evaluation_is_built_names_what_it_did_not_write(
    csv_trained, tmp_path, signum, by, status
):
    """Signalled with the data read and the checkpoint loaded, before Lightning's test: its
    line on stderr and in eval.log, and the signal's status; the same command then
    evaluates. Ctrl-C said only ``eval.py: stopped by Ctrl-C.``, on stderr alone."""
    out, go, log = tmp_path / "eval", tmp_path / "go", tmp_path / "eval.out"
    gate = [
        "+callbacks.gate._target_=tests.kill_callback.WaitWhenBuilt",
        f"+callbacks.gate.until={go}",
    ]
    args = [*eval_args(csv_trained, out), *gate]
    proc = start_eval(args, log)
    wait_for(tmp_path / "go.waiting", proc, log)
    proc.send_signal(signum)
    assert proc.wait(timeout=300) == status, log.read_text()[-3000:]
    said = log.read_text()
    assert "Traceback" not in said
    line = (
        f"eval.py: stopped by {by} before the evaluation had finished, without writing "
        f"{out / 'metrics.json'}: run the same command again."
    )
    assert said.endswith(f"{line}\n")
    assert (out / "eval.log").read_text().endswith(f"[ERROR] - {line}\n")
    go.touch()
    done = run_python(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "metrics.json").is_file()


@pytest.mark.parametrize(
    ("signum", "by", "status"),
    [(signal.SIGTERM, "SIGTERM", EXIT_CODE), (signal.SIGINT, "Ctrl-C", CTRL_C_EXIT_CODE)],
)
def test_a_signal_after_an_evaluation_wrote_its_results_says_they_are_there(
    csv_trained, tmp_path, monkeypatch, signum, by, status
):
    """Not that nothing was written: metrics.json is there, whole."""
    out = tmp_path / "eval"
    where = "cloudlstm.cli.evaluate:write_metrics"
    monkeypatch.setenv("SIGNAL_AFTER", signal.Signals(signum).name)
    proc = python_c(TERM_AFTER + RUN_SCRIPT, where, *eval_args(csv_trained, out))
    assert proc.returncode == status, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    line = (
        f"eval.py: stopped by {by} after the evaluation had finished: "
        f"{out / 'metrics.json'} holds its results."
    )
    assert proc.stderr.endswith(f"{line}\n")
    assert (out / "eval.log").read_text().endswith(f"[ERROR] - {line}\n")
    assert json.loads((out / "metrics.json").read_text())["test"]


def test_ctrl_c_in_an_evaluations_test_says_so_in_its_log_with_130(csv_trained, tmp_path):
    """Ctrl-C inside Lightning's test: the evaluation's own line (it stops after the batch),
    on the console and in eval.log, as outside it, and status 130."""
    out, log = tmp_path / "eval", tmp_path / "eval.out"
    stop = ["+callbacks.stop._target_=tests.kill_callback.SignalAtTest", "+callbacks.stop.signum=2"]
    proc = start_eval([*eval_args(csv_trained, out), *stop], log)
    assert proc.wait(timeout=300) == CTRL_C_EXIT_CODE, log.read_text()[-3000:]
    said = log.read_text()
    assert "Traceback" not in said
    line = (
        f"Evaluation interrupted by Ctrl-C: {out} has no metrics.json; the same command "
        "evaluates again."
    )
    assert said.rstrip().endswith(line)
    assert (out / "eval.log").read_text().endswith(f"[ERROR] - {line}\n")
    assert not (out / "metrics.json").exists()


def test_sigterm_before_an_evaluation_finished_leaves_an_earlier_one_and_logs_its_line(
    csv_trained, tmp_path
):
    """Signalled with the data read, in an earlier evaluation's folder (``hydra.run.dir=``):
    the line names the metrics.json there as that evaluation's, left as it was, where it
    said only that none was written; and it goes into eval.log, with the evaluation's
    other lines, where it reached stderr alone."""
    out = tmp_path / "eval"
    out.mkdir()
    (out / "metrics.json").write_text('{"test": "an earlier evaluation"}\n')
    where = "cloudlstm.cli.evaluate:assemble"
    proc = python_c(TERM_AFTER + RUN_SCRIPT, where, *eval_args(csv_trained, out))
    assert proc.returncode == EXIT_CODE, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    line = (
        "eval.py: stopped by SIGTERM before the evaluation had finished, without replacing "
        f"{out / 'metrics.json'}, an earlier evaluation's: run the same command again."
    )
    assert proc.stderr.endswith(f"{line}\n")
    assert (out / "eval.log").read_text().endswith(f"[ERROR] - {line}\n")
    assert json.loads((out / "metrics.json").read_text()) == {"test": "an earlier evaluation"}


def test_sigterm_while_predict_py_loads_torch_is_one_line_and_143(csv_trained, tmp_path):
    out = tmp_path / "forecast.csv"
    proc = python_c(TERM_AT + RUN_SCRIPT, "torch._C", *predict_args(csv_trained, tmp_path, out))
    assert (proc.returncode, proc.stderr) == (EXIT_CODE, BEFORE_THE_FORECAST)
    assert not out.exists()


@pytest.mark.parametrize(
    ("signum", "by", "status"),
    [(signal.SIGTERM, "SIGTERM", EXIT_CODE), (signal.SIGINT, "Ctrl-C", CTRL_C_EXIT_CODE)],
)
def test_a_signal_before_predict_py_writes_leaves_an_earlier_forecast(
    csv_trained, tmp_path, monkeypatch, signum, by, status
):
    """Signalled with the history read: the forecast of an earlier command at ``out`` is no
    forecast of this one, and stays as it was. Ctrl-C said only ``predict.py: stopped by
    Ctrl-C.``, not whether the forecast was written."""
    out = tmp_path / "forecast.csv"
    out.write_text("an earlier forecast\n")
    where = "cloudlstm.cli.predict:read_history"
    monkeypatch.setenv("SIGNAL_AFTER", signal.Signals(signum).name)
    proc = python_c(TERM_AFTER + RUN_SCRIPT, where, *predict_args(csv_trained, tmp_path, out))
    assert proc.returncode == status, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.endswith(
        f"predict.py: stopped by {by} before the forecast was written: run the same command "
        "again.\n"
    )
    assert out.read_text() == "an earlier forecast\n"


@pytest.mark.parametrize(
    ("signum", "by", "status"),
    [(signal.SIGTERM, "SIGTERM", EXIT_CODE), (signal.SIGINT, "Ctrl-C", CTRL_C_EXIT_CODE)],
)
def test_a_signal_after_predict_py_wrote_says_where_the_forecast_is(
    csv_trained, tmp_path, monkeypatch, signum, by, status
):
    out = tmp_path / "forecast.csv"
    out.write_text("an earlier forecast\n")
    where = "cloudlstm.cli.predict:write_forecast"
    monkeypatch.setenv("SIGNAL_AFTER", signal.Signals(signum).name)
    proc = python_c(TERM_AFTER + RUN_SCRIPT, where, *predict_args(csv_trained, tmp_path, out))
    assert proc.returncode == status, proc.stderr[-3000:]
    assert proc.stderr.endswith(
        f"predict.py: stopped by {by} after writing the forecast: {out} holds it.\n"
    )
    assert len(pd.read_csv(out)) > 0
