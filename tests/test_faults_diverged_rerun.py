"""A run stopped by divergence is recorded in its directory, and rerunning the directory
with other settings is refused with a line that says so and names the way: resume=never
there, or a new directory (``src/cloudlstm/rundir/divergence.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cloudlstm.cli.train import train
from cloudlstm.engine.module import TrainingDivergedError
from tests.test_config_changes import snapshot, train_py
from tests.test_input_checks import the_line

BASE = ["logger=csv", "report.figures=false"]
# Adam moves every weight by ~lr: the first validation's MAE leaves the bound (global step
# 3); a checkpoint every step leaves the run something to resume from
DIVERGES = ["optimizer.lr=1e4", "trainer.gradient_clip_val=null"]
EVERY_STEP = "callbacks.step_checkpoint.every_n_train_steps=1"


@pytest.fixture
def diverged_run(tiny_cfg) -> Path:
    cfg = tiny_cfg(*BASE, *DIVERGES, EVERY_STEP)
    with pytest.raises(TrainingDivergedError) as err:
        train(cfg)
    run = Path(cfg.paths.output_dir)
    record = json.loads((run / "diverged.json").read_text())
    assert record["step"] == 3 and record["message"] == str(err.value)
    assert (run / "checkpoints" / "last.ckpt").is_file() and not (run / "metrics.json").exists()
    return run


def test_another_learning_rate_after_a_divergence_is_told_to_start_fresh(diverged_run):
    before = snapshot(diverged_run)
    done = train_py(diverged_run, "trainer.gradient_clip_val=null", EVERY_STEP, "optimizer.lr=1e-3")
    assert done.returncode != 0
    line = the_line(done, "diverged")
    assert done.stderr.strip() == line, "one line"
    assert line.startswith(
        f"{diverged_run} holds a run that diverged at global step 3 (val/mae is "
    )
    assert "optimizer.lr 10000.0 -> 0.001" in line
    assert "start fresh with resume=never in this directory, or in a new directory" in line
    assert snapshot(diverged_run) == before, "nothing written"

    # the way it names: the same command with resume=never trains from scratch and finishes
    fresh = train_py(
        diverged_run, "trainer.gradient_clip_val=null", EVERY_STEP, "optimizer.lr=1e-3",
        "resume=never",
    )  # fmt: skip
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    metrics = json.loads((diverged_run / "metrics.json").read_text())
    assert metrics["resumed_from"] is None and metrics["steps"] == 6
    assert not (diverged_run / "diverged.json").exists(), "the new run did not diverge"


def test_a_refusal_without_a_divergence_does_not_mention_one(tiny_cfg):
    cfg = tiny_cfg(*BASE)
    train(cfg)
    run = Path(cfg.paths.output_dir)
    (run / "metrics.json").unlink()  # stopped before its end
    done = train_py(run, "optimizer.lr=1e-2")
    line = the_line(done, "holds a run trained with other settings")
    assert "diverged" not in line
