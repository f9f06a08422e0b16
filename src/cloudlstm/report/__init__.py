"""What a finished test adds to a run: its cost, figures, the W&B dashboard's tables, and a
short summary on the console.

Figures are PNG files in ``<run dir>/figures/`` whatever the logger; with ``logger=wandb``
they are also logged as images, beside tables of the per-horizon and per-channel metrics
and a line plot of error against horizon.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning as L
from omegaconf import DictConfig

from cloudlstm.report.cost import cost
from cloudlstm.report.dashboard import log_test_report
from cloudlstm.report.figures import draw_figures
from cloudlstm.rundir.layout import FIGURES_DIR, METRICS_FILE

log = logging.getLogger(__name__)

# The overall test metrics summarised on the console first, in this order (metrics.json
# holds the rest); any other declared metric follows them.
SUMMARY_METRICS = ("mae", "rmse", "mape", "smae", "psnr", "ssim")


def add_test_report(
    cfg: DictConfig,
    model_name: str,
    module: L.LightningModule,
    datamodule: Any,
    trainer: L.Trainer,
    loggers: list[Any],
    results: dict[str, Any],
    output_dir: Path,
) -> None:
    """Cost, figures (``report.figures``) and the W&B tables of a finished test, into
    ``results`` (whose ``test`` holds the test metrics); the figures are titled with
    ``model_name``, the model's config name (``cloudlstm``)."""
    options = cfg.get("report") or {}
    results["cost"] = cost(module, datamodule, trainer)
    figures = {}
    if options.get("figures", True):
        figures = draw_figures(
            module,
            datamodule,
            results["test"],
            output_dir / FIGURES_DIR,
            window=options.get("window", 0),
            channel=options.get("channel", 0),
            model_name=model_name,
        )
    # relative to the run directory: the record stays true when the folder moves
    results["figures"] = {
        name: Path(path).relative_to(output_dir).as_posix() for name, path in figures.items()
    }
    log_test_report(loggers, results, figures, results["cost"])
    # the overall metrics; Lightning's table of every metric at every step is turned off
    # (trainer.test(verbose=False)): metrics.json, written next, holds them
    print_test_summary(results["test"], output_dir / METRICS_FILE)


def print_test_summary(test: dict[str, Any], metrics_file: Path) -> None:
    """The overall test metrics in one small table, and where the rest is.

    ``test``: the ``test`` results of ``metrics.json``; Lightning's own table (every metric
    at every horizon, some 50 rows) is turned off with ``trainer.test(verbose=False)``.
    """
    from rich import get_console
    from rich.table import Table

    from cloudlstm.engine.declared_metrics import metric_names
    from cloudlstm.engine.quantile_metrics import is_quantile_metric

    overall = test.get("overall", {})
    order = [*SUMMARY_METRICS, *(m for m in metric_names() if m not in SUMMARY_METRICS)]
    order += [m for m in overall if is_quantile_metric(m)]  # with module.quantiles
    metrics = [m for m in order if m in overall]
    windows = test.get("num_instances")
    title = "test" + (f" ({windows} windows)" if windows else "")
    table = Table(title=title, header_style="bold")
    for metric in metrics:
        table.add_column(metric, justify="right")
    table.add_row(*(f"{overall[m]['mean']:.4g}" for m in metrics))
    get_console().print(table)
    log.info("Test results per forecast step, channel and point group: %s", metrics_file)
