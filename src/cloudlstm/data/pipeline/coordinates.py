"""The coordinates a model sees: static points min-max normalised to [0, 1], then the outlier
options applied (DBSCAN noise found, or the paper's shifted points made:
:mod:`cloudlstm.data.pipeline.outliers`); moving points' positions scaled with the range the
training part saw.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from cloudlstm.data.pipeline.outliers import dbscan_outliers, shift_outliers
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.data.transforms import coord_scale, normalize_coords, scale_coords
from cloudlstm.errors import UserError

log = logging.getLogger(__name__)

__all__ = [
    "OUTLIER_METHODS",
    "FAR_OUTSIDE_SPANS",
    "CoordScale",
    "check_outlier_options",
    "extents_outside",
    "model_coords",
    "track_scale",
]

OUTLIER_METHODS = ("dbscan",)

# (lo, span, degenerate), each (L,): raw -> normalised coordinates (transforms.scale_coords)
CoordScale = tuple[np.ndarray, np.ndarray, np.ndarray]


def check_outlier_options(outliers: str | None, outlier_shift: float | None) -> None:
    """A ``UserError`` for an unknown ``outliers`` method, or for both options at once."""
    if outliers is not None and outliers not in OUTLIER_METHODS:
        raise UserError(
            f"PointCloudDataModule: unknown outliers={outliers!r}; use one of "
            f"{OUTLIER_METHODS} or null."
        )
    if outliers is not None and outlier_shift is not None:
        raise UserError(
            "PointCloudDataModule: choose either outliers=dbscan (find outliers) or "
            "outlier_shift=<d> (make them), not both."
        )


def model_coords(
    stream: PointCloudStream,
    train_end: int,
    outlier_options: Mapping[str, Any],
    trained: CoordScale | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, CoordScale, dict[str, np.ndarray]]:
    """The stream's coordinates as the model sees them.

    Args:
        stream: the datamodule's stream.
        train_end: the end of the training part (moving points are scaled with its range).
        outlier_options: the datamodule's ``outliers``, ``dbscan_eps``,
            ``dbscan_min_samples``, ``outlier_shift``, ``outlier_count``, ``outlier_seed``
            (static points only).
        trained: a trained run's ``(lo, span, degenerate)``, used instead of the stream's
            own range (evaluation): positions are then placed as training placed them, not
            clipped, and points far outside the training area are warned of.

    Returns:
        ``(coords (N, L) float32, track (T, N, L) float32 or None, scale, point_groups)``:
        the normalised coordinates (moving points: their first positions), the normalised
        positions of moving points (None for static ones), the ``(lo, span, degenerate)``
        mapping raw coordinates to normalised ones, and ``{"inliers", "outliers"}`` ``(N,)``
        bool masks when an outlier option is set (else empty).
    """
    if trained is not None:
        trained = _checked_training_scale(trained, stream)
    if stream.moving:
        scale = track_scale(stream.trajectory, train_end) if trained is None else trained
        placed = scale_coords(stream.trajectory, *scale)
        track = torch.as_tensor(placed, dtype=torch.float32)
        _warn_merged_track(stream, track.numpy())
        _warn_far_outside(stream, placed.max(axis=0), placed.min(axis=0), trained)
        return track[0], track, scale, {}
    scale = coord_scale(stream.coords) if trained is None else trained
    _warn_one_position(stream, scale[2])
    if trained is None:
        normalised = normalize_coords(stream.coords)
    else:
        normalised = scale_coords(stream.coords, *trained)
        _warn_far_outside(stream, normalised, normalised, trained)
    _warn_merged_positions(stream, normalised)
    coords, groups = _with_outliers(normalised, outlier_options)
    return torch.as_tensor(coords, dtype=torch.float32), None, scale, groups


# Points farther than this many training extents beyond the training coordinate range, in
# any dimension, are warned of: the model extrapolates there.
FAR_OUTSIDE_SPANS = 1.0


def extents_outside(normalised: np.ndarray, degenerate: np.ndarray) -> np.ndarray:
    """``(N,)``: how many training extents each point of ``normalised (N, L)`` lies outside
    the training area ([0, 1] in each dimension), 0 or less inside it; dimensions all
    training points shared (``degenerate``, which the model does not read) left out."""
    live = ~np.asarray(degenerate, dtype=bool)
    if not live.any():
        return np.zeros(len(normalised))
    placed = np.asarray(normalised, dtype=np.float64)[:, live]
    return np.maximum(-placed, placed - 1.0).max(axis=1)


def _checked_training_scale(trained: CoordScale, stream: PointCloudStream) -> CoordScale:
    """``trained`` as arrays, refused when it has another number of dimensions."""
    lo, span, degenerate = (np.asarray(a) for a in trained)
    if len(lo) != stream.num_dims:
        raise UserError(
            f"The model was trained on {len(lo)}-D positions, but stream '{stream.name}' has "
            f"{stream.num_dims}-D ones: evaluate it on data with its training coordinates."
        )
    return lo.astype(np.float64), span.astype(np.float64), degenerate.astype(bool)


def _warn_far_outside(
    stream: PointCloudStream,
    highest: np.ndarray,
    lowest: np.ndarray,
    trained: CoordScale | None,
) -> None:
    """Warn when points placed with a training run's scale (``highest``/``lowest``: each
    point's ``(N, L)`` normalised extremes) lie far outside its area."""
    if trained is None:
        return
    beyond = np.maximum(extents_outside(highest, trained[2]), extents_outside(lowest, trained[2]))
    far = np.flatnonzero(beyond > FAR_OUTSIDE_SPANS)
    if not len(far):
        return
    worst = far[np.argmax(beyond[far])]
    log.warning(
        "stream '%s': %d of %d point(s) lie more than %gx the training area's extent outside "
        "it, up to %.3gx (point %s): the model extrapolates there, so scores at and near them "
        "measure that.",
        stream.name,
        len(far),
        stream.num_points,
        FAR_OUTSIDE_SPANS,
        beyond[worst],
        stream.point_ids[worst],
    )


