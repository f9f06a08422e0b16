"""The training recipe (conf/recipe/): anchor, selection metric, step budget, schedule, and
the paper's recipe one setting away."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

from cloudlstm.cli.train import train
from cloudlstm.engine.module import ForecastModule, anchor_index
from cloudlstm.engine.schedules import warmup_cosine
from cloudlstm.errors import UserError
from cloudlstm.models import Persistence, SeqLSTM
from tests.conftest import compose_train


def _lrs(total: int, warmup: int, final: float) -> list[float]:
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=2.0)
    schedule = warmup_cosine(optimizer, total, warmup, final)
    lrs = []
    for _ in range(total + 3):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    return lrs


def test_warmup_cosine_rises_linearly_then_falls_to_its_floor() -> None:
    lrs = _lrs(total=10, warmup=4, final=0.1)
    assert lrs[:4] == pytest.approx([0.5, 1.0, 1.5, 2.0])  # (step + 1) / warmup * lr
    assert lrs[4] == pytest.approx(2.0)  # the cosine starts at the full rate
    # halfway through the cosine (step 7 of 4..10): final + (1 - final) / 2, times lr
    assert lrs[7] == pytest.approx(2.0 * (0.1 + 0.9 * 0.5))
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:], strict=False))
    assert lrs[10:] == pytest.approx([0.2] * 3)  # held at final_ratio * lr


@pytest.mark.parametrize(
    "total, warmup, final, match",
    [(-1, 0, 0.0, "trainer.max_steps"), (5, 5, 0.0, "warmup_steps"), (5, 0, 2.0, "final_ratio")],
)
def test_warmup_cosine_refuses_a_budget_it_cannot_span(total, warmup, final, match) -> None:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(UserError, match=match):
        warmup_cosine(optimizer, total, warmup, final)


def test_anchored_module_starts_as_persistence_and_leaves_naive_forecasts_alone() -> None:
    x, coords = torch.randn(3, 5, 4, 2), torch.rand(3, 4, 2)
    lstm = SeqLSTM(num_points=4, num_channels=2, output_steps=3, hidden_size=8, num_layers=1)
    module = ForecastModule(lstm, optimizer=None, anchor="last")
    assert torch.equal(module(x, coords), x[:, -1:].expand(3, 3, 4, 2))
    plain = ForecastModule(
        SeqLSTM(num_points=4, num_channels=2, output_steps=3, hidden_size=8, num_layers=1),
        optimizer=None,
    )
    assert not torch.equal(plain(x, coords), x[:, -1:].expand(3, 3, 4, 2))
    naive = ForecastModule(Persistence(output_steps=3), optimizer=None, anchor="last")
    assert not naive.anchored  # persistence plus the last frame would be twice it
    assert torch.equal(naive(x, coords), Persistence(3)(x, coords))


def test_anchor_reads_the_step_right_before_the_forecast() -> None:
    assert anchor_index([-5, -4, -3, -2, -1]) == 4
    assert anchor_index([-168, -144, -2, -1, -24]) == 3  # a seasonal order, ending elsewhere
    with pytest.raises(UserError, match="module.anchor=last needs"):
        anchor_index([-24, -12])
    with pytest.raises(ValueError, match="module.anchor='first'"):
        ForecastModule(Persistence(3), optimizer=None, anchor="first")


def test_default_is_the_strong_recipe_and_the_paper_presets_keep_the_papers(tmp_path) -> None:
    cfg = compose_train(tmp_path, [])
    assert cfg.recipe_name == "strong" and cfg.monitor == "val/mae"
    assert (cfg.module.anchor, cfg.module.loss, cfg.module.loss_weights) == (
        "last",
        "mae",
        "real_units",
    )
    assert cfg.trainer.max_steps == 5000 and cfg.trainer.check_val_every_n_epoch is None
    assert cfg.trainer.gradient_clip_val == 5.0 and cfg.optimizer.weight_decay > 0
    assert cfg.callbacks.model_checkpoint.monitor == "val/mae"
    assert cfg.callbacks.early_stopping.monitor == "val/mae"
    for overrides in (["recipe=paper"], ["experiment=paper/airq"], ["experiment=paper_cloudlstm"]):
        paper = compose_train(tmp_path, overrides)
        assert paper.recipe_name == "paper" and paper.module.anchor == "none"
        assert paper.module.loss == "mse" and paper.optimizer._target_ == "torch.optim.Adam"
        assert paper.callbacks.model_checkpoint.monitor == "val/loss"
        assert paper.trainer.max_steps == -1 and paper.trainer.max_epochs == 100


def _callback(trainer, kind):
    return next(cb for cb in trainer.callbacks if type(cb) is kind and cb.monitor)


def test_the_warmup_fits_a_short_budget_and_the_demo_runs_under_any_recipe(tmp_path) -> None:
    """250 warm-up steps, or a sixth of a budget of at most 250 steps (the demo's 150 warm
    up for 25, as they did when the demo set it); the demo leaves the schedule alone, so
    the paper recipe's plateau scheduler gets no warm-up setting it does not take."""
    from cloudlstm.assembly.known_keys import check_known_keys

    def warmup(*overrides: str) -> int:
        return compose_train(tmp_path, list(overrides)).scheduler.warmup_steps

    assert warmup() == 250 and warmup("trainer.max_steps=251") == 250
    assert warmup("trainer.max_steps=250") == 41 and warmup("experiment=demo") == 25
    assert warmup("experiment=metr_la") == 100  # recipe=small's own
    paper_demo = compose_train(tmp_path, ["experiment=demo", "recipe=paper"])
    assert "warmup_steps" not in paper_demo.scheduler
    assert paper_demo.trainer.check_val_every_n_epoch is None
    check_known_keys(paper_demo)


