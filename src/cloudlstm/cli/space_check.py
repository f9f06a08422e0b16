"""Does space matter on the synthetic data, and do these models use it?

``python -m cloudlstm.cli.space_check`` trains, with the real Lightning ``Trainer``, the same
number of epochs (15 by default) on the same small synthetic stream (the physics of
``conf/data/synthetic.yaml``, smaller sizes):

* ``lstm_k1``: a seq2seq LSTM shared by all points, each point fed only its own history;
* ``lstm_k6``: the same LSTM also fed its 5 nearest neighbours' histories;
* ``cloudlstm_k1`` / ``cloudlstm_k6``: a small seq2seq CloudLSTM with K = 1 / 6.

For every data seed it prints the normalised test MSE (best validation checkpoint) and its
ratio to ``lstm_k1``; below 1 means the model beat the per-point LSTM. Its models, sizes
and training are those of ``tests/test_spatial.py`` (see ``docs/design.md``), kept runnable so
that changes to the generator or to CloudLSTM can be checked in one command, e.g.
``python -m cloudlstm.cli.space_check --seeds 0 1 2 --models lstm_k1 cloudlstm_k6``.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import OmegaConf

from cloudlstm.data import PointCloudDataModule, SyntheticAdvectionDiffusion
from cloudlstm.models import KNNLSTM, CloudSeq2Seq
from cloudlstm.models.base import ForecastModel
from cloudlstm.paths import config_dir
from cloudlstm.training import ForecastModule

CONF_DIR = config_dir()

# (B, M, N, C) sizes of the check: small enough for a CPU, long enough that the test period
# is not one unusual week (at 700 steps the neighbour gain swings between seeds).
NUM_POINTS, NUM_CHANNELS, NUM_STEPS, GRID_SIZE, STEPS_IN, STEPS_OUT = 24, 2, 1500, 32, 6, 6

# CloudLSTM's validation loss is still falling steeply after 6 epochs (it passes the LSTMs'
# plateau around epoch 5); by 15 every model has levelled off.
EPOCHS = 15

MODELS: dict[str, Callable[[], ForecastModel]] = {
    "lstm_k1": lambda: KNNLSTM(NUM_CHANNELS, STEPS_OUT, k=1, hidden_size=32),
    "lstm_k6": lambda: KNNLSTM(NUM_CHANNELS, STEPS_OUT, k=6, hidden_size=32),
    "cloudlstm_k1": lambda: CloudSeq2Seq(NUM_CHANNELS, STEPS_OUT, k=1, hidden_channels=16),
    "cloudlstm_k6": lambda: CloudSeq2Seq(NUM_CHANNELS, STEPS_OUT, k=6, hidden_channels=16),
}


def synthetic_datamodule(seed: int, cache_dir: Path, num_steps: int = NUM_STEPS):
    """The default generator's physics (``conf/data/synthetic.yaml``) at the check's size."""
    cfg = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "data/synthetic.yaml").source)
    args = {k: v for k, v in cfg.items() if k not in ("_target_", "cache_dir")}
    args.update(
        num_points=NUM_POINTS,
        num_channels=NUM_CHANNELS,
        num_steps=num_steps,
        grid_size=GRID_SIZE,
        seed=seed,
    )
    source = SyntheticAdvectionDiffusion(**args, cache_dir=cache_dir)
    return PointCloudDataModule(source, input_steps=STEPS_IN, output_steps=STEPS_OUT, batch_size=16)


def fit_and_test(
    make_model: Callable[[], ForecastModel],
    datamodule: PointCloudDataModule,
    epochs: int,
    workdir: Path,
) -> float:
    """Build the model, train ``epochs`` epochs (Adam 3e-3, clip 1), return the normalised
    test MSE of the best validation checkpoint. Seeds torch before building the model, so
    equal calls give equal results."""
    L.seed_everything(0, verbose=False)
    module = ForecastModule(make_model(), optimizer=partial(torch.optim.Adam, lr=3e-3))
    checkpoint = ModelCheckpoint(dirpath=workdir, monitor="val/loss", save_top_k=1)
    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        logger=False,
        callbacks=[checkpoint],
        default_root_dir=workdir,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=1.0,
    )
    trainer.fit(module, datamodule=datamodule)
    result = trainer.test(
        module, datamodule=datamodule, ckpt_path="best", weights_only=False, verbose=False
    )
    return result[0]["test/loss"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args(argv)
    if args.models[0] != "lstm_k1":
        args.models = ["lstm_k1"] + [m for m in args.models if m != "lstm_k1"]
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")

    print("| seed | model | test MSE | vs lstm_k1 | fit s |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            datamodule = synthetic_datamodule(seed, Path(tmp) / "data")
            base = float("nan")  # set by lstm_k1, always trained first
            for name in args.models:
                start = time.perf_counter()
                mse = fit_and_test(MODELS[name], datamodule, args.epochs, Path(tmp) / name)
                base = mse if name == "lstm_k1" else base
                took = time.perf_counter() - start
                row = f"| {seed} | {name} | {mse:.4f} | {mse / base:.3f} | {took:.0f} |"
                print(row, flush=True)


if __name__ == "__main__":
    main()
