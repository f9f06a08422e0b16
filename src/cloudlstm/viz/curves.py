"""Forecast error against horizon, one line per named series."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.ticker import MaxNLocator

from cloudlstm.viz._common import new_figure, save_png


def plot_horizon_curve(
    per_step: Mapping[str, Sequence[float]],
    *,
    path: str | os.PathLike,
    metric: str = "mae",
    std: Mapping[str, Sequence[float]] | None = None,
) -> Path:
    """Draw ``metric`` against horizon 1..J for each series of ``per_step``.

    ``per_step[name]`` ``(J,)`` (J may differ between series); ``std[name]`` ``(J,)`` of the
    same series, where given, is drawn as a +- band. Writes a PNG to ``path`` and returns it.
    """
    curves = _check_curves(per_step, std or {})
    # many series (a results table) or long names: the legend goes beside the axes
    beside = len(curves) > 6 or any("\n" in name or len(name) > 40 for name in curves)
    fig = new_figure(6.8 if beside else 5.0, 3.2)
    ax = fig.subplots()
    colours = len(matplotlib.rcParams["axes.prop_cycle"].by_key()["color"])
    for i, (name, (mean, spread)) in enumerate(curves.items()):
        steps = np.arange(1, len(mean) + 1)
        # past the colour cycle, a new line style and marker keep the series apart
        style = dict(linestyle=("-", "--", ":")[i // colours % 3], marker="osD"[i // colours % 3])
        line = ax.plot(steps, mean, markersize=3, label=name, **style)[0]
        if spread is not None:
            ax.fill_between(steps, mean - spread, mean + spread, color=line.get_color(), alpha=0.2)
    # Horizons are whole steps.
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("horizon (steps)")
    ax.set_ylabel(metric.upper())
    if beside:
        fig.legend(fontsize="x-small", loc="outside right upper")
    else:
        ax.legend(fontsize="small")
    return save_png(fig, path)


def _check_curves(
    per_step: Mapping[str, Sequence[float]], std: Mapping[str, Sequence[float]]
) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """``{name: (mean (J,), std (J,) or None)}``, with the shapes and names checked."""
    if not per_step:
        raise ValueError("expected at least one series in per_step")
    unknown = sorted(set(std) - set(per_step))
    if unknown:
        raise ValueError(f"std names series not in per_step: {unknown}")
    curves = {}
    for name, values in per_step.items():
        mean = np.asarray(values, dtype=float)
        if mean.ndim != 1 or mean.size == 0:
            raise ValueError(f"expected per_step[{name!r}] of shape (J,), J >= 1; got {mean.shape}")
        spread = None if name not in std else np.asarray(std[name], dtype=float)
        if spread is not None and spread.shape != mean.shape:
            raise ValueError(
                f"expected std[{name!r}] of shape (J,) = {mean.shape}; got {spread.shape}"
            )
        curves[name] = (mean, spread)
    return curves