def test_a_step_budget_validates_across_epochs_and_selects_on_the_real_unit_mae(
    tiny_cfg, monkeypatch
) -> None:
    """7 steps over epochs of 3 batches, validated every 2 steps: validations at steps 2, 4
    and 6 (the first two epochs' ends are not validation points), the best checkpoint the
    one of the lowest val/mae, early stopping watching val/mae."""
    seen: dict[int, float] = {}
    original = ForecastModule.on_validation_epoch_end

    def record(self):
        original(self)
        if not self.trainer.sanity_checking:
            seen[self.global_step] = float(self.trainer.callback_metrics["val/mae"])

    monkeypatch.setattr(ForecastModule, "on_validation_epoch_end", record)
    cfg = tiny_cfg(
        "trainer.max_steps=7",
        "trainer.max_epochs=-1",
        "trainer.val_check_interval=2",
        "scheduler.warmup_steps=2",
        "logger=csv",
    )
    results = train(cfg)
    assert sorted(seen) == [2, 4, 6]
    best_step = min(seen, key=seen.get)
    assert f"step_{best_step:06d}" in Path(results["checkpoint"]).name
    assert results["val"]["val/mae_best"] == pytest.approx(min(seen.values()))
    saved = json.loads((Path(cfg.paths.output_dir) / "metrics.json").read_text())
    assert math.isfinite(saved["test"]["overall"]["mae"]["mean"])


def plateau_steps(tiny_cfg, monkeypatch, *overrides: str) -> tuple[dict[int, float], list]:
    """Train under recipe=paper and ``overrides``: each validation's val/loss by the global
    step after it, and the metrics ReduceLROnPlateau stepped on, in order."""
    from torch.optim.lr_scheduler import ReduceLROnPlateau

    seen: dict[int, float] = {}
    stepped: list[float] = []
    on_validation_end = ForecastModule.on_validation_epoch_end
    plateau_step = ReduceLROnPlateau.step

    def record(self):
        on_validation_end(self)
        if not self.trainer.sanity_checking:
            seen[self.global_step] = float(self.trainer.callback_metrics["val/loss"])

    def step(self, metrics, *args, **kwargs):
        stepped.append(float(metrics))
        return plateau_step(self, metrics, *args, **kwargs)

    monkeypatch.setattr(ForecastModule, "on_validation_epoch_end", record)
    monkeypatch.setattr(ReduceLROnPlateau, "step", step)
    train(tiny_cfg("recipe=paper", *overrides))
    return seen, stepped


