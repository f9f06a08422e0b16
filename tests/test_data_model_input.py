"""The model-input rule (``cloudlstm.data.pipeline.model_input``): a training window and a
forecast's input are put together alike, so a model is served what it was trained on."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cloudlstm.data.pipeline.datamodule import PointCloudDataModule
from cloudlstm.data.pipeline.forecast_input import build_input
from cloudlstm.data.pipeline.model_input import (
    normalised,
    positions_before_covariates,
    with_time_features,
)
from cloudlstm.data.stream import PointCloudStream

T, N, M, J = 120, 5, 4, 2
WINDOW = 3  # the test window compared
VALUES, COVARIATES = ["a", "b"], ["w0", "w1"]


def test_positions_go_after_the_values_and_before_the_covariates():
    channels = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)  # 2 values, 2 covariates
    positions = np.full((2, 3, 2), -1.0)
    out = positions_before_covariates(channels, positions, num_values=2)
    assert out.dtype == np.float32 and out.shape == (2, 3, 6)
    np.testing.assert_array_equal(out[..., :2], channels[..., :2])
    np.testing.assert_array_equal(out[..., 2:4], -1.0)
    np.testing.assert_array_equal(out[..., 4:], channels[..., 2:])
    mask = positions_before_covariates(np.zeros((2, 3, 4), bool), np.ones((2, 3, 2), bool), 2)
    assert mask.dtype == bool and mask[..., 2:4].all() and not mask[..., [0, 1, 4, 5]].any()


def test_normalised_sets_entries_without_a_value_to_zero_and_keeps_filled_ones():
    raw = np.array([[1.0, np.nan], [np.inf, 7.0]], dtype=np.float32)
    mean, std = np.array([1.0, 3.0], np.float32), np.array([2.0, 4.0], np.float32)
    out = normalised(raw, mean, std)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [[0.0, 0.0], [0.0, 1.0]])
    np.testing.assert_array_equal(normalised(raw, None, None), [[1.0, 0.0], [0.0, 7.0]])
    assert np.isnan(raw[0, 1])  # the raw values are left alone


def test_time_features_come_last_at_every_point_and_observed():
    x, x_mask = np.zeros((3, 2, 1), np.float32), np.zeros((3, 2, 1), bool)
    features = np.arange(6, dtype=np.float64).reshape(3, 2)
    out, out_mask = with_time_features(x, x_mask, features)
    assert out.shape == (3, 2, 3) and out.dtype == np.float32 and out_mask.dtype == bool
    np.testing.assert_array_equal(out[:, 1, 1:], features)
    assert out_mask[..., 1:].all() and not out_mask[..., 0].any()
    assert with_time_features(x, x_mask, None) == (x, x_mask)


def _stream(moving: bool) -> PointCloudStream:
    """Hourly values and covariates; covariate ``w1`` has no reading at any point during
    the compared window's input steps (so both paths must make it 0)."""
    rng = np.random.default_rng(5)
    channels = [*VALUES, *COVARIATES]
    values = rng.normal(10.0, 3.0, (T, N, len(channels))).astype(np.float32)
    mask = np.ones(values.shape, dtype=bool)
    split = _first_target(T)
    mask[split - M : split, :, -1] = False
    values[~mask] = np.nan
    track = np.cumsum(rng.normal(0.0, 0.3, (T, N, 2)), axis=0) + rng.uniform(0, 9, (1, N, 2))
    return PointCloudStream(
        values=values,
        mask=mask,
        coords=track[0] if moving else rng.uniform(0.0, 9.0, (N, 2)),
        channel_names=channels,
        point_ids=[f"p{p}" for p in range(N)],
        timestamps=np.datetime64("2024-03-01T00") + np.arange(T) * np.timedelta64(1, "h"),
        metadata={"covariates": COVARIATES},
        trajectory=track if moving else None,
    )


def _first_target(num_steps: int) -> int:
    """The first target step of test window :data:`WINDOW` (test_fraction 0.2)."""
    test_start = num_steps - int(round(0.2 * num_steps))
    return test_start + WINDOW  # its windows start M steps before the part


def _history(stream: PointCloudStream, steps: range) -> pd.DataFrame:
    """The stream's rows of ``steps`` as a long table: time, id, x, y, values, covariates."""
    rows = []
    for t in steps:
        for p, pid in enumerate(stream.point_ids):
            where = stream.trajectory[t, p] if stream.moving else stream.coords[p]
            rows.append([stream.timestamps[t], pid, *where, *stream.values[t, p]])
    return pd.DataFrame(rows, columns=["timestamp", "id", "x", "y", *stream.channel_names])


@pytest.mark.parametrize("moving", [False, True], ids=["static", "moving"])
def test_a_training_window_and_the_forecast_input_of_its_history_are_the_same(moving, caplog):
    stream = _stream(moving)
    dm = PointCloudDataModule(
        stream, input_steps=M, output_steps=J, test_fraction=0.2, time_features=["hour"]
    )
    dm.setup()
    first, split, _ = dm.test_dataset.time_range(WINDOW)
    assert split == _first_target(T) and first == split - M
    item = dm.test_dataset[WINDOW]
    # the window holds what the rule is about: covariates after the targets (positions too
    # for moving points), a channel without any reading, time features last
    targets = len(VALUES) + (2 if moving else 0)
    assert dm.num_channels == targets and item["x"].shape == (M, N, targets + 2 + 2)
    assert not item["x_mask"][..., targets + 1].any()
    assert (item["x"][..., targets + 1] == 0).all()

    with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.forecast_input"):
        served = build_input(_history(stream, range(split - M - 2, split)), dm.spec)
    (said,) = caplog.messages  # the covariate read nowhere is its training mean, said so
    assert said.startswith("the history has no reading of the covariate(s) 'w1' at any point")

    np.testing.assert_array_equal(served.x, item["x"].numpy())
    np.testing.assert_array_equal(served.future, item["future"].numpy())
    np.testing.assert_array_equal(served.coords, item["coords"].numpy())
