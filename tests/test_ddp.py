"""Testing under DDP scores every test window exactly once and saves them all, in order."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cloudlstm.cli.train import train
from cloudlstm.compare import find_runs
from cloudlstm.compare.groups import group_runs
from cloudlstm.engine.ddp_launch import LAUNCH_VARIABLES, ddp_launch_undone
from tests.conftest import ROOT, TINY, compose_train, run_python, subprocess_env

# The whole test part (no batch limit, which DDP would apply per rank), one training epoch.
JOB = [
    *[a for a in TINY if not a.startswith(("trainer", "data.source.num_steps"))],
    "data.source.num_steps=165",
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=3",
    "trainer.val_check_interval=3",
    "trainer.limit_val_batches=2",
    "trainer.enable_progress_bar=false",
    "logger=none",
    "module.save_predictions=true",
    "report.figures=false",
    "torch_threads=1",
]
# Batch composition differs between 1 and 2 processes, so float32 forward passes may round
# differently; the metric sums are float64 and exact otherwise.
RTOL = 1e-5


def assert_close(got: Any, expected: Any, where: str = "test", rtol: float = RTOL) -> None:
    """Nested metrics equal up to ``rtol`` (NaN equals NaN)."""
    if isinstance(expected, dict):
        assert got.keys() == expected.keys(), where
        for key in expected:
            assert_close(got[key], expected[key], f"{where}.{key}", rtol)
    elif isinstance(expected, list):
        assert len(got) == len(expected), where
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            assert_close(g, e, f"{where}[{i}]", rtol)
    elif isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(got), where
    else:
        assert math.isclose(got, expected, rel_tol=rtol, abs_tol=1e-9), (where, got, expected)


def test_two_ddp_processes_test_like_one(tmp_path):
    cfg = compose_train(tmp_path, [*JOB, "trainer=cpu"])
    single = train(cfg)
    windows = single["data"]["windows"]["test"]
    # an odd count: a sampler padding the ranks to equal length would score a window twice
    assert windows % 2 == 1

    ddp_dir = tmp_path / "ddp"
    # metrics.json names the checkpoint relative to its run directory
    tested = Path(cfg.paths.output_dir) / single["checkpoint"]
    proc = ddp_test_of(JOB, tested, ddp_dir, tmp_path / "data")
    # every rank logs the same gathered test results: no line per number asking to reduce them
    assert "sync_dist=True" not in proc.stdout + proc.stderr

    ddp = json.loads((ddp_dir / "metrics.json").read_text())
    assert ddp["checkpoint"] == str(tested)  # outside the DDP run's directory: absolute
    (process,) = ddp["provenance"]  # rank 0's, for both
    assert process["machine"]["processes"] == 2
    assert_close(ddp["test"], single["test"])
    with (
        np.load(Path(cfg.paths.output_dir) / "predictions.npz") as one,
        np.load(ddp_dir / "predictions.npz") as two,
    ):
        assert one["prediction"].shape[0] == two["prediction"].shape[0] == windows
        np.testing.assert_array_equal(two["target"], one["target"])  # same windows, same order
        for name in ("observed", "scored", "point_ids"):  # rank 0 reads them for every rank
            np.testing.assert_array_equal(two[name], one[name])
        np.testing.assert_allclose(two["prediction"], one["prediction"], rtol=RTOL, atol=1e-6)
    # the same windows: one data set for compare, whatever the processes
    groups = group_runs(find_runs([Path(cfg.paths.output_dir), ddp_dir]), by=["model"])
    assert [g.data for g in groups] == ["synthetic"]


@pytest.mark.slow
def test_a_ddp_run_s_own_test_is_its_evaluation_in_one_process(tmp_path):
    """The test a run trained with trainer=ddp_cpu ran at its end, on an odd number of test
    windows, is eval.py's of its checkpoint with trainer=cpu: the same windows, each once,
    the same metrics up to the order of float sums."""
    run_dir = tmp_path / "ddp"
    where = [f"hydra.run.dir={run_dir}", f"paths.data_dir={tmp_path / 'data'}"]
    proc = run_python("train.py", *JOB, "trainer=ddp_cpu", *where, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_python("eval.py", f"run={run_dir}", "trainer=cpu", "module.save_predictions=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    trained = json.loads((run_dir / "metrics.json").read_text())
    (evaluation,) = run_dir.glob("eval/*/")
    alone = json.loads((evaluation / "metrics.json").read_text())
    windows = trained["data"]["windows"]["test"]
    assert windows % 2 == 1 and trained["test"]["num_instances"] == windows
    assert alone["checkpoint"] == trained["checkpoint"]
    assert_close(alone["test"], trained["test"], rtol=1e-6)
    with (
        np.load(run_dir / "predictions.npz") as two,
        np.load(evaluation / "predictions.npz") as one,
    ):
        np.testing.assert_array_equal(one["target"], two["target"])
        np.testing.assert_allclose(one["prediction"], two["prediction"], rtol=1e-6, atol=1e-6)


def ddp_test_of(
    job: list[str], checkpoint: Path, run_dir: Path, data_dir: Path
) -> subprocess.CompletedProcess:
    """``train.py train=false`` of ``checkpoint`` under ``trainer=ddp_cpu`` into ``run_dir``."""
    proc = run_python(
        "train.py",
        *job,
        "trainer=ddp_cpu",
        "train=false",
        f"ckpt_path={checkpoint}",
        f"hydra.run.dir={run_dir}",
        f"paths.data_dir={data_dir}",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


# A DDP training, then an evaluation of its run in the same Python, as a notebook or a
# script runs them; each process writes the launch's variables before and after each job.
# Lightning starts process 1 as this script again: it ends after the training.
ONE_PYTHON = """
import json, os, sys
from pathlib import Path