def test_the_plateau_schedule_steps_after_each_validation_across_epochs(
    tiny_cfg, monkeypatch
) -> None:
    """recipe=paper validated every 2 steps across epochs of 3 batches (as experiment=demo
    validates under any recipe): ReduceLROnPlateau steps after each validation, on its
    val/loss. Stepped at epochs' ends, it found no metric there and stopped the run."""
    seen, stepped = plateau_steps(
        tiny_cfg,
        monkeypatch,
        "trainer.max_steps=7",
        "trainer.max_epochs=-1",
        "trainer.val_check_interval=2",
        "trainer.check_val_every_n_epoch=null",
    )
    assert sorted(seen) == [2, 4, 6]
    assert stepped == [seen[2], seen[4], seen[6]]


@pytest.mark.parametrize("interval", ["1", "0.5"], ids=["steps", "fraction"])
def test_the_plateau_schedule_counts_validations_within_an_epoch(
    tiny_cfg, monkeypatch, interval
) -> None:
    """recipe=paper validated after every batch within epochs of 3 batches (as
    experiment=compare validates every 50 steps under it): ReduceLROnPlateau steps after each
    validation, on its val/loss, so its patience counts validations, as early stopping's
    does. Stepped at epochs' ends, it saw one of every three, and counted epochs."""
    seen, stepped = plateau_steps(
        tiny_cfg,
        monkeypatch,
        "trainer.max_steps=6",
        f"trainer.val_check_interval={interval}",
        "trainer.check_val_every_n_epoch=1",
    )
    assert sorted(seen) == [1, 2, 3, 4, 5, 6]
    assert stepped == [seen[n] for n in sorted(seen)]


def test_a_step_interval_longer_than_an_epoch_of_epoch_validations_is_one_line(
    tiny_cfg,
) -> None:
    """Validations at epochs' ends (recipe=paper) every 4 steps, in epochs of 3 batches:
    Lightning's ValueError when training starts, here one line with both ways out."""
    cfg = tiny_cfg("recipe=paper", "trainer.val_check_interval=4")
    with pytest.raises(UserError, match=(
        r"^trainer.val_check_interval=4 steps is longer than an epoch of training \(3 batches "
        r"per process\), and trainer.check_val_every_n_epoch=1 validates at epochs' ends: give "
        r"trainer.check_val_every_n_epoch=null to validate every 4 steps across epochs, or a "
        r"trainer.val_check_interval of at most 3\.$"
    )):  # fmt: skip
        train(cfg)


def test_the_recipe_callbacks_follow_the_monitor_setting(tiny_cfg) -> None:
    from cloudlstm.assembly.build import build_trainer

    for recipe, metric in (("strong", "val/mae"), ("paper", "val/loss")):
        trainer = build_trainer(tiny_cfg(f"recipe={recipe}"), [])
        assert _callback(trainer, ModelCheckpoint).monitor == metric
        assert _callback(trainer, EarlyStopping).monitor == metric


def test_a_step_budget_that_ends_before_the_first_epoch_validation_tests_the_final_weights(
    tiny_cfg, caplog
) -> None:
    """recipe=paper validates at epochs' ends; a budget of 2 steps ends within the first
    epoch of 3 batches, so no validation ran. The run tests its final weights and says so,
    as under a step recipe; early stopping found no val/loss at the epoch's end and stopped
    it with a traceback."""
    every_epoch = ("trainer.val_check_interval=1.0", "trainer.check_val_every_n_epoch=1")
    results = train(tiny_cfg("recipe=paper", *every_epoch, "trainer.max_steps=2", "logger=none"))
    assert results["steps"] == 2 and results["val"] == {}
    assert results["checkpoint"] == "checkpoints/last.ckpt"
    assert math.isfinite(results["test"]["overall"]["mae"]["mean"])
    assert "No best checkpoint (no validation): testing the final weights" in caplog.text
