"""The comparison as one W&B run (``--wandb``): tables, horizon curves and figures.

Offline by default, as every run of this project (``conf/logger/wandb.yaml``): the run is
written under ``<first folder>/wandb/offline-run-*`` (or ``$WANDB_DIR``) and published with
``wandb sync <that folder>``. It is logged online where the runs were
(``logger.wandb.offline=false``) or ``WANDB_MODE=online`` says so. It is named after
the sweep folder and joins the runs' W&B group when they share one (train.py records the
group in each ``metrics.json``), so it sits beside the sweep's runs on the dashboard.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cloudlstm.compare.cells import Column
from cloudlstm.compare.formats import plain_table
from cloudlstm.compare.groups import Group
from cloudlstm.compare.plots import figure_names, plot
from cloudlstm.compare.runs import CompareError, Run, read_yaml_mapping
from cloudlstm.compare.table import ranked, scored
from cloudlstm.errors import wandb_error_reason

PROJECT = "cloudlstm"  # conf/logger/wandb.yaml's, for runs whose config names none


def log_to_wandb(
    groups: Sequence[Group],
    table: Sequence[Column],
    sources: Sequence[Path],
    *,
    rank_metric: str,
    curve_metric: str,
) -> Path:
    """Log ``table`` (rows ranked by ``rank_metric``) and the ``curve_metric`` figures of
    ``groups`` into one W&B run; return the run's folder (what ``wandb sync`` takes).

    Per data set ``<data>/table`` (one row per setting: keys, n, mean and std of every
    metric), ``<data>/<metric>_vs_horizon`` (a line plot of the horizon curves),
    ``<data>/horizon_plot`` and ``<data>/bar_chart`` (the ``--plot`` PNGs); the summary
    names each data set's best setting.

    Raises:
        CompareError: W&B could not start the run (online without a login, ...).
    """
    import wandb

    runs = [run for g in groups for run in g.runs]
    rows = ranked(groups, rank_metric)  # the table's row order
    datasets = list(dict.fromkeys(g.data for g in rows))
    try:
        run = wandb.init(**_init_args(runs, sources, datasets, table))
    except Exception as err:  # W&B raises its own types (UsageError, CommError, ...)
        raise CompareError(f"W&B could not start the run: {wandb_error_reason(err)}") from None
    try:
        _log(run, wandb, rows, table, rank_metric, curve_metric)
        _log_searches(run, wandb, sources)
    except BaseException:
        run.finish(exit_code=1)  # marked failed, not left open until the process exits
        raise
    folder = Path(run.dir).parent  # run.dir is the run's files/ folder
    run.finish()
    return folder


def _log(
    run: Any,
    wandb: Any,
    rows: Sequence[Group],
    table: Sequence[Column],
    rank_metric: str,
    curve_metric: str,
) -> None:
    """Tables, line plots and figures of every data set, and each one's best setting."""
    datasets = list(dict.fromkeys(g.data for g in rows))
    with tempfile.TemporaryDirectory() as tmp:
        figures = plot(rows, curve_metric, Path(tmp))  # read by wandb.Image right away
        payload: dict[str, Any] = {}
        for data in datasets:
            payload |= _data_set(wandb, data, rows, table, curve_metric, figures)
        run.log(payload)
    for data in datasets:
        best = next(g for g in rows if g.data == data)  # rows are ranked, best first
        # the first row unscored (no value, or NaN): all are, and none is best
        if (mean := scored(best.metric(rank_metric))) is not None:
            run.summary[f"{data}/best"] = best.label
            run.summary[f"{data}/best_{rank_metric}"] = mean


