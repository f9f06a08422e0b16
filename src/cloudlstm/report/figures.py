"""The test report's figures: maps and worst-point series of one test window, and the error
against the forecast horizon, as PNG files in ``<run dir>/figures/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch

from cloudlstm.data.cache import CachedSource
from cloudlstm.errors import UserError
from cloudlstm.report.cost import evaluating, model_inputs
from cloudlstm.viz import plot_forecast_maps, plot_horizon_curve, plot_worst_series


def figure_choice(datamodule: Any, window: object, channel: object) -> tuple[int, int]:
    """``(window, channel index)`` of the test window and channel the figures draw
    (``report.window``, ``report.channel``: an index or a name), checked against the set-up
    data, so that a run can be refused before it trains rather than after.

    Raises:
        UserError: no such test window or channel.
    """
    names = list(datamodule.channel_names)
    if isinstance(channel, str) and channel in names:
        c = names.index(channel)
    elif _is_index(channel, len(names)):
        c = channel
    else:
        raise UserError(
            f"report.channel={channel}: the data has channels {names}; give one of their names "
            f"or an index from 0 to {len(names) - 1}."
        )
    windows = len(datamodule.test_dataset or ())
    if windows and not _is_index(window, windows):
        raise UserError(
            f"report.window={window}: the test part has {windows} window(s); give an index "
            f"from 0 to {windows - 1}."
        )
    return (window if windows else 0), c


def _is_index(value: object, count: int) -> bool:
    """Whether ``value`` is an int in ``[0, count)``; a bool is not one, though Python's
    ``True`` is an int."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < count


@torch.no_grad()
def draw_figures(
    module: L.LightningModule,
    datamodule: Any,
    results: dict[str, Any],
    out_dir: Path,
    window: int = 0,
    channel: int | str = 0,
    model_name: str | None = None,
) -> dict[str, Path]:
    """Maps and worst-point series of one test window, and the error-vs-horizon curve.

    The maps' title names ``model_name`` (default: the model's class) and the time of the
    window's first forecast step; their axes are the points' coordinates in the data's
    units. Returns ``{name: png path}``; empty if there is no test window.
    """
    dataset = datamodule.test_dataset
    if not dataset:
        return {}
    index, c = figure_choice(datamodule, window, channel)
    names = list(datamodule.channel_names)
    item = dataset[index]
    model = module.model
    with evaluating(model) as (device, dtype):
        # the module's forward: the forecast as trained (anchored on the last frame or not)
        inputs = model_inputs([item], device, dtype)
        pred = module(*inputs)[0].cpu().float()
        fan = _quantiles(module, item, inputs)
    scaler = module.scaler  # the forecast channels' (the first of the input's)
    targets = {"x": item["x"][..., : len(names)], "y": item["y"]}
    real = {k: scaler.inverse_transform(v).numpy() for k, v in targets.items()}
    forecast = scaler.inverse_transform(pred).numpy()
    mask = item["y_mask"].numpy().astype(bool)
    # the inputs the loader filled are no readings: left out of the drawn history, as
    # unobserved targets are of the truth
    read = item["x_mask"][..., : len(names)].numpy().astype(bool)
    real["x"] = np.where(read, real["x"], np.nan)
    out_dir.mkdir(parents=True, exist_ok=True)
    per_step = results["per_step"]
    coords, coord_names = _map_coords(datamodule, item["coords"].numpy())
    return {
        "forecast_maps": plot_forecast_maps(
            coords,
            real["y"],
            forecast,
            channel=c,
            channel_name=names[c],
            mask=mask,
            path=out_dir / "forecast_maps.png",
            model=model_name or type(model).__name__,
            start=_forecast_start(datamodule, dataset, index),
            window=index,
            coord_names=coord_names,
        ),
        "worst_points": plot_worst_series(
            real["x"],
            real["y"],
            forecast,
            channel=c,
            channel_name=names[c],
            point_ids=list(datamodule.stream.point_ids),
            mask=mask,
            path=out_dir / "worst_points.png",
            **fan,
        ),
        "error_vs_horizon": plot_horizon_curve(
            {"test": per_step["mae"]["mean"]},
            std={"test": per_step["mae"]["std"]},
            path=out_dir / "error_vs_horizon.png",
        ),
    }


def _quantiles(module: L.LightningModule, item: dict, inputs: list) -> dict[str, Any]:
    """The fan of the worst points' series: ``quantiles (J, N, C, Q)`` in real units and
    their ``levels``, calibrated as tested; nothing without ``module.quantiles``."""
    levels = getattr(module, "quantile_levels", ())
    if not levels:
        return {}
    keys = [key for key in ("x", "coords", "future") if key in item]
    quantiles = module.predict_quantiles(dict(zip(keys, inputs, strict=True)))
    return {"quantiles": quantiles[0].cpu().numpy(), "levels": levels}


def _map_coords(datamodule: Any, normalised: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The points' coordinates in the data's own units (km, degrees) and their names; the
    model's normalised ones where the points move or the stream has none of its own."""
    stream = getattr(datamodule, "stream", None)
    coords = getattr(stream, "coords", None)
    if stream is None or stream.moving or coords is None or len(coords) != len(normalised):
        return normalised, ["x (normalised)", "y (normalised)"]
    declared = CachedSource.declared_by(getattr(datamodule, "source", None))  # may be absent
    source_names = list(declared.coord_cols or [])
    names = source_names[:2] if len(source_names) >= 2 else ["x", "y"]
    return np.asarray(coords), names


def _forecast_start(datamodule: Any, dataset: Any, index: int) -> str | None:
    """The timestamp of a test window's first forecast step; None without timestamps."""
    timestamps = getattr(getattr(datamodule, "stream", None), "timestamps", None)
    if timestamps is None or not hasattr(dataset, "time_range"):
        return None
    first_target = dataset.time_range(index)[1]
    return str(np.datetime_as_string(timestamps[first_target], unit="m")).replace("T", " ")
