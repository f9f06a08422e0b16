"""What a finished test adds to a run: figures, cost figures and the W&B dashboard items.

Figures are PNG files in ``<run dir>/figures/`` whatever the logger; with ``logger=wandb``
they are also logged as images, beside tables of the per-horizon and per-channel metrics
and a line plot of error against horizon.
"""

from __future__ import annotations

import logging
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig

from cloudlstm.callbacks import EpochTimer
from cloudlstm.cli.config import describe_run
from cloudlstm.cli.console import print_test_summary
from cloudlstm.errors import UserError
from cloudlstm.metrics import declared, metric_names
from cloudlstm.viz import plot_forecast_maps, plot_horizon_curve, plot_worst_series

log = logging.getLogger(__name__)


def best_summaries() -> dict[str, str]:
    """The curves whose best value (``min`` or ``max``) is the W&B run summary: the losses
    and every metric declared ``at_validation``."""
    return {
        "val/loss": "min",
        "train/loss": "min",
        **{f"val/{m.name}": m.best for m in declared() if m.at_validation},
    }


def define_wandb_metrics(loggers: list[Any]) -> None:
    """Make the W&B summary of each validation curve its best value, not its last one."""
    for logger in _wandb(loggers):
        for key, best in best_summaries().items():
            logger.experiment.define_metric(key, step_metric="trainer/global_step", summary=best)


