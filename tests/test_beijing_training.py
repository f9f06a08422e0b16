"""Slow: CloudLSTM and a per-point LSTM train for a few minutes on the real Beijing data.

The numbers must be sane: finite, and better than predicting the training mean (the
forecast a model that learned nothing would converge to). Run with
``pytest -m slow tests/test_beijing_training.py``; skipped without the shared data copy.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import ROOT, compose_train

from cloudlstm.cli.train import train
from cloudlstm.data.pipeline.datamodule import PointCloudDataModule
from cloudlstm.data.sources.beijing import BeijingSource
from cloudlstm.engine.metrics import ForecastMetrics

BEIJING = ROOT.parent / "shared" / "data" / "beijing_multisite"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not BEIJING.is_dir(), reason=f"the Beijing data copy is not at {BEIJING}"),
]

BUDGET = [
    "data=beijing",
    f"data.source.root={BEIJING}",
    "logger=none",
    "trainer=cpu",
    "trainer.min_epochs=0",  # else the time budget waits for a whole (long) epoch
    "trainer.max_epochs=100",
    "trainer.max_time=00:00:01:30",
    "trainer.val_check_interval=100",
    "trainer.enable_progress_bar=false",
    "trainer.limit_val_batches=40",
    "~callbacks.progress_bar",
    "~callbacks.model_summary",
    "torch_threads=2",
]


def _training_mean_scores(dm: PointCloudDataModule) -> dict:
    """Test metrics of forecasting every value as its channel's training mean."""
    metrics = ForecastMetrics(dm.output_steps, dm.num_channels)
    for batch in dm.test_dataloader():
        target = dm.scaler.inverse_transform(batch["y"])
        mean = dm.scaler.inverse_transform(torch.zeros_like(batch["y"]))
        metrics.update(mean, target, batch["y_mask"])
    return metrics.compute()["overall"]


@pytest.mark.parametrize(
    "model",
    [
        ["model=cloudlstm", "model.k=6", "model.hidden_channels=16"],
        ["model=knn_lstm", "model.k=1", "model.hidden_size=64"],
    ],
    ids=["cloudlstm", "lstm_per_point"],
)
def test_models_beat_the_training_mean(tmp_path, model):
    cfg = compose_train(tmp_path, [*BUDGET, *model])
    results = train(cfg)
    scores = results["test"]["overall"]
    for name in ("mae", "rmse", "psnr", "ssim"):
        assert math.isfinite(scores[name]["mean"]), name
    source = BeijingSource(BEIJING, cache_dir=tmp_path / "data" / "beijing")
    dm = PointCloudDataModule(source, input_steps=12, output_steps=12, batch_size=64)
    baseline = _training_mean_scores(dm)
    assert scores["mae"]["mean"] < 0.9 * baseline["mae"]["mean"]
    assert scores["rmse"]["mean"] < 0.9 * baseline["rmse"]["mean"]
