"""Forecast error against horizon, one line per named series."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator

from cloudlstm.viz._common import new_figure, reference_style, save_png, series_style


def plot_horizon_curve(
    per_step: Mapping[str, Sequence[float]],
    *,
    path: str | os.PathLike,
    metric: str = "mae",
    std: Mapping[str, Sequence[float]] | None = None,
    reference: Mapping[str, Sequence[float]] | None = None,
) -> Path:
    """Draw ``metric`` against horizon 1..J for each series of ``per_step``.

    ``per_step[name]`` ``(J,)`` (J may differ between series); ``std[name]`` ``(J,)`` of the
    same series, where given, is drawn as a +- band. Each series has a colour of its own
    and a line style and marker that change from one to the next. ``reference[name]``
    ``(J,)``: lines to beat (the persistence forecast), grey and dashed. Writes a PNG to
    ``path`` and returns it.
    """
    if not per_step and not reference:
        raise ValueError("expected at least one series in per_step")
    curves = _check_curves(per_step, std or {})
    references = _check_curves(reference or {}, {})
    names = [*curves, *references]
    # many series (a results table) or long names: the legend goes beside the axes
    beside = len(names) > 6 or any("\n" in name or len(name) > 40 for name in names)
    fig = new_figure(6.8 if beside else 5.0, 3.2)
    ax = fig.subplots()
    # a dozen overlapping bands would hide the lines: the more series, the fainter
    alpha = 0.2 if len(curves) <= 4 else 0.1
    for i, (name, (mean, spread)) in enumerate(curves.items()):
        steps = np.arange(1, len(mean) + 1)
        line = ax.plot(steps, mean, markersize=3, label=name, **series_style(i))[0]
        if spread is not None:
            band = (mean - spread, mean + spread)
            ax.fill_between(steps, *band, color=line.get_color(), alpha=alpha)
    for name, (mean, _) in references.items():
        ax.plot(np.arange(1, len(mean) + 1), mean, label=name, zorder=1.5, **reference_style())
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
