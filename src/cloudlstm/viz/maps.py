"""Maps of one test window: truth, forecast and absolute error at a few horizons."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Colormap, Normalize

from cloudlstm.viz._common import check_forecast, new_figure, save_png

# NaN values (e.g. a diverged forecast) are drawn light grey instead of vanishing.
VALUE_CMAP = mpl.colormaps["viridis"].with_extremes(bad="lightgrey")
ERROR_CMAP = mpl.colormaps["magma_r"].with_extremes(bad="lightgrey")
HOLLOW = {"facecolors": "none", "edgecolors": "0.6", "linewidths": 0.6}
ROWS = ("truth", "forecast", "|error|")


def default_horizons(num_steps: int) -> list[int]:
    """First, middle and last horizon (1-based, ascending, no repeats) of ``num_steps``."""
    return sorted({1, max(1, num_steps // 2), num_steps})


def plot_forecast_maps(
    coords: np.ndarray,
    truth: np.ndarray,
    forecast: np.ndarray,
    *,
    channel: int,
    channel_name: str,
    horizons: Sequence[int] | None = None,
    path: str | os.PathLike,
    title: str | None = None,
    mask: np.ndarray | None = None,
    model: str | None = None,
    start: str | None = None,
    window: int | None = None,
    coord_names: Sequence[str] = ("x", "y"),
) -> Path:
    """Draw truth / forecast / absolute error maps of one channel at some horizons.

    ``coords`` ``(N, L)`` point positions (L = 2 or 3; the first two dims are drawn, on
    axes named ``coord_names``), ``truth`` and ``forecast`` ``(J, N, C)``, ``mask``
    ``(J, N, C)`` bool (True = observed) or None. ``horizons`` are 1-based steps (default
    :func:`default_horizons`). Truth and forecast share one colour scale, the error has its
    own; both ignore unobserved truth and NaN. Unobserved truth (and its error) is drawn as
    hollow grey circles. The title names the ``model``, the channel and the time of the
    first forecast step (``start``), or the test ``window`` where the data have no
    timestamps; ``title`` replaces it. Writes a PNG to ``path`` and returns it.
    """
    truth, forecast, observed = check_forecast(truth, forecast, mask, channel)
    xy = _check_coords(coords, truth.shape[1])
    steps = _check_horizons(horizons, truth.shape[0])
    truth, forecast, observed = (a[steps, :, channel] for a in (truth, forecast, observed))
    error = np.abs(forecast - truth)
    value_norm = _norm(np.concatenate([truth[observed], forecast.ravel()]))
    error_norm = _norm(error[observed], lower=0.0)

    fig = new_figure(2.6 * len(steps) + 1.2, 7.2)
    axes = fig.subplots(3, len(steps), squeeze=False, sharex=True, sharey=True)
    # Smaller markers as points crowd, so a few thousand still do not hide each other.
    size = float(np.clip(3000 / xy.shape[0], 4, 40))
    everywhere = np.ones_like(observed)
    panels = [
        (truth, observed, value_norm, VALUE_CMAP),
        (forecast, everywhere, value_norm, VALUE_CMAP),
        (error, observed, error_norm, ERROR_CMAP),
    ]
    for row, (values, seen, norm, cmap) in enumerate(panels):
        for col in range(len(steps)):
            _scatter(axes[row, col], xy, values[col], seen[col], norm, cmap, size)
    _label(axes, steps, coord_names)
    fig.colorbar(ScalarMappable(value_norm, VALUE_CMAP), ax=axes[:2], label=channel_name)
    fig.colorbar(
        ScalarMappable(error_norm, ERROR_CMAP), ax=axes[2], label=f"|error| {channel_name}"
    )
    fig.suptitle(title or map_title(channel_name, model, start, window))
    return save_png(fig, path)


def map_title(channel_name: str, model: str | None, start: str | None, window: int | None) -> str:
    """``cloudlstm · PM2.5 · forecast from 2017-01-01 13:00`` (or ``· test window 3``)."""
    when = f"forecast from {start}" if start else None
    if when is None and window is not None:
        when = f"test window {window}"
    return " · ".join(part for part in (model, channel_name, when) if part)


def _check_coords(coords: np.ndarray, num_points: int) -> np.ndarray:
    """``coords`` ``(N, L)``, L = 2 or 3 -> its first two dims ``(N, 2)``."""
    coords = np.asarray(coords, dtype=float)
    if coords.ndim != 2 or coords.shape[0] != num_points or coords.shape[1] not in (2, 3):
        raise ValueError(
            f"expected coords of shape (N, L) with N = {num_points} and L in (2, 3); "
            f"got {coords.shape}"
        )
    return coords[:, :2]


def _check_horizons(horizons: Sequence[int] | None, num_steps: int) -> list[int]:
    """1-based ``horizons`` (default first / middle / last) -> 0-based step indices."""
    horizons = default_horizons(num_steps) if horizons is None else list(horizons)
    if not horizons or any(not 1 <= h <= num_steps for h in horizons):
        raise ValueError(
            f"expected horizons in 1..J with J = {num_steps}, at least one; got {horizons}"
        )
    return [h - 1 for h in horizons]


def _norm(values: np.ndarray, lower: float | None = None) -> Normalize:
    """Colour scale over the finite ``values`` (fixed at ``lower`` when given).

    An empty or constant set still gets a non-empty range, so the colour bar can be drawn.
    """
    finite = values[np.isfinite(values)]
    lo = float(finite.min()) if finite.size else 0.0
    lo = lo if lower is None else lower
    hi = float(finite.max()) if finite.size else lo + 1.0
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    return Normalize(lo, hi)


def _scatter(
    ax: Axes,
    xy: np.ndarray,
    values: np.ndarray,
    seen: np.ndarray,
    norm: Normalize,
    cmap: Colormap,
    size: float,
) -> None:
    """Points ``xy`` ``(N, 2)`` coloured by ``values`` ``(N,)`` where ``seen``, else hollow."""
    ax.scatter(*xy[seen].T, c=values[seen], norm=norm, cmap=cmap, s=size)
    if not seen.all():
        ax.scatter(*xy[~seen].T, s=size, label="unobserved", **HOLLOW)
    ax.set_aspect("equal")
    ax.tick_params(labelsize="x-small")


def _label(axes: np.ndarray, steps: list[int], coord_names: Sequence[str]) -> None:
    """Column titles ``h=<horizon>``, row names and coordinates (on the outer panels), and
    a legend where points are unobserved."""
    for col, step in enumerate(steps):
        axes[0, col].set_title(f"h={step + 1}")
    for ax in axes[-1]:
        ax.set_xlabel(coord_names[0], fontsize="small")
    for row, name in enumerate(ROWS):
        axes[row, 0].set_ylabel(f"{name}\n{coord_names[1]}")
    for ax in axes.ravel():
        ax.label_outer()  # tick labels on the left column and the bottom row only
    for ax in axes[0]:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right", fontsize="x-small")
            return
