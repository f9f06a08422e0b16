"""A run resumed after its last validation, which validates nothing more (stopped between
that validation and the end of training, or between training and its test), records that
validation's metrics in metrics.json's ``val``, as the uninterrupted run does: its
checkpoint carries them. One whose checkpoint predates that record says it cannot know them.
A run its early stopping had ended is resumed ended, not trained on."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from cloudlstm.engine.module import VALIDATION_KEY
from cloudlstm.rundir.checkpoints import write_checksum
from tests.conftest import TINY, compose_train
from tests.test_preemption_validation import OUTCOME, stopped

# TINY's epochs of 3 steps, to a budget of 8: validations after steps 3 and 6, none after
JOB = [
    *[a for a in TINY if not a.startswith("trainer.max_epochs")],
    "logger=csv",
    "trainer.max_epochs=-1",
    "trainer.max_steps=8",
]
# SIGTERM as step 7 begins: its checkpoint is saved at its end, after the last validation
AFTER_LAST_VALIDATION = [
    "+callbacks.term._target_=tests.kill_callback.SigtermAt",
    "+callbacks.term.epoch=2",
    "+callbacks.term.batch=0",
]
# SIGTERM as the test runs: training ended, last.ckpt at step 8
AT_TEST = ["+callbacks.term._target_=tests.kill_callback.SignalAtTest", "+callbacks.term.signum=15"]
RESUMED = ["allow_changes=[callbacks.term]"]  # the same command without the signal
# early stopping that ends the run at its second validation (step 6), which cannot improve
# on the first by a million
STOPPING_EARLY = [
    *JOB,
    "callbacks.early_stopping.patience=1",
    "callbacks.early_stopping.min_delta=1000000",
]


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """metrics.json of the uninterrupted run."""
    from cloudlstm.cli.train import train

    cfg = compose_train(tmp_path_factory.mktemp("whole"), JOB)
    train(cfg)
    return json.loads((Path(cfg.paths.output_dir) / "metrics.json").read_text())


def resumed(tmp_path: Path, signal_at: list[str], step: int, job: list[str] = JOB) -> dict:
    """metrics.json of ``job`` stopped by the signal of ``signal_at``, saved at ``step``,
    then resumed."""
    from cloudlstm.cli.train import train

    _, line = stopped(tmp_path, *signal_at, job=job)
    assert f"at step {step}:" in line
    train(compose_train(tmp_path, [*job, *RESUMED]))
    return json.loads((tmp_path / "run" / "metrics.json").read_text())


@pytest.mark.parametrize(
    ("signal_at", "step"), [(AFTER_LAST_VALIDATION, 7), (AT_TEST, 8)], ids=["training", "test"]
)
def test_a_run_resumed_after_its_last_validation_records_that_validation(
    tmp_path, whole, signal_at, step
):
    """Resumed at step 7, val was empty; resumed at step 8 (its test), the final weights
    were validated again, which are not the step-6 validation's."""
    got = resumed(tmp_path, signal_at, step)
    last = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)
    assert got["resumed_from"] == "checkpoints/last.ckpt" and whole["val"]["val/mae"] > 0
    assert {k: got[k] for k in OUTCOME} == {k: whole[k] for k in OUTCOME}
    assert last[VALIDATION_KEY] == whole["val"]  # the checkpoint written after the resume too
    # resume=auto of the finished run: its metrics.json as it is, nothing trained
    from cloudlstm.cli.train import train

    again = train(compose_train(tmp_path, [*JOB, *RESUMED]))
    assert again["val"] == whole["val"] and again["provenance"] == got["provenance"]


def test_a_run_its_early_stopping_ended_is_resumed_ended(tmp_path):
    """Lightning restores early stopping's state but not the stop: resumed at its test, the
    run trained on to step 8 and recorded that validation."""
    from cloudlstm.cli.train import train

    whole = train(compose_train(tmp_path / "whole", STOPPING_EARLY))
    assert whole["steps"] == 6  # stopped early, of 8
    got = resumed(tmp_path, AT_TEST, 6, job=STOPPING_EARLY)
    assert {k: got[k] for k in OUTCOME} == {k: whole[k] for k in OUTCOME}


def test_a_patience_raised_on_resume_trains_an_early_stopped_run_on(tmp_path):
    from cloudlstm.cli.train import train

    stopped(tmp_path, *AT_TEST, job=STOPPING_EARLY)
    patience = ["callbacks.early_stopping.patience=3", "allow_changes=[callbacks]"]
    results = train(compose_train(tmp_path, [*STOPPING_EARLY, *patience]))
    assert results["steps"] == 8


def test_a_run_stopped_before_any_validation_records_none(tmp_path):
    """Known, and empty: a training shorter than one validation, as uninterrupted."""
    short = [*[a for a in JOB if not a.startswith("trainer.max_steps")], "trainer.max_steps=2"]
    got = resumed(tmp_path, AT_TEST, 2, job=short)
    assert got["val"] == {} and got["steps"] == 2


def test_an_older_checkpoint_without_the_record_says_val_is_unknown(tmp_path, caplog):
    """Written before checkpoints kept their validation: no validation after the resume,
    so the metrics are unknown, null in metrics.json, not an empty section."""
    from cloudlstm.cli.train import train

    _, line = stopped(tmp_path, *AFTER_LAST_VALIDATION, job=JOB)
    assert "at step 7: saved" in line
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(last, weights_only=False)
    del checkpoint[VALIDATION_KEY]
    torch.save(checkpoint, last)
    write_checksum(last)
    with caplog.at_level(logging.WARNING):
        results = train(compose_train(tmp_path, [*JOB, *RESUMED]))
    assert results["val"] is None and results["steps"] == 8
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["val"] is None
    assert "not in its checkpoint" in caplog.text and "val as null (unknown)" in caplog.text
