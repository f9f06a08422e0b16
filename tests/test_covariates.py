"""Covariates: measured input-only channels and known-future time features, from the data
source to the window, the data description, the model's build and the training module."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from cloudlstm.cli.train import train
from cloudlstm.data.covariates import check_time_zone, time_feature_names, time_features
from cloudlstm.data.pipeline.datamodule import PointCloudDataModule
from cloudlstm.data.pipeline.forecast_input import build_input
from cloudlstm.data.pipeline.windows import WindowDataset
from cloudlstm.data.sources.beijing import BeijingSource
from cloudlstm.data.spec import DataSpec
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.engine.module import ForecastModule
from cloudlstm.errors import UserError
from cloudlstm.forecast import FILLED_COLUMN, Forecaster
from cloudlstm.models.base import ForecastModel
from cloudlstm.models.build import build_model
from tests.conftest import TINY
from tests.test_data_beijing import tiny  # noqa: F401  (fixture)
from tests.test_forecast import (
    CHANNELS,
    SPLIT,
    STAMPS,
    J,
    N,
    T,
    long_table,
    raw_stream,
    run_data,
    train_run,
    window_at,
)
from tests.test_input_checks import run_script, the_line


def hour_and_weekday(hours: np.ndarray, weekdays: np.ndarray) -> np.ndarray:
    """``(T, 4)``: sin and cos of the hours (of 24) and of the weekdays (of 7), by hand."""
    hour, day = 2 * np.pi * hours / 24, 2 * np.pi * weekdays / 7
    return np.stack([np.sin(hour), np.cos(hour), np.sin(day), np.cos(day)], axis=1)


def test_time_features_are_sin_cos_of_hand_computed_angles() -> None:
    # 2024-01-01 (a Monday) at 06:00 and 2024-01-03 (a Wednesday) at 18:30
    stamps = np.array(["2024-01-01T06:00", "2024-01-03T18:30"], dtype="datetime64[ns]")
    got = time_features(stamps, ["hour", "weekday"])
    hours = np.array([6.0, 18.5])
    weekdays = np.array([0 + 6 / 24, 2 + 18.5 / 24])  # Monday = 0, with the time of day
    np.testing.assert_allclose(got, hour_and_weekday(hours, weekdays), atol=1e-6)
    assert time_feature_names(["hour", "weekday"]) == [
        "hour_sin",
        "hour_cos",
        "weekday_sin",
        "weekday_cos",
    ]


def test_time_features_follow_a_zones_clock_across_daylight_saving() -> None:
    # 23:00 UTC on Saturday 2024-03-30 and on Sunday 2024-03-31: Rome's clocks went forward
    # between them, so it is 00:00 on Sunday (UTC+1) and then 01:00 on Monday (UTC+2)
    stamps = np.array(["2024-03-30T23:00", "2024-03-31T23:00"], dtype="datetime64[ns]")
    got = time_features(stamps, ["hour", "weekday"], "Europe/Rome")
    hours = np.array([0.0, 1.0])
    weekdays = np.array([6.0, 0 + 1 / 24])  # Sunday = 6; Monday = 0 at 01:00
    np.testing.assert_allclose(got, hour_and_weekday(hours, weekdays), atol=1e-6)
    # UTC is the times as read
    np.testing.assert_array_equal(
        time_features(stamps, ["hour"], "UTC"), time_features(stamps, ["hour"])
    )


@pytest.mark.parametrize(
    ("zone", "near"),
    [("Europe/Rom", " (did you mean Europe/Rome?)"), ("Mars/Base", ""), ("", ""), ("../etc", "")],
)
def test_a_time_zone_the_machine_does_not_know_is_refused_with_examples(zone, near) -> None:
    with pytest.raises(UserError) as err:
        PointCloudDataModule(_stream(), time_features=["hour"], time_zone=zone)
    assert str(err.value) == (
        f"data.time_zone={zone!r} is not a time zone this machine knows{near}: give an IANA "
        "name such as data.time_zone=Europe/Rome or America/Los_Angeles, or null for the "
        "times as read."
    )
    assert check_time_zone(None) is None and check_time_zone("Europe/Rome") == "Europe/Rome"


def test_the_datamodule_computes_and_records_the_zones_clock() -> None:
    stream = _stream(covariates=0)
    dm = PointCloudDataModule(
        stream, input_steps=4, output_steps=3, time_features=["hour"], time_zone="Asia/Tokyo"
    )
    dm.setup()
    assert dm.spec.time_zone == "Asia/Tokyo"
    assert DataSpec.from_dict(json.loads(json.dumps(dm.spec.to_dict()))) == dm.spec
    item = dm.train_dataloader().dataset[0]
    # Tokyo is 9 h ahead of UTC all year: the first input step, 00:00 UTC, is 09:00 there
    angle = 2 * np.pi * 9 / 24
    np.testing.assert_allclose(
        item["x"][0, 0, -2:].numpy(), [np.sin(angle), np.cos(angle)], atol=1e-6
    )


@pytest.mark.parametrize(
    ("options", "warned"),
    [
        (
            {"time_zone": "Europe/Rome"},
            "data.time_zone='Europe/Rome' changes nothing without data.time_features=[hour]",
        ),
        ({"seasonal_days": 3}, "data.seasonal_days=3 changes nothing without data.seasonal=true"),
        ({"dbscan_eps": 0.2}, "data.dbscan_eps=0.2 changes nothing without data.outliers=dbscan"),
        (
            {"outlier_count": 3},
            "data.outlier_count=3 changes nothing without data.outlier_shift=<distance>",
        ),
        ({"subset_seed": 4}, "data.subset_seed=4 changes nothing without data.num_points=<count>"),
        ({"subset_seed": 4, "num_points": 3}, None),
        ({"seasonal_days": 3, "seasonal": True}, None),
        ({"time_zone": "Europe/Rome", "time_features": ["hour"]}, None),
        ({}, None),
    ],
)
def test_an_option_whose_feature_is_off_is_warned_of(options, warned, caplog) -> None:
    with caplog.at_level("WARNING"):
        PointCloudDataModule(_stream(), input_steps=4, output_steps=3, **options)
    idle = [r.getMessage() for r in caplog.records if "changes nothing" in r.getMessage()]
    if warned is None:
        assert idle == []
    else:
        assert len(idle) == 1 and idle[0].startswith(warned), idle


def _stream(covariates: int = 1, steps: int = 60) -> PointCloudStream:
    rng = np.random.default_rng(0)
    channels = ["a", "b", *[f"w{i}" for i in range(covariates)]]
    values = rng.normal(size=(steps, 5, len(channels))).astype(np.float32)
    return PointCloudStream(
        values=values,
        mask=np.ones(values.shape, dtype=bool),
        coords=rng.random((5, 2)),
        channel_names=channels,
        point_ids=[str(i) for i in range(5)],
        timestamps=np.datetime64("2024-01-01T00") + np.arange(steps) * np.timedelta64(1, "h"),
        metadata={"covariates": channels[2:]},
    )


def test_window_reads_every_input_channel_and_forecasts_the_targets() -> None:
    stream = _stream(covariates=1)
    feats = time_features(stream.timestamps, ["hour"])
    data = WindowDataset(
        stream.values, None, stream.coords, 4, 3, num_targets=2, time_features=feats
    )
    item = data[7]
    assert item["x"].shape == (4, 5, 3 + 2) and item["y"].shape == (3, 5, 2)
    assert item["y_mask"].shape == (3, 5, 2) and item["future"].shape == (3, 5, 2)
    np.testing.assert_array_equal(item["x"][..., :3].numpy(), stream.values[7:11])
    np.testing.assert_array_equal(item["y"].numpy(), stream.values[11:14, :, :2])
    # time features: the same at every point, the input steps' in x, the targets' as future
    np.testing.assert_array_equal(item["x"][:, 3, 3:].numpy(), feats[7:11])
    np.testing.assert_array_equal(item["future"][:, 0].numpy(), feats[11:14])
    assert item["x_mask"][..., 3:].all()


def test_datamodule_describes_inputs_and_targets_apart() -> None:
    dm = PointCloudDataModule(
        _stream(covariates=2), input_steps=4, output_steps=3, time_features=["hour", "weekday"]
    )
    dm.setup()
    spec = dm.spec
    assert spec.channel_names == ["a", "b"] and spec.num_channels == 2
    assert spec.covariate_names == ["w0", "w1"]
    assert spec.future_names == ["hour_sin", "hour_cos", "weekday_sin", "weekday_cos"]
    assert spec.input_channels == 8 and spec.future_channels == 4
    assert len(spec.scaler["mean"]) == 4  # targets and measured covariates are normalised
    assert spec.value_scaler().num_channels == 2
    # it survives a checkpoint
    assert DataSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    batch = next(iter(dm.train_dataloader()))
    assert batch["x"].shape[-1] == 8 and batch["y"].shape[-1] == 2
    assert batch["future"].shape[1:] == (3, 5, 4)


def test_time_features_need_timestamps_and_known_names() -> None:
    stream = _stream()
    stream.timestamps = None
    with pytest.raises(UserError, match="needs timestamps"):
        PointCloudDataModule(stream, input_steps=4, output_steps=3, time_features=["hour"]).setup()
    with pytest.raises(UserError, match="data.time_features"):
        PointCloudDataModule(_stream(), time_features=["minute"])


class OwnChannelsOnly(ForecastModel):
    """A model whose constructor takes no covariates."""

    covariates_refused = "it forecasts each channel from its own past alone"

    def __init__(self, num_channels: int, output_steps: int) -> None:
        super().__init__()
        self.output_steps = output_steps


@pytest.mark.parametrize("extra", [{"covariates": 1}, {"time_features": ["hour"]}])
def test_a_model_without_covariates_refuses_them_in_one_line(extra) -> None:
    spec = DataSpec.sized(4, 2, 5, 3, **extra)
    with pytest.raises(UserError) as err:
        build_model({"_target_": "tests.test_covariates.OwnChannelsOnly"}, spec)
    message = str(err.value)
    assert "\n" not in message and "its own past alone" in message
    assert ("cov0" if "covariates" in extra else "hour") in message
    assert build_model(
        {"_target_": "tests.test_covariates.OwnChannelsOnly"}, DataSpec.sized(4, 2, 5, 3)
    )


def test_an_anchored_module_with_covariates_starts_as_persistence_of_the_targets() -> None:
    spec = DataSpec.sized(4, 2, 5, 3, covariates=2, time_features=["hour"])
    model = build_model({"_target_": "cloudlstm.models.lstm.SeqLSTM", "hidden_size": 8}, spec)
    module = ForecastModule(model, optimizer=None, spec=spec, anchor="last")
    x, future = torch.randn(3, 5, 4, spec.input_channels), torch.randn(3, 3, 4, 2)
    out = module(x, torch.rand(3, 4, 2), future)
    assert torch.equal(out, x[:, -1:, :, :2].expand(3, 3, 4, 2))


def test_beijing_weather_covariates_and_the_wind_vector(tiny, tmp_path) -> None:  # noqa: F811
    source = BeijingSource(tiny, cache_dir=tmp_path / "cache", covariates=["TEMP", "wind"])
    stream = source.load()
    assert stream.channel_names[6:] == ["TEMP", "wind_u", "wind_v"]
    assert stream.metadata["covariates"] == ["TEMP", "wind_u", "wind_v"]
    # the fixture's wind: 2 m/s from the north-west, i.e. blowing to the south-east
    np.testing.assert_allclose(stream.values[0, 0, 6:], [1.0, np.sqrt(2), -np.sqrt(2)], atol=1e-5)
    plain = BeijingSource(tiny, cache_dir=tmp_path / "cache").load()
    assert plain.channel_names == stream.channel_names[:6]  # its own cache, as before
    with pytest.raises(UserError, match="data.source.covariates"):
        BeijingSource(tiny, covariates=["humidity"])


def test_training_with_covariates_runs_and_records_them(tiny_cfg, tmp_path) -> None:
    cfg = tiny_cfg("data.time_features=[hour]")  # CloudLSTM, its decoder reading them
    results = train(cfg)
    assert results["data"]["time_features"] == ["hour_sin", "hour_cos"]
    assert np.isfinite(results["test"]["overall"]["mae"]["mean"])


def test_forecasting_new_data_reads_covariates_and_time_as_training_did(tmp_path) -> None:
    """A run with a measured covariate column and time features: the forecast of a test
    window's history, given as a long table, equals the test loop's forecast of it."""
    values, observed = raw_stream()
    table = long_table(values, observed, range(T))
    hours = (table["timestamp"] - table["timestamp"].min()) / pd.Timedelta(hours=1)
    table["temp"] = 10 + 5 * np.cos(2 * np.pi * hours / 24)
    table.to_csv(tmp_path / "stream.csv", index=False)
    keep = [o for o in TINY if not o.startswith("data.source.")]
    run = train_run(
        tmp_path,
        [
            *keep,
            "data=points",
            f"data.source.path={tmp_path / 'stream.csv'}",
            "data.source.covariate_cols=[temp]",
            "data.time_features=[hour,weekday]",
            "module.save_predictions=true",
        ],
    )
    dm, prediction = run_data(run)
    assert dm.spec.input_names[2:] == ["temp", *time_feature_names(["hour", "weekday"])]
    forecaster = Forecaster.load(run, device="cpu")
    out = forecaster.forecast(table[table["timestamp"] < STAMPS[SPLIT]])
    assert list(out.columns) == ["timestamp", "horizon", "id", "x", "y", *CHANNELS, FILLED_COLUMN]
    forecast = out[CHANNELS].to_numpy().reshape(J, N, len(CHANNELS))
    np.testing.assert_allclose(forecast, prediction[window_at(dm, SPLIT)], rtol=1e-5, atol=1e-4)
    with pytest.raises(UserError, match="temp"):
        forecaster.forecast(table.drop(columns="temp"))


def test_forecasting_new_data_takes_the_time_features_on_the_runs_zone(tmp_path, caplog) -> None:
    """Times written in UTC, features on Los Angeles' clock: a forecast of a test window's
    history equals the test loop's, so both compute the features in that zone."""
    values, observed = raw_stream()
    table = long_table(values, observed, range(T))
    history = table[table["timestamp"] < STAMPS[SPLIT]].copy()
    for frame in (table, history):
        frame["timestamp"] = frame["timestamp"].dt.tz_localize("UTC")
    table.to_csv(tmp_path / "stream.csv", index=False)
    keep = [o for o in TINY if not o.startswith("data.source.")]
    with caplog.at_level("WARNING"):
        run = train_run(
            tmp_path,
            [
                *keep,
                "data=points",
                f"data.source.path={tmp_path / 'stream.csv'}",
                "data.time_features=[hour]",
                "data.time_zone=America/Los_Angeles",
                "module.save_predictions=true",
            ],
        )
    assert not [r for r in caplog.records if "clock times" in r.getMessage()]
    dm, prediction = run_data(run)
    assert dm.spec.time_zone == "America/Los_Angeles"
    window, item = build_input(history, dm.spec), dm.test_dataset[window_at(dm, SPLIT)]
    np.testing.assert_allclose(window.x[..., -2:], item["x"][..., -2:].numpy(), atol=1e-6)
    np.testing.assert_allclose(window.future, item["future"].numpy(), atol=1e-6)
    out = Forecaster.load(run, device="cpu").forecast(history)
    forecast = out[CHANNELS].to_numpy().reshape(J, N, len(CHANNELS))
    np.testing.assert_allclose(forecast, prediction[window_at(dm, SPLIT)], rtol=1e-5, atol=1e-4)
    # evaluated on another clock, the model would read every hour shifted
    done = run_script("eval.py", f"run={run}", "data.time_zone=null")
    assert done.returncode == 1
    assert the_line(done, "time features on").endswith(
        "was trained with its time features on data.time_zone=America/Los_Angeles, and "
        "these data give data.time_zone=null: the model would read every hour shifted. "
        "Evaluate it with data.time_zone=America/Los_Angeles, or train a model for this clock."
    )


def test_a_zone_for_clock_times_is_warned_of(caplog) -> None:
    stream = _stream(covariates=0)
    stream.metadata["times_zoned"] = False  # as a file that wrote its times without a zone
    with caplog.at_level("WARNING"):
        PointCloudDataModule(
            stream, input_steps=4, output_steps=3, time_features=["hour"], time_zone="Europe/Rome"
        ).setup()
    assert any(
        "data.time_zone=Europe/Rome reads the times as UTC, but stream" in r.getMessage()
        for r in caplog.records
    )
