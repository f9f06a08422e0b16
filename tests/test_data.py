"""Tests of the data layer: stream validation, scaling, windows/splits, datamodule, generator."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import rebuilding_fails
from omegaconf import OmegaConf
from torch.utils.data import SequentialSampler

from cloudlstm.data import (
    PointCloudDataModule,
    PointCloudStream,
    StandardScaler,
    SyntheticAdvectionDiffusion,
    WindowDataset,
    normalize_coords,
    split_bounds,
)
from cloudlstm.data.pipeline.coordinates import model_coords
from cloudlstm.data.pipeline.resumable import ShuffleSampler
from cloudlstm.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(num_points=10, num_channels=2, num_steps=120, grid_size=16, spin_up=20)


def make_stream(t=200, n=5, c=3, seed=0, missing=0.0) -> PointCloudStream:
    """A stream whose channel 0 encodes the time index (value = t), so windows can be decoded."""
    rng = np.random.default_rng(seed)
    values = rng.normal(10.0, 2.0, size=(t, n, c)).astype(np.float32)
    values[:, :, 0] = np.arange(t, dtype=np.float32)[:, None]
    mask = np.ones_like(values, dtype=bool)
    if missing:
        mask[:, :, 1:] = rng.random((t, n, c - 1)) >= missing
        values[~mask] = np.nan
    coords = rng.uniform(-5.0, 5.0, size=(n, 2))
    return PointCloudStream(
        values=values,
        mask=mask,
        coords=coords,
        channel_names=[f"c{i}" for i in range(c)],
        point_ids=[f"p{i}" for i in range(n)],
        timestamps=np.datetime64("2021-03-01T00") + np.arange(t) * np.timedelta64(1, "h"),
        name="toy",
    )


class CountingSource:
    def __init__(self, stream: PointCloudStream) -> None:
        self.stream = stream
        self.calls = 0

    def load(self) -> PointCloudStream:
        self.calls += 1
        return self.stream


# ---------------------------------------------------------------- PointCloudStream
def test_stream_validation_errors_are_clear():
    s = make_stream(t=20)
    kw = dict(
        values=s.values,
        mask=s.mask,
        coords=s.coords,
        channel_names=s.channel_names,
        point_ids=s.point_ids,
    )
    bad_coords = s.coords.copy()
    bad_coords[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"coords contains NaN/inf.*\[2\]"):
        PointCloudStream(**{**kw, "coords": bad_coords})
    with pytest.raises(ValueError, match="coords has 4 rows but values has N=5"):
        PointCloudStream(**{**kw, "coords": s.coords[:4]})
    with pytest.raises(ValueError, match="mask has shape"):
        PointCloudStream(**{**kw, "mask": s.mask[:, :, :2]})
    with pytest.raises(ValueError, match=r"\(T, N, C\)"):
        PointCloudStream(**{**kw, "values": s.values[:, :, 0]})
    nan_values = s.values.copy()
    nan_values[3, 1, 2] = np.nan  # observed according to the mask
    with pytest.raises(ValueError, match="where mask is True.*t=3, point=1, channel=2"):
        PointCloudStream(**{**kw, "values": nan_values})
    with pytest.raises(ValueError, match="channel_names has 2 names"):
        PointCloudStream(**{**kw, "channel_names": ["a", "b"]})
    with pytest.raises(ValueError, match="unique"):
        PointCloudStream(**{**kw, "point_ids": ["a"] * 5})
    ts = np.datetime64("2020-01-01T00") + np.arange(20)[::-1] * np.timedelta64(1, "h")
    with pytest.raises(ValueError, match="strictly increasing"):
        PointCloudStream(**kw, timestamps=ts)
    # NaN where the mask is False is fine, and values become float32
    ok = PointCloudStream(**{**kw, "values": nan_values, "mask": np.isfinite(nan_values)})
    assert ok.values.dtype == np.float32 and ok.mask.dtype == np.bool_
    assert ok.missing_fraction == pytest.approx(1 / nan_values.size)


# ---------------------------------------------------------------- transforms
def test_scaler_roundtrip_numpy_and_torch_and_state():
    rng = np.random.default_rng(1)
    x = rng.normal([5.0, -3.0, 100.0], [2.0, 0.1, 30.0], size=(50, 7, 3))
    mask = rng.random(x.shape) > 0.2
    x_nan = np.where(mask, x, np.nan)
    sc = StandardScaler().fit(x_nan, mask)
    # fitted on observed entries only
    for c in range(3):
        obs = x[..., c][mask[..., c]]
        assert sc.mean[c] == pytest.approx(obs.mean())
        assert sc.std[c] == pytest.approx(obs.std())
    z = sc.transform(x)
    np.testing.assert_allclose(sc.inverse_transform(z), x, rtol=1e-10, atol=1e-10)
    zt = sc.transform(torch.tensor(x, dtype=torch.float32))
    assert isinstance(zt, torch.Tensor) and zt.dtype == torch.float32
    torch.testing.assert_close(sc.inverse_transform(zt), torch.tensor(x, dtype=torch.float32))
    np.testing.assert_allclose(zt.numpy(), z, rtol=1e-4, atol=1e-4)
    # gradients flow through inverse_transform (metrics on raw units during training)
    p = torch.zeros(2, 3, requires_grad=True)
    sc.inverse_transform(p).sum().backward()
    np.testing.assert_allclose(p.grad[0].numpy(), sc.std, rtol=1e-6)
    # state round trip
    sc2 = StandardScaler.from_dict(sc.to_dict())
    np.testing.assert_array_equal(sc2.mean, sc.mean)
    np.testing.assert_array_equal(sc2.std, sc.std)
    with pytest.raises(ValueError, match="fitted on 3 channels"):
        sc.transform(np.zeros((4, 2)))


def test_scaler_constant_channel_and_empty_channel():
    x = np.ones((10, 4, 2))
    x[..., 1] = np.arange(40).reshape(10, 4)
    z = StandardScaler().fit(x).transform(x)
    assert np.isfinite(z).all() and np.all(z[..., 0] == 0)
    with pytest.raises(ValueError, match=r"channel\(s\) \[1\] have no observed"):
        StandardScaler().fit(x, mask=np.stack([np.ones((10, 4)), np.zeros((10, 4))], -1))
    with pytest.raises(RuntimeError, match="not fitted"):
        StandardScaler().transform(x)


def test_normalize_coords_invariant_to_shift_and_scale():
    rng = np.random.default_rng(2)
    raw = rng.uniform(-100, 300, size=(30, 2))
    out = normalize_coords(raw)
    assert out.min() >= 0.0 and out.max() <= 1.0
    np.testing.assert_allclose(out.min(0), 0.0)
    np.testing.assert_allclose(out.max(0), 1.0)
    moved = raw * np.array([0.001, 37.0]) + np.array([5e5, -42.0])  # e.g. km vs. UTM metres
    np.testing.assert_allclose(normalize_coords(moved), out, atol=1e-9)
    degenerate = np.stack([raw[:, 0], np.full(30, 7.0)], 1)
    d = normalize_coords(degenerate)
    assert np.all(d[:, 1] == 0.5)
    np.testing.assert_allclose(d[:, 0], out[:, 0])
    with pytest.raises(ValueError, match="NaN"):
        normalize_coords(np.array([[0.0, 1.0], [np.nan, 2.0]]))


@pytest.mark.parametrize(
    ("positions", "warned"),
    [("one", True), ("one axis", False), ("spread", False), ("single point", False)],
)
def test_points_that_all_share_one_position_are_warned_of(caplog, positions, warned):
    """All points at one place: the models that read positions cannot tell them apart."""
    n = 1 if positions == "single point" else 5
    stream = make_stream(t=40, n=n)
    if positions == "one":
        stream.coords[:] = [3.0, -1.5]
    elif positions == "one axis":
        stream.coords[:, 1] = 2.0  # points on a line: still apart
    with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.coordinates"):
        model_coords(
            stream, train_end=30, outlier_options={"outliers": None, "outlier_shift": None}
        )
    messages = [r.getMessage() for r in caplog.records]
    if warned:
        assert messages == [
            "stream 'toy': all 5 points have the same position (3, -1.5), so the models that "
            "read positions tell them apart by their order alone; give each point its own "
            "position in the data."
        ]
    else:
        assert messages == []


def test_a_coordinate_far_from_the_rest_that_merges_the_cloud_is_named(caplog):
    """x = 1e300 for one point (a typo): the others' x all scale to 0 in float32, and the
    warning names the point; a cloud whose positions stay apart is not warned of."""
    stream = make_stream(t=40, n=5)
    stream.coords[:] = [[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [4.0, 0.0]]
    options = {"outliers": None, "outlier_shift": None}
    with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.coordinates"):
        model_coords(stream, train_end=30, outlier_options=options)
        assert caplog.records == []
        stream.coords[3, 0] = 1e300
        model_coords(stream, train_end=30, outlier_options=options)
    [message] = [r.getMessage() for r in caplog.records]
    assert message == (
        f"stream 'toy': 5 distinct point positions become 2 once scaled to [0, 1] in float32, "
        "so the models that read positions cannot tell some points apart. The farthest "
        f"coordinate from the others is point {stream.point_ids[3]}'s x (1e+300, where the "
        "median is 2): if it is wrong, correct it in the data."
    )


# ---------------------------------------------------------------- windows / splits
def test_window_dataset_items_and_too_few_steps():
    s = make_stream(t=30, n=4, c=2)
    ds = WindowDataset(s.values, s.mask, normalize_coords(s.coords), 4, 2, start=5, end=20)
    assert len(ds) == 20 - 5 - 6 + 1
    assert ds.window_starts[0] == 5 and ds.window_starts[-1] + 6 == 20
    item = ds[3]
    assert set(item) == {"x", "y", "coords", "x_mask", "y_mask"}
    assert item["x"].shape == (4, 4, 2) and item["y"].shape == (2, 4, 2)
    assert item["coords"].shape == (4, 2) and item["coords"].dtype == torch.float32
    assert item["x_mask"].dtype == torch.bool
    np.testing.assert_array_equal(item["x"][:, 0, 0].numpy(), np.arange(8, 12))
    np.testing.assert_array_equal(item["y"][:, 0, 0].numpy(), np.arange(12, 14))
    assert ds.time_range(3) == (8, 12, 14)
    assert int(WindowDataset(s.values, s.mask, s.coords, 4, 2, return_index=True)[7]["t0"]) == 7
    with pytest.raises(ValueError, match=r"needs 12 input \(history\) \+ 12 output = 24 .*only 15"):
        WindowDataset(s.values, s.mask, s.coords, 12, 12, start=5, end=20)
    with pytest.raises(ValueError, match="stride"):
        WindowDataset(s.values, s.mask, s.coords, 4, 2, stride=0)


def test_split_bounds_and_window_counts_by_hand():
    # T=200: test = last 40, val = last 16 of the remaining 160, train = first 144
    assert split_bounds(200, 0.1, 0.2) == {"train": (0, 144), "val": (144, 160), "test": (160, 200)}
    dm = PointCloudDataModule(make_stream(t=200), input_steps=5, output_steps=3, stride=2)
    dm.setup()
    # windows of 8 steps every 2 steps: (steps - 8) // 2 + 1; validation and test inputs
    # reach 5 steps back into the part before: (16 + 5 - 8) // 2 + 1, (40 + 5 - 8) // 2 + 1
    assert dm.summary()["windows"] == {"train": 69, "val": 7, "test": 19}
    assert len(dm.train_dataset) == 69 and len(dm.val_dataset) == 7 and len(dm.test_dataset) == 19
    assert dm.window_bounds == {"train": (0, 144), "val": (139, 160), "test": (155, 200)}
    for split, (lo, hi) in dm.bounds.items():
        ds = dm.datasets[split]
        starts = ds.window_starts
        first_input = lo if split == "train" else lo - 5
        assert starts.min() == first_input and (starts + 8).max() <= hi
        assert np.all(np.diff(starts) == 2)
        # and the data really comes from there: channel 0 encodes the time index
        for i in (0, len(ds) - 1):
            x = dm.scaler.inverse_transform(ds[i]["x"])[:, 0, 0]
            y = dm.scaler.inverse_transform(ds[i]["y"])[:, 0, 0]
            t0 = starts[i]
            np.testing.assert_allclose(x.numpy(), np.arange(t0, t0 + 5), atol=1e-3)
            np.testing.assert_allclose(y.numpy(), np.arange(t0 + 5, t0 + 8), atol=1e-3)
            assert lo <= t0 + 5 and t0 + 8 <= hi  # targets never leave their split


def test_scaler_fitted_on_train_part_only():
    stream = make_stream(t=200, seed=3)
    dm = PointCloudDataModule(stream, input_steps=4, output_steps=4)
    dm.setup()
    changed = make_stream(t=200, seed=3)
    tr_end = dm.bounds["train"][1]
    changed.values[tr_end:] = changed.values[tr_end:] * 50.0 + 1000.0  # val and test parts
    dm2 = PointCloudDataModule(changed, input_steps=4, output_steps=4)
    dm2.setup()
    np.testing.assert_array_equal(dm.scaler.mean, dm2.scaler.mean)
    np.testing.assert_array_equal(dm.scaler.std, dm2.scaler.std)
    np.testing.assert_allclose(dm.scaler.mean, stream.values[:tr_end].mean((0, 1)), rtol=1e-5)
    # changing the training part does change it
    changed.values[:10] += 100.0
    dm3 = PointCloudDataModule(changed, input_steps=4, output_steps=4)
    dm3.setup()
    assert not np.allclose(dm3.scaler.mean, dm.scaler.mean)


def test_no_nan_in_batches_with_missing_values():
    stream = make_stream(t=120, n=6, c=3, missing=0.3)
    assert np.isnan(stream.values).any()
    dm = PointCloudDataModule(stream, input_steps=6, output_steps=4, batch_size=16)
    dm.setup()
    seen_missing = 0
    for loader in (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()):
        for batch in loader:
            for key in ("x", "y", "coords"):
                assert torch.isfinite(batch[key]).all(), key
            for key in ("x", "y"):
                missing = ~batch[f"{key}_mask"]
                assert torch.all(batch[key][missing] == 0)  # filled with the normalised mean
                seen_missing += int(missing.sum())
    assert seen_missing > 0


def test_loaders_shapes_order_and_shuffling():
    dm = PointCloudDataModule(
        make_stream(t=150, n=5, c=3), input_steps=6, output_steps=3, batch_size=7
    )
    dm.prepare_data()
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["x"].shape == (7, 6, 5, 3) and batch["y"].shape == (7, 3, 5, 3)
    assert batch["coords"].shape == (7, 5, 2) and batch["y_mask"].shape == (7, 3, 5, 3)
    assert batch["x"].dtype == torch.float32 and batch["x_mask"].dtype == torch.bool
    assert torch.all(batch["coords"] == dm.coords)
    assert isinstance(dm.train_dataloader().sampler, ShuffleSampler)  # RandomSampler's draws
    assert isinstance(dm.val_dataloader().sampler, SequentialSampler)
    # the test loader yields windows in chronological order
    t0s = torch.cat(
        [dm.scaler.inverse_transform(b["x"])[:, 0, 0, 0] for b in dm.test_dataloader()]
    ).round()
    lo, hi = dm.bounds["test"]  # inputs start 6 steps before the test part
    np.testing.assert_array_equal(t0s.numpy(), np.arange(lo - 6, hi - 9 + 1))
    assert dm.coords.shape == (5, 2) and float(dm.coords.min()) == 0.0
    assert float(dm.coords.max()) == 1.0


def test_datamodule_loads_once_summary_and_state(capsys):
    src = CountingSource(make_stream(t=100, n=4, c=3, missing=0.1))
    dm = PointCloudDataModule(src, input_steps=4, output_steps=2, batch_size=8)
    assert dm.num_channels == 3 and dm.num_points == 4 and src.calls == 1
    dm.prepare_data()
    dm.setup("fit")
    dm.setup("test")
    assert src.calls == 1
    info = dm.summary()
    assert info["name"] == "toy" and info["channel_names"] == ["c0", "c1", "c2"]
    assert info["total_steps"] == 100 and sum(info["steps"].values()) == 100
    assert info["input_steps"] == 4 and info["output_steps"] == 2
    assert info["missing_fraction"] == pytest.approx(src.stream.missing_fraction)
    dm.print_summary()
    assert "toy" in capsys.readouterr().out
    dm2 = PointCloudDataModule(src, input_steps=4, output_steps=2)
    dm2.use_scaler(dm.spec.scaler)  # a training run's scaler, from its data description
    np.testing.assert_array_equal(dm2.scaler.mean, dm.scaler.mean)
    assert dm.spec.num_points == dm.num_points and dm.spec.input_steps == 4


def test_datamodule_errors():
    # T=40: train 29 steps, val 3, test 8; val and test need only J steps of their own
    with pytest.raises(ValueError, match=r"val part .* has 3 steps .* needs output_steps = 6"):
        PointCloudDataModule(make_stream(t=40), input_steps=2, output_steps=6).setup()
    with pytest.raises(
        ValueError, match=r"train part .* has 29 steps .* needs its history \+ output_steps"
    ):
        PointCloudDataModule(make_stream(t=40), input_steps=27, output_steps=3).setup()
    with pytest.raises(ValueError, match=r"test_fraction must be in \[0, 1\]; got 1.5"):
        PointCloudDataModule(make_stream(t=40), test_fraction=1.5)
    with pytest.raises(ValueError, match=r"val_fraction must be in \[0, 1\); got 1.0"):
        PointCloudDataModule(make_stream(t=40), val_fraction=1.0)
    with pytest.raises(ValueError, match=r"train part .* has 0 steps"):  # all test: no training
        PointCloudDataModule(make_stream(t=40), test_fraction=1.0).setup()
    with pytest.raises(TypeError, match=r"\.load\(\)"):
        PointCloudDataModule(object())


def gap_over(stream: PointCloudStream, first: int, end: int, channels: slice) -> PointCloudStream:
    """``stream`` with no observed value of ``channels`` in steps ``[first, end)`` (filled
    values kept, as a source's interpolation leaves them)."""
    mask = stream.mask.copy()
    mask[first:end, :, channels] = False
    return PointCloudStream(**{**vars(stream), "mask": mask})


@pytest.mark.parametrize(("split", "first", "end"), [("val", 144, 160), ("test", 160, 200)])
def test_a_part_without_an_observed_target_is_refused(split, first, end):
    """Its loss or scores would be empty: a NaN validation MAE that selects no checkpoint,
    or a test of no value. Filled values count only with score_filled=true."""
    stream = gap_over(make_stream(t=200), first, end, slice(None))
    with pytest.raises(ValueError, match=(
        rf"the {split} part of stream 'toy' \(steps \[{first}, {end}\), 2021-03-0. ..:00 to "
        r".*\) has no observed value of a forecast channel, only values filled across a gap "
        r"\(\d+\.\d% of the stream is filled\).*data\.score_filled=true\)\.$"
    )):  # fmt: skip
        PointCloudDataModule(stream, input_steps=5, output_steps=3).setup()
    PointCloudDataModule(stream, input_steps=5, output_steps=3, score_filled=True).setup()


def test_an_evaluation_checks_only_the_test_part_it_scores():
    """With a trained run's scaler the data serve its evaluation, which neither trains nor
    validates: a validation part in a gap is no reason to refuse, a test part in one is."""
    trained = PointCloudDataModule(make_stream(t=200), input_steps=5, output_steps=3)
    scaler = trained.spec.scaler
    val_gap = PointCloudDataModule(
        gap_over(make_stream(t=200), 144, 160, slice(None)), input_steps=5, output_steps=3
    )
    val_gap.use_scaler(scaler)
    val_gap.setup()
    assert val_gap.window_bounds["test"] == trained.window_bounds["test"]
    test_gap = PointCloudDataModule(
        gap_over(make_stream(t=200), 160, 200, slice(None)), input_steps=5, output_steps=3
    )
    test_gap.use_scaler(scaler)
    with pytest.raises(ValueError, match="the test part of stream 'toy'"):
        test_gap.setup()


def test_one_observed_target_or_an_observed_input_channel_decides():
    """One observed forecast value in the part is enough; an observed covariate is not."""
    stream = gap_over(make_stream(t=200), 144, 160, slice(None))
    stream.mask[159, 4, 1] = True
    PointCloudDataModule(stream, input_steps=5, output_steps=3).setup()
    covariate_only = gap_over(make_stream(t=200), 144, 160, slice(0, 2))
    covariate_only.metadata["covariates"] = ["c2"]
    with pytest.raises(ValueError, match="the val part"):
        PointCloudDataModule(covariate_only, input_steps=5, output_steps=3).setup()


def silent_points(stream: PointCloudStream, first: int, end: int, points: list[int]):
    """``stream`` with no observed value at ``points`` in steps ``[first, end)``."""
    mask = stream.mask.copy()
    mask[first:end, points] = False
    return PointCloudStream(**{**vars(stream), "mask": mask})


@pytest.mark.parametrize(
    ("score_filled", "effect"),
    [
        (False, "They are not scored there: the test scores cover the other points."),
        (
            True,
            "Their filled values are scored there as if read (data.score_filled=true), which "
            "favours a model that repeats their last reading.",
        ),
    ],
)
def test_points_silent_over_a_scored_part_are_named(caplog, score_filled, effect):
    """A test table would otherwise hide that it scores fewer points, or invented values.
    Points with a single reading there, and the parts where every point reads, go unwarned."""
    stream = silent_points(make_stream(t=200), 160, 200, [1, 3, 4])
    stream.mask[199, 4, 2] = True  # one reading of one forecast channel
    with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.splits"):
        PointCloudDataModule(
            stream, input_steps=5, output_steps=3, score_filled=score_filled
        ).setup()
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "PointCloudDataModule: 2 of the 5 points of stream 'toy' have no observed value of a "
        "forecast channel in the test part (steps [160, 200), 2021-03-07 16:00 to 2021-03-09 "
        f"07:00): p1, p3. Their values there are filled ones. {effect}"
    ]


