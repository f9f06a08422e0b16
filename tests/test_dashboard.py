"""What one offline W&B run holds after `python train.py logger=wandb` (issue: dashboard).

Read back from the run file that `wandb sync` uploads, so nothing is mocked.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import hydra
import numpy as np
import pytest
import torch
from matplotlib.image import imread

from cloudlstm.assembly.checkpoint_fit import TrainedCheckpoint
from cloudlstm.cli.train import train
from cloudlstm.engine.module import ForecastModule
from cloudlstm.models.build import build_model
from tests.conftest import TINY, compose_train
from tests.wandb_reader import finished_run

FIGURES = ("forecast_maps", "worst_points", "error_vs_horizon")


def assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    image = imread(path)
    assert image.ndim == 3 and min(image.shape[:2]) > 100


@pytest.fixture(scope="module")
def wandb_run(tmp_path_factory):
    """One tiny training run with outlier groups, logged to W&B offline."""
    tmp = tmp_path_factory.mktemp("dash")
    cfg = compose_train(
        tmp,
        [
            *TINY,
            "logger=wandb",
            "report.figures=true",
            "trainer.log_every_n_steps=1",
            "data.outlier_shift=1",
            "data.outlier_count=3",
            "model.cell=gru",
            "seed=7",
        ],
    )
    results = train(cfg)
    run_dir = Path(cfg.paths.output_dir)
    return cfg, results, run_dir, finished_run(run_dir)[1]


def test_identity_name_group_tags_and_whole_config(wandb_run):
    cfg, results, run_dir, run = wandb_run
    assert run.name == results["run"]["name"]
    # model and data keys set on the command line, in their order, then the seed
    assert run.name.startswith("cloudlstm-synthetic-") and run.name.endswith("-gru-s7")
    assert {"k3", "h4", "shift1", "m4", "j3"} <= set(run.name.split("-"))
    assert run.group == "cloudlstm-synthetic"
    assert {"cloudlstm", "synthetic", "k=3", "cell=gru", "seed=7"} <= set(run.tags)
    assert run.run_id == (run_dir / "wandb_run_id.txt").read_text().strip()
    # the resolved config, nested, so the dashboard can filter by model.k etc.
    assert run.config["model"]["k"] == 3 and run.config["model"]["cell"] == "gru"
    assert run.config["data"]["outlier_shift"] == 1 and run.config["seed"] == 7
    assert run.config["num_params"] == results["num_params"]


def test_curves_in_real_units_with_best_so_far_summaries(wandb_run):
    cfg, results, run_dir, run = wandb_run
    for key in (
        "val/mae",
        "val/rmse",
        "val/mae_best",
        "train/loss_step",
        "lr-AdamW",
        "perf/epoch_time_s",
        "perf/train_samples_per_s",
        "perf/train_s_per_1k_steps",
    ):
        values = run.series(key)
        assert values and all(math.isfinite(v) for v in values), key
    assert len(run.series("val/mae")) == cfg.trainer.max_epochs
    assert len(run.series("train/loss_step")) == cfg.trainer.max_epochs * 3  # every batch
    best = run.series("val/mae_best")
    assert best == list(np.minimum.accumulate(run.series("val/mae")))
    for key in ("val/mae", "val/rmse", "val/loss"):
        assert run.metric_summaries[key] == ["min"], key


def test_val_mae_is_the_real_unit_error_of_the_model(wandb_run):
    """The last logged val/mae equals numpy's MAE of the final model on de-normalised data."""
    cfg, results, run_dir, run = wandb_run
    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.setup("fit")
    trained = TrainedCheckpoint.read(run_dir / "checkpoints" / "last.ckpt")
    ckpt, spec = trained.contents, trained.forecasting_spec()
    model = build_model(cfg.model, spec)
    module = ForecastModule(model, optimizer=None, spec=spec, anchor=cfg.module.anchor)
    module.load_state_dict(ckpt["state_dict"])
    module.eval()
    errors = []
    with torch.no_grad():
        for batch in datamodule.val_dataloader():
            pred = module(batch["x"], batch["coords"])  # anchored as in training
            real = datamodule.scaler.inverse_transform(pred.numpy())
            errors.append(np.abs(real - datamodule.scaler.inverse_transform(batch["y"].numpy())))
    # all observed and equal-sized snapshots: the mean over instances is the plain mean
    limit = cfg.trainer.limit_val_batches * cfg.data.batch_size
    expected = np.concatenate(errors)[:limit].mean()
    assert run.series("val/mae")[-1] == pytest.approx(expected, rel=1e-5)


