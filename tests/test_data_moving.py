"""Tests of the synthetic moving points (``data=synthetic_moving``)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import compose_train
from hydra.utils import instantiate

from cloudlstm.data.pipeline.datamodule import PointCloudDataModule
from cloudlstm.data.sources.moving import SyntheticMovingPoints

SMALL = dict(num_points=16, num_steps=600)


@pytest.fixture(scope="module")
def fleet():
    gen = SyntheticMovingPoints(**SMALL, seed=0)
    return gen, gen.load()


def pair_stats(stream, channel: int) -> tuple[np.ndarray, np.ndarray]:
    """Distances (km) and absolute value differences of every pair of points at every step."""
    i, j = np.triu_indices(stream.num_points, 1)
    traj = stream.trajectory
    dist = np.linalg.norm(traj[:, i] - traj[:, j], axis=2).ravel()
    diff = np.abs(stream.values[:, i, channel] - stream.values[:, j, channel]).ravel()
    return dist, diff


def test_stream_format(fleet):
    gen, s = fleet
    assert s.moving and s.trajectory.shape == (600, 16, 2)
    np.testing.assert_array_equal(s.coords, s.trajectory[0])
    assert s.values.shape == (600, 16, 2) and s.mask.all()
    assert s.channel_names == ["pm25_like", "speed_kmh"]
    assert (np.diff(s.timestamps) == np.timedelta64(1, "m")).all()
    assert s.metadata["step_minutes"] == 1 and s.metadata["steps_per_day"] == 1440
    assert np.isfinite(s.values).all() and (s.values >= 0).all()
    names = SyntheticMovingPoints(num_channels=4).channel_names
    assert names == ["pm25_like", "speed_kmh", "no2_like", "o3_like"]
    assert SyntheticMovingPoints(num_channels=1).channel_names == ["pm25_like"]


def test_deterministic_given_seed(fleet):
    _, a = fleet
    b = SyntheticMovingPoints(**SMALL, seed=0).load()
    c = SyntheticMovingPoints(**SMALL, seed=1).load()
    np.testing.assert_array_equal(a.trajectory, b.trajectory)
    np.testing.assert_array_equal(a.values, b.values)
    assert not np.allclose(a.trajectory, c.trajectory)


def test_points_move_smoothly_inside_the_domain(fleet):
    gen, s = fleet
    traj = s.trajectory
    assert traj.min() >= 0.0 and traj.max() <= gen.extent_km
    moves = np.diff(traj, axis=0)
    step = np.linalg.norm(moves, axis=2)
    assert (step.sum(axis=0) > 50.0).all()  # every vehicle covers > 50 km in 10 h
    assert step.max() <= gen.max_step_km  # bounded speed
    turn = np.linalg.norm(np.diff(moves, axis=0), axis=2)
    assert np.quantile(turn, 0.99) < 0.8 * step.mean()  # no jumps or sharp reversals
    # positions are forecastable: extrapolating the last move beats standing still by far
    still = np.linalg.norm(moves[1:], axis=2).mean()
    assert turn.mean() < 0.3 * still


def test_speed_channel_is_the_vehicles_own_speed(fleet):
    _, s = fleet
    km_per_h = np.linalg.norm(np.diff(s.trajectory, axis=0), axis=2) * 60.0
    assert np.corrcoef(km_per_h.ravel(), s.values[:-1, :, 1].ravel())[0, 1] > 0.95


def test_values_depend_on_position(fleet):
    _, s = fleet
    dist, diff = pair_stats(s, channel=0)
    near, far = diff[dist < 0.5], diff[dist > 3.0]
    assert len(near) > 100 and near.mean() < 0.4 * far.mean()


def test_cache_roundtrip(tmp_path):
    gen = SyntheticMovingPoints(num_points=6, num_steps=50, cache_dir=tmp_path)
    first = gen.load()
    assert not gen.last_load_from_cache and gen.cache_path.exists()
    again = SyntheticMovingPoints(num_points=6, num_steps=50, cache_dir=tmp_path)
    second = again.load()
    assert again.last_load_from_cache
    np.testing.assert_array_equal(first.trajectory, second.trajectory)
    np.testing.assert_array_equal(first.values, second.values)
    other = SyntheticMovingPoints(num_points=6, num_steps=50, cache_dir=tmp_path, seed=5)
    other.load()
    assert not other.last_load_from_cache and other.cache_path != gen.cache_path


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_points must be an integer >= 2"):
        SyntheticMovingPoints(num_points=1)
    with pytest.raises(ValueError, match="step_minutes must be a number"):
        SyntheticMovingPoints(step_minutes=0)
    with pytest.raises(ValueError, match="start='yesterday' is not an ISO date"):
        SyntheticMovingPoints(start="yesterday")
    with pytest.raises(ValueError, match=r"mean_speed_kmh must be a number >= 0.0 and <= 1000"):
        SyntheticMovingPoints(mean_speed_kmh=1e9)  # no road fleet's speed


def test_hydra_config_builds_the_datamodule(tmp_path):
    cfg = compose_train(tmp_path, ["data=synthetic_moving", "data.source.num_steps=300"])
    assert cfg.data.input_steps == 12 and cfg.data.output_steps == 12
    dm = instantiate(cfg.data)
    assert isinstance(dm, PointCloudDataModule)
    batch = next(iter(dm.train_dataloader()))
    b = cfg.data.batch_size
    assert batch["x"].shape == (b, 12, 16, dm.num_channels) and batch["coords"].shape == (b, 16, 2)
    assert dm.source.cache_path.parent == tmp_path / "data" / "synthetic_moving"
