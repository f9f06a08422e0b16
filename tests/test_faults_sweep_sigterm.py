"""SIGTERM sent to the parent of a joblib sweep alone (``kill <pid>``): it passes the signal on
to its running jobs, which save and stop as a run does, keeps the jobs not started from
training, prints a line per unfinished job and how to continue them, and exits with 143
(``src/cloudlstm/rundir/sweep_sigterm.py``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cloudlstm.rundir.checkpoints import check_checkpoint
from tests.conftest import ROOT, as_in_a_terminal, subprocess_env
from tests.test_preemption import GATE, JOB


def lock_pids(sweep: Path) -> list[int]:
    """The pids the jobs' run.lock files name (the jobs' processes)."""
    pids = []
    for lock in sweep.glob("*/run.lock"):
        with contextlib.suppress(ValueError):
            pids.append(int(json.loads(lock.read_text())["pid"]))
    return pids


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return (
        Path(f"/proc/{pid}").exists()
        and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
    )


def wait_until(
    condition, proc: subprocess.Popen, log: Path, timeout_s: float = 300, poll_s: float = 0.2
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the sweep did not get there: {log.read_text()[-3000:]}")
        time.sleep(poll_s)


def kill_a_worker_at_the_gates(command: list[str], sweep: Path, log: Path) -> str:
    """Run the sweep ``command`` (a process group of its own, output to ``log``) until jobs
    0 and 1 wait at their gates (:data:`~tests.test_preemption.GATE`), SIGKILL one job's
    worker, as the out-of-memory killer does, and return the output once the sweep has
    exited with 1."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            command, cwd=ROOT, env=subprocess_env(), stdout=out, stderr=out,
            start_new_session=True,
        )  # fmt: skip
    try:
        waiting = [sweep / str(n) / "go.waiting" for n in (0, 1)]
        wait_until(lambda: all(w.exists() for w in waiting), proc, log)
        os.kill(lock_pids(sweep)[0], signal.SIGKILL)
        assert proc.wait(timeout=300) == 1, log.read_text()[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    out = log.read_text()
    assert "Traceback" not in out, out[-3000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("to_group", "signum", "status", "by"),
    [
        (False, signal.SIGTERM, 143, "SIGTERM"),
        (True, signal.SIGTERM, 143, "SIGTERM"),
        (True, signal.SIGINT, 130, "Ctrl-C"),
    ],
    ids=["SIGTERM to the parent", "SIGTERM to the process group", "Ctrl-C to the process group"],
)
def test_sigterm_to_a_joblib_sweeps_parent_stops_its_jobs_and_names_them(
    tmp_path, to_group, signum, status, by
):
    """SIGTERM to the parent alone, or Ctrl-C in the terminal (every process of the group:
    the parent and the jobs' workers), stops the jobs at their step, saved."""
    sweep, log = tmp_path / "sweep", tmp_path / "sweep.log"
    args = [
        "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}",
        f"paths.data_dir={tmp_path / 'data'}",
        *[a for a in JOB if not a.startswith("model.k=")], "model.k=2,3,4", *GATE,
    ]  # fmt: skip
    cmd = [sys.executable, "train.py", *args]
    jobs: list[int] = []
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=subprocess_env(), stdout=out, stderr=out,
            start_new_session=True, preexec_fn=as_in_a_terminal,
        )  # fmt: skip
    try:
        # jobs 0 and 1 run (held before step 5), job 2 waits for a free worker
        waiting = [sweep / str(n) / "go.waiting" for n in (0, 1)]
        wait_until(lambda: all(w.exists() for w in waiting), proc, log)
        jobs = lock_pids(sweep)
        assert len(jobs) == 2 and proc.pid not in jobs
        if to_group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)  # the parent only
        assert proc.wait(timeout=300) == status, log.read_text()[-3000:]
        out = log.read_text()
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in jobs) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(alive(pid) for pid in jobs), "jobs left running without their sweep"
    finally:
        for pid in [proc.pid, *jobs]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    assert "Traceback" not in out
    for n in (0, 1):  # saved at the step the signal came in, as a run on SIGTERM
        assert check_checkpoint(sweep / str(n) / "checkpoints" / "last.ckpt")["global_step"] == 5
        assert not (sweep / str(n) / "metrics.json").exists()
    assert not (sweep / "2" / "checkpoints").exists(), "job 2 trained after the signal"
    # nor did it read its data or build its model first: it stopped as it began
    assert not (sweep / "2" / "data_summary.json").exists()
    report = out[out.index("3 of 3 jobs of the sweep did not finish") :]
    lines = report.splitlines()
    assert lines[0] == f"3 of 3 jobs of the sweep did not finish (the sweep got {by}):"
    for n, k in ((0, 2), (1, 3)):
        assert lines[1 + n].startswith(
            f"  job {n} (model.k={k}): Job {n} of the sweep, interrupted by {by} at step 5: "
            f"saved {sweep / str(n) / 'checkpoints' / 'last.ckpt'}"
        )
    assert lines[3].startswith(f"  job 2 (model.k=4): Job 2 of the sweep, stopped by {by} before")
    assert lines[4].startswith(f"Start the same command with hydra.sweep.dir={sweep} to ")

    # what the report says: the same command continues the two and runs the third
    for n in (0, 1, 2):
        (sweep / str(n) / "go").touch()
    done = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    for n in (0, 1, 2):
        metrics = json.loads((sweep / str(n) / "metrics.json").read_text())
        assert metrics["steps"] == 6
        resumed = None if n == 2 else "checkpoints/last.ckpt"
        assert metrics["resumed_from"] == resumed


