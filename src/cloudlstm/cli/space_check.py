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

Each model is a run of ``train.py``'s config (:func:`check_config`: ``model=knn_lstm`` or
``model=cloudlstm``, ``data=synthetic``, ``recipe=paper`` with Adam at 3e-3, no learning-rate
schedule and no early stopping), put together by :func:`cloudlstm.assembly.assemble.assemble`, the
build path of every run.
"""

from __future__ import annotations

import argparse
import io
import logging
import sys
import tempfile
import time
import warnings
from contextlib import redirect_stdout
from pathlib import Path

import lightning as L
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict

from cloudlstm.assembly.assemble import assemble
from cloudlstm.cli.arguments import at_least_one, at_least_zero
from cloudlstm.errors import UserError, one_line_errors
from cloudlstm.paths import config_dir

# (B, M, N, C) sizes of the check: small enough for a CPU, long enough that the test period
# is not one unusual week (at 700 steps the neighbour gain swings between seeds).
NUM_POINTS, NUM_CHANNELS, NUM_STEPS, GRID_SIZE, STEPS_IN, STEPS_OUT = 24, 2, 1500, 32, 6, 6

# CloudLSTM's validation loss is still falling steeply after 6 epochs (it passes the LSTMs'
# plateau around epoch 5); by 15 every model has levelled off.
EPOCHS = 15

# Each model of the check: its config and the keys set over it.
MODELS: dict[str, list[str]] = {
    "lstm_k1": ["model=knn_lstm", "model.k=1", "model.hidden_size=32"],
    "lstm_k6": ["model=knn_lstm", "model.k=6", "model.hidden_size=32"],
    "cloudlstm_k1": ["model=cloudlstm", "model.k=1", "model.hidden_channels=16"],
    "cloudlstm_k6": ["model=cloudlstm", "model.k=6", "model.hidden_channels=16"],
}


def check_config(
    model: str,
    seed: int,
    epochs: int,
    workdir: Path,
    data_dir: Path,
    num_steps: int = NUM_STEPS,
) -> DictConfig:
    """``train.py``'s config of model ``model`` (a key of :data:`MODELS`) in the check: the
    default generator's physics (``conf/data/synthetic.yaml``) at the check's size and data
    seed ``seed``, cached under ``data_dir``; ``epochs`` epochs of the paper recipe (MSE on
    normalised values, gradients clipped at 1) with Adam at 3e-3 and no schedule; the
    checkpoint of the best validation loss tested, no early stopping, no logger; the run's
    files in ``workdir``."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                *MODELS[model],
                "data=synthetic",
                f"data.source.num_points={NUM_POINTS}",
                f"data.source.num_channels={NUM_CHANNELS}",
                f"data.source.num_steps={num_steps}",
                f"data.source.grid_size={GRID_SIZE}",
                f"data.source.seed={seed}",
                f"data.input_steps={STEPS_IN}",
                f"data.output_steps={STEPS_OUT}",
                "data.batch_size=16",
                "recipe=paper",
                "optimizer.lr=3e-3",
                "~scheduler",
                "trainer=cpu",
                f"trainer.max_epochs={epochs}",
                "trainer.enable_progress_bar=false",
                "+trainer.enable_model_summary=false",
                "logger=none",
                "seed=0",  # the models' initial weights: the same for every data seed
            ],
        )
    with open_dict(cfg):
        cfg.paths.root_dir = cfg.paths.work_dir = cfg.paths.output_dir = str(workdir)
        cfg.paths.data_dir = str(data_dir)
        # the best validation loss's checkpoint, tested; no early stopping, timers, summaries
        cfg.callbacks = {"model_checkpoint": cfg.callbacks.model_checkpoint}
    return cfg


def fit_and_test(cfg: DictConfig) -> float:
    """Assemble the run of ``cfg`` (see :func:`check_config`), train it, and return the
    normalised test MSE of its best validation checkpoint. Seeds torch with ``cfg.seed``
    before the model is built, so equal calls give equal results."""
    L.seed_everything(cfg.seed, verbose=False)
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    with redirect_stdout(io.StringIO()):  # the data's summary table: one per model, not ours
        job = assemble(cfg, output_dir, with_loggers=False)
    job.trainer.fit(job.module, datamodule=job.datamodule)
    result = job.trainer.test(
        job.module, datamodule=job.datamodule, ckpt_path="best", weights_only=False, verbose=False
    )
    return result[0]["test/loss"]


def main(argv: list[str] | None = None) -> int:
    """Print the table; 2 for a bad option (argparse's usage and one line) or a refusal
    met while training (one ``space_check: ...`` line)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=at_least_zero, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=at_least_one, default=EPOCHS)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args(argv)
    if args.models[0] != "lstm_k1":
        args.models = ["lstm_k1"] + [m for m in args.models if m != "lstm_k1"]
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")
    try:
        with one_line_errors():
            _print_table(args.seeds, args.models, args.epochs)
    except UserError as err:
        print(f"space_check: {err}", file=sys.stderr)
        return 2
    return 0


def _print_table(seeds: list[int], models: list[str], epochs: int) -> None:
    """Train and test each model on each data seed, a row as each is done."""
    print("| seed | model | test MSE | vs lstm_k1 | fit s |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            base = float("nan")  # set by lstm_k1, always trained first
            for name in models:
                start = time.perf_counter()
                workdir = Path(tmp) / f"s{seed}" / name
                cfg = check_config(name, seed, epochs, workdir, Path(tmp) / "data")
                mse = fit_and_test(cfg)
                base = mse if name == "lstm_k1" else base
                took = time.perf_counter() - start
                row = f"| {seed} | {name} | {mse:.4f} | {mse / base:.3f} | {took:.0f} |"
                print(row, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
