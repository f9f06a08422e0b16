"""A run directory has one owner: a second training there is refused; a dead one's lock is
taken over (``src/cloudlstm/rundir/lock.py``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cloudlstm.errors import UserError
from cloudlstm.rundir import lock as run_lock
from cloudlstm.rundir.layout import LOCK_FILE as LOCK_NAME
from cloudlstm.rundir.lock import RunLock, run_dir_lock, training_holder
from tests.conftest import (
    ROOT,
    TINY,
    held_by_another_process,
    one_line,
    run_python,
    subprocess_env,
)


def leave_lock(run_dir: Path, **holder: object) -> Path:
    """A lock file as a run that is no longer here left it (no flock held)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    path.write_text(json.dumps({"started": "2026-01-01T00:00:00+00:00", **holder}))
    return path


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_second_lock_is_refused_in_one_line_naming_the_holder(tmp_path):
    with run_dir_lock(tmp_path):
        holder = json.loads((tmp_path / LOCK_NAME).read_text())
        assert holder["host"] == socket.gethostname() and holder["pid"] == os.getpid()
        with pytest.raises(UserError) as err:
            RunLock(tmp_path).acquire()
    message = str(err.value)
    assert "\n" not in message
    assert f"host {socket.gethostname()}, pid {os.getpid()}, started {holder['started']}" in message
    assert str(tmp_path) in message
    with run_dir_lock(tmp_path):  # released: free again
        pass
    assert (tmp_path / LOCK_NAME).read_text() == ""


def test_a_released_lock_is_free_while_a_process_forked_during_the_run_lives(tmp_path):
    """A child forked while the lock was held shares its open file: closing the file left
    the flock with the child, and the next run of the directory was refused."""
    lock = RunLock(tmp_path)
    lock.acquire()
    child = os.fork()
    if child == 0:  # a worker that outlives the run's end a while
        time.sleep(30)
        os._exit(0)
    try:
        lock.release()
        with run_dir_lock(tmp_path):
            assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def test_a_lock_left_on_this_host_is_taken_over(tmp_path, caplog):
    leave_lock(tmp_path, host=socket.gethostname(), pid=dead_pid())
    with run_dir_lock(tmp_path):
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert "Taking over the lock" in caplog.text and "its process is gone" in caplog.text


def test_a_lock_whose_pid_another_process_took_is_no_training(tmp_path):
    """The training killed, and its pid given to another process since (a shell, an
    editor): the run read as still training, by the pid alone, to every evaluation."""
    with held_by_another_process(tmp_path) as trainer:
        assert training_holder(tmp_path).startswith(
            f"host {socket.gethostname()}, pid {trainer.pid},"
        )
        left = json.loads((tmp_path / LOCK_NAME).read_text())
    # the kernel gives a pid again only once its process has ended: the dead training's
    # description is moved onto a live process's pid, as that reuse would leave it
    with subprocess.Popen(["sleep", "60"]) as other:
        try:
            (tmp_path / LOCK_NAME).write_text(json.dumps({**left, "pid": other.pid}))
            assert training_holder(tmp_path) is None
            with run_dir_lock(tmp_path):  # and a training takes the directory over
                pass
        finally:
            other.kill()


def test_another_hosts_lock_is_trusted_until_stale_or_taken_over(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    path = leave_lock(tmp_path, host="node-17", pid=4242)
    with pytest.raises(UserError, match="node-17, pid 4242.*run_lock=takeover"):
        RunLock(tmp_path).acquire()
    with run_dir_lock(tmp_path, "takeover"):
        pass

    leave_lock(tmp_path, host="node-17", pid=4242)
    old = time.time() - run_lock.FOREIGN_STALE_S - 60  # no heartbeat for longer than that
    os.utime(path, (old, old))
    with run_dir_lock(tmp_path):
        pass


def test_a_requeued_slurm_job_takes_over_its_own_lock_from_another_node(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "77")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    leave_lock(tmp_path, host="node-17", pid=4242, slurm_job="77_3")
    with run_dir_lock(tmp_path):
        assert json.loads((tmp_path / LOCK_NAME).read_text())["slurm_job"] == "77_3"
    leave_lock(tmp_path, host="node-17", pid=4242, slurm_job="77_4")  # another task
    with pytest.raises(UserError, match="SLURM job 77_4"):
        RunLock(tmp_path).acquire()


def test_only_rank_zero_holds_the_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    with run_dir_lock(tmp_path / "run"):
        assert not (tmp_path / "run" / LOCK_NAME).exists()
    monkeypatch.setenv("LOCAL_RANK", "0")
    with run_dir_lock(tmp_path / "run"):
        assert (tmp_path / "run" / LOCK_NAME).exists()


def test_the_heartbeat_keeps_the_lock_fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(run_lock, "HEARTBEAT_S", 0.05)
    with run_dir_lock(tmp_path):
        path = tmp_path / LOCK_NAME
        os.utime(path, (1_000, 1_000))
        time.sleep(0.5)
        assert path.stat().st_mtime > time.time() - 60


def test_the_run_directories_held_under_a_sweep_directory(tmp_path):
    """What a sweep compares its jobs' directories with: live holders only, none taken."""
    stale, live = tmp_path / "stgcn" / "seed_0", tmp_path / "cloudlstm_k3" / "seed_0"
    leave_lock(stale, host=socket.gethostname(), pid=dead_pid())
    with run_dir_lock(live):
        held = run_lock.held_run_dirs(tmp_path, "auto")
        assert list(held) == [str(live)]
        assert held[str(live)].startswith(f"Run directory {live} is in use by host ")
    assert run_lock.held_run_dirs(tmp_path, "auto") == {}
    assert json.loads((stale / LOCK_NAME).read_text())["host"] == socket.gethostname()
    assert run_lock.held_run_dirs(tmp_path / "none", "auto") == {}


def test_a_wrong_mode_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="run_lock=sometimes"):
        RunLock(tmp_path).acquire("sometimes")


