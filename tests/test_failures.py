"""Failing safely: diverged training, bad user input at the entry point, corrupt data caches.

The checkpoint and run-directory failures of ``eval.py`` are in ``test_eval.py``.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import re
from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from cloudlstm.cli.train import train
from cloudlstm.data.sources.synthetic import SyntheticAdvectionDiffusion
from cloudlstm.engine.module import ForecastModule, TrainingDivergedError
from cloudlstm.errors import UserError
from cloudlstm.models.base import ForecastModel
from tests.conftest import (
    TINY,
    build_datamodule,
    compose_train,
    rebuilding_fails,
    run_python,
)


# ---------------------------------------------------------------- diverged training
def test_diverging_cloudlstm_stops_at_the_batch_whose_coordinates_blew_up(tiny_cfg):
    # Adam moves every weight by ~lr: 1e30 overflows the next forward pass, whose DConv
    # coordinates become NaN before any loss is computed
    cfg = tiny_cfg("optimizer.lr=1e30", "trainer.gradient_clip_val=null", "logger=none")
    with pytest.raises(TrainingDivergedError) as err:
        train(cfg)
    message = str(err.value)
    assert "epoch 0, batch 1 (global step 1): the model's point coordinates" in message
    for cause in ("optimizer.lr", "non-finite inputs", "trainer.gradient_clip_val"):
        assert cause in message
    assert not (Path(cfg.paths.output_dir) / "metrics.json").exists()


def test_coordinates_that_overflow_first_in_validation_stop_as_a_divergence(tiny_cfg):
    """Finite weights so large that the validation's features overflow (the training's last
    batch was still finite): the kNN's NaN error ended the run, and a search's trial, in a
    traceback taken for a bug, not the divergence's line."""
    cfg = tiny_cfg("optimizer.lr=1e12", "trainer.max_epochs=1", "logger=none")
    with pytest.raises(TrainingDivergedError) as err:
        train(cfg)
    assert "(global step 3): the model's point coordinates became NaN or inf in validation. " in (
        str(err.value)
    )
    assert "optimizer.lr" in str(err.value)
    assert not (Path(cfg.paths.output_dir) / "metrics.json").exists()


class InfiniteGradient(L.Callback):
    """Makes the first weight's gradient infinite before the first update: a finite loss
    whose update makes the weights non-finite (an infinite learning rate, which did the same,
    is refused before training)."""

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if trainer.global_step == 0:
            next(p for p in pl_module.parameters() if p.grad is not None).grad.fill_(math.inf)


def test_an_update_to_non_finite_weights_stops_at_that_batch(tiny_cfg):
    cfg = tiny_cfg("+callbacks.inf._target_=tests.test_failures.InfiniteGradient", "logger=none")
    with pytest.raises(TrainingDivergedError, match=r"epoch 0, batch 0 .*weights non-finite"):
        train(cfg)
    assert not (Path(cfg.paths.output_dir) / "metrics.json").exists()


