"""SLURM's requeue signal (SIGUSR1, Lightning's auto-requeue) during a validation, or at the
training step a validation follows: the requeue's ``hpc_ckpt_<n>.ckpt`` resumes into that
whole validation, so the requeued run ends as the uninterrupted run does.

No SLURM here: the job's variables make Lightning take the run for a SLURM job with
auto-requeue (its signal handlers, its requeue), and a ``scontrol`` on ``PATH`` notes the
requeue and ends the job as SLURM does, with SIGTERM, or SIGKILL where the job is killed
before it could write any other checkpoint. The signal reaches the process itself. A real
cluster's requeue (``tests/test_slurm.py``, ``-m slurm``) is not run here.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from tests import test_preemption_validation as preemption
from tests.conftest import compose_train, run_python
from tests.test_preemption_validation import JOB, same_end, stopped

whole = preemption.whole  # the fixture of the uninterrupted run

JOB_ID = "4242"
SCONTROL = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/requeued"
kill -"${SCONTROL_SIGNAL:-TERM}" "$PPID"
"""


@pytest.fixture
def slurm_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """As in a one-task SLURM job with Lightning's auto-requeue; the folder of the
    ``scontrol`` that requeues it (its ``requeued`` file holds the commands it was given)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(SCONTROL)
    scontrol.chmod(0o755)
    job = dict(SLURM_NTASKS="1", SLURM_JOB_NAME="train", SLURM_JOB_ID=JOB_ID, SLURM_PROCID="0")
    for name, value in {**job, "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")  # before SLURM's
    return bin_dir


def usr1_at(callback: str, *where: str) -> list[str]:
    """The overrides of the test callback ``callback`` sending SIGUSR1 at ``where``."""
    target = f"+callbacks.term._target_=tests.kill_callback.{callback}"
    return [target, *where, f"+callbacks.term.signum={int(signal.SIGUSR1)}"]


def pending_validation(checkpoint: Path) -> dict[str, int]:
    """The validation progress of a checkpoint's fit loop (``total``)."""
    loops = torch.load(checkpoint, weights_only=False)["loops"]
    return loops["fit_loop"]["epoch_loop.val_loop.batch_progress"]["total"]


def test_a_requeue_during_a_validation_resumes_into_the_whole_validation(
    tmp_path, whole, slurm_job
):
    """Lightning's handler saved where the signal came, before the validation's first
    batch, and its resume skipped that validation."""
    requeued_during_validation(tmp_path, whole, slurm_job, JOB)


def test_a_requeue_during_a_validation_of_a_run_averaging_its_weights_resumes_into_it(
    tmp_path, slurm_job
):
    """callbacks=ema: the average stands in the model's place during the validation; the
    requeue's checkpoint holds the live weights and the average each in its own place."""
    from cloudlstm.cli.train import train

    job = [*JOB, "callbacks=ema"]
    whole_cfg = compose_train(tmp_path / "whole", job)
    train(whole_cfg)
    requeued_during_validation(
        tmp_path / "requeued", Path(whole_cfg.paths.output_dir), slurm_job, job
    )


def requeued_during_validation(folder: Path, whole: Path, slurm_job: Path, job: list[str]):
    """Run ``job`` in ``folder``, requeued during its validation of step 3, then the
    requeued job; it ends as the uninterrupted run ``whole`` did."""
    from cloudlstm.cli.train import train

    at = usr1_at("SignalAtValidation", "+callbacks.term.step=3", "+callbacks.term.batch=0")
    cfg, line = stopped(folder, *at, job=job)
    run_dir = Path(cfg.paths.output_dir)
    hpc = run_dir / "hpc_ckpt_1.ckpt"
    # requeued at the end of the validation's first batch of 2; SLURM's SIGTERM stopped it
    assert (slurm_job / "requeued").read_text() == f"requeue {JOB_ID}\n"
    assert f"SIGTERM at step 3: not saved; the newest checkpoint is {hpc}, of step 3" in line
    assert not (run_dir / "checkpoints" / "last.ckpt").exists()
    assert pending_validation(hpc) == dict(ready=1, started=1, processed=0, completed=0)
    train(cfg)  # the requeued job
    same_end(run_dir, whole, resumed_from="hpc_ckpt_1.ckpt")


def test_a_requeue_at_the_step_a_validation_follows_resumes_into_that_validation(
    tmp_path, whole, slurm_job, monkeypatch
):
    """The job killed as it is requeued, before the validation that follows step 3 (the
    epoch's last): Lightning's hpc_ckpt_1.ckpt of that step resumed past it, unrun."""
    monkeypatch.setenv("SCONTROL_SIGNAL", "KILL")
    run_dir = tmp_path / "run"
    job = [*JOB, f"hydra.run.dir={run_dir}", f"paths.data_dir={tmp_path / 'data'}"]
    at = usr1_at("SignalAfterStep", "+callbacks.term.epoch=0", "+callbacks.term.batch=2")
    killed = run_python("train.py", *job, *at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert (slurm_job / "requeued").read_text() == f"requeue {JOB_ID}\n"
    assert not (run_dir / "checkpoints" / "last.ckpt").exists()
    hpc = run_dir / "hpc_ckpt_1.ckpt"
    assert torch.load(hpc, weights_only=False)["global_step"] == 3
    assert pending_validation(hpc) == dict(ready=1, started=1, processed=0, completed=0)
    resumed = run_python("train.py", *job, *at)  # the requeued job
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    same_end(run_dir, whole, resumed_from="hpc_ckpt_1.ckpt")
