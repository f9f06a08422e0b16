"""A forecast file's columns: each gets a name of its own, or the run is refused before it
trains."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import TINY, compose_train
from test_forecast import T, long_table, raw_stream

from cloudlstm.cli.train import train
from cloudlstm.data.spec import DataSpec
from cloudlstm.engine.forecast_columns import check_forecast_columns, forecast_columns
from cloudlstm.errors import UserError


def spec_of(channels: list[str]) -> DataSpec:
    """A spec without data whose value channels are ``channels``, at coordinates x, y."""
    spec = DataSpec.sized(4, len(channels), 3, 2)
    return dataclasses.replace(
        spec, channel_names=channels, value_channels=channels, coord_cols=["x", "y"]
    )


def test_the_columns_are_named_in_the_files_order() -> None:
    names = [name for name, _ in forecast_columns(spec_of(["no2", "pm25"]), (0.1, 0.5))]
    assert names == [
        "timestamp",
        "horizon",
        "id",
        "x",
        "y",
        "no2",
        "pm25",
        "no2_q10",
        "no2_q50",
        "pm25_q10",
        "pm25_q50",
        "filled_inputs",
    ]


@pytest.mark.parametrize(
    ("channels", "levels", "said"),
    [
        (["no2", "horizon"], (), "'horizon' of this run's forecasts would hold both the horizon "),
        (["filled_inputs"], (), "both a channel and the count of filled inputs"),
        (["no2", "no2_q50"], (0.5,), "'no2_q50' of this run's forecasts would hold both a chan"),
        (["x"], (), "'x' of this run's forecasts would hold both a coordinate and a channel"),
    ],
)
def test_names_that_share_a_column_are_refused(channels, levels, said) -> None:
    with pytest.raises(UserError) as err:
        check_forecast_columns(spec_of(channels), levels)
    assert said in str(err.value) and "rename" in str(err.value)
    check_forecast_columns(spec_of(["no2", "pm25"]), levels)  # apart, they pass


def test_training_refuses_a_channel_named_horizon_before_it_trains(tmp_path) -> None:
    values, observed = raw_stream()
    table = long_table(values, observed, range(T)).rename(columns={"pm25": "horizon"})
    table.to_csv(tmp_path / "stream.csv", index=False)
    keep = [o for o in TINY if not o.startswith("data.source.")]
    overrides = [*keep, "data=points", f"data.source.path={tmp_path / 'stream.csv'}"]
    cfg = compose_train(tmp_path, [*overrides, "logger=none", "report.figures=false"])
    with pytest.raises(UserError, match=r"^Column 'horizon' of this run's forecasts would"):
        train(cfg)
    assert not list((tmp_path).rglob("*.ckpt"))
