"""What a run shows on its W&B dashboard beside the curves: each validation curve summarised
by its best value, and at the end of a test, tables of the metrics per horizon, channel and
point group, a line plot of error against horizon, the figures and the cost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import WandbLogger

from cloudlstm.engine.declared_metrics import declared, metric_names
from cloudlstm.engine.module import PERSISTENCE_KEY
from cloudlstm.engine.quantile_metrics import QUANTILE_DECLARED, is_quantile_metric


def best_summaries() -> dict[str, str]:
    """The curves whose best value (``min`` or ``max``) is the W&B run summary: the losses,
    every metric declared ``at_validation`` and persistence's validation MAE."""
    return {
        "val/loss": "min",
        "train/loss": "min",
        **{f"val/{m.name}": m.best for m in (*declared(), *QUANTILE_DECLARED) if m.at_validation},
        PERSISTENCE_KEY: "min",  # measured once: the same value at every validation
    }


def define_wandb_metrics(loggers: list[Any]) -> None:
    """Make the W&B summary of each validation curve its best value, not its last one."""
    for logger in _wandb(loggers):
        for key, best in best_summaries().items():
            logger.experiment.define_metric(key, step_metric="trainer/global_step", summary=best)


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
    metrics += [m for m in first if is_quantile_metric(m)]  # with module.quantiles
    return wandb.Table(
        columns=[label, *(f"{m}{s}" for m in metrics for s in ("", "_std"))],
        data=[
            [name, *(stats[m][s] for m in metrics for s in ("mean", "std"))]
            for name, stats in rows.items()
        ],
    )


def _wandb(loggers: list[Any]) -> list[WandbLogger]:
    return [lg for lg in loggers if isinstance(lg, WandbLogger)]
