"""Datamodule options the paper's experiments need: seasonal input, point subsets, outliers,
moving points, filled values."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY, compose_train

from cloudlstm.cli.train import train
from cloudlstm.data import PointCloudDataModule, PointCloudStream
from cloudlstm.data.pipeline.outliers import dbscan_outliers, shift_outliers
from cloudlstm.data.pipeline.splits import seasonal_offsets
from cloudlstm.data.transforms import normalize_coords
from cloudlstm.errors import UserError


def _stream(t: int = 400, n: int = 6, c: int = 2, minutes: int = 60, seed: int = 0, **kw):
    """values[t, n, c] = t + 1000 n + 0.5 c, so every window's contents can be checked."""
    rng = np.random.default_rng(seed)
    values = (
        np.arange(t)[:, None, None] + 1000.0 * np.arange(n)[None, :, None] + 0.5 * np.arange(c)
    ).astype(np.float32)
    ts = np.datetime64("2021-01-01T00:00") + np.arange(t) * np.timedelta64(minutes, "m")
    return PointCloudStream.from_values(
        values, rng.uniform(0, 10, size=(n, 2)), timestamps=ts, name="toy", **kw
    )


def _raw(dm: PointCloudDataModule, x: torch.Tensor) -> np.ndarray:
    return dm.scaler.inverse_transform(x).numpy()


def test_seasonal_offsets_match_the_paper() -> None:
    five_min = seasonal_offsets(6, steps_per_day=288)
    assert len(five_min) == 90  # 84 two-hourly samples of a week + the last 30 minutes
    assert five_min[0] == -7 * 288 and five_min[83] == -24
    np.testing.assert_array_equal(five_min[84:], np.arange(-6, 0))
    assert (np.diff(five_min[:84]) == 24).all()
    hourly = seasonal_offsets(12, steps_per_day=24)
    assert len(hourly) == 96 and hourly[0] == -168 and (np.diff(hourly[:84]) == 2).all()
    with pytest.raises(ValueError, match="whole"):
        seasonal_offsets(6, steps_per_day=24, every_minutes=90)


def test_seasonal_windows_hold_the_right_steps() -> None:
    dm = PointCloudDataModule(
        _stream(t=3000), input_steps=6, output_steps=3, batch_size=4, seasonal=True
    )
    item = dm.train_dataset[0]
    assert item["x"].shape == (90, 6, 2) and dm.summary()["input_steps"] == 90
    assert dm.history_steps == 168
    t_first_target = 168  # the first window starts at 0 and reaches back 168 steps
    expected = t_first_target + seasonal_offsets(6, 24)
    np.testing.assert_allclose(_raw(dm, item["x"])[:, 0, 0], expected, atol=1e-2)
    np.testing.assert_allclose(_raw(dm, item["y"])[:, 0, 0], [168, 169, 170], atol=1e-2)
    # Targets stay in their split; training inputs too (later inputs may reach back).
    assert dm.train_dataset.window_starts[0] == 0
    for split in ("val", "test"):
        ds, (lo, hi) = dm.datasets[split], dm.bounds[split]
        assert ds.time_range(0)[1] == lo and ds.time_range(len(ds) - 1)[2] == hi


def test_seasonal_paper_protocol_reaches_back_into_the_previous_split() -> None:
    """85 days of 5-minute steps, 10 % validation (6.8 days) under the 7-day input window."""
    stream = _stream(t=85 * 288, n=2, c=1, minutes=5)  # value = time index (+ 1000 at point 1)
    dm = PointCloudDataModule(stream, input_steps=6, output_steps=6, seasonal=True)
    dm.setup()
    week = 7 * 288
    assert dm.history_steps == week and dm.model_input_steps == 90
    assert dm.bounds == {"train": (0, 17626), "val": (17626, 19584), "test": (19584, 24480)}
    assert dm.bounds["val"][1] - dm.bounds["val"][0] < week  # shorter than the window
    # every J-step target window inside a split, one per step; training needs a whole week
    assert dm.summary()["windows"] == {"train": 17626 - week - 5, "val": 1953, "test": 4891}
    for split, first_input, first_target in (
        ("train", 0, week),
        ("val", 17626 - week, 17626),
        ("test", 19584 - week, 19584),
    ):
        ds = dm.datasets[split]
        lo, hi = dm.bounds[split]
        x, y = (_raw(dm, ds[0][key])[:, 0, 0].round() for key in ("x", "y"))
        assert x[0] == first_input and x[83] == first_target - 24  # the week, every 2 h
        np.testing.assert_array_equal(x[84:], np.arange(first_target - 6, first_target))
        np.testing.assert_array_equal(y, np.arange(first_target, first_target + 6))
        last = _raw(dm, ds[len(ds) - 1]["y"])[:, 0, 0].round()
        np.testing.assert_array_equal(last, np.arange(hi - 6, hi))
        targets = ds.window_starts + week
        assert targets.min() >= lo and (targets + 6).max() <= hi  # never leave the split
    # the scaler saw the training part only: mean time index 8812.5, points 0 and 1000
    np.testing.assert_allclose(dm.scaler.mean, [(17626 - 1) / 2 + 500], rtol=1e-6)
    # without the week the same target windows are scored
    plain = PointCloudDataModule(stream, input_steps=6, output_steps=6)
    assert (len(plain.val_dataset), len(plain.test_dataset)) == (1953, 4891)