def _warn_one_position(stream: PointCloudStream, degenerate: np.ndarray) -> None:
    """Warn when every static point has the same position (each coordinate ``degenerate``):
    the models that read positions (point-cloud models' neighbours, graphs built from
    positions, the grid mapping) then tell the points apart by their order alone, which
    usually means the coordinate columns were not filled."""
    if stream.num_points > 1 and np.asarray(degenerate, dtype=bool).all():
        where = ", ".join(f"{v:g}" for v in stream.coords[0])
        log.warning(
            "stream '%s': all %d points have the same position (%s), so the models that read "
            "positions tell them apart by their order alone; give each point its own "
            "position in the data.",
            stream.name,
            stream.num_points,
            where,
        )


def _warn_merged_positions(stream: PointCloudStream, normalised: np.ndarray) -> None:
    """Warn when points at distinct positions share one once scaled to [0, 1] in float32,
    as the model sees them: the kNN, graphs and grid can no longer tell them apart. Two
    sensors a millimetre apart in a city do that; most of a cloud doing it means one
    coordinate far from the rest (a typo, 1e300 for 13.4), which the warning names."""
    raw = np.asarray(stream.coords, dtype=np.float64)
    distinct = len(np.unique(raw, axis=0))
    seen = len(np.unique(normalised.astype(np.float32), axis=0))
    if seen == distinct:
        return
    (farthest,), axis, median = _farthest_coordinate(raw)
    log.warning(
        "stream '%s': %d distinct point positions become %d once scaled to [0, 1] in float32, "
        "so the models that read positions cannot tell some points apart. The farthest "
        "coordinate from the others is point %s's %s (%g, where the median is %g): if it is "
        "wrong, correct it in the data.",
        stream.name,
        distinct,
        seen,
        stream.point_ids[farthest],
        "xyz"[axis],
        raw[farthest, axis],
        median[axis],
    )


def _warn_merged_track(stream: PointCloudStream, seen: np.ndarray) -> None:
    """:func:`_warn_merged_positions` for moving points: warn when, at some steps, points at
    distinct positions share one in ``seen``, the ``(T, N, L)`` float32 positions the model
    sees, naming how many steps, the first, and the coordinate farthest from the rest."""
    raw = np.asarray(stream.trajectory, dtype=np.float64)
    merged = np.concatenate(
        [
            _merged_steps(raw[t : t + _STEPS_AT_ONCE], seen[t : t + _STEPS_AT_ONCE])
            for t in range(0, len(raw), _STEPS_AT_ONCE)
        ]
    )
    if not merged.any():
        return
    (step, point), axis, median = _farthest_coordinate(raw)
    log.warning(
        "stream '%s': at %d of %d steps (the first: step %d) points at distinct positions "
        "share one once scaled to [0, 1] in float32, so the models that read positions cannot "
        "tell them apart there. The farthest coordinate from the others is point %s's %s at "
        "step %d (%g, where the median is %g): if it is wrong, correct it in the data.",
        stream.name,
        int(merged.sum()),
        len(merged),
        int(np.argmax(merged)),
        stream.point_ids[point],
        "xyz"[axis],
        step,
        raw[step, point, axis],
        median[axis],
    )


