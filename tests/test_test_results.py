"""A test's results leave Lightning as ``trainer.test()``'s return value, bit for bit."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from cloudlstm.assembly.assemble import assemble
from cloudlstm.engine.results import (
    RESULTS_PREFIX,
    results_from,
    results_scalars,
    without_results,
)


def test_nested_results_round_trip_through_scalars() -> None:
    results = {
        "overall": {"mae": {"mean": 0.1 + 0.2, "std": math.nan}},
        "per_step": {"mae": {"mean": [1 / 3, 2 / 3, 1e-300]}},
        "per_channel": {'PM2.5/µg:m³ "x"': {"mae": {"mean": 7.0}}},
        "num_instances": 42,
        "v_max": 500.0,
    }
    logged = {key: value.item() for key, value in results_scalars(results).items()}
    back = results_from([{"test/mae": 0.3, **logged}])
    assert json.dumps(back) == json.dumps(results)  # values, types, key order, NaN
    assert isinstance(back["num_instances"], int) and isinstance(back["v_max"], float)
    assert without_results({"test/mae": 0.3, **logged}) == {"test/mae": 0.3}


def test_no_results_is_an_error() -> None:
    with pytest.raises(ValueError, match="no test results"):
        results_from([{"test/mae": 1.0}])


def test_the_results_are_what_trainer_test_returns(tiny_cfg) -> None:
    """The returned results equal the metric objects' own, bit for bit, point groups
    included; the loggers do not get the reserved keys."""
    cfg = tiny_cfg("logger=csv", "data.outlier_shift=1.0", "data.outlier_count=2")
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True)
    job = assemble(cfg, output_dir)
    job.trainer.fit(job.module, datamodule=job.datamodule)
    returned = job.trainer.test(job.module, datamodule=job.datamodule, verbose=False)

    computed = job.module.test_metrics.compute()
    computed["groups"] = {name: m.compute() for name, m in job.module.group_metrics.items()}
    assert set(computed["groups"]) == {"inliers", "outliers"}
    assert json.dumps(results_from(returned)) == json.dumps(computed)

    job.trainer.loggers[0].save()
    header = pd.read_csv(next(output_dir.glob("csv/version_*/metrics.csv"))).columns
    assert "test/mae" in header
    assert not [column for column in header if column.startswith(RESULTS_PREFIX)]