def _log_searches(run: Any, wandb: Any, sources: Sequence[Path]) -> None:
    """The outcome of each hyperparameter search a folder holds (``hparams_search=optuna``
    writes ``optimization_results.yaml`` for the default study and
    ``optimization_results_<study>.yaml`` for another): its best value and parameters in the
    summary, the parameters' importance as ``search/param_importance``, under
    ``search/<folder>/`` and ``search/<study>/`` where several folders or studies share one
    comparison."""
    found = [(Path(source), path) for source in sources for path in _search_files(Path(source))]
    studies = {path.name for _, path in found}
    for source, path in found:
        results = read_yaml_mapping(path)
        parts = ["search"]
        if len(sources) > 1:
            parts.append(source.name)
        if len(studies) > 1:
            parts.append(str(results.get("study_name") or path.stem))
        prefix = "/".join(parts)
        for key in ("best_value", "best_params", "best_trial", "best_config"):
            if results.get(key) is not None:
                run.summary[f"{prefix}/{key}"] = results[key]
        importance = results.get("param_importance") or {}
        if importance:
            rows = [[name, float(share)] for name, share in importance.items()]
            table = wandb.Table(columns=["parameter", "importance"], data=rows)
            run.log({f"{prefix}/param_importance": table})


def _search_files(folder: Path) -> list[Path]:
    """The results files of the searches run in ``folder``, the default study's first."""
    default = folder / "optimization_results.yaml"
    others = sorted(folder.glob("optimization_results_*.yaml"))
    return [default, *others] if default.is_file() else others


def _init_args(
    runs: Sequence[Run], sources: Sequence[Path], datasets: Sequence[str], table: Sequence[Column]
) -> dict[str, Any]:
    """``wandb.init``'s arguments: name, group, project and entity after the runs."""
    folders = [s if s.is_dir() else s.parent for s in map(Path, sources)]
    groups = {run.wandb_group for run in runs}
    return {
        "project": _shared(runs, "logger.wandb.project") or PROJECT,
        "entity": _shared(runs, "logger.wandb.entity"),
        "name": "compare-" + "+".join(f.resolve().name for f in folders),
        # one sweep: its group; runs of several sweeps belong to none of them
        "group": groups.pop() if len(groups) == 1 and "" not in groups else None,
        "job_type": "compare",
        "tags": ["compare", *datasets],
        "dir": os.environ.get("WANDB_DIR") or str(folders[0]),
        "mode": os.environ.get("WANDB_MODE") or _mode(runs),
        "config": {
            "sources": [str(s) for s in sources],
            "runs": len(runs),
            "settings": len(table[0].cells),
            "columns": [c.name for c in table],
        },
        # stdout carries the table, for redirection: W&B must not wrap it
        "settings": {"console": "off"},
    }


def _mode(runs: Sequence[Run]) -> str:
    """Online only where the runs were (``logger.wandb.offline=false``): offline by default."""
    return "online" if _shared(runs, "logger.wandb.offline") is False else "offline"


def _shared(runs: Sequence[Run], key: str) -> Any:
    """The config value ``key`` if every run has the same non-empty one, else None."""
    values = {run.keys.get(key) for run in runs}
    return values.pop() if len(values) == 1 and None not in values else None


def _data_set(
    wandb: Any,
    data: str,
    rows: Sequence[Group],
    table: Sequence[Column],
    metric: str,
    figures: Sequence[Path],
) -> dict[str, Any]:
    """The table, line plot and images of one data set."""
    indices = [i for i, g in enumerate(rows) if g.data == data]
    members = [rows[i] for i in indices]
    header, cells = plain_table(
        [Column(c.name, [c.cells[i] for i in indices], c.better) for c in table]
    )
    by_name = {path.name: path for path in figures}
    horizons, bars = figure_names(metric, data)
    logged: dict[str, Any] = {
        f"{data}/table": wandb.Table(columns=header, data=cells),
        f"{data}/horizon_plot": wandb.Image(str(by_name[horizons])),
        f"{data}/bar_chart": wandb.Image(str(by_name[bars])),
    }
    # rows without per-step values of the metric have no line (the command names them)
    drawn = [g for g in members if g.has_curve(metric)]
    if drawn:
        curves = [g.curve(metric) for g in drawn]
        logged[f"{data}/{metric}_vs_horizon"] = wandb.plot.line_series(
            xs=[list(range(1, len(curve) + 1)) for curve in curves],
            ys=[[s.mean for s in curve] for curve in curves],
            keys=[f"{g.label} (n={len(g.runs)})" for g in drawn],
            title=f"{data}: {metric.upper()} against forecast step",
            xname="forecast step",
        )
    return logged