def test_points_silent_over_the_training_part_are_named(caplog):
    """A model with weights of each point's own would never fit them."""
    stream = silent_points(make_stream(t=200), 0, 144, [0])
    with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.splits"):
        PointCloudDataModule(stream, input_steps=5, output_steps=3).setup()
    (message,) = [r.getMessage() for r in caplog.records]
    assert "in the train part (steps [0, 144)" in message and ": p0. " in message
    assert message.endswith("never fits them.")


# ---------------------------------------------------------------- synthetic generator
def test_generator_deterministic_and_plausible():
    a = SyntheticAdvectionDiffusion(**SMALL, seed=5, cache_dir=None).load()
    b = SyntheticAdvectionDiffusion(**SMALL, seed=5, cache_dir=None).load()
    c = SyntheticAdvectionDiffusion(**SMALL, seed=6, cache_dir=None).load()
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.coords, b.coords)
    assert not np.allclose(a.values, c.values)
    assert not np.allclose(a.coords, c.coords)
    assert a.values.shape == (120, 10, 2) and a.values.dtype == np.float32
    assert np.isfinite(a.values).all() and (a.values >= 0).all() and a.mask.all()
    assert a.channel_names == ["pm25_like", "no2_like"]
    assert a.point_ids[:2] == ["s000", "s001"]
    assert a.timestamps[0] == np.datetime64("2020-01-01T00:00")
    assert np.all(np.diff(a.timestamps) == np.timedelta64(1, "h"))
    assert 10 < a.values[..., 0].mean() < 100  # pollutant-like magnitudes
    assert (a.coords >= 0).all() and (a.coords <= 96.0).all()
    m = SyntheticAdvectionDiffusion(**SMALL, missing_rate=0.2, cache_dir=None).load()
    assert 0.1 < m.missing_fraction < 0.3
    assert np.isnan(m.values[~m.mask]).all() and np.isfinite(m.values[m.mask]).all()