def test_seasonal_needs_a_sampling_period() -> None:
    s = _stream()
    s.timestamps = None
    with pytest.raises(ValueError, match="sampling period"):
        PointCloudDataModule(s, input_steps=6, output_steps=3, seasonal=True).setup()


def test_point_subset_is_seeded_and_checked() -> None:
    stream = _stream(n=20)
    a = PointCloudDataModule(stream, 4, 2, num_points=5, subset_seed=1)
    b = PointCloudDataModule(stream, 4, 2, num_points=5, subset_seed=1)
    c = PointCloudDataModule(stream, 4, 2, num_points=5, subset_seed=2)
    assert a.num_points == 5 and a.stream.point_ids == b.stream.point_ids
    assert a.stream.point_ids != c.stream.point_ids
    idx = [stream.point_ids.index(p) for p in a.stream.point_ids]
    np.testing.assert_array_equal(a.stream.values, stream.values[:, idx])
    with pytest.raises(ValueError, match="num_points=30 .* only 20"):
        _ = PointCloudDataModule(stream, 4, 2, num_points=30).stream


def test_dbscan_flags_isolated_points() -> None:
    rng = np.random.default_rng(0)
    cluster = rng.normal(0.5, 0.03, size=(40, 2))
    far = np.array([[0.0, 0.0], [1.0, 0.95]])
    outliers = dbscan_outliers(np.vstack([cluster, far]), eps=0.1, min_samples=4)
    assert outliers[-2:].all() and not outliers[:-2].any()
    # The default eps finds the same two.
    assert dbscan_outliers(np.vstack([cluster, far])).tolist() == outliers.tolist()


def test_outlier_shift_moves_points_outwards_by_quadrant() -> None:
    coords = np.random.default_rng(1).uniform(size=(50, 2))
    moved, mask = shift_outliers(coords, shift=1.0, count=10, seed=3)
    assert mask.sum() == 10
    np.testing.assert_array_equal(moved[~mask], coords[~mask])
    delta = moved[mask] - coords[mask]
    np.testing.assert_allclose(np.abs(delta), 1.0)
    np.testing.assert_array_equal(np.sign(delta), np.where(coords[mask] >= 0.5, 1, -1))
    same, _ = shift_outliers(coords, shift=0.0, count=10, seed=3)
    np.testing.assert_array_equal(same, coords)
    with pytest.raises(ValueError, match="outlier_count=60 of 50"):
        shift_outliers(coords, 1.0, count=60)


def test_a_dbscan_group_without_points_is_not_scored_and_said(caplog) -> None:
    """Every point within reach of the others: the outliers group was empty, NaN in
    metrics.json."""
    dm = PointCloudDataModule(_stream(n=12), 4, 2, outliers="dbscan", dbscan_eps=10.0)
    with caplog.at_level("WARNING"):
        dm.setup()
    assert list(dm.point_groups) == ["inliers"] and dm.point_groups["inliers"].all()
    assert "DBSCAN finds no outlier: the outliers group is not scored" in caplog.text


def test_outlier_groups_reach_the_batches_and_summary() -> None:
    dm = PointCloudDataModule(
        _stream(n=12), 4, 2, outlier_shift=5.0, outlier_count=3, outlier_seed=0
    )
    dm.setup()
    groups = dm.point_groups
    assert groups["outliers"].sum() == 3 and (groups["inliers"] ^ groups["outliers"]).all()
    base = normalize_coords(dm.stream.coords)
    got = dm.train_dataset[0]["coords"].numpy()
    np.testing.assert_allclose(got[groups["inliers"]], base[groups["inliers"]], atol=1e-6)
    assert np.abs(got[groups["outliers"]] - base[groups["outliers"]]).min() > 4.99
    assert len(dm.summary()["point_groups"]["outliers"]) == 3
    for count in (12, 13):
        # all 12 moved: the inliers group was empty, its every metric NaN
        with pytest.raises(
            UserError, match=rf"outlier_count={count} of 12 points leaves no inlier"
        ):
            PointCloudDataModule(
                _stream(n=12), 4, 2, outlier_shift=5.0, outlier_count=count
            ).setup()
    with pytest.raises(ValueError, match="not both"):
        PointCloudDataModule(_stream(), 4, 2, outliers="dbscan", outlier_shift=1.0)
    with pytest.raises(ValueError, match="unknown outliers='kmeans'"):
        PointCloudDataModule(_stream(), 4, 2, outliers="kmeans")


