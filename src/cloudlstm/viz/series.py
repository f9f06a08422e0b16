"""Time series of the points a model forecasts worst in one test window."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes

from cloudlstm.viz._common import check_forecast, new_figure, save_png


def point_mae(
    truth: np.ndarray, forecast: np.ndarray, channel: int, mask: np.ndarray | None = None
) -> np.ndarray:
    """Mean absolute error per point ``(N,)`` over the J steps of one channel.

    ``truth``, ``forecast`` and ``mask`` ``(J, N, C)``. Only observed entries with a finite
    error count; a point with none gets NaN.
    """
    truth, forecast, observed = check_forecast(truth, forecast, mask, channel)
    error = np.abs(forecast - truth)[:, :, channel]
    valid = observed[:, :, channel] & np.isfinite(error)
    count = valid.sum(axis=0)
    total = np.where(valid, error, 0.0).sum(axis=0)
    return np.divide(total, count, out=np.full(count.shape, np.nan), where=count > 0)


def worst_points(
    truth: np.ndarray,
    forecast: np.ndarray,
    channel: int,
    num_points: int,
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """Indices of the ``num_points`` points with the largest :func:`point_mae`, worst first.

    ``truth``, ``forecast`` and ``mask`` ``(J, N, C)``. Ties go to the lower index; points
    without an observed finite error are never picked, so fewer may come back.
    """
    if num_points < 1:
        raise ValueError(f"num_points must be >= 1; got {num_points}")
    mae = point_mae(truth, forecast, channel, mask)
    candidates = np.flatnonzero(np.isfinite(mae))
    # A stable sort of -MAE keeps equal errors in index order.
    order = np.argsort(-mae[candidates], kind="stable")
    return candidates[order[:num_points]]


def plot_worst_series(
    history: np.ndarray,
    truth: np.ndarray,
    forecast: np.ndarray,
    *,
    channel: int,
    channel_name: str,
    num_points: int = 4,
    point_ids: Sequence | None = None,
    path: str | os.PathLike,
    mask: np.ndarray | None = None,
    quantiles: np.ndarray | None = None,
    levels: Sequence[float] = (),
) -> Path:
    """Draw history, truth and forecast of the :func:`worst_points` of one channel.

    ``history`` ``(M, N, C)`` inputs (steps -M+1..0), ``truth`` and ``forecast`` ``(J, N, C)``
    (steps 1..J), ``mask`` ``(J, N, C)`` bool (True = observed; unobserved truth is left
    out) or None. ``point_ids`` ``(N,)`` names the points in the subplot titles (default:
    their index). ``quantiles`` ``(J, N, C, Q)`` at ``levels`` (ascending) draw a fan: each
    central interval (levels tau and 1 - tau) shaded, the narrower darker. Writes a PNG to
    ``path`` and returns it.
    """
    truth_f, forecast_f, observed = check_forecast(truth, forecast, mask, channel)
    history = _check_history(history, truth_f.shape)
    ids = _check_ids(point_ids, truth_f.shape[1])
    mae = point_mae(truth_f, forecast_f, channel, observed)
    picked = worst_points(truth_f, forecast_f, channel, num_points, observed)

    fig, axes = _grid(len(picked))
    shown_truth = np.where(observed, truth_f, np.nan)[:, :, channel]
    for ax, point in zip(axes, picked, strict=True):
        series = (history[:, point, channel], shown_truth[:, point], forecast_f[:, point, channel])
        if quantiles is not None:
            _draw_fan(ax, np.asarray(quantiles)[:, point, channel], levels)
        _draw_series(ax, *series)
        ax.set_title(f"point {ids[point]}  MAE {mae[point]:.3g}", fontsize="small")
        ax.set_ylabel(channel_name)
    if len(picked):
        axes[0].legend(fontsize="x-small")
    else:
        fig.text(0.5, 0.5, "no observed entries to rank", ha="center", va="center")
    return save_png(fig, path)


def _check_history(history: np.ndarray, forecast_shape: tuple[int, ...]) -> np.ndarray:
    """``history`` ``(M, N, C)`` with the (N, C) of the forecast, as floats."""
    history = np.asarray(history, dtype=float)
    if history.ndim != 3 or history.shape[1:] != forecast_shape[1:]:
        raise ValueError(
            f"expected history of shape (M, N, C) with (N, C) = {forecast_shape[1:]}; "
            f"got {history.shape}"
        )
    return history


def _check_ids(point_ids: Sequence | None, num_points: int) -> Sequence:
    """``point_ids`` of length N, or the indices ``0..N-1`` when None."""
    if point_ids is None:
        return range(num_points)
    if len(point_ids) != num_points:
        raise ValueError(f"expected point_ids of length N = {num_points}; got {len(point_ids)}")
    return point_ids


def _grid(num_panels: int) -> tuple:
    """A figure with ``num_panels`` subplots in two columns, and the flat list of them."""
    cols = min(2, max(num_panels, 1))
    rows = max(1, math.ceil(num_panels / cols))
    fig = new_figure(4.2 * cols, 2.6 * rows)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[num_panels:]:
        ax.set_axis_off()
    return fig, list(axes[:num_panels])


def _draw_series(ax: Axes, history: np.ndarray, truth: np.ndarray, forecast: np.ndarray) -> None:
    """``history`` ``(M,)`` at steps -M+1..0; ``truth``, ``forecast`` ``(J,)`` at 1..J."""
    past = np.arange(1 - len(history), 1)
    future = np.arange(1, len(truth) + 1)
    ax.plot(past, history, color="0.4", marker=".", label="history")
    ax.plot(future, truth, color="tab:blue", marker="o", markersize=3, label="truth")
    ax.plot(future, forecast, color="tab:orange", marker="x", ls="--", label="forecast")
    ax.axvline(0.5, color="0.8", lw=0.8)
    ax.set_xlabel("step")


def _draw_fan(ax: Axes, quantiles: np.ndarray, levels: Sequence[float]) -> None:
    """``quantiles (J, Q)`` at ``levels``: the central intervals at steps 1..J, shaded."""
    steps = np.arange(1, quantiles.shape[0] + 1)
    pairs = [
        (lo, hi)
        for lo, tau in enumerate(levels)
        if tau < 0.5
        for hi, other in enumerate(levels)
        if abs(other - (1 - tau)) < 1e-9
    ]
    for lo, hi in pairs:  # widest first: the narrower ones are drawn over them
        ax.fill_between(
            steps,
            quantiles[:, lo],
            quantiles[:, hi],
            color="tab:orange",
            alpha=0.18,
            lw=0,
            label=f"{round(100 * (1 - 2 * levels[lo]), 6):g} % interval",
        )
