"""The table of groups: its columns, row order, and which cells are best."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from cloudlstm.compare.cells import Column, Stat
from cloudlstm.compare.groups import (
    LEVEL_SCORES,
    Group,
    check_horizons,
    group_runs,
    level_sets,
)
from cloudlstm.compare.runs import CompareError, Run
from cloudlstm.engine.declared_metrics import metric_names, monitor_mode
from cloudlstm.engine.quantile_metrics import any_metric_info

# the point groups of the held-out-sites protocol (cloudlstm.data.pipeline.held_out), shown
# by default where runs have them
HOLDOUT_GROUPS = ("held_out", "trained")


def higher_is_better(metric: str) -> bool:
    """Whether ``metric``'s best is its highest value (its declaration says)."""
    return any_metric_info(metric).higher_is_better


def reported_metrics(groups: Sequence[Group]) -> list[str]:
    """The declared metrics that at least one run of ``groups`` reports, in their order."""
    return [m for m in metric_names() if any(m in run.overall for g in groups for run in g.runs)]


def build_table(
    groups: Sequence[Group],
    metrics: Sequence[str] | None = None,
    horizons: Sequence[int] = (),
    horizon_metric: str = "mae",
    channels: Sequence[str] = (),
    channel_metric: str = "mae",
    point_groups: Sequence[str] | None = None,
    group_metric: str = "mae",
    validation: bool = False,
    pooled: bool = False,
    relative: bool = False,
) -> list[Column]:
    """Columns: group keys, n, params, epochs, train_s (steps and s_per_1k_steps where runs
    have them), metrics (None: every declared one that a run reports, so that runs from
    before a metric existed show no empty column of it), horizon metric at each step,
    channel metric of each channel (``mae[CO]``), group metric of each point group
    (``held_out/mae``; ``point_groups`` None: the held-out protocol's groups, where runs
    have them: :func:`default_point_groups`); ``validation``: after the test metrics, the
    validation score each run chose its checkpoint by (:func:`validation_column`);
    ``pooled``: after the test metrics, those pooled over every forecast value of the test
    part (:func:`pooled_columns`). ``relative``: the runs' metrics are ratios to a
    baseline's (``--relative-to``), which have no nominal value to be near: an interval's
    coverage then marks no best.

    Rows are sorted by data set, then best first on the first metric. A metric a row's runs
    lack (``smae`` in older metrics.json, another data set's channel) is an empty cell.

    Raises:
        CompareError: a channel or a point group that no run has, a horizon beyond every
            run's forecast length.
    """
    metrics = reported_metrics(groups) if metrics is None else metrics
    rows = ranked(groups, metrics[0], nominal=not relative)
    columns = [
        Column(key, [g.keys[key] for g in rows], data_sets=_data_sets(key, rows))
        for key in rows[0].keys
    ]
    columns.append(Column("n", [len(g.runs) for g in rows]))
    columns += [Column(a, [g.mean_of(a) for g in rows]) for a in ("params", "epochs", "train_s")]
    # runs with a step budget: their steps and cost per 1,000 steps (absent from older runs)
    for name, attr in (("steps", "train_steps"), ("s_per_1k_steps", "s_per_1k_steps")):
        values = [g.mean_of(attr) for g in rows]
        if any(v is not None for v in values):
            columns.append(Column(name, values))
    columns += [Column(m, [g.metric(m) for g in rows], better_of(m, rows)) for m in metrics]
    if pooled:
        columns += pooled_columns(rows)
    if validation:
        columns.append(validation_column(rows))
    check_horizons(rows, horizon_metric, horizons)
    columns += [
        Column(
            f"{horizon_metric}@{h}",
            [g.at_horizon(horizon_metric, h) for g in rows],
            better_of(horizon_metric, rows),
        )
        for h in horizons
    ]
    _check_channels(rows, channels)
    columns += [
        Column(
            f"{channel_metric}[{c}]",
            [g.channel(c, channel_metric) for g in rows],
            better_of(channel_metric, rows),
        )
        for c in channels
    ]
    columns += _point_group_columns(rows, group_metric, point_groups)
    if relative:
        return [replace(c, better=None) if _nominal(c.better) else c for c in columns]
    return columns


