"""A run records what produced its numbers: the code, packages, machine and command of each
process that trained it, and a resume under other code says so."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cloudlstm.rundir.layout import PROVENANCE_FILE
from cloudlstm.rundir.provenance import (
    _is_own_checkout,
    code_version,
    record_process,
    record_training,
    this_process,
    training_processes,
)
from tests.conftest import ROOT


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_code_is_the_checkout_s_commit_and_whether_it_was_changed():
    if not (ROOT / ".git").exists():
        pytest.skip("the tests do not run from a git checkout of the project")
    code = code_version()
    assert code["commit"] == git("rev-parse", "HEAD")
    package = ROOT / "src" / "cloudlstm"
    changes = git("status", "--porcelain", "--", str(package))
    assert code["changed"] == bool(changes)


def test_a_copy_installed_inside_another_repository_has_no_commit(tmp_path):
    """A virtual environment inside a user's own repository: its commit is not the code's."""
    top = tmp_path / "their_project"
    installed = top / ".venv" / "lib" / "python3.11" / "site-packages" / "cloudlstm"
    assert not _is_own_checkout(installed, top)
    assert _is_own_checkout(top / "src" / "cloudlstm", top)
    assert not _is_own_checkout(tmp_path / "elsewhere" / "cloudlstm", top)


def test_an_entry_names_the_packages_machine_and_command():
    trainer = SimpleNamespace(
        strategy=SimpleNamespace(root_device=torch.device("cpu")), world_size=1
    )
    entry = this_process(trainer, from_step=250)
    assert entry["from_step"] == 250
    assert entry["packages"]["torch"] == torch.__version__
    assert entry["machine"]["device"] == "cpu" and entry["machine"]["processes"] == 1
    assert entry["machine"]["torch_threads"] == torch.get_num_threads()
    assert entry["machine"]["cpus"] >= 1 and entry["machine"]["cpu"]
    json.dumps(entry)  # written as one JSON line


def test_a_line_cut_short_is_left_out(tmp_path):
    whole = {"from_step": 0, "code": {"commit": None, "version": "1"}}
    (tmp_path / PROVENANCE_FILE).write_text(json.dumps(whole) + "\n" + '{"from_step": 25')
    assert training_processes(tmp_path) == [whole]
    assert training_processes(tmp_path / "none") == []
    record_training(tmp_path, {"from_step": 50}, resumed=True)  # the next line is whole
    assert training_processes(tmp_path) == [whole, {"from_step": 50}]


def test_a_resume_of_another_runs_checkpoint_lists_that_runs_processes_before_it(tmp_path, caplog):
    def process(step: int, commit: str) -> dict:
        return {"from_step": step, "code": {"commit": commit * 40, "changed": False}}

    source, run = tmp_path / "source", tmp_path / "run"
    for folder in (source / "checkpoints", run / ".replaced" / "t" / "checkpoints"):
        folder.mkdir(parents=True)
        (folder.parent / "config.yaml").write_text("seed: 0\n")
    for step in (0, 500, 1500):  # the last one started after the checkpoint resumed
        record_training(source, process(step, "a"), resumed=step > 0)
    record_training(run, process(0, "c"), resumed=False)  # the run's own earlier training

    record_process(run, process(1000, "b"), str(source / "checkpoints" / "epoch_1.ckpt"))
    assert training_processes(run) == [process(0, "a"), process(500, "a"), process(1000, "b")]
    assert "trained up to step 1000 by commit aaaaaaaaaa, and continues under" in caplog.text

    record_process(run, process(1200, "b"), str(run / "checkpoints" / "last.ckpt"))  # its own
    assert [p["from_step"] for p in training_processes(run)] == [0, 500, 1000, 1200]
    moved = run / ".replaced" / "t"  # an earlier training moved aside is another run too
    record_training(moved, process(0, "d"), resumed=False)
    record_process(run, process(40, "d"), str(moved / "checkpoints" / "last.ckpt"))
    assert training_processes(run) == [process(0, "d"), process(40, "d")]
    loose = tmp_path / "loose.ckpt"  # in no run directory: nothing known before it
    record_process(run, process(7, "e"), str(loose))
    assert [p["from_step"] for p in training_processes(run)] == [0, 40, 7]
    record_process(run, process(0, "f"), None)  # a fresh start
    assert training_processes(run) == [process(0, "f")]


def test_a_run_lists_its_processes_and_a_resume_under_other_code_says_so(tiny_cfg, caplog):
    from cloudlstm.cli.train import train

    first = train(tiny_cfg("logger=none", "trainer.max_epochs=1"))
    run_dir = Path(tiny_cfg().paths.output_dir)
    (entry,) = first["provenance"]
    assert entry["from_step"] == 0 and entry["code"] == code_version()
    assert entry["command"].endswith("logger=none trainer.max_epochs=1")  # the job's own
    assert training_processes(run_dir) == first["provenance"]

    # as if the first process had run another commit
    entry["code"] = {
        "version": "0.0.9",
        "commit": "0123456789abcdef" * 2 + "01234567",
        "changed": False,
    }
    (run_dir / PROVENANCE_FILE).write_text(json.dumps(entry) + "\n")
    (run_dir / "metrics.json").unlink()  # so that the run goes on
    cfg = tiny_cfg("logger=none", "trainer.max_epochs=2", "allow_changes=[trainer.max_epochs]")
    with caplog.at_level(logging.WARNING):
        second = train(cfg)
    assert [p["from_step"] for p in second["provenance"]] == [0, 3]
    assert second["provenance"][0]["code"]["commit"].startswith("0123456789")
    said = [r.getMessage() for r in caplog.records if "continues under" in r.getMessage()]
    assert len(said) == 1
    assert said[0].startswith("This run was trained up to step 3 by commit 0123456789, and ")

    again = train(tiny_cfg("logger=none", "trainer.max_epochs=1", "resume=never"))
    assert [p["from_step"] for p in again["provenance"]] == [0]  # a fresh run starts anew


def test_the_code_state_is_read_without_writing_the_checkout(tmp_path):
    """``git status`` of a checkout whose file times changed since its index was written
    reads the same with no room to write (a full disk, ``ulimit -f``), so it writes nothing
    there: not the ``.git/index.lock`` that the processes of a DDP run or the jobs of a sweep
    would take at once, and the user's own git commands fail on meanwhile."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "code.py").write_text("x = 1\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "code.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "code"], check=True)
    os.utime(repo / "code.py", (1_000_000_000, 1_000_000_000))  # the index's times go stale

    read = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1, resource.RLIM_INFINITY))\n"
        "from cloudlstm.rundir.provenance import _git\n"
        "print(repr(_git(__import__('pathlib').Path(sys.argv[1]), 'status', '--porcelain')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", read, str(repo)], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "''", done.stdout + done.stderr  # clean, not unknown (None)
