"""A DDP process whose process 0 ended (killed: SIGKILL, the out-of-memory killer) says so
in one line, whatever it was doing: starting, meeting the others to set up the process
group, or training (tests/test_faults_disk_full.py: process 0 stopped by a full disk)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest
from torch.distributed import TCPStore

from cloudlstm.engine.parent_watch import _alive, _process_group_ready
from cloudlstm.errors import UserError, process_lost
from tests.conftest import ROOT, TINY, subprocess_env

# serves a process group's store on the port given, until killed
STORE_SERVER = """
import sys, time
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", int(sys.argv[1]), is_master=True, wait_for_workers=False)
print("serving", flush=True)
time.sleep(600)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_watch_reads_a_torch_distributed_still_being_imported_as_not_set_up(monkeypatch):
    """The main thread of a starting DDP process imports torch while the watch reads it: a
    module listed in sys.modules before its functions exist ended the watch with a
    traceback (partially initialized module 'torch.distributed')."""
    monkeypatch.setitem(sys.modules, "torch.distributed", types.ModuleType("torch.distributed"))
    assert _process_group_ready() is False


@pytest.mark.parametrize(
    ("environment", "named"),
    [
        ({"LOCAL_RANK": "1"}, "DDP process 1 stopped"),
        # torchrun's second node of two processes each, which sets no NODE_RANK
        ({"LOCAL_RANK": "1", "RANK": "3", "WORLD_SIZE": "4"}, "DDP process 3 of 4 stopped"),
    ],
)
def test_a_store_whose_server_ended_is_a_lost_peer(monkeypatch, environment, named):
    """The processes meet at process 0's store to set up their process group: one that
    waits there when process 0 ends gets the store's error, which is the lost peer's line,
    not a traceback. It names the process by the rank Lightning gave it (``LOCAL_RANK``;
    Lightning's clean-up of the failed set-up has removed ``WORLD_SIZE``), or torchrun's
    (``RANK``: on another node than the first, the local rank is not the rank)."""
    for key in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK"):
        monkeypatch.delenv(key, raising=False)
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", STORE_SERVER, str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout.readline().strip() == "serving"
        client = TCPStore("127.0.0.1", port, is_master=False, timeout=_seconds(60))
        threading.Timer(1.0, server.kill).start()  # as the client waits for a key
        with pytest.raises(RuntimeError) as lost:
            client.wait(["the other process's address"])
    finally:
        server.kill()
        server.wait()
    error = process_lost(lost.value)
    assert isinstance(error, UserError), lost.value
    assert str(error).startswith(f"{named}: another process of the run ended")


def _seconds(n: int):
    from datetime import timedelta

    return timedelta(seconds=n)


def _trainings_started_by(pid: int) -> list[int]:
    """The pids of ``pid``'s children that run train.py (Linux): not the short-lived
    short-lived programs that libraries start as they load (``ldconfig``)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        children = [int(p) for p in path.read_text().split()]
    except OSError:
        return []
    return [child for child in children if b"train.py" in _command_line(child)]


def _command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.slow  # a run of two processes: ~1 min on 2 CPU cores
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc")
def test_a_ddp_process_whose_process_0_is_killed_as_it_starts_says_so(tmp_path):
    """Process 0 killed as soon as it has started process 1: process 1 waited to meet it
    for the process group's timeout (30 minutes), without a word; it now stops at once with
    the lost peer's line."""
    log = tmp_path / "train.log"
    command = [
        sys.executable, "train.py", *TINY, "trainer=ddp_cpu", "logger=none", "torch_threads=1",
        f"hydra.run.dir={tmp_path / 'run'}", f"paths.data_dir={tmp_path / 'data'}",
    ]  # fmt: skip
    with log.open("w") as out:
        first = subprocess.Popen(
            command, cwd=ROOT, env=subprocess_env(), stdout=out, stderr=subprocess.STDOUT
        )
    other = None
    try:
        deadline = time.monotonic() + 300
        while not (started := _trainings_started_by(first.pid)):
            assert first.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        other = started[0]
        first.send_signal(signal.SIGKILL)
        first.wait()
        deadline = time.monotonic() + 120
        while _alive(other) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _alive(other), "process 1 still waits: " + log.read_text()[-3000:]
    finally:
        first.kill()
        if other is not None and _alive(other):
            os.kill(other, signal.SIGKILL)
    out = log.read_text()
    assert "Traceback" not in out
    (line,) = [x for x in out.splitlines() if "another process of the run ended" in x]
    assert line.startswith("DDP process 1 of 2 stopped: another process of the run ended")


# a process that watches the process named to it as its starter, then lives 3 s
WATCHED = """
import time
from cloudlstm.engine.parent_watch import watch_the_starting_process
watch_the_starting_process()
time.sleep(3)
print("lived", flush=True)
"""


def _watched(named: int) -> subprocess.CompletedProcess:
    """:data:`WATCHED` run as a process of local rank 1 to which ``named`` is its starter."""
    env = {**subprocess_env(), "LOCAL_RANK": "1", "CLOUDLSTM_STARTED_BY_PID": str(named)}
    env.pop("WORLD_SIZE", None)
    return subprocess.run(
        [sys.executable, "-c", WATCHED], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc")
def test_a_starter_named_in_a_leaked_environment_is_not_watched():
    """A process of local rank 1 that another program started (torchrun, from a notebook
    that trained under DDP and so names itself in its environment) lives on while the
    process named there runs: it is not this process's starter, whose end the watch is for.
    """
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        done = _watched(other.pid)
    finally:
        other.kill()
        other.wait()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "lived"


def test_a_starter_that_has_ended_stops_the_process_it_started():
    """A process whose starter ended before it began to watch stops with the lost peer's
    line."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    done = _watched(ended.pid)
    assert done.returncode == 1
    assert "another process of the run ended" in done.stderr
    assert "lived" not in done.stdout


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["trainer=cpu"], False),
        (["trainer=cpu", "trainer.devices=2"], True),  # strategy auto: Lightning's DDP
        (["trainer=ddp_cpu"], True),
    ],
)
def test_a_trainer_that_may_start_processes_names_its_process(
    tmp_path, monkeypatch, overrides, named
):
    """A Trainer of two devices names the process that builds it to the processes it
    starts, under Lightning's own choice of DDP (``trainer.devices=2``, strategy ``auto``)
    too, which named none, so that its processes waited for a killed process 0 for the
    group's timeout; one of one device names nothing, into the environment of the programs
    its Python starts later."""
    from cloudlstm.assembly.build import build_trainer
    from cloudlstm.engine.parent_watch import STARTED_BY
    from tests.conftest import compose_train

    monkeypatch.delenv(STARTED_BY, raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    cfg = compose_train(tmp_path, [*TINY, *overrides, "logger=none"])
    build_trainer(cfg, [])
    assert (os.environ.get(STARTED_BY) == str(os.getpid())) is named