def pooled_columns(rows: Sequence[Group]) -> list[Column]:
    """The metrics pooled over every forecast value of a run's test part (``test.pooled``:
    an RMSE of all squared errors, as DCRNN's and T-GCN's tables give it, where the
    ``rmse`` column averages each test window's RMSE), over each row's runs: ``pooled/mae``,
    ``pooled/rmse``. An empty cell where a run has none (metrics.json from before them).

    Raises:
        CompareError: no run has pooled metrics.
    """
    have = {name for g in rows for run in g.runs for name in run.pooled}
    if not have:
        raise CompareError("no run records pooled test metrics (test.pooled in metrics.json)")
    names = [m for m in metric_names() if m in have]
    return [
        Column(f"pooled/{name}", [_pooled_metric(g, name) for g in rows], better_of(name))
        for name in names
    ]


def _pooled_metric(group: Group, metric: str) -> Stat | None:
    values = [run.pooled.get(metric) for run in group.runs]
    return None if None in values else Stat.over(values)


def validation_column(rows: Sequence[Group]) -> Column:
    """The validation score of the tested checkpoints (``val/mae``), over each row's runs:
    what model selection saw, beside what the test shows. An empty cell where a run has
    none (a model without training).

    Raises:
        CompareError: runs that chose their checkpoints on different metrics.
    """
    monitors = {run.val_monitor for g in rows for run in g.runs if run.val_score is not None}
    if len(monitors) > 1:
        names = ", ".join(sorted(monitors))
        raise CompareError(
            f"the runs chose their checkpoints on different metrics ({names}): compare them "
            "apart for --val"
        )
    if not monitors:
        raise CompareError("no run records the validation score of its tested checkpoint")
    (monitor,) = monitors
    cells = []
    for group in rows:
        values = [run.val_score for run in group.runs]
        cells.append(None if None in values else Stat.over(values))
    # the monitor's direction as checkpointing read it: val/loss is no declared metric
    return Column(monitor, cells, monitor_mode(monitor, default=None))


def default_point_groups(groups: Sequence[Group]) -> list[str]:
    """The point groups of the held-out-sites protocol (``held_out``, then ``trained``)
    where some run has them; none otherwise (other groups, e.g. outliers, on request)."""
    have = {name for g in groups for run in g.runs for name in run.groups}
    return [name for name in HOLDOUT_GROUPS if HOLDOUT_GROUPS[0] in have]


def _point_group_columns(
    rows: Sequence[Group], metric: str, point_groups: Sequence[str] | None
) -> list[Column]:
    """``metric`` of each point group over the runs of each row (``held_out/mae``); an
    empty cell where a run lacks it.

    Raises:
        CompareError: a group no run has (a typo), naming the groups the runs have.
    """
    shown = default_point_groups(rows) if point_groups is None else list(point_groups)
    have = {name for g in rows for run in g.runs for name in run.groups}
    if unknown := [name for name in shown if name not in have]:
        valid = ", ".join(sorted(have)) or "none (no run scores point groups)"
        raise CompareError(f"no run has point group(s) {', '.join(unknown)}; groups: {valid}")
    _check_group_metric(rows, metric, shown)
    return [
        Column(
            f"{name}/{metric}", [_group_metric(g, name, metric) for g in rows], better_of(metric)
        )
        for name in shown
    ]