def cost(module: L.LightningModule, datamodule: Any, trainer: L.Trainer) -> dict[str, Any]:
    """Parameters, time per epoch and per 1,000 training steps, inference time per sample
    and peak memory."""
    from cloudlstm.cli.assemble import count_parameters  # assemble imports this module

    timer = EpochTimer.of(trainer)
    out: dict[str, Any] = {
        "params": count_parameters(module.model),
        "epoch_time_s": timer.mean_epoch_time_s if timer else None,
        "train_s_per_1k_steps": timer.train_s_per_1k_steps if timer else None,
        "inference_ms_per_sample": inference_ms_per_sample(
            module.model, datamodule, batch=int(getattr(datamodule, "batch_size", 32) or 32)
        ),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["peak_gpu_memory_mb"] = torch.cuda.max_memory_allocated() / 2**20
    # ru_maxrss is in KiB on Linux: the process's peak resident memory so far
    out["peak_cpu_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def add_test_report(
    cfg: DictConfig,
    module: L.LightningModule,
    datamodule: Any,
    trainer: L.Trainer,
    loggers: list[Any],
    results: dict[str, Any],
    output_dir: Path,
) -> None:
    """Cost, figures (``report.figures``) and the W&B tables of a finished test, into
    ``results`` (whose ``test`` holds the test metrics)."""
    options = cfg.get("report") or {}
    results["cost"] = cost(module, datamodule, trainer)
    figures = {}
    if options.get("figures", True):
        figures = draw_figures(
            module,
            datamodule,
            results["test"],
            output_dir / "figures",
            window=int(options.get("window", 0)),
            channel=options.get("channel", 0),
            model_name=_model_name(cfg, results),
        )
    results["figures"] = {name: str(path) for name, path in figures.items()}
    log_test_report(loggers, results, figures, results["cost"])
    # the overall metrics; Lightning's table of every metric at every step is turned off
    # (trainer.test(verbose=False)): metrics.json, written next, holds them
    print_test_summary(results["test"], output_dir / "metrics.json")


@torch.no_grad()
def inference_ms_per_sample(
    model: torch.nn.Module, datamodule: Any, batch: int = 32, budget_s: float = 5.0
) -> float:
    """Forward time per window on a batch of up to ``batch`` test windows (the run's batch
    size): best of 3 after a warm-up, fewer once ``budget_s`` is spent (a city-size cloud's
    forward takes seconds, and this is a report, not a benchmark)."""
    dataset = datamodule.test_dataset
    if not dataset:
        return float("nan")
    items = [dataset[i] for i in range(min(batch, len(dataset)))]
    times = []
    with _evaluating(model) as device:
        inputs = model_inputs(items, device)
        model(*inputs)  # warm-up: first-call allocations and kernel selection
        while len(times) < 3 and sum(times) < budget_s:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            model(*inputs)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    return 1000 * min(times) / len(items)


def model_inputs(items: list[dict[str, torch.Tensor]], device: torch.device) -> list:
    """A forward's arguments from dataset items, batched on ``device``: ``x``, ``coords`` and,
    with time features, ``future``."""
    keys = [key for key in ("x", "coords", "future") if key in items[0]]
    return [torch.stack([it[key] for it in items]).to(device) for key in keys]


@contextmanager
def _evaluating(model: torch.nn.Module) -> Iterator[torch.device]:
    """The model in eval mode on its device (yielded), its training mode restored after."""
    was_training = model.training
    model.eval()
    try:
        yield next(model.parameters(), torch.empty(0)).device
    finally:
        model.train(was_training)


@torch.no_grad()
def draw_figures(
    module: L.LightningModule,
    datamodule: Any,
    results: dict[str, Any],
    out_dir: Path,
    window: int = 0,
    channel: int | str = 0,
    model_name: str | None = None,
) -> dict[str, Path]:
    """Maps and worst-point series of one test window, and the error-vs-horizon curve.

    The maps' title names ``model_name`` (default: the model's class) and the time of the
    window's first forecast step; their axes are the points' coordinates in the data's
    units. Returns ``{name: png path}``; empty if there is no test window.
    """
    dataset = datamodule.test_dataset
    if not dataset:
        return {}
    names = list(datamodule.channel_names)
    c = names.index(channel) if isinstance(channel, str) and channel in names else int(channel)
    if not 0 <= c < len(names):
        raise UserError(f"report.channel={channel}: the data has channels {names}")
    index = window % len(dataset)
    item = dataset[index]
    model = module.model
    with _evaluating(model) as device:
        # the module's forward: the forecast as trained (anchored on the last frame or not)
        pred = module(*model_inputs([item], device))[0].cpu()
    scaler = module.scaler  # the forecast channels' (the first of the input's)
    targets = {"x": item["x"][..., : len(names)], "y": item["y"]}
    real = {k: scaler.inverse_transform(v).numpy() for k, v in targets.items()}
    forecast = scaler.inverse_transform(pred).numpy()
    mask = item["y_mask"].numpy().astype(bool)
    out_dir.mkdir(parents=True, exist_ok=True)
    per_step = results["per_step"]
    coords, coord_names = _map_coords(datamodule, item["coords"].numpy())
    return {
        "forecast_maps": plot_forecast_maps(
            coords,
            real["y"],
            forecast,
            channel=c,
            channel_name=names[c],
            mask=mask,
            path=out_dir / "forecast_maps.png",
            model=model_name or type(model).__name__,
            start=_forecast_start(datamodule, dataset, index),
            window=index,
            coord_names=coord_names,
        ),
        "worst_points": plot_worst_series(
            real["x"],
            real["y"],
            forecast,
            channel=c,
            channel_name=names[c],
            point_ids=list(datamodule.stream.point_ids),
            mask=mask,
            path=out_dir / "worst_points.png",
        ),
        "error_vs_horizon": plot_horizon_curve(
            {"test": per_step["mae"]["mean"]},
            std={"test": per_step["mae"]["std"]},
            path=out_dir / "error_vs_horizon.png",
        ),
    }


def _model_name(cfg: DictConfig, results: dict[str, Any]) -> str:
    """The model's config name (``cloudlstm``): the trained run's (eval.py's results name
    it), else this job's."""
    return (results.get("run") or {}).get("model") or describe_run(cfg)["model"]


def _map_coords(datamodule: Any, normalised: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The points' coordinates in the data's own units (km, degrees) and their names; the
    model's normalised ones where the points move or the stream has none of its own."""
    stream = getattr(datamodule, "stream", None)
    coords = getattr(stream, "coords", None)
    if stream is None or stream.moving or coords is None or len(coords) != len(normalised):
        return normalised, ["x (normalised)", "y (normalised)"]
    source_names = list(getattr(getattr(datamodule, "source", None), "coord_cols", None) or [])
    names = source_names[:2] if len(source_names) >= 2 else ["x", "y"]
    return np.asarray(coords), names


def _forecast_start(datamodule: Any, dataset: Any, index: int) -> str | None:
    """The timestamp of a test window's first forecast step; None without timestamps."""
    timestamps = getattr(getattr(datamodule, "stream", None), "timestamps", None)
    if timestamps is None or not hasattr(dataset, "time_range"):
        return None
    first_target = dataset.time_range(index)[1]
    return str(np.datetime_as_string(timestamps[first_target], unit="m")).replace("T", " ")


def log_test_report(
    loggers: list[Any], results: dict[str, Any], figures: dict[str, Path], cost: dict[str, Any]
) -> None:
    """Tables, a line plot, images and the cost summary in each W&B run."""
    loggers = _wandb(loggers)
    if not loggers:
        return
    import wandb

    test = results["test"]
    per_step = test["per_step"]
    horizon = _metric_table(
        "horizon",
        {
            h + 1: {m: {s: values[s][h] for s in ("mean", "std")} for m, values in per_step.items()}
            for h in range(len(per_step["mae"]["mean"]))
        },
    )
    payload: dict[str, Any] = {
        "test/horizon_table": horizon,
        "test/mae_vs_horizon": wandb.plot.line(
            horizon, "horizon", "mae", title="test MAE against forecast horizon"
        ),
        "test/channel_table": _metric_table("channel", test["per_channel"]),
    }
    if "groups" in test:
        groups = {name: res["overall"] for name, res in test["groups"].items()}
        payload["test/group_table"] = _metric_table("group", groups)
    for name, path in figures.items():
        payload[f"figures/{name}"] = wandb.Image(str(path))
    for logger in loggers:
        logger.experiment.log(payload)
        logger.experiment.summary.update({f"cost/{k}": v for k, v in cost.items()})


def _metric_table(label: str, rows: dict[Any, dict[str, dict[str, float]]]) -> Any:
    """A W&B table with one row per name and ``<metric>``, ``<metric>_std`` columns: the
    declared metrics the results have."""
    import wandb

    first = next(iter(rows.values()), {})
    metrics = [m for m in metric_names() if m in first]
    return wandb.Table(
        columns=[label, *(f"{m}{s}" for m in metrics for s in ("", "_std"))],
        data=[
            [name, *(stats[m][s] for m in metrics for s in ("mean", "std"))]
            for name, stats in rows.items()
        ],
    )


def _wandb(loggers: list[Any]) -> list[WandbLogger]:
    return [lg for lg in loggers if isinstance(lg, WandbLogger)]