def test_moving_points_forecast_their_positions() -> None:
    t, n = 200, 5
    stream = _stream(t=t, n=n)
    track = stream.coords[None] + np.linspace(0, 3, t)[:, None, None] * np.ones((1, n, 2))
    moving = PointCloudStream(
        values=stream.values,
        mask=stream.mask,
        coords=track[0],
        channel_names=stream.channel_names,
        point_ids=stream.point_ids,
        timestamps=stream.timestamps,
        trajectory=track,
    )
    dm = PointCloudDataModule(moving, 4, 2, batch_size=4)
    assert dm.num_channels == 4 and dm.channel_names[-2:] == ["pos_x", "pos_y"]
    item = dm.train_dataset[3]  # input steps 3..6, target 7..8
    raw_y = _raw(dm, item["y"])
    np.testing.assert_allclose(raw_y[..., 2:], track[7:9], atol=1e-4)
    # coords = positions at the last input step, normalised with the training range
    train_end = dm.bounds["train"][1]
    seen = track[:train_end].reshape(-1, 2)
    expected = (track[6] - seen.min(0)) / (seen.max(0) - seen.min(0))
    np.testing.assert_allclose(item["coords"].numpy(), expected, atol=1e-5)
    assert dm.summary()["moving"]


def test_filled_values_are_kept_and_optionally_scored() -> None:
    stream = _stream(t=100, n=3)
    stream.mask[10:20, 0, 0] = False  # as if a loader had interpolated these
    dm = PointCloudDataModule(stream, 4, 2)
    item = dm.train_dataset[10]
    np.testing.assert_allclose(_raw(dm, item["x"])[:, 0, 0], np.arange(10, 14), atol=1e-2)
    assert not item["x_mask"][:, 0, 0].any()
    scored = PointCloudDataModule(stream, 4, 2, score_filled=True)
    assert scored.train_dataset[10]["x_mask"].all()


def _tiny_model_run(tmp_path, *overrides: str):
    base = [o for o in TINY if not o.startswith("model.")]
    return compose_train(tmp_path, [*base, "logger=none", *overrides])


def test_outlier_study_reports_groups_in_metrics(tmp_path) -> None:
    cfg = _tiny_model_run(
        tmp_path,
        "model=knn_lstm",
        "model.hidden_size=4",
        "data.outlier_shift=1.0",
        "data.outlier_count=3",
    )
    results = train(cfg)
    groups = results["test"]["groups"]
    assert set(groups) == {"inliers", "outliers"}
    for res in groups.values():
        assert np.isfinite(res["overall"]["mae"]["mean"])
    on_disk = json.loads(Path(cfg.paths.output_dir, "metrics.json").read_text())
    assert on_disk["test"]["groups"]["outliers"]["num_instances"] > 0


def test_parameter_free_model_skips_training(tmp_path) -> None:
    cfg = _tiny_model_run(tmp_path, "model=persistence")
    results = train(cfg)
    assert results["num_params"] == 0 and "train_time_s" not in results
    assert np.isfinite(results["test"]["overall"]["mae"]["mean"])
    summary = json.loads(Path(cfg.paths.output_dir, "data_summary.json").read_text())
    assert summary["steps_per_day"] == 24


def test_moving_fleet_end_to_end_forecasts_positions(tmp_path) -> None:
    cfg = compose_train(
        tmp_path,
        [
            "data=synthetic_moving",
            "data.source.num_points=8",
            "data.source.num_steps=160",
            "data.input_steps=4",
            "data.output_steps=3",
            "data.batch_size=8",
            "model=cloudlstm",
            "model.k=3",
            "model.hidden_channels=4",
            "logger=none",
            *[o for o in TINY if o.startswith(("trainer", "~callbacks"))],
        ],
    )
    results = train(cfg)
    per_channel = results["test"]["per_channel"]
    assert {"pos_x", "pos_y"} <= set(per_channel)
    assert np.isfinite(per_channel["pos_x"]["mae"]["mean"])
    assert results["data"]["moving"] and results["data"]["num_channels"] == 4
