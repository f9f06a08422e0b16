"""SIGTERM before training has begun (``timeout``, a batch system's preemption, ``kill``
while torch is imported or the data read) stops ``train.py`` with one line and status 143,
as Ctrl-C does (tests/test_ctrl_c_at_start.py); SIGTERM during training saves ``last.ckpt``
at its step (tests/test_preemption.py)."""

from __future__ import annotations

import shlex
import signal

import pytest

from cloudlstm.rundir.stops import EXIT_CODE
from tests.conftest import TINY, run_python
from tests.test_ctrl_c_at_start import INSTALLED_PROGRAM, python_c
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


def test_sigterm_while_the_run_is_built_names_the_command_that_starts_it(tmp_path):
    """Signalled with the data read and the Trainer being built: the run's line, with the
    command that starts it; that command trains it."""
    run_dir, log = tmp_path / "run", tmp_path / "train.log"
    gate = [
        "+callbacks.gate._target_=tests.kill_callback.WaitWhenBuilt",
        "+callbacks.gate.until=${paths.output_dir}/go",
    ]
    args = [*TINY, "logger=none", *gate, f"hydra.run.dir={run_dir}"]
    proc = start([*args, f"paths.data_dir={tmp_path / 'data'}"], log)
    wait_for(run_dir / "go.waiting", proc, log)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == EXIT_CODE, log.read_text()[-3000:]

    out = log.read_text()
    assert "Traceback" not in out
    (line,) = [x for x in out.splitlines() if "stopped by SIGTERM" in x]
    assert f"Run stopped by SIGTERM before training (no checkpoint yet). Run dir {run_dir}" in line
    assert line.endswith("starts it (resume=auto).")
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
