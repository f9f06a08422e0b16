"""checkpoints/last.ckpt holds the final weights when training ends, between validations
too, and a run shorter than one validation names a checkpoint that eval and predict load."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from cloudlstm import Forecaster
from cloudlstm.cli.evaluate import evaluate
from cloudlstm.cli.train import train
from cloudlstm.rundir.checkpoints import check_checkpoint
from tests.conftest import TINY, compose_train
from tests.test_eval import compose_eval

# A step budget validated every 5 steps (across epochs of 3 batches), at a constant rate (no
# schedule over the budget), so that a longer budget continues a shorter run's steps.
STEPS = [
    *[o for o in TINY if not o.startswith(("trainer.max_epochs", "trainer.val_check"))],
    "trainer.max_epochs=-1",
    "trainer.val_check_interval=5",
    "scheduler=null",
    "logger=none",
    "report.figures=false",
]


def last(run: Path) -> dict:
    return check_checkpoint(run / "checkpoints" / "last.ckpt")  # its checksum verified too


def test_last_holds_the_final_steps_after_the_last_validation(tmp_path):
    cfg = compose_train(tmp_path, [*STEPS, "trainer.max_steps=8"])
    results = train(cfg)
    run = Path(cfg.paths.output_dir)
    assert results["steps"] == 8
    final = last(run)
    assert final["global_step"] == 8  # the validation was at step 5
    weights = final["state_dict"]
    best = torch.load(run / results["checkpoint"], weights_only=False)
    assert best["global_step"] == 5
    assert any(not torch.equal(weights[k], best["state_dict"][k]) for k in weights)


def test_a_longer_budget_continues_the_final_checkpoint_exactly(tmp_path):
    whole = train(compose_train(tmp_path / "whole", [*STEPS, "trainer.max_steps=10"]))

    cfg = compose_train(tmp_path / "part", [*STEPS, "trainer.max_steps=8"])
    train(cfg)
    run = Path(cfg.paths.output_dir)
    resumed = train(
        compose_train(
            tmp_path / "part",
            [
                *STEPS,
                "trainer.max_steps=10",
                f"resume={run / 'checkpoints' / 'last.ckpt'}",  # past the finished run's metrics
                "allow_changes=[trainer.max_steps]",
            ],
        )
    )
    assert resumed["resumed_from"] == "checkpoints/last.ckpt"
    assert resumed["steps"] == whole["steps"] == 10
    assert resumed["val"] == whole["val"]  # bit-identical: the steps 9 and 10 as never stopped
    assert resumed["test"] == whole["test"]


def test_a_run_shorter_than_one_validation_is_evaluated_and_forecast_from_last(tmp_path):
    cfg = compose_train(tmp_path, [*STEPS, "trainer.max_steps=2"])
    results = train(cfg)
    run = Path(cfg.paths.output_dir)
    assert last(run)["global_step"] == 2
    assert results["checkpoint"] == "checkpoints/last.ckpt"  # what was tested: final weights
    assert json.loads((run / "metrics.json").read_text())["checkpoint"] == "checkpoints/last.ckpt"

    for ckpt in ("best", "last"):
        again = evaluate(compose_eval(run, tmp_path / f"eval_{ckpt}", f"ckpt={ckpt}"))
        assert again["test"] == results["test"]
        assert again["checkpoint"] == "checkpoints/last.ckpt"
    forecaster = Forecaster.load(run, device="cpu")  # predict.py's default, ckpt=best
    assert forecaster.checkpoint == run / "checkpoints" / "last.ckpt"
    assert all(
        torch.equal(v, last(run)["state_dict"][k])
        for k, v in forecaster.module.state_dict().items()
    )
