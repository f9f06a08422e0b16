"""End-to-end check that space matters in the synthetic data for learned, shared models.

A seq2seq LSTM shared by all stations (``KNNLSTM``) is trained with the real Lightning
``Trainer``, ``PointCloudDataModule`` and ``ForecastModule`` once on each station's own history
(``k=1``) and once also fed its 5 nearest neighbours (``k=6``); with the default physics of
``conf/data/synthetic.yaml`` (at a small size) the neighbours must lower the test MSE clearly.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

import lightning as L
import pytest
import torch
from omegaconf import OmegaConf

from cloudlstm.data import PointCloudDataModule, SyntheticAdvectionDiffusion
from cloudlstm.lit import ForecastModule
from cloudlstm.models import KNNLSTM

ROOT = Path(__file__).resolve().parents[1]
N, C, T, G, M, J = 24, 2, 700, 32, 6, 6


def _test_mse(model: torch.nn.Module, seed: int, cache_dir: Path, epochs: int) -> float:
    cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "conf/data/synthetic.yaml").source)
    args = {k: v for k, v in cfg.items() if k not in ("_target_", "cache_dir")}
    args.update(num_points=N, num_channels=C, num_steps=T, grid_size=G, seed=seed)
    source = SyntheticAdvectionDiffusion(**args, cache_dir=cache_dir)
    dm = PointCloudDataModule(source, input_steps=M, output_steps=J, batch_size=16)
    module = ForecastModule(model, optimizer=partial(torch.optim.Adam, lr=3e-3))
    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=1.0,
    )
    trainer.fit(module, datamodule=dm)
    return trainer.test(module, datamodule=dm, verbose=False)[0]["test/loss"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 2])
def test_neighbours_help_a_shared_lstm(seed, tmp_path):
    logging.getLogger("lightning").setLevel(logging.ERROR)
    mse = {}
    for k in (1, 6):
        L.seed_everything(0)
        mse[k] = _test_mse(KNNLSTM(C, J, k=k, hidden_size=32), seed, tmp_path, epochs=6)
    assert mse[1] < 0.6, f"seed {seed}: test MSE {mse} (normalised) is not well below 1"
    assert mse[6] < 0.9 * mse[1], f"seed {seed}: test MSE k=1 vs k=6: {mse}"
