"""Calibrated intervals on a stream with known Gaussian noise.

Every point's series is a daily cycle (its own phase) plus independent Gaussian noise of
standard deviation :data:`SIGMA`: what a forecast cannot know is that noise, so an 80 %
interval of a good forecaster is about ``2 x 1.2816 SIGMA`` wide and, calibrated on the
validation split, covers 80 % of the test targets. The linear model trained for its
quantiles has the median of one trained for the point forecast alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import compose_train

from cloudlstm.cli.train import train

T, N, SIGMA = 2000, 24, 2.0
NORMAL_80 = 1.2816  # the 0.9 quantile of N(0, 1)
SEEDS = (0, 1)


def gaussian_stream(path: Path) -> Path:
    """``T`` hourly steps at ``N`` points, one channel: ``50 + 20 sin(2 pi t / 24 + phase)``
    plus N(0, SIGMA^2) noise, as a long-format CSV."""
    rng = np.random.default_rng(0)
    t = np.arange(T)[:, None]
    phase = rng.uniform(0, 2 * np.pi, (1, N))
    values = 50 + 20 * np.sin(2 * np.pi * t / 24 + phase) + rng.normal(0, SIGMA, (T, N))
    coords = rng.uniform(0, 10, (N, 2))
    stamps = pd.Timestamp("2021-01-01") + pd.to_timedelta(np.arange(T), unit="h")
    frame = pd.DataFrame(
        {
            "timestamp": np.repeat(stamps, N),
            "id": np.tile([f"p{p:02d}" for p in range(N)], T),
            "x": np.tile(coords[:, 0], T),
            "y": np.tile(coords[:, 1], T),
            "value": values.ravel(),
        }
    )
    frame.to_csv(path, index=False)
    return path


def run(tmp: Path, stream: Path, seed: int, *extra: str) -> dict:
    """The test results of the linear model under the default recipe, 600 steps."""
    overrides = [
        "data=points",
        f"data.source.path={stream}",
        "data.input_steps=24",
        "data.output_steps=3",
        "model=linear",
        f"seed={seed}",
        "trainer=cpu",
        "trainer.max_steps=600",
        "trainer.val_check_interval=200",
        "scheduler.warmup_steps=20",
        "optimizer.lr=5e-3",
        "trainer.enable_progress_bar=false",
        "~callbacks.progress_bar",
        "~callbacks.model_summary",
        "logger=none",
        "report.figures=false",
        *extra,
    ]
    name = "-".join([str(seed), *(e.split("=")[0].split(".")[-1] for e in extra)])
    return train(compose_train(tmp / name, overrides))["test"]


@pytest.mark.slow
def test_calibrated_80_percent_intervals_cover_80_percent_and_the_median_is_the_point_fit(
    tmp_path,
):
    stream = gaussian_stream(tmp_path / "gaussian.csv")
    quantile = {
        seed: run(
            tmp_path,
            stream,
            seed,
            "module.quantiles=[0.1,0.5,0.9]",
            "module.calibrate=conformal",
        )
        for seed in SEEDS
    }
    point = {seed: run(tmp_path, stream, seed) for seed in SEEDS}
    ideal = 2 * NORMAL_80 * SIGMA
    for seed, test in quantile.items():
        coverage = test["overall"]["coverage80"]["mean"]
        assert abs(coverage - 0.8) <= 0.03, (seed, coverage, test["uncalibrated"]["overall"])
        # no narrower than the noise allows, and not much wider
        width = test["overall"]["width80"]["mean"]
        assert ideal * 0.95 <= width <= ideal * 1.3, (seed, width, ideal)
    # the median is the point forecast of a model trained for it alone, within seed noise
    mae_q = np.mean([quantile[s]["overall"]["mae"]["mean"] for s in SEEDS])
    mae_p = np.mean([point[s]["overall"]["mae"]["mean"] for s in SEEDS])
    seed_noise = max(
        abs(point[0]["overall"]["mae"]["mean"] - point[1]["overall"]["mae"]["mean"]),
        abs(quantile[0]["overall"]["mae"]["mean"] - quantile[1]["overall"]["mae"]["mean"]),
    )
    assert abs(mae_q - mae_p) <= max(2 * seed_noise, 0.01 * mae_p), (mae_q, mae_p, seed_noise)
    # and about the noise's own MAE, sqrt(2 / pi) SIGMA: the cycle is learnt
    assert mae_p < 1.2 * np.sqrt(2 / np.pi) * SIGMA