def test_what_a_joblib_worker_reads_before_its_job_imports_no_torch():
    """A worker unpickles train.py's Hydra callbacks and its task, then its job checks for
    a stop (rundir/stops.py): none of that may import torch or Lightning, whose import takes
    tens of seconds on a loaded machine, longer than a batch system waits after SIGTERM."""
    import yaml

    callbacks = {}
    for config in ("train.yaml", "hydra/default.yaml"):  # hydra: at the top of the latter
        tree = yaml.safe_load((ROOT / "conf" / config).read_text())
        callbacks |= (tree.get("hydra", tree)).get("callbacks") or {}
    modules = {c["_target_"].rsplit(".", 1)[0] for c in callbacks.values()}
    assert len(modules) >= 4, callbacks
    modules |= {"cloudlstm.cli.scripts", "cloudlstm.rundir.stops"}
    code = f"import sys\nfor m in {sorted(modules)}: __import__(m)\n" + (
        "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=subprocess_env(), capture_output=True,
        text=True, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "[]", modules


def workers(parent: int) -> list[int]:
    """The pids of loky's worker processes among ``parent``'s children (not its resource
    tracker)."""
    pids = []
    for child in Path(f"/proc/{parent}/task").glob("*/children"):
        for pid in map(int, child.read_text().split()):
            with contextlib.suppress(OSError):
                cmdline = Path(f"/proc/{pid}/cmdline").read_text()
                if "loky" in cmdline and "resource_tracker" not in cmdline:
                    pids.append(pid)
    return pids


def catches(pid: int, signum: int, mask: str = "SigCgt") -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (its ``SigCgt`` mask), or with
    ``mask="SigBlk"``, blocks it."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{mask}:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def worker_start(gate: Path, noted_file: Path) -> None:
    """A loky process's task standing in for a worker's first moments: it waits at ``gate``
    (``<gate>.waiting`` says it is there), then runs the workers' initializer and writes the
    signals noted to ``noted_file``."""
    from cloudlstm.rundir.worker_signals import note_signals, noted

    gate.with_suffix(".waiting").touch()
    while not gate.exists():
        time.sleep(0.01)
    note_signals()
    noted_file.write_text(json.dumps(noted))


@pytest.mark.parametrize("held", [True, False])
def test_a_worker_signalled_before_its_initializer_holds_the_signal_until_then(tmp_path, held):
    """A process that loky starts in a joblib sweep (held) is signalled before it could
    handle the signal: it lives, and its initializer notes the signal. Started outside a
    sweep's block, the same process dies of it, as workers did."""
    from joblib.externals.loky.backend.process import LokyProcess

    from cloudlstm.rundir.sweep_sigterm import workers_note_signals

    gate, noted_file = tmp_path / "go", tmp_path / "noted.json"
    worker = LokyProcess(target=worker_start, args=(gate, noted_file))
    with workers_note_signals() if held else contextlib.nullcontext():
        worker.start()
    deadline = time.monotonic() + 120
    while not gate.with_suffix(".waiting").exists():
        assert worker.is_alive() and time.monotonic() < deadline, "the process did not start"
        time.sleep(0.05)
    assert catches(worker.pid, signal.SIGTERM, "SigBlk") == held
    assert not catches(worker.pid, signal.SIGTERM)  # no handler yet
    os.kill(worker.pid, signal.SIGTERM)
    gate.touch()
    worker.join(timeout=120)
    if held:
        assert worker.exitcode == 0
        assert json.loads(noted_file.read_text()) == [signal.SIGTERM]
    else:
        assert worker.exitcode == -signal.SIGTERM
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == set(), "this process's mask is back"


def sweep_command(sweep: Path, tmp_path: Path, *extra: str) -> list[str]:
    """A joblib sweep of 3 tiny jobs (model.k=2,3,4) on 2 workers."""
    return [
        sys.executable, "train.py", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
        f"hydra.sweep.dir={sweep}", f"paths.data_dir={tmp_path / 'data'}",
        *[a for a in JOB if not a.startswith("model.k=")], "model.k=2,3,4", *extra,
    ]  # fmt: skip


@pytest.mark.slow
def test_a_joblib_worker_signalled_as_it_starts_stops_its_job_and_not_the_pool(tmp_path):
    """SIGTERM to the workers alone as soon as they exist, before a job's own handler does:
    each worker holds it (blocked) until its initializer notes it, its job stops before
    training with its line, and the third job trains in a freed worker. Without both the
    workers died of it, and joblib failed the sweep with a traceback, or a broken pool."""
    sweep, log = tmp_path / "sweep", tmp_path / "sweep.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            sweep_command(sweep, tmp_path), cwd=ROOT, env=subprocess_env(), stdout=out,
            stderr=out, start_new_session=True,
        )  # fmt: skip
    try:
        wait_until(lambda: len(workers(proc.pid)) == 2, proc, log, poll_s=0.005)
        for pid in workers(proc.pid):
            blocked_or_noted = [catches(pid, signal.SIGTERM, m) for m in ("SigBlk", "SigCgt")]
            os.kill(pid, signal.SIGTERM)
            assert any(blocked_or_noted), "a worker could die of the signal"
        # before the jobs start: Hydra writes a job's .hydra/ before its on_job_start
        assert not list(sweep.glob("*/.hydra")), "the workers noted signals only once in a job"
        proc.wait(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    out = log.read_text()
    assert "Traceback" not in out and "BrokenProcessPool" not in out, out[-3000:]
    assert proc.returncode == 1
    report = out[out.index("2 of 3 jobs of the sweep failed") :].splitlines()
    for line, n in zip(report[1:3], (0, 1), strict=True):
        assert f"Job {n} of the sweep, stopped by SIGTERM before training" in line
    assert json.loads((sweep / "2" / "metrics.json").read_text())["steps"] == 6


@pytest.mark.slow
def test_a_joblib_worker_killed_mid_sweep_is_reported_in_lines_not_a_traceback(tmp_path):
    """A worker killed with SIGKILL (as the out-of-memory killer does) breaks joblib's pool,
    which ends every job at once: the sweep says so and names each unfinished job with its
    newest checkpoint, in lines and without a traceback, and exits with 1."""
    sweep = tmp_path / "sweep"
    out = kill_a_worker_at_the_gates(
        sweep_command(sweep, tmp_path, *GATE), sweep, tmp_path / "sweep.log"
    )
    lines = out[out.index("3 of 3 jobs of the sweep did not finish") :].splitlines()
    assert lines[0] == (
        "3 of 3 jobs of the sweep did not finish (a worker process died (SIGKILL(-9)): killed, "
        "by the machine's out-of-memory killer for one, and joblib ended the other jobs at "
        "once):"
    )
    assert lines[3] == "  job 2 (model.k=4): ended by joblib, no checkpoint"
    assert lines[4].startswith(f"Start the same command with hydra.sweep.dir={sweep} to ")