class NaNFromCall(ForecastModel):
    """Repeats the last input step (times a weight) until its ``bad_call``-th training call,
    which forecasts NaN: a NaN loss from finite weights."""

    def __init__(self, output_steps: int, bad_call: int) -> None:
        super().__init__()
        self.output_steps = output_steps
        self.scale = nn.Parameter(torch.ones(()))
        self.bad_call = bad_call
        self.calls = 0

    def forward(self, x: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
        out = self.scale * x[:, -1:].expand(-1, self.output_steps, -1, -1)
        if self.training:
            self.calls += 1
            if self.calls == self.bad_call:
                return out * torch.nan
        return out


def test_nan_loss_stops_before_its_backward_pass(tiny_cfg):
    cfg = tiny_cfg()
    datamodule, _ = build_datamodule(cfg, Path(cfg.paths.output_dir).parent)
    model = NaNFromCall(output_steps=3, bad_call=5)  # 3 batches per epoch: epoch 1, batch 1
    module = ForecastModule(model, functools.partial(torch.optim.SGD, lr=0.01))
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=2,
        limit_train_batches=3,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    where = r"epoch 1, batch 1 \(global step 4\): the training loss is nan"
    with pytest.raises(TrainingDivergedError, match=where):
        trainer.fit(module, datamodule=datamodule)
    assert torch.isfinite(model.scale), "the NaN loss must not reach an update"


def test_a_validation_mae_far_above_the_mean_forecasts_stops_the_run(tiny_cfg):
    # Adam moves every weight by ~lr: the forecasts become huge but stay finite, so no
    # loss or weight turns NaN; the validation MAE does leave every sensible bound
    absurd = ("optimizer.lr=1e4", "trainer.gradient_clip_val=null", "logger=none")
    cfg = tiny_cfg(*absurd)
    assert cfg.module.diverge_factor == 10  # the default of every recipe
    with pytest.raises(TrainingDivergedError) as err:
        train(cfg)
    message = str(err.value)
    assert "\n" not in message
    found = re.fullmatch(
        r"Training diverged at the validation of global step 3 \(epoch 0\): val/mae is "
        r"(\S+), above the bound (\S+) \(module\.diverge_factor=10 times (\S+), the "
        r"validation MAE of forecasting the training mean\)\. Usual causes: a learning rate "
        r"too high \(optimizer\.lr\) or exploding gradients \(clip them: "
        r"trainer\.gradient_clip_val=1\.0\); module\.diverge_factor=null turns this check "
        r"off\. The run stopped without writing metrics\. Train again with other settings "
        r"in a new run directory, or with resume=never in this one .*",
        message,
    )
    assert found, message
    mae, bound, reference = (float(v) for v in found.groups())
    assert bound == pytest.approx(10 * reference, rel=1e-3) and math.isfinite(mae) and mae > bound
    assert not (Path(cfg.paths.output_dir) / "metrics.json").exists()
    # what the message advises: the same directory, other settings, resume=never
    again = train(tiny_cfg(*absurd[1:], "optimizer.lr=1e-3", "resume=never"))
    assert again["resumed_from"] is None and math.isfinite(again["test"]["overall"]["mae"]["mean"])


def test_without_the_bound_the_absurd_run_writes_huge_metrics(tmp_path):
    absurd = ["optimizer.lr=1e4", "trainer.gradient_clip_val=null", "logger=none"]
    cfg = compose_train(tmp_path, [*TINY, *absurd, "module.diverge_factor=null"])
    results = train(cfg)  # what the check prevents: finite, meaningless scores
    assert (Path(cfg.paths.output_dir) / "metrics.json").exists()
    assert results["test"]["overall"]["mae"]["mean"] > 100  # a trained run: ~10


class JumpsAtValidation(ForecastModel):
    """Repeats the last input step (times a weight); from its ``bad``-th validation on, it
    forecasts 1000 times that."""

    def __init__(self, output_steps: int, bad: int) -> None:
        super().__init__()
        self.output_steps = output_steps
        self.scale = nn.Parameter(torch.ones(()))
        self.bad = bad
        self.validations = 0

    def forward(self, x: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
        out = self.scale * x[:, -1:].expand(-1, self.output_steps, -1, -1)
        return out * 1000 if not self.training and self.validations >= self.bad else out


class CountValidations(L.Callback):
    def on_validation_epoch_start(self, trainer, module):
        if not trainer.sanity_checking:
            module.model.validations += 1


@pytest.mark.parametrize("bad", [2, 99])
def test_the_bound_is_the_mean_forecasts_mae_measured_at_the_first_validation(tiny_cfg, bad):
    cfg = tiny_cfg()
    datamodule, _ = build_datamodule(cfg, Path(cfg.paths.output_dir).parent)
    module = ForecastModule(JumpsAtValidation(3, bad), functools.partial(torch.optim.SGD, lr=0.01))
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=3,
        limit_train_batches=3,
        limit_val_batches=2,
        num_sanity_val_steps=2,
        callbacks=[CountValidations()],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    if bad == 99:  # a sane forecast: never stopped, and far below the bound
        trainer.fit(module, datamodule=datamodule)
        assert trainer.callback_metrics["val/mae"] < 0.5 * module.mean_forecast_mae
    else:
        with pytest.raises(TrainingDivergedError, match=r"validation of global step 6 \("):
            trainer.fit(module, datamodule=datamodule)
    # the reference: the MAE of the scaler's mean against the first two validation batches
    errors = []
    for batch in itertools.islice(datamodule.val_dataloader(), 2):
        target = module.scaler.inverse_transform(batch["y"])
        mean = module.scaler.inverse_transform(torch.zeros_like(target))
        errors.append((mean - target).abs()[batch["y_mask"].bool()])
    assert module.mean_forecast_mae == pytest.approx(float(torch.cat(errors).mean()), rel=1e-4)


@pytest.mark.parametrize("value", [0, -1, "ten", True, math.inf])
def test_a_bad_diverge_factor_is_one_line(tiny_cfg, value):
    with pytest.raises(UserError) as err:
        ForecastModule(NaNFromCall(3, 99), None, diverge_factor=value)
    assert str(err.value) == (
        f"module.diverge_factor={value!r}: use a number > 0 (a validation MAE more than this "
        "many times that of forecasting the training mean stops the run; default 10) or null "
        "for no check."
    )


# ---------------------------------------------------------------- user input
def bad_cell_file(path: Path) -> Path:
    """A small long-format file whose channel ``no2`` holds the text 'n/d' in data row 7
    (point p1, at 01:00)."""
    times = pd.date_range("2024-01-01", periods=60, freq="1h")
    rows = [
        {"timestamp": t, "id": f"p{i}", "x": i % 3, "y": i // 3, "no2": float(s + i)}
        for s, t in enumerate(times)
        for i in range(6)
    ]
    df = pd.DataFrame(rows).astype({"no2": object})
    df.loc[7, "no2"] = "n/d"
    df.to_csv(path, index=False)
    return path


def test_a_bad_data_file_stops_train_py_with_one_line_and_no_traceback(tmp_path):
    path = bad_cell_file(tmp_path / "fleet.csv")
    proc = run_python(
        "train.py",
        "data=points",
        f"data.source.path={path}",
        "logger=none",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "not finite numbers" in line]
    assert errors == [
        f"file {path}: 1 channel value(s) are not finite numbers: point p1, time 2024-01-01 "
        "01:00:00, column 'no2': 'n/d'. Leave missing readings empty (or NA) and remove units "
        "or text from the cells, or set bad_values=warn (data.source.bad_values=warn) to treat "
        "them as missing."
    ]


def test_a_user_error_in_a_constructor_is_not_wrapped_by_hydra(tmp_path):
    path = bad_cell_file(tmp_path / "fleet.csv")
    overrides = ["data=points", f"data.source.path={path}", "data.source.bad_values=skip"]
    cfg = compose_train(tmp_path, overrides)
    with pytest.raises(UserError) as err:
        build_datamodule(cfg, tmp_path)
    assert type(err.value) is UserError  # not Hydra's InstantiationException around it
    assert str(err.value) == "bad_values='skip': use one of ['error', 'warn']."


# ---------------------------------------------------------------- data cache
def flip_a_value_byte(path: Path) -> None:
    """Corrupt one byte inside the cached values (after the .npy header): only the stored
    checksum can tell."""
    values = path / "values.npy"
    data = bytearray(values.read_bytes())
    data[len(data) - 100] ^= 0xFF
    values.write_bytes(bytes(data))


def cut_in_half(path: Path) -> None:
    values = path / "values.npy"
    values.write_bytes(values.read_bytes()[: values.stat().st_size // 2])


def drop_the_mask(path: Path) -> None:
    (path / "mask.npy").unlink()


@pytest.mark.parametrize("damage", [cut_in_half, flip_a_value_byte, drop_the_mask])
def test_a_damaged_data_cache_is_detected_logged_and_rebuilt(tmp_path, caplog, damage):
    kw = dict(num_points=12, num_channels=2, num_steps=100, grid_size=16, cache_dir=tmp_path)
    gen = SyntheticAdvectionDiffusion(**kw)
    fresh = np.array(gen.load().values)  # a copy: the damage changes the mapped file
    damage(gen.cache_path)
    with caplog.at_level(logging.WARNING, logger="cloudlstm.data.cache"):
        rebuilt = SyntheticAdvectionDiffusion(**kw).load()
    assert f"Data cache {gen.cache_path} is unreadable" in caplog.text
    assert "rebuilding it" in caplog.text
    np.testing.assert_array_equal(rebuilt.values, fresh)
    with rebuilding_fails(SyntheticAdvectionDiffusion, "generate"):  # rewritten, valid again
        again = SyntheticAdvectionDiffusion(**kw)
        np.testing.assert_array_equal(again.load().values, fresh)
    assert again.last_load_from_cache
