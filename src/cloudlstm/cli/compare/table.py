"""The table of groups: its columns, row order, and which cells are best."""

from __future__ import annotations

from collections.abc import Sequence

from cloudlstm.cli.compare.cells import Column
from cloudlstm.cli.compare.groups import Group, group_runs
from cloudlstm.cli.compare.runs import Run
from cloudlstm.metrics import METRICS

HIGHER_IS_BETTER = {"mae": False, "rmse": False, "psnr": True, "ssim": True}


def build_table(
    groups: Sequence[Group],
    metrics: Sequence[str] = METRICS,
    horizons: Sequence[int] = (),
    horizon_metric: str = "mae",
) -> list[Column]:
    """Columns: group keys, n, params, epochs, train_s, metrics, horizon metric at each step.

    Rows are sorted by data set, then best first on the first metric.
    """
    rows = ranked(groups, metrics[0])
    columns = [Column(key, [g.keys[key] for g in rows]) for key in rows[0].keys]
    columns.append(Column("n", [len(g.runs) for g in rows]))
    columns += [Column(a, [g.mean_of(a) for g in rows]) for a in ("params", "epochs", "train_s")]
    columns += [Column(m, [g.metric(m) for g in rows], _better(m)) for m in metrics]
    columns += [
        Column(
            f"{horizon_metric}@{h}",
            [g.at_horizon(horizon_metric, h) for g in rows],
            _better(horizon_metric),
        )
        for h in horizons
    ]
    return columns


def compare(
    runs: Sequence[Run],
    by: Sequence[str] | None = None,
    metrics: Sequence[str] = METRICS,
    horizons: Sequence[int] = (),
    horizon_metric: str = "mae",
) -> list[Column]:
    """Group ``runs`` (see :func:`group_runs`) and build their table."""
    return build_table(group_runs(runs, by), metrics, horizons, horizon_metric)


def ranked(groups: Sequence[Group], metric: str) -> list[Group]:
    """``groups`` sorted by data set, then best first on ``metric``."""
    sign = -1 if HIGHER_IS_BETTER[metric] else 1
    return sorted(groups, key=lambda g: (g.data, sign * g.metric(metric).mean))


def _better(metric: str) -> str:
    return "max" if HIGHER_IS_BETTER[metric] else "min"


def best_rows(column: Column, data: Sequence[str]) -> set[int]:
    """Rows holding the best mean of a metric column within their data set (ties: all)."""
    if column.better is None:
        return set()
    pick = max if column.better == "max" else min
    cells = list(zip(column.cells, data, strict=True))
    best = {d: pick(c.mean for c, dd in cells if dd == d) for d in set(data)}
    return {i for i, (c, d) in enumerate(cells) if c.mean == best[d]}
