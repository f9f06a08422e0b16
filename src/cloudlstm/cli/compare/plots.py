"""Figures of the groups: a metric against the forecast step, and its overall value as bars."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from cloudlstm.cli.compare.cells import Stat
from cloudlstm.cli.compare.groups import Group
from cloudlstm.cli.compare.table import ranked
from cloudlstm.viz import plot_horizon_curve
from cloudlstm.viz._common import new_figure, save_png


def plot(groups: Sequence[Group], metric: str, out_dir: Path) -> list[Path]:
    """Per data set: ``<metric>_horizon_<data>.png`` and ``<metric>_bar_<data>.png``."""
    paths = []
    for data in sorted({g.data for g in groups}):
        members = [g for g in ranked(groups, metric) if g.data == data]
        paths.append(_plot_horizons(members, metric, out_dir / f"{metric}_horizon_{data}.png"))
        paths.append(_plot_bars(members, metric, out_dir / f"{metric}_bar_{data}.png"))
    return paths


def _plot_horizons(groups: Sequence[Group], metric: str, path: Path) -> Path:
    """The metric at each forecast step, one line per group, a ± std band over seeds."""
    curves = {f"{_wrapped(g.label)} (n={len(g.runs)})": (g, g.curve(metric)) for g in groups}
    means = {name: [s.mean for s in curve] for name, (_, curve) in curves.items()}
    stds = {name: [s.std for s in curve] for name, (g, curve) in curves.items() if len(g.runs) > 1}
    return plot_horizon_curve(means, std=stds, path=path, metric=metric)


def _plot_bars(groups: Sequence[Group], metric: str, path: Path) -> Path:
    """The overall metric per group, error bars of ± std over seeds."""
    stats = [g.metric(metric) or Stat(math.nan, math.nan) for g in groups]  # None: no bar
    fig = new_figure(max(4.0, 1.0 + 0.8 * len(groups)), 4)
    ax = fig.add_subplot()
    x = np.arange(len(groups))
    ax.bar(x, [s.mean for s in stats], yerr=[s.std for s in stats], capsize=4)  # NaN: no bar
    ax.set_xticks(x, [_wrapped(g.label) for g in groups], rotation=30, ha="right")
    ax.set(ylabel=metric.upper(), title=groups[0].data)
    return save_png(fig, path)


def _wrapped(label: str, width: int = 32) -> str:
    """A legend or tick label on lines of at most ``width`` characters: labels of runs that
    differ in several keys are long enough to squeeze the axes to nothing."""
    return textwrap.fill(label, width)
