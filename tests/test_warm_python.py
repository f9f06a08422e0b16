"""The tests' warm ``python`` (tests/warm_python.py) runs a program as a fresh Python does:
the same command line, directory, environment, streams, exit status and signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import PYTHON, subprocess_env
from tests.warm_python import FRESH_LOG_SUFFIX, SOCKET_VARIABLE


@pytest.fixture(autouse=True)
def _a_warm_server() -> None:
    if SOCKET_VARIABLE not in os.environ:
        pytest.skip("WARM_PYTHON=0: no warm server to test")


REPORT = """
import json, os, sys
print(json.dumps({
    "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "name": __name__,
    "env": os.environ.get("SOME_SETTING"), "stdin": sys.stdin.read(),
    "preloaded": "lightning" in sys.modules,
}))
"""


def run(python: list[str], *args: str, cwd: Path, **options) -> subprocess.CompletedProcess:
    env = {**subprocess_env(), "SOME_SETTING": "42", **options.pop("env", {})}
    return subprocess.run(
        [*python, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
        **options,
    )  # fmt: skip


def report(python: list[str], *args: str, cwd: Path, **options) -> dict:
    done = run(python, *args, cwd=cwd, **options)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_program_sees_what_it_would_in_a_fresh_python(tmp_path):
    (tmp_path / "script.py").write_text(REPORT)
    (tmp_path / "module.py").write_text(REPORT)
    for args in (["script.py", "a", "b=1"], ["-m", "module", "x"], ["-c", REPORT, "y"]):
        fresh = report([sys.executable], *args, cwd=tmp_path, input="in")
        warm = report(PYTHON, *args, cwd=tmp_path, input="in")
        assert (fresh.pop("preloaded"), warm.pop("preloaded")) == (False, True)
        assert warm == fresh, args
        assert fresh["env"] == "42" and fresh["stdin"] == "in"


@pytest.mark.parametrize(
    "code",
    [
        "print('out'); sys.exit(3)",
        "sys.exit('a message')",
        "raise ValueError('a bug')",
        "import atexit; atexit.register(print, 'at exit'); print('ends')",
        "os.kill(os.getpid(), signal.SIGTERM); time.sleep(10)",
        "os.kill(os.getpid(), signal.SIGINT); time.sleep(10)",
        "os.kill(os.getpid(), signal.SIGKILL)",
    ],
)
def test_an_ending_is_the_same_as_in_a_fresh_python(tmp_path, code):
    program = f"import os, signal, sys, time\n{code}\n"
    fresh = run([sys.executable], "-c", program, cwd=tmp_path)
    warm = run(PYTHON, "-c", program, cwd=tmp_path)
    assert warm.returncode == fresh.returncode
    assert warm.stdout == fresh.stdout
    # a traceback's first frames differ (the warm server's), its last lines do not
    assert warm.stderr.splitlines()[-1:] == fresh.stderr.splitlines()[-1:]
    assert ("Traceback" in warm.stderr) == ("Traceback" in fresh.stderr)


def _started(tmp_path: Path, program: str, **options) -> tuple[subprocess.Popen, int]:
    """A warm program that writes its pid to ``pid`` once it is ready; and that pid."""
    ready = tmp_path / "pid"
    proc = subprocess.Popen(
        [*PYTHON, "-c", program, str(ready)], cwd=tmp_path, env=subprocess_env(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **options,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not ready.exists() or not ready.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return proc, int(ready.read_text())


def test_a_variable_an_import_of_a_test_sets_keeps_programs_warm(tmp_path):
    """joblib, imported by a test after the server started, sets KMP_INIT_AT_FORK in the
    tests' process: the programs' environment then differed from the server's, and every
    later program of that worker ran fresh."""
    import joblib  # noqa: F401

    (tmp_path / "script.py").write_text(REPORT)
    assert report(PYTHON, "script.py", cwd=tmp_path, input="")["preloaded"]


def test_a_signal_sent_to_it_reaches_the_program(tmp_path):
    program = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(60)
"""
    proc, pid = _started(tmp_path, program)
    assert pid != proc.pid
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 7


def test_ctrl_c_ignored_at_the_start_stays_ignored(tmp_path):
    program = """
import os, signal, sys, time
print(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)
"""
    for handling in (signal.SIG_IGN, signal.SIG_DFL):
        options = {"preexec_fn": lambda h=handling: signal.signal(signal.SIGINT, h)}
        fresh = run([sys.executable], "-c", program, cwd=tmp_path, **options)
        warm = run(PYTHON, "-c", program, cwd=tmp_path, **options)
        assert warm.stdout == fresh.stdout == f"{handling == signal.SIG_IGN}\n"


def test_killing_it_kills_the_program(tmp_path):
    program = """
import os, sys, time
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(60)
"""
    proc, pid = _started(tmp_path, program)
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid):
        assert time.monotonic() < deadline, f"the program {pid} outlived its client"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "zombie"
    return next(line for line in status.splitlines() if line.startswith("State:")).lower()


@pytest.mark.parametrize(
    "args, env, why",
    [
        (["-X", "importtime", "-c", REPORT], {}, "an interpreter option"),
        (["-c", REPORT], {"PYTHONPATH": "/nowhere"}, "PYTHONPATH differ"),  # read at the start
        (["-c", REPORT], {"CLOUDLSTM_TRITON": "0"}, "CLOUDLSTM_TRITON differ"),  # at import
    ],
)
def test_what_a_preloaded_python_would_run_differently_starts_fresh(tmp_path, args, env, why):
    assert report(PYTHON, *args, cwd=tmp_path, env=env)["preloaded"] is False
    log = Path(os.environ[SOCKET_VARIABLE] + FRESH_LOG_SUFFIX).read_text().splitlines()
    assert why in log[-1]