def _farthest_coordinate(raw: np.ndarray) -> tuple[tuple[int, ...], int, np.ndarray]:
    """Where in ``raw`` (``(..., L)`` finite positions) the coordinate farthest from its
    axis's median is: its index over the leading dimensions, its axis, and the ``(L,)``
    medians."""
    median = np.median(raw.reshape(-1, raw.shape[-1]), axis=0)
    *where, axis = np.unravel_index(np.argmax(np.abs(raw - median)), raw.shape)
    return tuple(int(i) for i in where), int(axis), median


# steps of a trajectory checked at once: bounded memory for long streams of many points
_STEPS_AT_ONCE = 4096


def _merged_steps(raw: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """``(T,)`` bool: the steps at which two points at distinct ``raw`` positions ``(T, N, L)``
    share one in ``seen`` (the same positions as the model sees them, float32).

    The steps where two points share their first two seen coordinates are found first, by
    sorting those as one 64-bit key (fast); only those steps are compared in full.
    """
    first = np.ascontiguousarray(seen[..., :2] + np.float32(0.0))  # -0.0 as 0.0: equal keys
    keys = np.sort(first.view(np.uint64 if first.shape[-1] == 2 else np.uint32)[..., 0], axis=1)
    merged = np.zeros(len(seen), dtype=bool)
    candidates = (keys[:, 1:] == keys[:, :-1]).any(axis=1)
    if candidates.any():
        merged[candidates] = _shared_by_distinct(raw[candidates], seen[candidates])
    return merged


def _shared_by_distinct(raw: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """:func:`_merged_steps` in full: sorted by their seen position, points that share one
    are neighbours, so adjacent pairs suffice."""
    keys = tuple(seen[..., axis] for axis in reversed(range(seen.shape[-1])))
    order = np.lexsort(keys, axis=-1)[..., None]
    seen, raw = np.take_along_axis(seen, order, axis=1), np.take_along_axis(raw, order, axis=1)
    shared = (seen[:, 1:] == seen[:, :-1]).all(axis=-1)
    distinct = (raw[:, 1:] != raw[:, :-1]).any(axis=-1)
    return (shared & distinct).any(axis=-1)


def _with_outliers(
    coords: np.ndarray, options: Mapping[str, Any]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Apply the outlier options to normalised coords: (coords, {"inliers", "outliers"})."""
    if options["outliers"] == "dbscan":
        mask = dbscan_outliers(coords, options["dbscan_eps"], options["dbscan_min_samples"])
    elif options["outlier_shift"] is not None:
        _check_outlier_count(options["outlier_count"], len(coords))
        coords, mask = shift_outliers(
            coords,
            float(options["outlier_shift"]),
            options["outlier_count"],
            options["outlier_seed"],
        )
    else:
        return coords, {}
    groups = {"inliers": ~mask, "outliers": mask}
    if empty := [name for name, members in groups.items() if not members.any()]:
        # a group without a point has no score: NaN in every metric
        log.warning(
            "DBSCAN finds %s: the %s group is not scored (data.dbscan_eps, "
            "data.dbscan_min_samples set how far apart outliers lie).",
            "no outlier" if empty == ["outliers"] else "every point an outlier",
            empty[0],
        )
    return coords, {name: members for name, members in groups.items() if members.any()}


def _check_outlier_count(count: int, num_points: int) -> None:
    """Refuse a ``data.outlier_count`` (>= 1, checked with the other options) that leaves
    no inlier to score."""
    if count >= num_points:
        raise UserError(
            f"data.outlier_count={count} of {num_points} points leaves no inlier to score: "
            f"give 1 to {num_points - 1} (data.outlier_shift moves that many points)."
        )


def track_scale(trajectory: np.ndarray, train_end: int) -> CoordScale:
    """``(lo, span, degenerate)`` of ``(T, N, L)`` moving points: the range the training part
    saw. Later positions may leave [0, 1] slightly; they are not clipped (clipping would
    pile points up on the border and break their neighbourhoods)."""
    seen = trajectory[: max(train_end, 1)].reshape(-1, trajectory.shape[-1])
    lo, hi = seen.min(axis=0), seen.max(axis=0)
    span = np.where(hi - lo > 1e-12, hi - lo, 1.0)
    return lo, span, np.zeros(len(lo), dtype=bool)
