"""An allowed change of a resumed run that reshapes its weights (``allow_changes=[model.k]``)
is refused up front, in one line naming the key, before anything is written: which keys
reshape is found by building the model of the new settings, not from a list
(``src/cloudlstm/assembly/resume_shapes.py``)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from cloudlstm.cli.train import train
from cloudlstm.errors import UserError
from tests.conftest import PYTHON, ROOT, TINY, compose_train, subprocess_env
from tests.test_config_changes import snapshot
from tests.test_input_checks import the_line

BASE = ["logger=csv", "report.figures=false"]


@pytest.fixture
def stopped_run(tiny_cfg) -> Path:
    """A tiny run (K=3, 4 hidden channels) stopped before its end: checkpoints, no metrics."""
    cfg = tiny_cfg(*BASE)
    train(cfg)
    run = Path(cfg.paths.output_dir)
    (run / "metrics.json").unlink()
    return run


def test_allow_changes_of_model_k_is_refused_before_anything_is_written(stopped_run):
    before = snapshot(stopped_run)
    done = subprocess.run(
        [
            *PYTHON, "train.py", *TINY, *BASE, f"hydra.run.dir={stopped_run}",
            f"paths.data_dir={stopped_run.parent / 'data'}", "model.k=2",
            "allow_changes=[model.k]",
        ],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode != 0
    line = the_line(done, "cannot take")
    assert done.stderr.strip() == line, "one line, nothing else"
    last = stopped_run / "checkpoints" / "last.ckpt"
    assert line.startswith(f"{last} holds weights that the model built by these settings cannot")
    assert re.search(
        r"\(\d+, 3, \d+, \d+, \d+\) in the checkpoint, \(\d+, 2, \d+, \d+, \d+\) in", line
    )
    assert "model.k 3 -> 2 (allowed by allow_changes) reshapes the model" in line
    assert "resume=never" in line
    # config.yaml still describes the run, config_changes.yaml records nothing, and neither
    # .hydra/ nor the log took the refused command
    assert snapshot(stopped_run) == before


def test_only_the_keys_that_reshape_are_named(stopped_run, tmp_path):
    cfg = compose_train(
        tmp_path,
        [*TINY, *BASE, "model.hidden_channels=5", "optimizer.lr=0.01",
         "allow_changes=[model.hidden_channels,optimizer.lr]"],
    )  # fmt: skip
    before = snapshot(stopped_run)
    with pytest.raises(UserError) as err:
        train(cfg)
    message = str(err.value)
    assert "model.hidden_channels 4 -> 5 (allowed by allow_changes) reshapes" in message
    assert "optimizer.lr" not in message
    assert snapshot(stopped_run) == before

    # a change that keeps the shapes goes through, and is recorded
    lr = compose_train(
        tmp_path, [*TINY, *BASE, "optimizer.lr=0.01", "allow_changes=[optimizer.lr]"]
    )
    assert train(lr)["resumed_from"] == "checkpoints/last.ckpt"
    (entry,) = yaml.safe_load((stopped_run / "config_changes.yaml").read_text())
    assert sorted(entry["changes"]) == ["allow_changes", "optimizer.lr"]


def test_a_data_change_that_reshapes_is_found_on_the_new_data(stopped_run, tmp_path):
    """Three channels instead of two: the data are read (through the cache) to size the
    model, as the run would size it."""
    cfg = compose_train(
        tmp_path, [*TINY, *BASE, "data.source.num_channels=3", "allow_changes=[data]"]
    )
    before = snapshot(stopped_run)
    with pytest.raises(UserError, match=r"data\.source\.num_channels 2 -> 3 \(allowed by "):
        train(cfg)
    assert snapshot(stopped_run) == before


def test_the_refusal_of_a_change_that_reshapes_offers_no_allow_changes_for_it(
    stopped_run, tmp_path
):
    """model.k and optimizer.lr changed, neither allowed: the first line offered
    allow_changes=[model.k,optimizer.lr], which then met the shapes' refusal. It names
    model.k as reshaping the model, and offers allow_changes for optimizer.lr alone."""
    cfg = compose_train(tmp_path, [*TINY, *BASE, "model.k=2", "optimizer.lr=0.01"])
    before = snapshot(stopped_run)
    with pytest.raises(UserError) as err:
        train(cfg)
    message = str(err.value)
    assert message.startswith(
        f"{stopped_run} holds a run trained with other settings, which resuming would mix "
        "with these: model.k 3 -> 2, optimizer.lr "
    )
    assert re.search(
        r"\. model\.k reshapes the model \(.*\(\d+, 2, \d+, \d+, \d+\) in the model.*\), whose "
        r"weights a resumed run keeps: restore the old value of it, or start fresh with "
        r"resume=never \(better in a new directory\); the other change may be taken with "
        r"allow_changes=\[optimizer\.lr\]\.$",
        message,
    ), message
    assert snapshot(stopped_run) == before