def test_generator_cache_hit_and_corrupt_cache(tmp_path):
    kw = dict(num_points=24, num_channels=3, num_steps=400, grid_size=32, cache_dir=tmp_path)
    gen = SyntheticAdvectionDiffusion(**kw)
    first = gen.load()
    assert not gen.last_load_from_cache and gen.cache_path.exists()
    assert gen.cache_path.parent == tmp_path and gen.cache_path.is_dir()
    assert first.memory_mapped  # the stream returned after generating reads from the cache
    with rebuilding_fails(SyntheticAdvectionDiffusion, "generate"):
        again = SyntheticAdvectionDiffusion(**kw)
        second = again.load()
    assert again.last_load_from_cache
    np.testing.assert_array_equal(first.values, second.values)
    np.testing.assert_array_equal(first.mask, second.mask)
    np.testing.assert_array_equal(first.coords, second.coords)
    np.testing.assert_array_equal(first.timestamps, second.timestamps)
    assert first.channel_names == second.channel_names and first.point_ids == second.point_ids
    # any argument change -> another cache file
    assert SyntheticAdvectionDiffusion(**{**kw, "noise_std": 0.01}).cache_path != gen.cache_path
    # a corrupt file is regenerated (and rewritten)
    (gen.cache_path / "meta.json").write_bytes(b"not json")
    gen3 = SyntheticAdvectionDiffusion(**kw)
    third = gen3.load()
    assert not gen3.last_load_from_cache
    np.testing.assert_array_equal(first.values, third.values)
    with rebuilding_fails(SyntheticAdvectionDiffusion, "generate"):
        gen4 = SyntheticAdvectionDiffusion(**kw)
        gen4.load()
    assert gen4.last_load_from_cache


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_points": 1}, "num_points must be an integer >= 2"),
        ({"num_steps": 3}, "num_steps must be an integer >= 10"),
        ({"num_channels": 0}, "num_channels"),
        ({"grid_size": 4}, "grid_size"),
        ({"noise_std": -0.1}, "noise_std"),
        ({"diffusion": 0.3}, r"diffusion must be a number >= 0.0 and <= 0.25"),
        ({"num_points": 2.5}, "num_points"),
        ({"cluster_fraction": 1.5}, "cluster_fraction"),
        ({"wind_speed": float("nan")}, "wind_speed"),
    ],
)
def test_generator_rejects_bad_args(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SyntheticAdvectionDiffusion(**kwargs, cache_dir=None)


def test_hydra_config_instantiates(tmp_path):
    from conftest import compose_train
    from hydra.utils import instantiate

    cfg = compose_train(tmp_path, [])
    assert cfg.data.input_steps == 12 and cfg.data.output_steps == 12
    assert cfg.data.batch_size == 16  # demo-sized default
    cfg.data.source.update(SMALL)
    cfg.data.input_steps, cfg.data.output_steps = 4, 3
    dm = instantiate(cfg.data)
    assert isinstance(dm, PointCloudDataModule)
    assert isinstance(dm.source, SyntheticAdvectionDiffusion)
    dm.prepare_data()
    dm.setup("fit")
    assert dm.num_points == 10 and dm.num_channels == 2
    assert dm.source.cache_path.parent == tmp_path / "data" / "synthetic"
    assert dm.source.cache_path.exists()


# ---------------------------------------------------------------- space matters
def _linear_one_step_mse(stream: PointCloudStream, k: int = 6, lags: int = 3, frac: float = 0.7):
    """Per channel: validation MSE of least-squares one-step-ahead predictors.

    For every station a linear model (with intercept) is fitted on the first ``frac`` of the
    steps, from (a) its own last ``lags`` values, or (b) those plus the last ``lags`` values of
    its ``k`` nearest stations; the MSE over the remaining steps is pooled over stations.
    Values are standardised per channel with the training part.
    """
    v = stream.values.astype(np.float64)
    t_num, n, c_num = v.shape
    split = int(frac * t_num)
    v = (v - v[:split].mean((0, 1))) / v[:split].std((0, 1))
    dist = ((stream.coords[:, None] - stream.coords[None]) ** 2).sum(-1)
    nbrs = np.argsort(dist, axis=1)[:, 1 : k + 1]
    ts = np.arange(lags - 1, t_num - 1)
    train = ts + 1 < split
    own_mse, nbr_mse = np.zeros(c_num), np.zeros(c_num)
    for c in range(c_num):
        s = v[:, :, c]
        own = np.stack([s[ts - lag] for lag in range(lags)], -1)  # (steps, N, lags)
        nb = np.stack([s[ts - lag][:, nbrs] for lag in range(lags)], -1).reshape(len(ts), n, -1)
        target = s[ts + 1]
        for feats, out in ((own, own_mse), (np.concatenate([own, nb], -1), nbr_mse)):
            feats = np.concatenate([feats, np.ones(feats.shape[:2] + (1,))], -1)
            f_tr, y_tr = feats[train], target[train]
            # batched normal equations, one least-squares fit per station
            gram = np.einsum("tnp,tnq->npq", f_tr, f_tr) + 1e-8 * np.eye(feats.shape[-1])
            w = np.linalg.solve(gram, np.einsum("tnp,tn->np", f_tr, y_tr)[..., None])[..., 0]
            pred = np.einsum("tnp,np->tn", feats[~train], w)
            out[c] = ((pred - target[~train]) ** 2).mean()
    return own_mse, nbr_mse


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_space_matters_in_synthetic_data(seed):
    """Neighbours' recent history predicts a station's next value clearly better than its own."""
    cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "conf/data/synthetic.yaml").source)
    args = {k: v for k, v in cfg.items() if k not in ("_target_", "cache_dir")}
    # the config's physics at a fixed size: the demo's small default size is not the point
    args.update(num_points=48, num_steps=1500, seed=seed, cache_dir=None)
    stream = SyntheticAdvectionDiffusion(**args).load()
    own, nbr = _linear_one_step_mse(stream)
    ratio = nbr / own
    # measured with the defaults: 0.66-0.86 per channel, 0.75-0.80 on average
    assert np.all(ratio < 0.9) and ratio.mean() < 0.83, (
        f"seed {seed}: MSE ratio neighbours/own per channel {ratio}"
    )


