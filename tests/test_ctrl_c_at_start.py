"""Ctrl-C at any moment of a program's start (checking the command, importing torch,
composing the config, reading the data) stops it with one line and status 130: no
traceback, no abort of an extension module interrupted as it initialised, no press lost.
Training's own Ctrl-C is tests/test_preemption.py's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from contextlib import suppress

import lightning as L
import pytest
from lightning.pytorch.demos.boring_classes import BoringModel

from cloudlstm.cli.sigterm_at_start import BEFORE_TRAINING
from cloudlstm.engine import ctrl_c_noted
from cloudlstm.engine.signals import SignalsTogether
from cloudlstm.rundir.preemption import stopped_by_ctrl_c
from tests.conftest import ROOT, TINY, as_in_a_terminal, subprocess_env

# an import whose body is interrupted by a Ctrl-C, with a nested import also interrupted:
# the press must arrive once both bodies have run to their end, not in the middle of either
# (the import statement then fails with it, and the program stops)
INTERRUPTED_IMPORT = """
import os, signal, sys
sys.path.insert(0, sys.argv[1])
{hold}
try:
    import outer
except KeyboardInterrupt:
    done = os.environ.get("OUTER_DONE") == "1"
    print("interrupted;", "outer done:", done, "inner:", "inner" in sys.modules)
else:
    print("not interrupted")
"""
HOLD = "from cloudlstm.cli.ctrl_c import hold_ctrl_c_while_importing\nhold_ctrl_c_while_importing()"
MODULES = {
    "outer.py": "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(0.2)\n"
    "import inner\nos.environ['OUTER_DONE'] = '1'\n",
    "inner.py": "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\nvalue = 1\n",
}


def python_c(code: str, *args: str) -> subprocess.CompletedProcess:
    """``python -c <code> <args>`` in the repository, in a fresh Python that a Ctrl-C stops
    as in a terminal, its output captured."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=as_in_a_terminal,
    )


@pytest.mark.parametrize(
    ("hold", "printed"),
    [(True, "outer done: True inner: True"), (False, "outer done: False inner: False")],
)
def test_a_ctrl_c_during_an_import_arrives_when_the_import_is_done(tmp_path, hold, printed):
    for name, source in MODULES.items():
        (tmp_path / name).write_text(source)
    code = textwrap.dedent(INTERRUPTED_IMPORT).format(hold=HOLD if hold else "")
    proc = python_c(code, str(tmp_path))
    assert proc.stdout.strip() == f"interrupted; {printed}", proc.stderr[-2000:]


# a Ctrl-C pressed while a program loads the package (before its own guard is in place): a
# finder sends it as the package's first module is looked up, then lets the import go on
PRESSED_WHILE_THE_PACKAGE_LOADS = """
import os, signal, sys
import cloudlstm_programs

class PressOnce:
    def find_spec(self, name, path=None, target=None):
        if name == "cloudlstm" and not hasattr(self, "sent"):
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, PressOnce())
try:
    cloudlstm_programs.train()
except SystemExit as stop:
    print(stop.code, "cloudlstm.cli.ctrl_c" in sys.modules)
"""


def test_a_ctrl_c_while_the_package_loads_arrives_once_it_has_loaded():
    """A KeyboardInterrupt raised inside an import can be lost, leaving a module half made
    (omegaconf's, whose later use fails with a traceback): the program holds the press
    until the package has loaded, then stops on it with its line."""
    proc = python_c(textwrap.dedent(PRESSED_WHILE_THE_PACKAGE_LOADS))
    assert proc.stdout.split() == ["130", "True"], proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == ["-c: stopped by Ctrl-C."]


def holds_ctrl_c(pid: int) -> bool:
    """Whether process ``pid`` has SIGINT blocked now (its ``/proc/<pid>/status``)."""
    with open(f"/proc/{pid}/status") as status:
        (mask,) = [line.split()[1] for line in status if line.startswith("SigBlk:")]
    return bool(int(mask, 16) >> (signal.SIGINT - 1) & 1)


