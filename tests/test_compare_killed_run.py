"""compare's row of an eval.py re-test of a run killed before it wrote its metrics.json:
the re-test records no model or data (the run had none to give), and its row names them as
Hydra chose them for the run (``.hydra/hydra.yaml``), as the run's own row would."""

from __future__ import annotations

import csv
import io
import json
import signal
import subprocess
from pathlib import Path

import pytest

from cloudlstm.cli.compare.command import main as compare_main
from tests.conftest import PYTHON, ROOT, TINY, subprocess_env
from tests.test_compare import write_run

# killed at the second epoch's first step, after the first epoch's checkpoint: a run with a
# best checkpoint to test and no metrics.json; a preset that shares cloudlstm's class, so
# that only the name Hydra chose tells it apart
JOB = [*TINY, "logger=none", "model=cloudlstm_k3"]
KILL_AT_STEP_4 = [
    "+callbacks.kill._target_=tests.kill_callback.KillAtStep",
    "+callbacks.kill.step=4",
]


def python(*args: str) -> subprocess.CompletedProcess:
    """``python <args>`` in the repository, as from a shell."""
    return subprocess.run(
        [*PYTHON, *args], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True
    )


def compared(root: Path, capsys) -> tuple[list[dict[str, str]], list[str]]:
    """compare's CSV rows of ``root`` with the re-tests, and its stderr lines."""
    assert compare_main([str(root), "--include-evals", "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    return list(csv.DictReader(io.StringIO(out))), err.splitlines()


def test_a_retest_of_a_killed_run_names_its_model_and_data_as_the_runs_own_row(tmp_path, capsys):
    """Its row was model ``?`` and data ``?``: a data set of its own, beside no other row.
    The run's config.yaml holds class paths alone (cloudlstm_k3 is cloudlstm's class)."""
    run = tmp_path / "run"
    args = [f"hydra.run.dir={run}", f"paths.data_dir={tmp_path / 'data'}"]
    killed = python("train.py", *JOB, *args, *KILL_AT_STEP_4)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not (run / "metrics.json").exists()
    evaluated = python("eval.py", f"run={run}")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    (retest,) = (run / "eval").glob("*/metrics.json")
    assert json.loads(retest.read_text())["run"] is None  # eval.py had none to record

    rows, err = compared(tmp_path, capsys)
    assert [(r["model"], r["data"]) for r in rows] == [("cloudlstm_k3", "synthetic")]
    assert not [line for line in err if "model and data ?" in line], err
    # the run trained to its end, without the kill: its own row now
    trained = python("train.py", *JOB, *args, "resume=auto", "allow_changes=[callbacks.kill]")
    assert trained.returncode == 0, trained.stderr[-3000:]
    rows, _ = compared(tmp_path, capsys)
    assert [(r["model"], r["data"]) for r in rows] == [("cloudlstm_k3", "synthetic")] * 2


@pytest.mark.parametrize(
    ("hydra_yaml", "why"),
    [
        (None, "{} does not exist"),
        ("hydra: [unclosed\n", "{} is not valid YAML (while parsing a flow sequence"),
        (
            "hydra:\n  runtime:\n    choices:\n      trainer: cpu\n",
            "{} has no hydra.runtime.choices.model or hydra.runtime.choices.data",
        ),
    ],
    ids=["absent", "damaged", "without-choices"],
)
def test_a_retest_whose_run_records_no_names_says_why_they_are_unknown(
    tmp_path, capsys, hydra_yaml, why
):
    """Where neither the re-test's metrics.json nor its run's .hydra/hydra.yaml names the
    model and data, its row keeps ``?``, and one stderr line says why."""
    run = tmp_path / "runs" / "a"
    run.mkdir(parents=True)
    folder = run / "eval" / "2026-12-01_10-00-00-000000"
    write_run(folder, 1.0)
    results = json.loads((folder / "metrics.json").read_text())
    results.update(run=None, run_dir=str(run), checkpoint="checkpoints/last.ckpt")
    (folder / "metrics.json").write_text(json.dumps(results))
    hydra_file = run / ".hydra" / "hydra.yaml"
    if hydra_yaml is not None:
        hydra_file.parent.mkdir()
        hydra_file.write_text(hydra_yaml)
    rows, err = compared(tmp_path / "runs", capsys)
    assert [(r["model"], r["data"]) for r in rows] == [("?", "?")]
    (line,) = err
    assert line.startswith(
        "compare: 1 run(s) have model and data ?, as neither their metrics.json (run) nor "
        "their run's .hydra/hydra.yaml (hydra.runtime.choices) names them: "
        f"a/eval/2026-12-01_10-00-00-000000: {why.format(hydra_file)}"
    ), line