def test_moving_points_that_meet_only_once_scaled_are_warned_of_with_the_steps(caplog):
    """Two vehicles 1e-9 km apart in a 10 km cloud, at 3 of 40 steps, share a position in
    float32; points that truly meet (the same raw position) are no warning."""
    stream = make_stream(t=40, n=5)
    rng = np.random.default_rng(1)
    track = rng.uniform(0.0, 10.0, size=(40, 5, 2))
    track[:, 1] = track[:, 0]  # points 0 and 1 drive together: no warning
    stream.trajectory, stream.coords = track, track[0].copy()
    options = {"outliers": None, "outlier_shift": None}
    with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.coordinates"):
        model_coords(stream, train_end=30, outlier_options=options)
        assert caplog.records == []
        for step in (7, 8, 35):
            track[step, 2] = [5.0, 5.0]
            track[step, 3] = [5.0 + 1e-9, 5.0]
        model_coords(stream, train_end=30, outlier_options=options)
    [message] = [r.getMessage() for r in caplog.records]
    assert message.startswith(
        "stream 'toy': at 3 of 40 steps (the first: step 7) points at distinct positions "
        "share one once scaled to [0, 1] in float32, so the models that read positions cannot "
        "tell them apart there. The farthest coordinate from the others is point "
    )


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_the_fast_search_for_merged_steps_agrees_with_the_full_comparison(dims):
    """Points on a small grid (many share a position in truth), some moved by 1e-12 (they
    share one only once scaled): the sort by a 64-bit key finds the steps the full
    comparison finds, in 1, 2 and 3 dimensions."""
    from cloudlstm.data.pipeline.coordinates import _merged_steps, _shared_by_distinct

    rng = np.random.default_rng(dims)
    raw = rng.integers(0, 3, size=(300, 6, dims)).astype(np.float64)
    raw[::7, 0, -1] += 1e-12
    seen = (raw / 3).astype(np.float32)
    merged = _merged_steps(raw, seen)
    np.testing.assert_array_equal(merged, _shared_by_distinct(raw, seen))
    assert 0 < merged.sum() < len(raw)


