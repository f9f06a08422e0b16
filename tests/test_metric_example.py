"""The worked example of docs/design.md, "Adding a metric", works as it is written: its
declaration, taken from the document and appended to the declared metrics, reaches a
run's results and compare's table alone."""

from __future__ import annotations

import math
import re

import pytest
from conftest import ROOT, TINY, compose_train, doc_examples

from cloudlstm.cli.compare.command import main as compare_main
from cloudlstm.cli.train import train
from cloudlstm.engine import declared_metrics
from cloudlstm.engine.declared_metrics import MetricInfo

DESIGN = ROOT / "docs" / "design.md"


def example_declaration() -> MetricInfo:
    """The entry of ``DECLARED`` that the section's ```python block adds, as written."""
    block = doc_examples(DESIGN, "Adding a metric")["python"]
    (entry,) = re.findall(r"^\s*(MetricInfo\(.*\)),$", block, re.M)
    return eval(entry, {"MetricInfo": MetricInfo, "math": math})


@pytest.fixture
def declared(monkeypatch) -> MetricInfo:
    """The example appended to the declared metrics for the test."""
    info = example_declaration()
    monkeypatch.setattr(declared_metrics, "DECLARED", (*declared_metrics.DECLARED, info))
    return info


def test_the_example_metric_reaches_the_results_and_compare(declared, tmp_path, capsys):
    results = train(compose_train(tmp_path, [*TINY, "logger=none"]))
    test = results["test"]
    assert declared.name == "bias"
    assert math.isfinite(test["overall"]["bias"]["mean"])
    assert abs(test["overall"]["bias"]["mean"]) <= test["overall"]["mae"]["mean"]
    run = str(tmp_path / "run")
    per_step = ["--horizons", "1,3", "--horizon-metric", "bias"]
    assert compare_main([run, "--metrics", "bias", "mae", *per_step]) == 0
    table = capsys.readouterr().out.split("| model |", 1)[1]
    assert "| bias | mae | bias@1 | bias@3 |" in table.splitlines()[0]
