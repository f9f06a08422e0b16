"""Gradients accumulated over several batches (``trainer.accumulate_grad_batches``): the
recipe's validation interval counts optimizer steps, and a stop waits for the window's step,
so the resumed run is the uninterrupted one, bit for bit."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from cloudlstm.assembly.build import validation_in_optimizer_steps
from cloudlstm.rundir.stops import RunInterrupted
from tests.conftest import TINY, compose_train
from tests.test_input_checks import run_script, the_line

# Epochs of 14 batches, 2 batches a step: 7 steps an epoch; validation every 4 steps.
ACCUMULATED = [
    *[a for a in TINY if not a.startswith(("trainer.max_epochs", "trainer.limit_train"))],
    "trainer.max_epochs=-1",
    "trainer.max_steps=10",
    "trainer.val_check_interval=4",
    "trainer.accumulate_grad_batches=2",
    "trainer.deterministic=true",
    "scheduler.warmup_steps=2",
    "optimizer.lr=3e-2",
    "logger=csv",
    "trainer.log_every_n_steps=1",
]


def validated_steps(run_dir: Path) -> list[int]:
    (path,) = run_dir.glob("csv/*/metrics.csv")
    log = pd.read_csv(path)
    return sorted(int(s) for s in log.loc[log["val/mae"].notna(), "step"])


def test_the_recipe_validates_every_n_optimizer_steps(tmp_path):
    from cloudlstm.cli.train import train

    cfg = compose_train(tmp_path, ACCUMULATED)
    result = train(cfg)
    assert result["steps"] == 10
    # after steps 4 and 8 (the CSV log names a validation by the steps done before it);
    # Lightning, counting batches, would validate after steps 2, 4, 6, 8 and 10
    assert validated_steps(Path(cfg.paths.output_dir)) == [3, 7]
    # the cost per 1,000 steps counts optimizer steps, each of 2 batches: 8 by step 8's
    (validated,) = (Path(cfg.paths.output_dir) / "checkpoints").glob("*-step_000008.ckpt")
    timer = torch.load(validated, weights_only=False)["callbacks"]["EpochTimer"]
    assert timer["train_steps"] == 8


@pytest.mark.parametrize(
    ("interval", "accumulate", "every_n_epoch", "given"),
    [
        (250, 4, None, 1000),
        (250, 1, None, None),
        (250, None, None, None),  # Lightning's default: 1
        # validated within each epoch: Lightning's batches of the epoch, as documented
        (10, 4, 1, None),
        (1.0, 4, 1, None),
    ],
)
def test_the_interval_lightning_is_given(interval, accumulate, every_n_epoch, given):
    trainer = {"val_check_interval": interval, "check_val_every_n_epoch": every_n_epoch}
    if accumulate is not None:
        trainer["accumulate_grad_batches"] = accumulate
    expected = {} if given is None else {"val_check_interval": given}
    assert validation_in_optimizer_steps(OmegaConf.create(trainer)) == expected


def test_a_stop_within_a_window_saves_at_its_step_and_resumes_bit_exactly(tmp_path):
    from cloudlstm.cli.train import train

    whole_cfg = compose_train(tmp_path / "whole", ACCUMULATED)
    whole = train(whole_cfg)

    cfg = compose_train(
        tmp_path / "stopped",
        [
            *ACCUMULATED,
            "+callbacks.term._target_=tests.kill_callback.SigtermAt",
            "+callbacks.term.epoch=0",
            "+callbacks.term.batch=4",  # the first batch of step 3's window
        ],
    )
    with pytest.raises(RunInterrupted) as err:
        train(cfg)
    last = Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt"
    saved = torch.load(last, weights_only=False)
    # the window's second batch ran: no gradient of batch 4 is lost in the checkpoint
    assert saved["global_step"] == 3
    (loader_state,) = saved["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert loader_state["pass"]["batches"] == 6
    assert f"interrupted by SIGTERM at step 3: saved {last}." in str(err.value)

    resumed = train(cfg)  # the same command continues it
    assert resumed["resumed_from"] == "checkpoints/last.ckpt"
    assert resumed["test"] == whole["test"]
    assert resumed["val"] == whole["val"]
    final = [
        torch.load(Path(c.paths.output_dir) / "checkpoints" / "last.ckpt", weights_only=False)
        for c in (whole_cfg, cfg)
    ]
    assert final[0]["global_step"] == final[1]["global_step"] == 10
    weights = [f["state_dict"] for f in final]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_accumulating_more_batches_than_an_epoch_has_is_one_line_before_training(tmp_path):
    """TINY's epochs hold 3 batches (trainer.limit_train_batches=3): Lightning stepped the
    optimizer at each epoch's end over those 3, so a command asking for steps of 4 batches
    trained with steps of 3 and validated every 4 x 3 batches, a step in 4 later than asked,
    without a word."""
    args = [*TINY, "logger=none", "print_config=false", "torch_threads=1"]
    run = tmp_path / "run"
    done = run_script(
        "train.py", *args, "trainer.accumulate_grad_batches=4", f"hydra.run.dir={run}"
    )
    assert done.returncode == 1
    assert the_line(done, "trainer.accumulate_grad_batches=4") == (
        "trainer.accumulate_grad_batches=4 is more than an epoch's training batches (3 per "
        "process, of data.batch_size=8): Lightning would step the optimizer at each epoch's "
        "end over 3 batches, not 4. Give trainer.accumulate_grad_batches of at most 3, or "
        "train on more data."
    )
    assert not (run / "checkpoints").exists()
