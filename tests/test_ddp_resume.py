"""A 2-process DDP run stopped by SIGTERM in the middle of an epoch resumes bit for bit.

Lightning's own SIGTERM handling under DDP runs a collective inside the signal handler of
each process the signal reaches, which pairs with whatever the other process is doing:
the run hung until killed. The processes now agree on the step at which they stop
(``cloudlstm.engine.signals.SignalsTogether``) and save there together.
"""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from lightning.pytorch.trainer.states import TrainerFn

from cloudlstm.engine.callbacks import RngState
from tests.conftest import PYTHON, ROOT, as_in_a_terminal, subprocess_env
from tests.test_resume_mid_epoch import STEP_BUDGET, log_of

# 20 steps of STID (dropout: every process's generators must be restored alike) in two
# processes, validated and checkpointed every 4 steps; an epoch is 7 steps per process
JOB = [
    *[a for a in STEP_BUDGET if not a.startswith(("model.k", "model.hidden_channels"))],
    "trainer=ddp_cpu",
    "model=stid",
    "optimizer.lr=1e-2",
    "torch_threads=1",
]
STEPS_PER_EPOCH = 7
SIGTERM = "+callbacks.kill._target_=tests.kill_callback.SigtermAt"
CASES = {
    # SLURM's preemption or scancel: every process gets it, during global step 10 (epoch
    # 1, batch 2); last.ckpt is saved as that step ends, in the middle of epoch 1
    "every process": (["+callbacks.kill.epoch=1", "+callbacks.kill.batch=2"], 10),
    # Ctrl-C in the terminal: SIGINT to every process of the command, the same stop
    "Ctrl-C": (
        ["+callbacks.kill.epoch=1", "+callbacks.kill.batch=2", "+callbacks.kill.signum=2"],
        10,
    ),
    # docker stop or kill <pid>: only the process started by the command gets it, during
    # step 12, which a validation follows: the processes stop once it has run (its
    # checkpoint written); the other process learns of the signal from rank 0
    "rank 0, before a validation": (
        ["+callbacks.kill.epoch=1", "+callbacks.kill.batch=4", "+callbacks.kill.rank=0"],
        12,
    ),
}


def run_train(run_dir: Path, data_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [
        *PYTHON, "train.py", *JOB, f"hydra.run.dir={run_dir}",
        f"paths.data_dir={data_dir}", *extra,
    ]  # fmt: skip
    return subprocess.run(
        cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300,
        preexec_fn=as_in_a_terminal,
    )  # fmt: skip


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    """The run without a stop."""
    root = tmp_path_factory.mktemp("ddp_whole")
    done = run_train(root / "run", root / "data")
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "run"


@pytest.mark.slow  # runs of two processes: ~1 min each on 2 CPU cores
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_ddp_run_stopped_by_sigterm_mid_epoch_resumes_bit_exactly(tmp_path, whole, case):
    signal_args, saved_at = CASES[case]
    run_dir = tmp_path / "stopped"
    stopped = run_train(run_dir, tmp_path / "data", SIGTERM, *signal_args)
    output = stopped.stdout + stopped.stderr
    by, code = ("Ctrl-C", 130) if case == "Ctrl-C" else ("SIGTERM", 143)
    assert stopped.returncode == code, output[-3000:]  # not a hang, not Lightning's status
    assert "Traceback" not in output
    lines = [x for x in output.splitlines() if f"interrupted by {by}" in x]
    assert len(lines) == 1, lines  # rank 0's line, with the command the user gave
    assert f"at step {saved_at}" in lines[0] and "hydra.job.name" not in lines[0]
    assert not (run_dir / "metrics.json").exists()
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] == saved_at and saved_at % STEPS_PER_EPOCH != 0  # mid-epoch

    resumed = run_train(run_dir, tmp_path / "data", "allow_changes=[callbacks.kill]")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Resuming from" in resumed.stdout + resumed.stderr

    expected = json.loads((whole / "metrics.json").read_text())
    got = json.loads((run_dir / "metrics.json").read_text())
    assert got["steps"] == expected["steps"] == 20
    assert got["test"] == expected["test"]  # bit-identical: every metric, step and channel
    assert got["val"] == expected["val"]
    assert got["checkpoint"] == expected["checkpoint"]  # the same best checkpoint
    pd.testing.assert_frame_equal(log_of(run_dir), log_of(whole))  # each step's row once
    weights = [
        torch.load(d / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
        for d in (whole, run_dir)
    ]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


@pytest.mark.parametrize(("saved", "now", "said"), [(2, 1, True), (2, 2, False), (None, 4, False)])
def test_a_resume_with_another_number_of_processes_says_so(caplog, saved, now, said):
    """The checkpoint holds how many processes wrote it (None: written before it was
    kept); a resume with another number says in one line that it cannot match."""
    state = RngState().state_dict()
    if saved is None:
        del state["world_size"]
    else:
        state["world_size"] = saved
    trainer = SimpleNamespace(
        state=SimpleNamespace(fn=TrainerFn.FITTING),
        strategy=SimpleNamespace(root_device=torch.device("cpu")),
        num_training_batches=7,
        accumulate_grad_batches=1,
        global_step=7,
        world_size=now,
        is_global_zero=True,
    )
    callback = RngState()
    callback.on_load_checkpoint(trainer, None, {"loops": {"fit_loop": {"state_dict": {}}}})
    callback.load_state_dict(state)
    with caplog.at_level(logging.WARNING):
        callback.on_train_start(trainer, None)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == int(said)
    if said:
        assert f"a run of {saved} processes, this one has {now}" in lines[0]
