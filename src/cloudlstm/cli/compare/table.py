"""The table of groups: its columns, row order, and which cells are best."""

from __future__ import annotations

import math
from collections.abc import Sequence

from cloudlstm.cli.compare.cells import Column
from cloudlstm.cli.compare.groups import Group, group_runs
from cloudlstm.cli.compare.runs import CompareError, Run
from cloudlstm.engine.metrics import metric_info, metric_names


def higher_is_better(metric: str) -> bool:
    """Whether ``metric``'s best is its highest value (its declaration says)."""
    return metric_info(metric).higher_is_better


def build_table(
    groups: Sequence[Group],
    metrics: Sequence[str] | None = None,
    horizons: Sequence[int] = (),
    horizon_metric: str = "mae",
    channels: Sequence[str] = (),
    channel_metric: str = "mae",
) -> list[Column]:
    """Columns: group keys, n, params, epochs, train_s (steps and s_per_1k_steps where runs
    have them), metrics (None: every declared one), horizon metric at each step,
    channel metric of each channel (``mae[CO]``).

    Rows are sorted by data set, then best first on the first metric. A metric a row's runs
    lack (``smae`` in older metrics.json, another data set's channel) is an empty cell.

    Raises:
        CompareError: a channel that no run has.
    """
    metrics = metric_names() if metrics is None else metrics
    rows = ranked(groups, metrics[0])
    columns = [Column(key, [g.keys[key] for g in rows]) for key in rows[0].keys]
    columns.append(Column("n", [len(g.runs) for g in rows]))
    columns += [Column(a, [g.mean_of(a) for g in rows]) for a in ("params", "epochs", "train_s")]
    # runs with a step budget: their steps and cost per 1,000 steps (absent from older runs)
    for name, attr in (("steps", "train_steps"), ("s_per_1k_steps", "s_per_1k_steps")):
        values = [g.mean_of(attr) for g in rows]
        if any(v is not None for v in values):
            columns.append(Column(name, values))
    columns += [Column(m, [g.metric(m) for g in rows], _better(m)) for m in metrics]
    columns += [
        Column(
            f"{horizon_metric}@{h}",
            [g.at_horizon(horizon_metric, h) for g in rows],
            _better(horizon_metric),
        )
        for h in horizons
    ]
    _check_channels(rows, channels)
    columns += [
        Column(
            f"{channel_metric}[{c}]",
            [g.channel(c, channel_metric) for g in rows],
            _better(channel_metric),
        )
        for c in channels
    ]
    return columns


def _check_channels(groups: Sequence[Group], channels: Sequence[str]) -> None:
    """Refuse a channel no run has (a typo), naming the channels the runs have."""
    have = {name for g in groups for run in g.runs for name in run.channels}
    if unknown := [c for c in channels if c not in have]:
        valid = ", ".join(sorted(have)) or "none (no per-channel results)"
        raise CompareError(f"no run has channel(s) {', '.join(unknown)}; channels: {valid}")


def compare(
    runs: Sequence[Run],
    by: Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
    horizons: Sequence[int] = (),
    horizon_metric: str = "mae",
    channels: Sequence[str] = (),
    channel_metric: str = "mae",
) -> list[Column]:
    """Group ``runs`` (see :func:`group_runs`) and build their table."""
    return build_table(
        group_runs(runs, by), metrics, horizons, horizon_metric, channels, channel_metric
    )


def ranked(groups: Sequence[Group], metric: str) -> list[Group]:
    """``groups`` sorted by data set, then best first on ``metric``; rows without it last."""
    sign = -1 if higher_is_better(metric) else 1

    def key(group: Group) -> tuple[str, bool, float]:
        stat = group.metric(metric)
        return group.data, stat is None, math.inf if stat is None else sign * stat.mean

    return sorted(groups, key=key)


def _better(metric: str) -> str:
    return metric_info(metric).best


def best_rows(column: Column, data: Sequence[str]) -> set[int]:
    """Rows holding the best mean of a metric column within their data set (ties: all);
    empty cells (None) are never best."""
    if column.better is None:
        return set()
    pick = max if column.better == "max" else min
    cells = [(c, d) for c, d in zip(column.cells, data, strict=True) if c is not None]
    best = {d: pick(c.mean for c, dd in cells if dd == d) for _, d in cells}
    return {
        i
        for i, (c, d) in enumerate(zip(column.cells, data, strict=True))
        if c is not None and c.mean == best[d]
    }