def test_a_run_directory_that_cannot_be_made_is_one_line_naming_it(tmp_path):
    in_the_way = tmp_path / "notes.txt"
    in_the_way.write_text("a file where the run directory goes")
    for run_dir in (in_the_way, in_the_way / "run"):
        with pytest.raises(UserError) as err:
            RunLock(run_dir).acquire()
        assert str(err.value) == (
            f"Cannot make the directory {run_dir}: {in_the_way} is a file, not a folder. "
            "Name a folder you can write with hydra.run.dir=<dir>."
        )
    assert in_the_way.read_text() == "a file where the run directory goes"
    with pytest.raises(
        UserError,
        match=r"^Cannot make the directory /proc/no_such_run: No such "
        r"file or directory \(/proc/no_such_run\)\. Name a folder",
    ):
        RunLock("/proc/no_such_run").acquire()  # procfs makes no folder
    # a folder that is there, where no file can be made (as on a read-only file system): it
    # said it could not make the folder
    with pytest.raises(UserError) as err:
        RunLock("/proc/self").acquire()
    assert str(err.value) == (
        "Cannot write in the directory /proc/self: No such file or directory "
        "(/proc/self/run.lock). Name a folder you can write with hydra.run.dir=<dir>."
    )


@pytest.mark.parametrize("sweep", [False, True], ids=["run", "sweep"])
def test_train_py_into_a_file_is_one_line(tmp_path, sweep):
    in_the_way = tmp_path / "results"
    in_the_way.write_text("")
    key = "hydra.sweep.dir" if sweep else "hydra.run.dir"
    proc = run_python(
        "train.py", *(["-m", "seed=0,1"] if sweep else []), *TINY, f"{key}={in_the_way}"
    )
    assert one_line(proc) == (
        f"Cannot make the directory {in_the_way}: {in_the_way} is a file, not a folder. "
        f"Name a folder you can write with {key}=<dir>."
    )


def train_py(run_dir: Path, data_dir: Path, *extra: str) -> subprocess.Popen:
    cmd = [
        sys.executable, "train.py", *TINY, "logger=csv",
        f"hydra.run.dir={run_dir}", f"paths.data_dir={data_dir}", *extra,
    ]  # fmt: skip
    return subprocess.Popen(
        cmd, cwd=ROOT, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def test_two_trainings_started_together_in_one_directory(tmp_path):
    """One trains; the other is refused with one line naming it, and exits non-zero."""
    run_dir, go = tmp_path / "run", tmp_path / "go"
    gate = [  # the owner waits before its first epoch until the other has been refused
        "+callbacks.gate._target_=tests.kill_callback.WaitAt",
        "+callbacks.gate.epoch=0",
        f"+callbacks.gate.until={go}",
    ]
    procs = [train_py(run_dir, tmp_path / "data", *gate) for _ in range(2)]
    deadline = time.monotonic() + 300
    while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.2)
    refused = next(p for p in procs if p.poll() is not None)
    owner = next(p for p in procs if p is not refused)
    go.touch()
    _, err = refused.communicate(timeout=60)
    out, owner_err = owner.communicate(timeout=300)
    assert owner.returncode == 0, owner_err[-3000:]
    assert (run_dir / "metrics.json").is_file()
    assert refused.returncode != 0
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "is in use by" in line]
    assert len(lines) == 1, err
    assert f"host {socket.gethostname()}, pid {owner.pid}, started " in lines[0]


