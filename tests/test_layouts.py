"""city_layout: seeded, in the unit square, clustered like a city, with far outliers."""

import numpy as np
import pytest
import torch
from conftest import benchmark_module

from cloudlstm.nn import knn


@pytest.fixture(scope="module")
def city_layout():
    """``benchmarks/layouts.py``'s layout generator: the scaling benchmarks' clouds."""
    for module in benchmark_module("layouts"):
        yield module.city_layout


def nearest_distance(points: np.ndarray) -> np.ndarray:
    """Distance of every point to its nearest other point (exact kNN, K = 2)."""
    index = knn(torch.from_numpy(points), 2)[:, 1].numpy()
    return np.linalg.norm(points - points[index], axis=1)


def test_deterministic_per_seed_and_in_the_unit_square(city_layout):
    a = city_layout(2000, seed=3)
    assert a.shape == (2000, 2) and a.dtype == np.float32
    assert np.array_equal(a, city_layout(2000, seed=3))
    assert not np.array_equal(a, city_layout(2000, seed=4))
    assert a.min() >= 0 and a.max() <= 1
    assert len(np.unique(a, axis=0)) == len(a)


@pytest.mark.parametrize("n", [274, 5000])
def test_clustered_far_more_than_uniform(n, city_layout):
    """Clark-Evans ratio (mean nearest-neighbour distance over its value for uniform
    points of the same density, 0.5 / sqrt(density)): ~1 for uniform points, well below
    for clustered ones; and the nearest-neighbour distances spread over a much wider range
    (90th / 10th percentile: ~4.5 for uniform points)."""
    city = nearest_distance(city_layout(n, seed=0))
    uniform = nearest_distance(np.random.default_rng(0).random((n, 2), dtype=np.float32))
    expected = 0.5 / np.sqrt(n)  # unit square
    assert 0.9 < uniform.mean() / expected < 1.1
    assert city.mean() / expected < 0.7
    spread = lambda d: np.percentile(d, 90) / np.percentile(d, 10)  # noqa: E731
    assert spread(uniform) < 6 and spread(city) > 2 * spread(uniform)


@pytest.mark.parametrize("n, outliers", [(274, 3), (13000, 13)])
def test_a_few_far_outliers(n, outliers, city_layout):
    """max(3, N // 1000) points beyond 0.85 along x or y, where the city ends at 0.7: each
    at least 0.15 from every city point, over 5x the city's median nearest-neighbour
    distance (outliers may still be near each other)."""
    points = city_layout(n, seed=1)
    far = points.max(axis=1) >= 0.85
    assert far.sum() == outliers
    city = points[~far]
    assert city.max() <= 0.7
    to_city = np.linalg.norm(points[far][:, None] - city[None], axis=-1).min()
    assert to_city >= 0.15
    assert to_city > 5 * np.median(nearest_distance(city))


def test_options(city_layout):
    points = city_layout(500, seed=0, num_outliers=0, centre_fraction=1.0)
    assert points.max() <= 0.7
    assert len(city_layout(2, seed=0)) == 2  # all outliers: the default 3 is capped at N
    with pytest.raises(ValueError):
        city_layout(0)