def _check_group_metric(rows: Sequence[Group], metric: str, shown: Sequence[str]) -> None:
    """Refuse a ``metric`` that no run scored by point group reports at all (``coverage80``
    where only point forecasts hold out points, the quantile runs none): every cell of its
    group columns would be empty, without a word.

    Raises:
        CompareError: no run with the groups ``shown`` reports ``metric``.
    """
    scored = [run for g in rows for run in g.runs if any(name in run.groups for name in shown)]
    if not scored or any(metric in run.overall for run in scored):
        return
    raise CompareError(
        f"--group-metric {metric}: no run scored by point group ({', '.join(shown)}) reports "
        f"{metric}, so its group columns would be empty: give a metric they report (e.g. "
        "--group-metric mae), or compare runs trained with both data.holdout_points and "
        "module.quantiles"
    )


def _group_metric(group: Group, point_group: str, metric: str) -> Stat | None:
    """A point group's metric over the runs of ``group``; None if a run lacks it."""
    values = [run.groups.get(point_group, {}).get(metric) for run in group.runs]
    return None if None in values else Stat.over(values)


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


def _data_sets(key: str, rows: Sequence[Group]) -> list[str] | None:
    """The data sets of ``rows`` for the ``data`` column (:attr:`Column.data_sets`); None
    for the others."""
    return [g.data for g in rows] if key == "data" else None


def scored(cell: object) -> float | None:
    """A metric cell's mean where it can rank: None for an empty cell and for NaN (a
    metric with nothing to score), which is neither better nor worse than a number, so a
    sort or a ``min`` over it gives an order or a best that depends on where it stands."""
    if not isinstance(cell, Stat) or math.isnan(cell.mean):
        return None
    return cell.mean


def ranked(groups: Sequence[Group], metric: str, nominal: bool = True) -> list[Group]:
    """``groups`` sorted by data set, then best first on ``metric`` (an interval's coverage:
    nearest its nominal value first; not ``nominal``, ratios to a baseline's: lowest
    first); rows without it, or with it NaN, last."""
    better = better_of(metric)
    if better is None or (_nominal(better) and not nominal):
        better = "min"  # no best: lowest first all the same, an order the input does not set

    def key(group: Group) -> tuple[tuple, bool, float]:
        mean = scored(group.metric(metric))
        far = math.inf if mean is None else from_best(better, mean)
        return group.data_order, mean is None, far

    return sorted(groups, key=key)


def better_of(metric: str, rows: Sequence[Group] = ()) -> str | float | None:
    """Where ``metric``'s best is (:attr:`Column.better`): an end, or the value it is
    closest to (an interval's nominal coverage); None (no best row) for a score of the
    levels (:data:`~cloudlstm.compare.groups.LEVEL_SCORES`) over ``rows`` of other levels."""
    if metric in LEVEL_SCORES and len(level_sets(rows)) > 1:
        return None
    info = any_metric_info(metric)
    return info.best if info.target is None else info.target


def _nominal(better: str | float | None) -> bool:
    """Whether a column's best is the value nearest a number (:func:`better_of`), not an end."""
    return isinstance(better, int | float)


def from_best(better: str | float, mean: float) -> float:
    """How far ``mean`` lies from the best of a column whose best is ``better``
    (:attr:`Column.better`), as a sort's key: the lower, the better."""
    if better == "max":
        return -mean
    if _nominal(better):
        return abs(mean - float(better))
    return mean


def data_sets(columns: Sequence[Column]) -> list[str]:
    """Each row's data set (:attr:`~cloudlstm.compare.groups.Group.data`), as the table's
    ``data`` column holds it."""
    data = next(c for c in columns if c.name == "data")
    return list(data.cells) if data.data_sets is None else list(data.data_sets)


def best_rows(column: Column, data: Sequence[str]) -> set[int]:
    """Rows holding the best mean of a metric column within their data set (ties: all);
    empty cells (None) and NaN means are never best (:func:`scored`)."""
    better = column.better
    if better is None:
        return set()
    cells = enumerate(zip(column.cells, data, strict=True))
    far = [(i, from_best(better, m), d) for i, (c, d) in cells if (m := scored(c)) is not None]
    best = {d: min(f for _, f, dd in far if dd == d) for _, _, d in far}
    return {i for i, f, d in far if f == best[d]}
