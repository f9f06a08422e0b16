"""Figures of the groups: a metric against the forecast step, and its overall value as bars.

The persistence forecast (:func:`~cloudlstm.compare.style.is_reference`) is the line to
beat in both: a grey dashed line, not one more series or bar. Each other group keeps its
colour from one figure to the other.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes

from cloudlstm.compare.cells import Stat
from cloudlstm.compare.groups import Group
from cloudlstm.compare.style import close_range, is_reference, label_lines
from cloudlstm.compare.table import ranked
from cloudlstm.viz import plot_horizon_curve
from cloudlstm.viz._common import new_figure, reference_style, save_png, series_style


def plot(groups: Sequence[Group], metric: str, out_dir: Path) -> list[Path]:
    """Per data set: ``<metric>_horizon_<data>.png`` and ``<metric>_bar_<data>.png``
    (:func:`figure_names`)."""
    paths = []
    rows = ranked(groups, metric)
    for data in dict.fromkeys(g.data for g in rows):
        members = [g for g in rows if g.data == data]
        horizons, bars = figure_names(metric, data)
        paths.append(_plot_horizons(members, metric, out_dir / horizons))
        paths.append(_plot_bars(members, metric, out_dir / bars))
    return paths


def figure_names(metric: str, data: str) -> tuple[str, str]:
    """The file names of a data set's horizon and bar figures; a data set told apart by
    its readings' hash (``points (1a2b3c4d)``) as ``points_1a2b3c4d``."""
    tag = re.sub(r"[^\w.-]+", "_", data).strip("_")
    return f"{metric}_horizon_{tag}.png", f"{metric}_bar_{tag}.png"


def _name(group: Group) -> str:
    return f"{_wrapped(group.label)} (n={len(group.runs)})"


def _plot_horizons(groups: Sequence[Group], metric: str, path: Path) -> Path:
    """The metric at each forecast step, one line per group, a ± std band over seeds;
    groups without per-step values of it are left out (the command names them)."""
    groups = [g for g in groups if g.has_curve(metric)]
    if not groups:
        return _no_curves(metric, path)
    curves = {_name(g): (g, g.curve(metric)) for g in groups if not is_reference(g)}
    means = {name: [_drawn(s.mean) for s in curve] for name, (_, curve) in curves.items()}
    stds = {
        name: [_drawn(s.std) for s in curve]
        for name, (g, curve) in curves.items()
        if len(g.runs) > 1
    }
    reference = {
        _name(g): [_drawn(s.mean) for s in g.curve(metric)] for g in groups if is_reference(g)
    }
    return plot_horizon_curve(means, std=stds, reference=reference, path=path, metric=metric)


def _no_curves(metric: str, path: Path) -> Path:
    """The horizon figure of a data set none of whose rows has per-step values of
    ``metric``: a note in its place, so that each data set still has its two figures."""
    fig = new_figure(5.0, 3.2)
    ax = fig.subplots()
    ax.set_axis_off()
    ax.text(0.5, 0.5, f"no row has per-step {metric} results", ha="center", va="center")
    return save_png(fig, path)


def _drawn(value: float) -> float:
    """A value as a figure draws it: an infinite one (a diverged run's error) as NaN, a
    gap, where it would make the axis infinite; the table shows it."""
    return value if math.isfinite(value) else math.nan


def _plot_bars(groups: Sequence[Group], metric: str, path: Path) -> Path:
    """The overall metric per group, error bars of ± std over seeds; the persistence
    forecast a dashed line across; the value axis near the values when they are close."""
    models = [g for g in groups if not is_reference(g)]
    stats = [g.metric(metric) or Stat(math.nan, math.nan) for g in models]  # None: no bar
    stats = [Stat(_drawn(s.mean), _drawn(s.std)) for s in stats]  # infinite: no bar either
    references = [(g, g.metric(metric)) for g in groups if is_reference(g)]
    fig = new_figure(max(4.0, 1.0 + 0.8 * len(models)), 4)
    ax = fig.subplots()
    x = np.arange(len(models))
    colours = [series_style(i)["color"] for i in range(len(models))]  # the lines' colours
    ax.bar(x, [s.mean for s in stats], yerr=[s.std for s in stats], capsize=4, color=colours)
    for group, stat in references:
        if stat is not None and math.isfinite(stat.mean):
            ax.axhline(stat.mean, label=_name(group), **reference_style())
    if references:
        ax.legend(fontsize="small", loc="upper left")
    ax.set_xticks(x, [_wrapped(g.label) for g in models], rotation=30, ha="right")
    ax.set(ylabel=_value_axis(ax, stats, references, metric), title=groups[0].data)
    return save_png(fig, path)


def _value_axis(
    ax: Axes,
    stats: Sequence[Stat],
    references: Sequence[tuple[Group, Stat | None]],
    metric: str,
) -> str:
    """Set the value range (near the bars and reference lines when they are close, else
    from 0) and return the axis label, which says when it does not start at 0."""
    values = [*stats, *(stat for _, stat in references if stat is not None)]
    means = [s.mean if math.isfinite(s.mean) else None for s in values]
    stds = [s.std if math.isfinite(s.std) else 0.0 for s in values]
    span = close_range(means, stds)
    if span is None:
        return metric.upper()
    ax.set_ylim(*span)
    return f"{metric.upper()} (axis from {span[0]:.3g}, not 0)"


def _wrapped(label: str) -> str:
    """A legend or tick label on lines (:func:`~cloudlstm.compare.style.label_lines`)."""
    return "\n".join(label_lines(label))