def test_loader_processes_far_beyond_the_cpus_are_refused(monkeypatch):
    """1000 workers, each a process with its own copy of the data, ran out of memory after
    minutes and were killed; a few per CPU pass."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    with pytest.raises(UserError) as err:
        PointCloudDataModule(make_stream(t=50), input_steps=4, output_steps=2, num_workers=1000)
    assert str(err.value) == (
        "PointCloudDataModule: num_workers=1000 loader processes for the 2 CPU(s) this job "
        "may use: give at most 8, e.g. data.num_workers=2 (0: load in the training process)."
    )
    PointCloudDataModule(make_stream(t=50), input_steps=4, output_steps=2, num_workers=8)


@pytest.mark.parametrize(
    ("options", "history"),
    [
        ({}, "data.input_steps=120"),
        # a week of hourly input before 4 steps: the days are what does not fit, and are named
        (
            {"input_steps": 4, "seasonal": True},
            "data.input_steps=4 and, with data.seasonal=true, the data.seasonal_days=7 days "
            "before them",
        ),
    ],
)
def test_a_window_longer_than_the_training_part_names_what_makes_its_history(options, history):
    stream = make_stream(t=150)
    module = PointCloudDataModule(stream, **{"input_steps": 120, **options}, output_steps=2)
    with pytest.raises(UserError) as err:
        module.setup()
    assert "has 108 steps (of T=150), but one window needs its history + output_steps" in str(
        err.value
    )
    assert f"(the history a window reaches back: {history})" in str(err.value)


@pytest.mark.parametrize(
    ("before", "need"),
    [
        (
            0,
            "4 + 3 = 7 (the history a window reaches back: input_steps), all in this part: "
            "no part before it holds its inputs.",
        ),
        (
            2,
            "4 + 3 = 7 (the history a window reaches back: input_steps), of which the 2 "
            "step(s) before this part hold only part of the inputs: 5 steps in this part.",
        ),
    ],
)
def test_a_short_test_part_needs_the_inputs_the_part_before_cannot_give(before, need):
    """``eval.py data.test_fraction=1`` on 6 steps, 4 + 3 a window: no part before holds
    its inputs, so the test part needs all 7 steps itself, not output_steps alone."""
    from cloudlstm.data.pipeline.splits import check_split_lengths, window_ranges

    bounds = {"train": (0, before), "test": (before, 6)}
    with pytest.raises(UserError) as err:
        check_split_lengths(bounds, window_ranges(bounds, 4), 4, 3, {"train"}, "toy", 6)
    expected = (
        f"the test part of stream 'toy' has {6 - before} steps (of T=6), but one window "
        f"needs its history + output_steps = {need}"
    )
    assert expected in str(err.value)


def test_a_short_test_part_after_a_whole_input_needs_output_steps_alone():
    from cloudlstm.data.pipeline.splits import check_split_lengths, window_ranges

    bounds = {"train": (0, 4), "test": (4, 6)}
    with pytest.raises(
        UserError,
        match=r"has 2 steps \(of T=6\), but one window needs "
        r"output_steps = 3 \(its inputs reach back into the part before\)",
    ):
        check_split_lengths(bounds, window_ranges(bounds, 4), 4, 3, {"train"}, "toy", 6)
