"""A training refused by the run lock leaves the holder's files as they were, ``.hydra/``
and its log included (Hydra writes those before the job starts: the lock is taken before,
``src/cloudlstm/rundir/lock.py``); so does a sweep started again while its jobs run."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import ROOT, TINY, subprocess_env
from tests.test_input_checks import the_line

JOB = [*TINY, "logger=csv", "torch_threads=1"]


def gate(until: str) -> list[str]:
    """Hold training at the start of epoch 0 until file ``until`` exists."""
    return [
        "+callbacks.gate._target_=tests.kill_callback.WaitAt",
        "+callbacks.gate.epoch=0",
        f"+callbacks.gate.until={until}",
    ]


@contextmanager
def holding(args: list[str], waiting: Path, log: Path) -> Iterator[subprocess.Popen]:
    """``train.py args`` started and held at its gate (``waiting`` exists) for the block;
    killed if it is still there after it."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "train.py", *args],
            cwd=ROOT, env=subprocess_env(), stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not waiting.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{waiting} did not appear: {log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def train_py(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "train.py", *args],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative name: bytes)."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_a_refused_run_leaves_the_holders_hydra_files_and_log(tmp_path):
    run_dir, go = tmp_path / "run", tmp_path / "go"
    common = [*JOB, f"hydra.run.dir={run_dir}", f"paths.data_dir={tmp_path / 'data'}"]
    with holding([*common, *gate(str(go))], tmp_path / "go.waiting", tmp_path / "h.log") as holder:
        hydra_files = files(run_dir / ".hydra")
        assert set(hydra_files) == {"config.yaml", "hydra.yaml", "overrides.yaml"}
        log = (run_dir / "train.log").read_bytes()

        # another command in the same directory: other settings, other overrides
        second = train_py(*common, "seed=7", "trainer.max_epochs=3")
        assert second.returncode != 0
        line = the_line(second, "is in use by")
        assert line.startswith(f"Run directory {run_dir} is in use by host ")
        assert f"pid {holder.pid}," in line and line.endswith("another hydra.run.dir.")
        assert files(run_dir / ".hydra") == hydra_files, "the holder's .hydra/ was rewritten"
        assert (run_dir / "train.log").read_bytes() == log, "the refused run wrote to its log"

        go.touch()
        assert holder.wait(timeout=300) == 0, (tmp_path / "h.log").read_text()[-3000:]
    assert files(run_dir / ".hydra") == hydra_files
    assert (run_dir / "run.lock").read_text() == ""  # released at the end


@pytest.mark.slow
def test_a_sweep_started_again_while_its_job_runs_is_refused_before_writing(tmp_path):
    sweep = tmp_path / "sweep"
    args = [
        "-m", *[a for a in JOB if not a.startswith("model.k=")], "model.k=2,3",
        f"hydra.sweep.dir={sweep}", f"paths.data_dir={tmp_path / 'data'}",
        *gate("${paths.output_dir}/go"),
    ]  # fmt: skip
    with holding(args, sweep / "0" / "go.waiting", tmp_path / "sweep.log") as first:
        before = files(sweep)
        again = train_py(*args)
        assert again.returncode != 0
        line = the_line(again, "is in use by")
        assert line.startswith(f"Run directory {sweep / '0'} is in use by host ")
        assert f"pid {first.pid}," in line and line.endswith("another hydra.sweep.dir.")
        assert files(sweep) == before, "the refused sweep wrote into the sweep directory"


@pytest.mark.slow
def test_sweeps_over_other_jobs_of_one_sweep_directory_run_side_by_side(tmp_path):
    """A fixed sweep directory with a job per setting (as experiment=beijing_held_out's
    ``<model>/seed_<seed>``): a sweep over other settings runs while a job of the first
    runs; one that would run the running job's setting again is refused, writing nothing."""
    sweep = tmp_path / "sweep"
    common = [
        "-m", *[a for a in JOB if not a.startswith("model.k=")], f"hydra.sweep.dir={sweep}",
        "hydra.sweep.subdir=k${model.k}", f"paths.data_dir={tmp_path / 'data'}",
    ]  # fmt: skip
    held = [*common, "model.k=2", *gate("${paths.output_dir}/go")]
    with holding(held, sweep / "k2" / "go.waiting", tmp_path / "first.log") as first:
        other = train_py(*common, "model.k=3")
        assert other.returncode == 0, other.stderr[-3000:]
        assert (sweep / "k3" / "metrics.json").is_file()

        overlapping = train_py(*common, "model.k=4,2")
        assert overlapping.returncode != 0
        line = the_line(overlapping, "is in use by")
        assert line.startswith(f"Run directory {sweep / 'k2'} is in use by host ")
        assert f"pid {first.pid}," in line
        assert not (sweep / "k4").exists(), "the refused sweep ran a job"

        (sweep / "k2" / "go").touch()
        assert first.wait(timeout=300) == 0, (tmp_path / "first.log").read_text()[-3000:]
