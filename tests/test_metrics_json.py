"""metrics.json in standard JSON: NaN and infinite metrics written so that any JSON reader
takes them, and read back as the floats they were."""

from __future__ import annotations

import json
import math

from cloudlstm.compare.runs import load_run
from cloudlstm.rundir.layout import load_metrics, write_metrics
from tests.test_train import not_standard_json


def results_with(mae: float, v_max: float) -> dict:
    return {
        "run": {"model": "linear", "data": "synthetic"},
        "resumed_from": None,
        "checkpoint": None,
        "val": {"val/mae": mae, "val/mae_best": 1.0},
        "test": {
            "overall": {
                "mae": {"mean": mae, "std": math.nan},
                "psnr": {"mean": math.inf, "std": 0.0},
            },
            "per_step": {"mae": {"mean": [1.0, mae], "std": [0.0, math.nan]}},
            "pooled": {"mae": mae},
            "v_max": v_max,
        },
    }


def test_nan_and_infinities_are_standard_json_and_read_back(tmp_path):
    path = write_metrics(tmp_path, results_with(math.nan, -math.inf))
    text = path.read_text()
    strict = json.loads(text, parse_constant=not_standard_json)  # jq's and a browser's reading
    assert strict["test"]["overall"]["mae"]["mean"] is None
    assert strict["test"]["overall"]["psnr"]["mean"] == "Infinity"
    assert strict["test"]["v_max"] == "-Infinity"
    assert strict["test"]["per_step"]["mae"]["mean"] == [1.0, None]

    read = load_metrics(path)
    assert math.isnan(read["test"]["overall"]["mae"]["mean"])
    assert math.isnan(read["val"]["val/mae"]) and read["val"]["val/mae_best"] == 1.0
    assert read["test"]["overall"]["psnr"]["mean"] == math.inf
    assert read["test"]["v_max"] == -math.inf
    assert read["test"]["per_step"]["mae"]["mean"][0] == 1.0
    assert math.isnan(read["test"]["per_step"]["mae"]["mean"][1])
    # a null outside the metrics is no number: it stays None
    assert read["resumed_from"] is None and read["checkpoint"] is None


def test_finite_results_are_written_as_before(tmp_path):
    results = results_with(2.5, 7.0)
    results["test"]["overall"]["psnr"]["mean"] = 30.0
    results["test"]["overall"]["mae"]["std"] = 0.1
    results["test"]["per_step"]["mae"]["std"] = [0.0, 0.1]
    path = write_metrics(tmp_path, results)
    assert path.read_text() == json.dumps(results, indent=2)
    assert load_metrics(path) == results


def test_an_older_file_with_bare_nan_reads_as_before(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps(results_with(math.nan, 7.0), indent=2))
    assert "NaN" in (tmp_path / "metrics.json").read_text()
    read = load_metrics(tmp_path / "metrics.json")
    assert math.isnan(read["test"]["overall"]["mae"]["mean"]) and read["test"]["v_max"] == 7.0


def test_compare_reads_a_nan_metric_written_as_null(tmp_path):
    run = load_run(write_metrics(tmp_path, results_with(math.nan, 7.0)))
    assert math.isnan(run.overall["mae"]) and run.overall["psnr"] == math.inf
    assert run.per_step["mae"][0] == 1.0 and math.isnan(run.per_step["mae"][1])
    assert math.isnan(run.pooled["mae"])


def test_a_part_that_is_null_as_a_whole_stays_none(tmp_path):
    """A run that trained but was never tested writes ``"test": null``: no metric was NaN,
    there was none, and readers such as ``compare`` say so."""
    results = results_with(2.5, 7.0)
    results["test"] = None
    read = load_metrics(write_metrics(tmp_path, results))
    assert read["test"] is None and read["val"]["val/mae"] == 2.5