def wait_for_the_guard(proc: subprocess.Popen, timeout_s: float = 300) -> None:
    """Until the program holds Ctrl-C, as it does first while its package loads
    (src/cloudlstm_programs.py) and then in every import: its start has begun. Before it,
    Python starts (its site imports, tens of milliseconds, seconds on a loaded machine),
    where a Ctrl-C ends the process as Python does, whatever the program is; so a press
    timed from the process's start was, under load, a test of Python's."""
    if not hasattr(signal, "pthread_sigmask") or not os.path.exists(f"/proc/{proc.pid}"):
        proc.kill()
        pytest.skip("needs /proc to see when the program holds Ctrl-C")
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and not holds_ctrl_c(proc.pid):
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the program did not hold Ctrl-C within {timeout_s} s")
        time.sleep(0.002)


def test_ctrl_c_at_any_moment_of_the_start_is_one_line(tmp_path):
    """A fresh Python (not the tests' warm one, which has imported torch already), pressed
    at moments from its first holding of Ctrl-C (:func:`wait_for_the_guard`); on a loaded
    machine the later presses may find the run training, whose own stop then says so
    (tests/test_preemption.py)."""
    command = [
        sys.executable,
        "train.py",
        *TINY,
        "trainer.max_epochs=200",
        "logger=none",
        "report.figures=false",
    ]
    for after_s in (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0):
        proc = subprocess.Popen(
            [*command, f"hydra.run.dir={tmp_path / f'run_{after_s}'}"],
            cwd=ROOT,
            env=subprocess_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=as_in_a_terminal,
        )
        wait_for_the_guard(proc)
        time.sleep(after_s)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=300)
        lines = [line for line in out.splitlines() if line.strip()]
        # the bare line while the program loads (src/cloudlstm_programs.py), before train()
        # takes a stop and says what it saved
        bare = "train.py: stopped by Ctrl-C."
        said = lines[-1:] in ([bare], [f"train.py: stopped by Ctrl-C {BEFORE_TRAINING}"]) or any(
            "Run stopped by Ctrl-C before training" in line
            or "Run interrupted by Ctrl-C at step" in line
            for line in lines
        )
        assert proc.returncode == 130 and said, f"after {after_s} s: {out[-3000:]}"
        assert "Traceback" not in out and "FakeTensor" not in out, f"after {after_s} s: {out}"


# a Ctrl-C pressed as the import of the module named by the first argument begins
PRESS_AT = """
import os, runpy, signal, sys

AT = sys.argv.pop(1)

class PressAt:
    def find_spec(self, name, path, target=None):
        if name == AT:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, PressAt())
"""
# an installed program started as its console script does (argv: its name, then its
# arguments)
INSTALLED_PROGRAM = """
sys.argv = sys.argv[1:]
import cloudlstm_programs
getattr(cloudlstm_programs, sys.argv[0].removeprefix("cloudlstm-"))()
"""
# ``python -m cloudlstm.cli.compare <args>``: runpy does what -m does
PYTHON_M_COMPARE = """
sys.argv = ["-m", *sys.argv[1:]]
runpy.run_module("cloudlstm.cli.compare", run_name="__main__", alter_sys=True)
"""


# the repository's script, run as ``python <script> <args>`` is (argv: the script, then its
# arguments)
REPOSITORY_SCRIPT = """
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.parametrize("script", ["train.py", "eval.py", "predict.py"])
@pytest.mark.parametrize("module", ["pathlib", "cloudlstm", "cloudlstm.cli.scripts"])
def test_a_ctrl_c_as_a_program_loads_is_its_bare_line(tmp_path, script, module):
    """A Ctrl-C as the package or the program's own module loads, before the program's
    guard that says what was saved or written is in place: nothing has begun (no command
    checked, no folder made), and the line says only that it stopped; one line, 130, and
    nothing written. ``pathlib`` (with ``re``, 40 ms) was imported by the scripts before
    the package's guard: a press then was a traceback and death by SIGINT."""
    folder = tmp_path / "run"
    args = [f"hydra.run.dir={folder}"]
    if script != "train.py":
        args = [f"run={tmp_path / 'trained'}", *args]
    proc = python_c(PRESS_AT + REPOSITORY_SCRIPT, module, script, *args)
    assert (proc.returncode, proc.stderr) == (130, f"{script}: stopped by Ctrl-C.\n")
    assert not folder.exists()