def test_test_results_per_horizon_channel_group_and_cost(wandb_run):
    cfg, results, run_dir, run = wandb_run
    test = results["test"]
    horizons = len(test["per_step"]["mae"]["mean"])
    last = run.history[-1] | run.summary
    for h in range(horizons):
        assert last[f"test/mae_h{h + 1:02d}"] == pytest.approx(test["per_step"]["mae"]["mean"][h])
        assert last[f"test/rmse_h{h + 1:02d}"] == pytest.approx(test["per_step"]["rmse"]["mean"][h])
    media = run_dir / "wandb" / next((run_dir / "wandb").glob("offline-run-*")).name / "files"
    tables = {
        name: json.loads(next(media.rglob(f"{name}_*.table.json")).read_text())
        for name in ("horizon_table", "channel_table", "group_table")
    }
    horizon = tables["horizon_table"]
    assert [row[0] for row in horizon["data"]] == list(range(1, horizons + 1))
    mae_col = horizon["columns"].index("mae")
    assert [row[mae_col] for row in horizon["data"]] == pytest.approx(
        test["per_step"]["mae"]["mean"]
    )
    assert [row[0] for row in tables["channel_table"]["data"]] == list(test["per_channel"])
    assert [row[0] for row in tables["group_table"]["data"]] == ["inliers", "outliers"]
    plot = run.config["_wandb/visualize/test/mae_vs_horizon"]["panel_config"]  # line plot
    assert plot["fieldSettings"] == {"x": "horizon", "y": "mae", "stroke": None}
    assert run.summary["cost/params"] == results["num_params"]
    for key in (
        "epoch_time_s",
        "train_s_per_1k_steps",
        "inference_ms_per_sample",
        "peak_cpu_rss_mb",
    ):
        assert run.summary[f"cost/{key}"] > 0 and results["cost"][key] > 0
    # a CPU run: no GPU memory (gpu_memory_mb picks the key by the run's device)
    assert not {"peak_gpu_memory_mb", "mps_driver_memory_mb"} & set(results["cost"])
    # the whole run's figures (6 steps, 2 epochs), not those of the best checkpoint tested
    assert (
        results["steps"] == 6
        and results["cost"]["train_s_per_1k_steps"] < results["train_time_s"] * 1000 / 6
    )


def test_figures_are_pngs_in_the_run_dir_and_wandb_images(wandb_run):
    cfg, results, run_dir, run = wandb_run
    for name in FIGURES:
        assert_png(run_dir / "figures" / f"{name}.png")
        assert results["figures"][name] == f"figures/{name}.png"  # in the run directory
        assert (run_dir / results["figures"][name]).is_file()
        logged = [f for f in run.files if f.startswith(f"media/images/figures/{name}_")]
        assert len(logged) == 1, name
        assert_png(next(run_dir.glob(f"wandb/offline-run-*/files/{logged[0]}")))


@pytest.mark.parametrize("logger", ["csv", "none"])
def test_figures_are_written_without_wandb(tiny_cfg, logger):
    cfg = tiny_cfg(f"logger={logger}", "report.figures=true", "trainer.max_epochs=1")
    train(cfg)
    for name in FIGURES:
        assert_png(Path(cfg.paths.output_dir) / "figures" / f"{name}.png")