sys.path.insert(0, {root!r})
import torch
from cloudlstm.cli.evaluate import evaluate
from cloudlstm.cli.train import train
from cloudlstm.engine.ddp_launch import LAUNCH_VARIABLES
from tests.conftest import compose_train
from tests.test_eval import compose_eval

def launch():
    omp = os.environ.get("OMP_NUM_THREADS")
    threads = {{"OMP_NUM_THREADS": omp, "threads": torch.get_num_threads()}}
    return {{**{{name: os.environ.get(name) for name in LAUNCH_VARIABLES}}, **threads}}

tmp = Path({tmp!r})
seen = [launch()]
cfg = compose_train(tmp, {job!r})
train(cfg)
seen.append(launch())
rank = seen[0]["LOCAL_RANK"] or "0"
if rank == "0":
    evaluate(compose_eval(Path(cfg.paths.output_dir), tmp / "eval", "trainer=cpu"))
    seen.append(launch())
(tmp / f"process{{rank}}.json").write_text(json.dumps(seen))
"""


def test_a_job_after_a_ddp_training_in_the_same_python_runs_as_one_process(tmp_path):
    """Process 0 kept Lightning's LOCAL_RANK, NODE_RANK, MASTER_ADDR and MASTER_PORT, and its
    process group: the evaluation that followed took itself for one of several processes
    started by a launcher, kept DDP and failed on the ended process 1's connection. Now each
    process's variables are as they were before the training, a launcher's (process 1's
    WORLD_SIZE, which Lightning's teardown removed) too."""
    script = tmp_path / "one_python.py"
    # torch's own thread count, which Lightning's DDP lowers to a share of the cores
    job = [*JOB, "trainer=ddp_cpu", "torch_threads=null"]
    script.write_text(ONE_PYTHON.format(root=str(ROOT), tmp=str(tmp_path), job=job))
    # neither a thread count given, nor the share of the cores tests.conftest gives xdist's
    # workers (the script imports it)
    given = ("OMP_NUM_THREADS", "PYTEST_XDIST_WORKER_COUNT")
    env = {k: v for k, v in subprocess_env().items() if k not in given}
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, *later = json.loads((tmp_path / "process0.json").read_text())
    assert later == [first, first]
    assert first["LOCAL_RANK"] is None
    started, ended = json.loads((tmp_path / "process1.json").read_text())
    assert (started["LOCAL_RANK"], started["WORLD_SIZE"]) == ("1", "2")
    assert ended == started
    evaluation = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert evaluation["provenance"][0]["machine"]["processes"] == 1


def test_the_launch_variables_are_put_back_after_a_failed_job(monkeypatch):
    """A job that fails after Lightning set its variables (and removed a launcher's) leaves
    them as they were before it."""
    monkeypatch.setenv("WORLD_SIZE", "2")  # a launcher's, which Lightning's teardown removes
    for name in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "RANK"):
        monkeypatch.delenv(name, raising=False)
    before = {name: os.environ.get(name) for name in LAUNCH_VARIABLES}
    with pytest.raises(ValueError), ddp_launch_undone():
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29500", LOCAL_RANK="0")
        del os.environ["WORLD_SIZE"]
        raise ValueError("the job failed")
    assert {name: os.environ.get(name) for name in LAUNCH_VARIABLES} == before


@pytest.mark.slow
@pytest.mark.parametrize(
    ("limit", "windows", "data_sets"),
    [
        (3, (24, 31), ["synthetic windows=24", "synthetic windows=31"]),
        (10, (31, 31), ["synthetic"]),
    ],
)
def test_compare_tells_a_test_limit_in_two_processes_from_the_same_in_one(
    tmp_path, limit, windows, data_sets
):
    """trainer.limit_test_batches=3 counts batches per process: a run's test in one process
    scores 24 of its 31 test windows, the same checkpoint's in 2 DDP processes (2 batches
    each) all 31, yet compare took both for one data set (and, grouped by model, one row's
    two seeds). With 10, above the batches of every process, both score all 31: one data
    set, which compare split by the processes (``processes=2``)."""
    limited = [*JOB, f"trainer.limit_test_batches={limit}"]
    cfg = compose_train(tmp_path, [*limited, "trainer=cpu"])
    single = train(cfg)
    ddp_dir = tmp_path / "ddp"
    tested = Path(cfg.paths.output_dir) / single["checkpoint"]
    ddp_test_of(limited, tested, ddp_dir, tmp_path / "data")
    ddp = json.loads((ddp_dir / "metrics.json").read_text())
    assert (single["test"]["num_instances"], ddp["test"]["num_instances"]) == windows
    groups = group_runs(find_runs([Path(cfg.paths.output_dir), ddp_dir]), by=["model"])
    assert sorted(g.data for g in groups) == data_sets