@pytest.mark.parametrize("program", ["cloudlstm-models", "cloudlstm-compare"])
def test_an_installed_program_stops_on_ctrl_c_as_its_package_loads(program):
    """The console scripts imported the package themselves: a Ctrl-C in their first half
    second, while ``import cloudlstm`` ran, was that import's traceback."""
    proc = python_c(PRESS_AT + INSTALLED_PROGRAM, "cloudlstm", program, str(ROOT / "docs"))
    assert (proc.returncode, proc.stderr) == (130, f"{program}: stopped by Ctrl-C.\n")


@pytest.mark.parametrize("module", ["cloudlstm.cli.compare.command", "cloudlstm.compare.table"])
def test_python_m_compare_stops_on_ctrl_c_as_its_modules_load(module):
    """``python -m`` imports a package before its ``__main__``: the comparison's modules
    loaded there, before anything held a Ctrl-C, and a press was a traceback. Its line names
    the command as typed, not ``__main__.py``."""
    proc = python_c(PRESS_AT + PYTHON_M_COMPARE, module, str(ROOT / "docs" / "results"))
    assert (proc.returncode, proc.stderr) == (
        130,
        "python -m cloudlstm.cli.compare: stopped by Ctrl-C.\n",
    )


def boring_trainer(folder, max_steps: int) -> L.Trainer:
    """A Trainer with the programs' signal handling and nothing else."""
    return L.Trainer(
        max_steps=max_steps,
        callbacks=[SignalsTogether()],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        default_root_dir=folder,
    )


def test_a_ctrl_c_that_python_lost_stops_training_before_it_starts(tmp_path):
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a program
    try:
        # the press is noted, and its KeyboardInterrupt dropped, as CPython drops one
        # raised in a __eq__ that a C function calls for a dict look-up
        with pytest.raises(KeyboardInterrupt):
            ctrl_c_noted.note_and_interrupt(signal.SIGINT, None)
        trainer = boring_trainer(tmp_path, max_steps=5)
        with pytest.raises(SystemExit):  # Lightning's shutdown after a KeyboardInterrupt
            trainer.fit(BoringModel())
        assert trainer.global_step == 0
        assert stopped_by_ctrl_c(trainer)  # so the programs say it (rundir.preemption)
        # noted once: the next training runs
        trainer = boring_trainer(tmp_path, max_steps=2)
        trainer.fit(BoringModel())
        assert trainer.global_step == 2
    finally:  # Lightning's shutdown left SIGINT ignored in this process
        signal.signal(signal.SIGINT, before)


def test_an_error_that_follows_a_ctrl_c_is_the_stop_the_user_asked_for():
    """A Ctrl-C in the middle of composing the config can leave an OmegaConf node half made,
    whose clean-up fails in Hydra's composition: "'NoneType' object has no attribute
    '_invalidate_flags_cache'", status 1, where the user had pressed Ctrl-C."""
    from hydra.errors import ConfigCompositionException

    from cloudlstm.cli.ctrl_c import ctrl_c_is_a_stop
    from cloudlstm.cli.scripts import _errors_without_hydra_hint

    def composing_when_interrupted() -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            # raised in handling it, as OmegaConf's clean-up is: the interrupt is its context
            raise AttributeError("'NoneType' object has no attribute '_invalidate_flags_cache'")  # noqa: B904

    def wrapped() -> None:
        try:
            composing_when_interrupted()
        except AttributeError as err:
            raise ConfigCompositionException("Error merging override") from err

    for failing in (composing_when_interrupted, wrapped):
        stop = pytest.raises(SystemExit)
        with stop as stopped, ctrl_c_is_a_stop(), _errors_without_hydra_hint():
            failing()
        assert stopped.value.code == 130
    with pytest.raises(SystemExit) as stopped, ctrl_c_is_a_stop(), _errors_without_hydra_hint():
        with suppress(KeyboardInterrupt):  # a press whose exception Python lost
            ctrl_c_noted.note_and_interrupt(signal.SIGINT, None)
        raise ValueError("half made")
    assert stopped.value.code == 130
    ctrl_c_noted.forget()
    # without one, a bug stays a bug
    with pytest.raises(ValueError, match="no press"), _errors_without_hydra_hint():
        raise ValueError("no press")