def test_the_lock_of_a_killed_training_is_taken_over(tmp_path):
    run_dir = tmp_path / "run"
    killed = train_py(
        run_dir,
        tmp_path / "data",
        "+callbacks.kill._target_=tests.kill_callback.KillAtEpochStart",
        "+callbacks.kill.epoch=1",
    )
    killed.communicate(timeout=300)
    assert killed.returncode == -signal.SIGKILL
    assert json.loads((run_dir / LOCK_NAME).read_text())["pid"] == killed.pid

    again = train_py(run_dir, tmp_path / "data", "allow_changes=[callbacks.kill]")
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-3000:]
    assert "Taking over the lock" in out + err
    assert (run_dir / LOCK_NAME).read_text() == ""  # released at the end


# run.lock files whose description names no process: what a node that crashed as the file
# was written leaves (NUL bytes), a copy cut short, other bytes, JSON of no description
DAMAGED_LOCKS = {
    "nul-bytes": (b"\0" * 64, "NUL bytes"),
    "cut-short": (b'{"host": "node-3", "pi', "not JSON"),
    "not-text": (b"\xff\xfe\x80lock", "not text"),
    "a-list": (b"[3, 4]", "a JSON list, not a description"),
}


@pytest.mark.parametrize("damage", DAMAGED_LOCKS)
def test_a_damaged_lock_that_no_process_holds_is_taken_over(tmp_path, caplog, damage):
    """It read as a run starting ("host ?, pid ?") to eval.py, predict.py and a sweep, a
    training was refused, naming that, or (not text) each of them was a traceback."""
    data, problem = DAMAGED_LOCKS[damage]
    path = tmp_path / LOCK_NAME
    path.write_bytes(data)
    assert training_holder(tmp_path) is None
    assert run_lock.held_run_dirs(tmp_path, "auto") == {}  # a sweep started again
    with run_dir_lock(tmp_path):
        assert json.loads(path.read_text())["pid"] == os.getpid()
    said = f"Taking over {path}: its description is damaged ({problem}) and no process held it."
    assert said in caplog.text


def test_a_damaged_lock_that_a_process_holds_names_that_process(tmp_path):
    """A training's description garbled as it runs: its flock, in the kernel's list of
    locks, names its process, where the description read as "host ?, pid ?"."""
    with held_by_another_process(tmp_path) as trainer:
        (tmp_path / LOCK_NAME).write_bytes(b"\0" * 64)
        named = f"host {socket.gethostname()}, pid {trainer.pid}, description unreadable"
        assert training_holder(tmp_path) == f"{named} (NUL bytes)"
        with pytest.raises(UserError, match=re.escape(f"is in use by {named} (NUL bytes):")):
            RunLock(tmp_path).acquire()


def test_train_py_takes_over_a_damaged_lock(tmp_path):
    """A training that a crashed node left with its run.lock's bytes NUL: train.py
    resume=auto was refused, told to wait for "host ?, pid ?" or take it over by hand."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / LOCK_NAME).write_bytes(b"\0" * 64)
    out, err = train_py(run_dir, tmp_path / "data").communicate(timeout=300)
    assert "is in use by" not in err and (run_dir / "metrics.json").is_file(), err[-3000:]
    assert f"Taking over {run_dir / LOCK_NAME}: its description is damaged (NUL bytes)" in out + err
    assert (run_dir / LOCK_NAME).read_text() == ""  # released at the end


def test_a_copy_of_a_directory_in_use_is_no_training(tmp_path, caplog):
    """cp -r of a run directory while it trains: the copy's run.lock names the training's
    live process, which holds the original's alone; the copy read as training too."""
    run, copy = tmp_path / "run", tmp_path / "copy"
    with held_by_another_process(run) as trainer:
        shutil.copytree(run, copy)
        assert training_holder(run).startswith(f"host {socket.gethostname()}, pid {trainer.pid}")
        assert training_holder(copy) is None
        with run_dir_lock(copy):
            pass
    assert "holds no flock on it (the directory was copied while" in caplog.text


def test_a_folder_named_like_the_lock_file_is_named_not_the_directory(tmp_path):
    """A folder in run.lock's place made the line say the run directory cannot be written
    in, which it can: the folder in the way is named."""
    (tmp_path / LOCK_NAME).mkdir()
    with pytest.raises(UserError) as err:
        RunLock(tmp_path).acquire()
    assert str(err.value) == (
        f"{tmp_path / LOCK_NAME} is a folder, where the run keeps its lock file: remove it "
        "(nothing of the run's is kept there), or name another folder with hydra.run.dir=<dir>."
    )
