"""The worked example of docs/design.md, "Adding a data source", works as it is written:
its source and its config are taken from the document, then read a small export and train
a tiny job through train.py's config."""

from __future__ import annotations

import math
from pathlib import Path

import hydra
import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, TINY, compose_train, doc_examples

from cloudlstm.cli.train import train
from cloudlstm.data.cache import CachedSource
from cloudlstm.data.pipeline.datamodule import PointCloudDataModule

DESIGN = ROOT / "docs" / "design.md"
DAYS, SENSORS = 4, 5
GAPS = [(1, 3, "s2"), (2, 10, "s0")]  # (day, hour, sensor) rows left out of the export


def example_blocks() -> dict[str, str]:
    """The section's ```python and ```yaml blocks, by language."""
    blocks = doc_examples(DESIGN, "Adding a data source")
    assert set(blocks) == {"python", "yaml"}, "the section lost one of its examples"
    return blocks


def write_export(folder: Path) -> None:
    """One CSV per day of hourly ``pm25`` (``10 * sensor + hour of the stream``) and
    ``no2`` readings at SENSORS fixed sensors, without the rows of GAPS."""
    folder.mkdir(parents=True)
    for day in range(DAYS):
        rows = [
            {
                "time": pd.Timestamp("2024-03-01") + pd.Timedelta(hours=24 * day + hour),
                "sensor": f"s{i}",
                "lon": 7.0 + 0.01 * i,
                "lat": 45.0 + 0.02 * (i % 3),
                "pm25": 10.0 * i + 24 * day + hour,
                "no2": 30.0 + 5.0 * np.sin(hour / 4.0 + i),
            }
            for hour in range(24)
            for i in range(SENSORS)
            if (day, hour, f"s{i}") not in GAPS
        ]
        pd.DataFrame(rows).to_csv(folder / f"2024-03-0{day + 1}.csv", index=False)


@pytest.fixture
def example_conf(tmp_path, monkeypatch) -> Path:
    """The example's module importable as ``sensor_export``, and a config folder holding
    its ``data/sensors.yaml``; returns that folder (for Hydra's search path)."""
    blocks = example_blocks()
    code = tmp_path / "code"
    code.mkdir()
    (code / "sensor_export.py").write_text(blocks["python"])
    monkeypatch.syspath_prepend(str(code))
    conf = tmp_path / "conf"
    (conf / "data").mkdir(parents=True)
    (conf / "data" / "sensors.yaml").write_text(blocks["yaml"])
    return conf


def test_the_example_source_reads_the_export_and_caches_it(example_conf, tmp_path):
    from sensor_export import SensorExport

    write_export(tmp_path / "export")
    source = SensorExport(tmp_path / "export", cache_dir=tmp_path / "cache")
    assert isinstance(source, CachedSource)
    stream = source.load()
    assert (stream.num_steps, stream.num_points, stream.channel_names) == (
        24 * DAYS,
        SENSORS,
        ["pm25", "no2"],
    )
    assert stream.point_ids == [f"s{i}" for i in range(SENSORS)]
    np.testing.assert_allclose(stream.coords[4], [7.04, 45.02])
    missing = {(int(t), int(n)) for t, n, _ in np.argwhere(~stream.mask)}
    assert missing == {(24 * day + hour, int(sensor[1:])) for day, hour, sensor in GAPS}
    hours = np.arange(24 * DAYS)
    for i in range(SENSORS):  # each gap holds the reading before it
        want = 10.0 * i + hours
        for day, hour, sensor in GAPS:
            if sensor == f"s{i}":
                want[24 * day + hour] = want[24 * day + hour - 1]
        np.testing.assert_allclose(stream.values[:, i, 0], want, rtol=1e-6)
    assert stream.metadata["step_minutes"] == 60.0 and stream.memory_mapped

    again = SensorExport(tmp_path / "export", cache_dir=tmp_path / "cache")
    np.testing.assert_array_equal(again.load().values, stream.values)
    assert again.last_load_from_cache and again.cache_path.name.startswith("sensors_")


def test_a_tiny_train_py_job_runs_on_the_example(example_conf, tmp_path):
    write_export(tmp_path / "data" / "sensors")  # the config's root: ${paths.data_dir}/sensors
    keep = [o for o in TINY if not o.startswith("data.source.")]
    overrides = [f"hydra.searchpath=[file://{example_conf}]", "data=sensors", "logger=none"]
    cfg = compose_train(tmp_path, [*overrides, *keep])
    assert hydra.utils.get_class(cfg.data._target_) is PointCloudDataModule
    assert cfg.data.source._target_ == "sensor_export.SensorExport"
    results = train(cfg)
    assert results["data"]["name"] == "sensors" and results["data"]["num_points"] == SENSORS
    assert results["data"]["channel_names"] == ["pm25", "no2"]
    assert math.isfinite(results["test"]["overall"]["mae"]["mean"])
    assert list((tmp_path / "data" / "sensors" / "cache").glob("sensors_*/values.npy"))
