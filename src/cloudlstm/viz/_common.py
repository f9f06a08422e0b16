"""Figure creation, PNG writing and input checks shared by the plotting functions.

Figures are plain ``matplotlib.figure.Figure`` objects with an Agg canvas attached
explicitly: Agg is used whatever the global backend is, and pyplot (with its registry of
open figures) is never touched, so nothing outlives a call but the PNG.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from cloudlstm.errors import replacing

DPI = 100
# Line and bar colours, no two alike: matplotlib's tab10 without its grey (the reference
# line's), then darker hues, where tab10 would start again at blue with the 11th series.
COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22",
    "#17becf", "#000075", "#800000", "#469990", "#f032e6", "#808000", "#4b0082", "#9a6324",
)  # fmt: skip
# Styles and markers change from one series to the next as well, so that lines of close
# colours (and a print in grey) still differ; dashed is the reference line's alone.
LINE_STYLES = ("solid", "dashdot", "dotted")
MARKERS = ("o", "s", "^", "D", "v", "P")
REFERENCE_COLOUR = "#555555"


def series_style(index: int) -> dict[str, str]:
    """Colour, line style and marker of the ``index``-th series of a figure."""
    return {
        "color": COLOURS[index % len(COLOURS)],
        "linestyle": LINE_STYLES[index % len(LINE_STYLES)],
        "marker": MARKERS[index % len(MARKERS)],
    }


def reference_style() -> dict[str, object]:
    """A reference line (the persistence forecast, the one to beat): grey, dashed."""
    return {"color": REFERENCE_COLOUR, "linestyle": "dashed", "linewidth": 2.0}


def new_figure(width: float, height: float) -> Figure:
    """A constrained-layout figure of ``width x height`` inches rendered by Agg."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Figure, path: str | os.PathLike) -> Path:
    """Write ``fig`` as a PNG to ``path`` (parent folders created) and return the path."""
    path = Path(path)
    with replacing(path) as part:
        fig.savefig(part, format="png", dpi=DPI)
    return path


def check_forecast(
    truth: np.ndarray, forecast: np.ndarray, mask: np.ndarray | None, channel: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate ``truth, forecast`` ``(J, N, C)``, ``mask`` ``(J, N, C)`` or None, ``channel``.

    Returns float ``truth, forecast`` and a bool ``observed`` ``(J, N, C)`` (all True
    where ``mask`` is None).
    """
    truth = np.asarray(truth, dtype=float)
    forecast = np.asarray(forecast, dtype=float)
    if truth.ndim != 3 or forecast.shape != truth.shape or 0 in truth.shape:
        raise ValueError(
            "expected truth and forecast of the same shape (J, N, C), none of them 0; got "
            f"truth {truth.shape}, forecast {forecast.shape}"
        )
    if mask is None:
        observed = np.ones(truth.shape, dtype=bool)
    else:
        observed = np.asarray(mask, dtype=bool)
        if observed.shape != truth.shape:
            raise ValueError(
                f"expected mask of shape (J, N, C) = {truth.shape}; got {observed.shape}"
            )
    num_channels = truth.shape[2]
    if not 0 <= channel < num_channels:
        raise ValueError(f"channel must be in [0, C) with C = {num_channels}; got {channel}")
    return truth, forecast, observed
