"""Seeded point layouts that look like a city's sensors, for scale tests and benchmarks.

Real deployments are not uniform: stations crowd in a few town centres of very different
sizes, thin out over the suburbs, and a handful sit far away from everything. Such
layouts stress what uniform points do not: neighbour search over very uneven densities
(tiny neighbour distances in the centres, a K-th neighbour far away for an outlier) and
bounding boxes dominated by a few distant points.
"""

from __future__ import annotations

import numpy as np


def city_layout(
    num_points: int,
    seed: int = 0,
    num_centres: int = 6,
    centre_fraction: float = 0.8,
    num_outliers: int | None = None,
    city_extent: float = 0.7,
    spread: float = 0.03,
) -> np.ndarray:
    """A clustered, city-like layout of ``num_points`` points in the unit square.

    Recipe (every draw from ``numpy.random.default_rng(seed)``, so one seed is one
    layout, on every machine and NumPy version with the same ``Generator`` streams):

    1. **The city** is the box ``[0, city_extent]^2``; the rest of the unit square is
       the far country.
    2. **Centres**: ``num_centres`` centres placed uniformly in the middle 70 % of the city
       box, with log-normal sizes (weights ``exp(N(0, 1))``, normalised): a few large
       towns and several small ones. The centres get ``centre_fraction`` of the points,
       shared out by weight. A centre's length scale is ``spread * sqrt(num_centres *
       weight)``, so its density grows more slowly than its point count (big towns are
       also wider). Even-numbered centres are 2-D Gaussians (isotropic, that scale as
       sigma); odd-numbered ones are log-normal radial (a uniform direction, radius
       ``scale * exp(N(0, 0.8))``): a denser core and a longer tail than a Gaussian.
       Points falling outside the city box are drawn again (:func:`_centre_points`).
    3. **Outskirts**: all other points but the outliers, uniform over the city box.
    4. **Outliers**: ``num_outliers`` points (default ``max(3, num_points // 1000)``)
       uniform in the far country beyond ``city_extent + 0.15`` along x or y (an L-shaped
       band along the top and right edges, :func:`_far_points`), far from every city point.
    5. The points are shuffled, so the groups are not contiguous in index order.

    Args:
        num_points: N >= 1.
        seed: the layout's seed.
        num_centres: number of dense centres (>= 1).
        centre_fraction: share of the non-outlier points in the centres, in [0, 1].
        num_outliers: far outliers; ``None`` for the default above. Capped at N.
        city_extent: side of the city box, in (0, 0.85).
        spread: length scale of an average centre, in units of the unit square.

    Returns:
        ``(num_points, 2)`` float32 coordinates in [0, 1].
    """
    if num_points < 1 or num_centres < 1:
        raise ValueError("city_layout: num_points and num_centres must be >= 1.")
    if not 0 <= centre_fraction <= 1 or not 0 < city_extent < 0.85 or spread <= 0:
        raise ValueError(
            "city_layout: need 0 <= centre_fraction <= 1, 0 < city_extent < 0.85 and spread > 0."
        )
    rng = np.random.default_rng(seed)
    if num_outliers is None:
        num_outliers = max(3, num_points // 1000)
    num_outliers = min(max(num_outliers, 0), num_points)
    city = num_points - num_outliers
    in_centres = round(city * centre_fraction)
    parts = _centre_points(rng, num_centres, in_centres, city_extent, spread)
    parts.append(rng.random((city - in_centres, 2)) * city_extent)  # outskirts
    parts.append(_far_points(rng, num_outliers, city_extent + 0.15))
    layout = np.concatenate(parts)
    rng.shuffle(layout)
    return np.clip(layout, 0.0, 1.0).astype(np.float32)


def _centre_points(
    rng: np.random.Generator, num_centres: int, count: int, city_extent: float, spread: float
) -> list[np.ndarray]:
    """``count`` points shared out over ``num_centres`` centres of log-normal weights: per
    centre an ``(n_c, 2)`` array inside the city box (step 2 of :func:`city_layout`)."""
    weights = np.exp(rng.normal(0.0, 1.0, num_centres))
    weights /= weights.sum()
    centres = city_extent * (0.15 + 0.7 * rng.random((num_centres, 2)))
    scales = spread * np.sqrt(num_centres * weights)
    # Points per centre in proportion to weight, the rounding remainder to the largest.
    counts = np.floor(weights * count).astype(int)
    counts[np.argmax(weights)] += count - counts.sum()
    parts = []
    for c, (centre, scale, n) in enumerate(zip(centres, scales, counts, strict=True)):
        points = np.empty((0, 2))
        while len(points) < n:  # redraw those outside the city box
            need = n - len(points)
            if c % 2 == 0:
                offsets = rng.normal(0.0, scale, (need, 2))
            else:
                angle = rng.uniform(0.0, 2 * np.pi, need)
                radius = scale * np.exp(rng.normal(0.0, 0.8, need))
                offsets = radius[:, None] * np.stack([np.cos(angle), np.sin(angle)], axis=1)
            new = centre + offsets
            inside = ((new >= 0) & (new <= city_extent)).all(axis=1)
            points = np.concatenate([points, new[inside]])
        parts.append(points)
    return parts


def _far_points(rng: np.random.Generator, count: int, far: float) -> np.ndarray:
    """``(count, 2)`` points uniform over the band ``max(x, y) >= far`` of the unit square,
    by rejection (the outliers of :func:`city_layout`)."""
    outliers = np.empty((0, 2))
    while len(outliers) < count:
        new = rng.random((4 * (count - len(outliers)), 2))
        outliers = np.concatenate([outliers, new[new.max(axis=1) >= far]])
    return outliers[:count]
