"""The data's summary: the sizes of the stream and of each split as plain Python values
(:func:`summary`, e.g. saved with a run) and as a small table (:func:`print_summary`)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from cloudlstm.data.covariates import time_feature_names
from cloudlstm.data.pipeline.splits import SPLITS, window_counts

__all__ = ["print_summary", "summary"]

# point groups whose ids the printed summary names (the others: their size)
NAMED_GROUPS = ("outliers", "held_out")


def summary(datamodule: Any) -> dict[str, Any]:
    """Sizes of the data and of each split of a set-up
    :class:`~cloudlstm.data.pipeline.datamodule.PointCloudDataModule` (all plain Python
    types). Typed ``Any``: the datamodule imports this module, not the other way round."""
    dm = datamodule
    stream = dm.stream
    steps = {s: e - b for s, (b, e) in dm.bounds.items()}
    windows = window_counts(dm.window_bounds, dm.history_steps, dm.output_steps, dm.stride)
    ids = np.asarray(stream.point_ids)
    extras = {k: v for k, v in stream.metadata.items() if k != "generator"}
    return {
        "name": stream.name,
        "num_points": stream.num_points,
        # the N axis of the run's arrays (predictions.npz, per-point figures), in order
        "point_ids": ids.tolist(),
        "points_digest": _digest(ids),
        "values_digest": values_digest(stream),
        "num_channels": dm.num_channels,
        "num_dims": stream.num_dims,
        "channel_names": dm.channel_names,
        "covariates": dm.covariate_names,
        "time_features": time_feature_names(dm.time_features),
        "total_steps": stream.num_steps,
        "steps": steps,
        "windows": windows,
        "bounds": {s: list(b) for s, b in dm.bounds.items()},
        "window_bounds": {s: list(b) for s, b in dm.window_bounds.items()},
        "times": _split_times(stream.timestamps, dm.bounds),
        "missing_fraction": stream.missing_fraction,
        "score_filled": dm.score_filled,
        "input_steps": dm.model_input_steps,
        "history_steps": dm.history_steps,
        "output_steps": dm.output_steps,
        "stride": dm.stride,
        "steps_per_day": dm.steps_per_day,
        "moving": stream.moving,
        "seasonal": dm.seasonal is not None,
        "subset": None if dm.subset is None else list(dm.subset),
        "point_groups": {g: ids[m].tolist() for g, m in dm.point_groups.items()},
        # with data.holdout_points: whether test inputs hold the held-out points' readings
        "holdout_history": None if dm.held_out is None else dm.holdout.history,
        "source_metadata": _plain(extras),
    }


def print_summary(info: Mapping[str, Any], console: Any = None) -> None:
    """Print a :func:`summary` as a small rich table (on ``console``, default a new one)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"data: {info['name']}", show_header=True, header_style="bold")
    table.add_column("item")
    table.add_column("value", justify="right")
    table.add_row("points N", str(info["num_points"]))
    table.add_row("channels C", f"{info['num_channels']} ({', '.join(info['channel_names'])})")
    inputs = [*info["covariates"], *info["time_features"]]
    if inputs:
        table.add_row("input-only channels", ", ".join(inputs))
    table.add_row("total steps T", str(info["total_steps"]))
    window = f"{info['input_steps']} -> {info['output_steps']}"
    if info["seasonal"]:
        window += f" (seasonal, reaching back {info['history_steps']} steps)"
    table.add_row("window M -> J", window)
    if info["moving"]:
        table.add_row("moving points", "positions are forecast as pos_* channels")
    for group, ids in info["point_groups"].items():
        table.add_row(
            group,
            f"{len(ids)}" + (f": {', '.join(ids[:12])}" if group in NAMED_GROUPS else ""),
        )
    table.add_row("missing", f"{info['missing_fraction']:.2%}")
    for split in SPLITS:
        b, e = info["bounds"][split]
        table.add_row(
            f"{split}",
            f"steps [{b}, {e}) = {info['steps'][split]}, windows {info['windows'][split]}",
        )
    (console or Console()).print(table)


def _digest(point_ids: np.ndarray) -> str:
    """A short hash of the point ids in order: the same network, whatever its file's name."""
    return hashlib.sha1("\n".join(map(str, point_ids)).encode()).hexdigest()[:16]


def values_digest(stream: Any, chunk_steps: int = 4096) -> str:
    """A short hash of what the stream observed: its readings (unobserved cells as 0,
    whatever a source or version filled them with), which were observed, the positions
    and the times. Runs on other data (the same files under another root, edited) differ
    in it where their configs may not; read ``chunk_steps`` steps at a time, so that a
    memory-mapped stream is never copied whole."""
    readings, observations = hashlib.blake2b(), hashlib.blake2b()  # each read in order
    for start in range(0, stream.num_steps, chunk_steps):
        part = slice(start, start + chunk_steps)
        observed = np.asarray(stream.mask[part])
        readings.update(np.where(observed, stream.values[part], 0).astype(np.float32).tobytes())
        observations.update(observed.astype(np.uint8).tobytes())
    digest = hashlib.blake2b(readings.digest() + observations.digest(), digest_size=8)
    for extra in (stream.coords, stream.timestamps, stream.trajectory):
        if extra is not None:
            digest.update(np.ascontiguousarray(extra).tobytes())
    return digest.hexdigest()


def _split_times(
    timestamps: np.ndarray | None, bounds: Mapping[str, tuple[int, int]]
) -> dict[str, list[str] | None] | None:
    """Each split's first and last time step (ISO 8601; None for an empty split), which tell
    an evaluation on a file cut or grown since training what the run saw; None for a stream
    without times."""
    if timestamps is None:
        return None

    def iso(step: int) -> str:  # one step's time: not the whole stream's turned into text
        return str(np.datetime_as_string(np.datetime64(timestamps[step], "s")))

    return {s: [iso(b), iso(e - 1)] if e > b else None for s, (b, e) in bounds.items()}


def _plain(value: Any) -> Any:
    """JSON-friendly copy of metadata (numpy scalars/arrays to Python)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value
