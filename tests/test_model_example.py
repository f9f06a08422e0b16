"""The worked example of docs/design.md, "Adding a model", works as it is written: its
class and its config are taken from the document, then trained, tested and forecast with
through train.py's config."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, TINY, compose_train, doc_examples

from cloudlstm import Forecaster
from cloudlstm.cli.train import train
from cloudlstm.models import ForecastModel

DESIGN = ROOT / "docs" / "design.md"


def example_blocks() -> dict[str, str]:
    """The section's ```python and ```yaml blocks, by language."""
    blocks = doc_examples(DESIGN, "Adding a model")
    assert set(blocks) == {"python", "yaml"}, "the section lost one of its examples"
    return blocks


@pytest.fixture
def example_conf(tmp_path, monkeypatch) -> Path:
    """The example's module importable as ``time_mix``, and a config folder holding its
    ``model/time_mix.yaml``; returns that folder (for Hydra's search path)."""
    blocks = example_blocks()
    code = tmp_path / "code"
    code.mkdir()
    (code / "time_mix.py").write_text(blocks["python"])
    monkeypatch.syspath_prepend(str(code))
    monkeypatch.delitem(sys.modules, "time_mix", raising=False)
    conf = tmp_path / "conf"
    (conf / "model").mkdir(parents=True)
    (conf / "model" / "time_mix.yaml").write_text(blocks["yaml"])
    return conf


def tiny_job(tmp_path: Path, conf: Path, *extra: str):
    keep = [o for o in TINY if not o.startswith("model.")]
    overrides = [f"hydra.searchpath=[file://{conf}]", "model=time_mix", "logger=none", *extra]
    return compose_train(tmp_path, [*keep, *overrides])


def history(summary: dict, steps: int) -> pd.DataFrame:
    """``steps`` hourly readings of every training point after the data's last time, in
    the long format (``timestamp, id, x, y, <channels>``)."""
    start = pd.Timestamp(summary["times"]["test"][1]) + pd.Timedelta(hours=1)
    rows = [
        {"timestamp": start + pd.Timedelta(hours=t), "id": point, "x": 0.1 * i, "y": 0.5}
        | {channel: 10.0 + i + t for channel in summary["channel_names"]}
        for t in range(steps)
        for i, point in enumerate(summary["point_ids"])
    ]
    return pd.DataFrame(rows)


def test_the_example_model_trains_tests_and_forecasts(example_conf, tmp_path):
    cfg = tiny_job(tmp_path, example_conf, "model.bias=false")
    assert cfg.model._target_ == "time_mix.TimeMix"
    results = train(cfg)
    assert math.isfinite(results["test"]["overall"]["mae"]["mean"])
    # input_steps 4 -> output_steps 3, no bias: the sizes came from the data, the option
    # from the command
    assert results["num_params"] == 4 * 3

    run = Forecaster.load(tmp_path / "run")
    summary = results["data"]
    forecast = run.forecast(history(summary, summary["input_steps"]))
    assert len(forecast) == summary["output_steps"] * summary["num_points"]
    assert np.isfinite(forecast[summary["channel_names"]].to_numpy()).all()


def test_a_model_that_does_not_name_its_output_head_is_told_how(example_conf, tmp_path):
    """The message says what to define, and where the contract is written."""
    from time_mix import TimeMix

    TimeMix.output_head = ForecastModel.output_head  # the example without it
    with pytest.raises(NotImplementedError, match=r"define output_head\(\).*Adding a model"):
        train(tiny_job(tmp_path, example_conf))
