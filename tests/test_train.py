"""End to end through Hydra, Lightning and W&B offline: what lands on disk."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import torch
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from cloudlstm.cli.train import train
from tests.conftest import PYTHON, ROOT, TINY, compose_train, subprocess_env

METRICS = ("mae", "rmse", "psnr", "ssim")


def not_standard_json(constant: str) -> None:
    """``json.loads``' hook for NaN and Infinity, which only Python's json reads."""
    raise AssertionError(f"{constant} is no JSON value")


def test_run_writes_config_metrics_checkpoints_and_wandb(tiny_cfg):
    cfg = tiny_cfg("logger=wandb", "module.save_predictions=true")
    results = train(cfg)
    run = Path(cfg.paths.output_dir)

    job = OmegaConf.load(run / "config.yaml")  # the composed job, resolved
    assert job.model.k == 3 and job.model.hidden_channels == 4 and job.data.output_steps == 3
    assert "hydra" not in job and "data_info" not in job  # nothing is written into the config
    assert "num_points" not in job.model  # the sizes come from the data's description
    spec = torch.load(next((run / "checkpoints").glob("epoch_*.ckpt")), weights_only=False)
    assert len(spec["data_spec"]["point_ids"]) == 12 and "PointCloudDataModule" not in spec
    saved = json.loads((run / "metrics.json").read_text(), parse_constant=not_standard_json)
    assert saved == json.loads(json.dumps(results))
    test = saved["test"]
    for name in METRICS:
        stats = test["overall"][name]
        assert set(stats) == {"mean", "std"} and stats["std"] >= 0
        assert len(test["per_step"][name]["mean"]) == 3  # J
    assert set(test["per_channel"]) == set(saved["data"]["channel_names"])
    assert test["overall"]["mae"]["mean"] > 0 and test["pooled"]["rmse"] >= test["pooled"]["mae"]
    assert saved["num_params"] > 0 and saved["train_time_s"] > 0

    ckpts = {p.name for p in (run / "checkpoints").iterdir()}
    assert "last.ckpt" in ckpts and any(n.startswith("epoch_") for n in ckpts)
    assert Path(saved["checkpoint"]).name.startswith("epoch_")  # tested with the best

    with __import__("numpy").load(run / "predictions.npz") as npz:
        assert npz["prediction"].shape == npz["target"].shape
        assert npz["prediction"].shape[1:] == (3, 12, 2)  # (windows, J, N, C)

    offline = list((run / "wandb").glob("offline-run-*"))
    assert len(offline) == 1, "one offline W&B run per job"
    log = next(offline[0].glob("run-*.wandb")).read_bytes()  # what `wandb sync` uploads
    for content in (
        b"cloudlstm-synthetic-",
        b"-k3-h4-s42",  # the run name: model, data, command-line keys, seed
        b"k=3",
        b"hidden_channels",
        b"num_params",
        b"train/loss",
        b"val/loss",
        b"test/mae",
        b"test/ssim",
    ):
        assert content in log, content


def test_csv_logger_records_losses_and_test_metrics(tiny_cfg):
    cfg = tiny_cfg("logger=csv")
    train(cfg)
    csv = next(Path(cfg.paths.output_dir).glob("csv/version_*/metrics.csv")).read_text()
    header = csv.splitlines()[0].split(",")
    for column in ("train/loss", "val/loss", "test/mae", "test/rmse", "test/psnr", "test/ssim"):
        assert column in header


def test_the_tested_checkpoint_is_the_epoch_of_least_validation_loss(tmp_path):
    # lr=1 makes the tiny model diverge after its first epoch, so the best epoch is not the
    # last one and testing the final weights would be caught. (last.ckpt would not: Lightning
    # 2.6 rewrites it only when a new best is saved, so here it holds epoch 0 as well.)
    base = [o for o in TINY if not o.startswith("trainer.max_epochs")]
    cfg = compose_train(tmp_path, [*base, "trainer.max_epochs=4", "optimizer.lr=1.0", "logger=csv"])
    results = train(cfg)
    log = pd.read_csv(next(Path(cfg.paths.output_dir).glob("csv/version_*/metrics.csv")))
    val = log.dropna(subset=["val/loss"]).set_index("epoch")["val/loss"]
    assert list(val.index) == [0, 1, 2, 3]
    best = int(val.idxmin())
    assert best != val.index[-1], f"the best epoch must not be the last here: {val.to_dict()}"
    tested = torch.load(  # metrics.json names it relative to the run directory
        Path(cfg.paths.output_dir) / results["checkpoint"], map_location="cpu", weights_only=False
    )
    assert tested["epoch"] == best, f"tested epoch {tested['epoch']}, val/loss {val.to_dict()}"
    # metrics.json records the tested checkpoint's validation score, not the last one's
    monitored = log.dropna(subset=[cfg.monitor]).set_index("epoch")[cfg.monitor]
    assert results["selection"] == {
        "monitor": cfg.monitor,
        "score": pytest.approx(float(monitored.min()), rel=1e-6),
    }
    assert int(monitored.idxmin()) == tested["epoch"]


def test_no_logger_with_default_callbacks(tiny_cfg):
    cfg = tiny_cfg("logger=none")
    results = train(cfg)
    assert Path(results["checkpoint"]).name.startswith("epoch_")
    assert "test" in json.loads((Path(cfg.paths.output_dir) / "metrics.json").read_text())


def test_no_logger_and_no_callbacks_still_write_metrics(tiny_cfg):
    cfg = tiny_cfg("logger=none", "callbacks=none")
    results = train(cfg)
    # Lightning's own default checkpoint holds the final weights, which are tested
    assert Path(results["checkpoint"]).name == "epoch=1-step=6.ckpt"
    assert (Path(cfg.paths.output_dir) / "metrics.json").exists()


def test_k_larger_than_point_count_is_a_clear_error(tiny_cfg):
    from cloudlstm.nn import NeighbourCountError

    with pytest.raises(NeighbourCountError, match=r"model\.k"):
        train(tiny_cfg("model.k=40", "logger=none"))


@pytest.mark.parametrize("override", ["model.kk=3", "model=cloudlstmm", "trainer.max_epoch=1"])
def test_config_typos_are_refused_with_the_key(tmp_path, override):
    with pytest.raises(ConfigCompositionException) as err:
        compose_train(tmp_path, [override])
    message = str(err.value) + str(err.value.__cause__)
    assert override.split("=")[0].split(".")[-1] in message or "cloudlstmm" in message


@pytest.mark.slow  # four jobs in two joblib processes: about 18 s
def test_joblib_multirun_gives_each_job_its_own_run(tmp_path):
    env = subprocess_env()
    sweep = tmp_path / "sweep"
    cmd = [
        *PYTHON,
        "train.py",
        "-m",
        "model.k=2,3",
        "model.cell=lstm,gru",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        f"hydra.sweep.dir={sweep}",
        f"paths.data_dir={tmp_path / 'data'}",
        "torch_threads=1",
        "logger=wandb",
        *[a for a in TINY if not a.startswith(("trainer.max_epochs", "model.k="))],
        "trainer.max_epochs=1",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit())
    assert [p.name for p in jobs] == ["0", "1", "2", "3"]
    seen = set()
    for job in jobs:
        metrics = json.loads((job / "metrics.json").read_text())
        seen.add((metrics["run"]["name"], tuple(metrics["run"]["tags"])))
        assert len(list((job / "wandb").glob("offline-run-*"))) == 1
    assert len(seen) == 4, "each job has its own settings, name and tags"
    # The comparison table has a row per setting (the swept keys), best MAE first.
    from cloudlstm.compare import compare, find_runs, to_markdown

    table = compare(find_runs([sweep]))
    cells = {c.name: c.cells for c in table}
    assert list(cells)[:5] == ["model", "data", "model.cell", "model.k", "n"]
    assert sorted(zip(cells["model.cell"], cells["model.k"], strict=True)) == [
        (c, k) for c in ("gru", "lstm") for k in ("2", "3")
    ]
    maes = [s.mean for s in cells["mae"]]
    assert cells["n"] == [1, 1, 1, 1] and maes == sorted(maes)
    assert to_markdown(table).count("\n") == 5
