"""Spatial outliers: find them (DBSCAN noise points) or make them (the paper's shift study).

Both work on normalised ``(N, L)`` coordinates and return a bool ``(N,)`` outlier mask, so
metrics can be reported separately for inliers and outliers.
"""

from __future__ import annotations

import numpy as np

__all__ = ["dbscan_outliers", "default_dbscan_eps", "shift_outliers"]


def _pairwise_distances(coords: np.ndarray) -> np.ndarray:
    diff = coords[:, None, :] - coords[None, :, :]
    return np.sqrt((diff**2).sum(-1))


def default_dbscan_eps(coords: np.ndarray, min_samples: int) -> float:
    """Twice the median distance to the ``min_samples``-th nearest point (itself counted).

    The paper does not give its DBSCAN settings; this scale-free heuristic marks points whose
    neighbourhood is much sparser than a typical point's as noise.
    """
    dist = np.sort(_pairwise_distances(np.asarray(coords, dtype=np.float64)), axis=1)
    k = min(min_samples, len(coords)) - 1
    return float(2.0 * np.median(dist[:, k]))


def dbscan_outliers(
    coords: np.ndarray, eps: float | None = None, min_samples: int = 4
) -> np.ndarray:
    """DBSCAN noise points of ``coords (N, L)``: bool ``(N,)``, True = outlier.

    A point is *core* when at least ``min_samples`` points (itself included) lie within
    ``eps``; a point is *noise* when it is not core and no core point lies within ``eps`` of
    it. Cluster labels are not needed for this, only the noise set, so no cluster expansion
    is done. ``eps=None`` uses :func:`default_dbscan_eps`. O(N^2) memory, fine for the
    hundreds of stations of the air-quality data.
    """
    coords = np.asarray(coords, dtype=np.float64)
    if min_samples < 1:
        raise ValueError(f"dbscan: min_samples must be >= 1; got {min_samples}.")
    if eps is None:
        eps = default_dbscan_eps(coords, min_samples)
    if not eps > 0:
        raise ValueError(f"dbscan: eps must be > 0; got {eps} (set data.dbscan_eps).")
    within = _pairwise_distances(coords) <= eps
    core = within.sum(axis=1) >= min_samples
    reachable = (within & core[None, :]).any(axis=1)
    return ~reachable


def shift_outliers(
    coords: np.ndarray, shift: float, count: int = 10, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The paper's controlled outlier study: move ``count`` random points away from the centre.

    Each chosen point moves by ``shift`` (normalised units) along every axis, away from the
    centre 0.5 (the sign of ``coord - 0.5`` per axis, i.e. outward in its quadrant; a point
    exactly on the centre line moves in the + direction). The result is *not* re-normalised,
    so ``shift=5`` really puts the points five domain widths away.

    Returns ``(shifted coords (N, L), outlier mask (N,) bool)``.
    """
    coords = np.asarray(coords, dtype=np.float64)
    n = len(coords)
    if not 0 <= count <= n:
        raise ValueError(
            f"outlier study: cannot pick outlier_count={count} of {n} points; use at most {n}."
        )
    if not np.isfinite(shift) or shift < 0:
        raise ValueError(f"outlier study: outlier_shift must be a finite number >= 0; got {shift}.")
    chosen = np.random.default_rng(seed).choice(n, size=count, replace=False)
    mask = np.zeros(n, dtype=bool)
    mask[chosen] = True
    direction = np.where(coords[chosen] >= 0.5, 1.0, -1.0)
    shifted = coords.copy()
    shifted[chosen] += shift * direction
    return shifted, mask
