"""benchmarks/bench_step.py: one configuration's measurement, the floor's replay and the table,
in-process at 12 points (the benchmark itself runs each configuration in a fresh process).
Timings are only checked for being consistent with each other, never against a figure."""

import pytest
import torch
from conftest import benchmark_module


@pytest.fixture(scope="module")
def bench():
    yield from benchmark_module("bench_step")


def test_the_recorder_sees_every_product_of_a_dconv_step_on_its_own_path(bench):
    """A DConv forward + backward runs three oneDNN products (the weighting, and the rows' and
    the weight's gradients); the recorder keeps them with their shapes and strides, and the
    replay runs them."""
    from cloudlstm.nn import DConv

    conv = DConv(4, 5, k=3)
    cloud = torch.rand(2, 12, 4, 3, requires_grad=True)
    with bench.ProductRecorder() as recorder:
        conv(cloud).sum().backward()
    names = [func.name() for func, _, _ in recorder.calls]
    assert names == ["mkldnn::_linear_pointwise"] * 3
    shapes = [args[0].shape for _, args, _ in recorder.calls]
    assert shapes[0] == (24, 4 * 3 * 3)  # the gathered rows, (B*N, U*K*F)
    assert bench.floor_seconds(recorder.calls, repeats=1) > 0


def test_measures_a_step_its_floor_and_its_parts(bench):
    r = bench.worker("cloudlstm_k3", 12, 1, batch=2, repeats=1)
    assert r["step_s"] > 0 and r["gflop"] > 0 and r["peak_mb"] > 0
    # every product of the step was recorded and replayed: a CloudLSTM step of 24 time
    # steps runs far more than a hundred
    assert r["products"] > 100 and r["floor_s"] > 0
    parts = r["parts_s"]
    assert set(parts) == set(bench.PARTS)
    assert min(parts["search"], parts["gather"], parts["product"], parts["pointwise"]) > 0
    assert sum(parts.values()) == pytest.approx(r["profiled_s"], rel=1e-6)


def test_the_table_gives_ratios_to_the_floor_and_to_convlstm(bench):
    parts = dict.fromkeys(bench.PARTS, 0.01)
    row = {"n": 12, "c": 6, "gflop": 30.0, "peak_mb": 700.0, "profiled_s": 0.06, "parts_s": parts}
    results = [
        {**row, "model": "convlstm", "step_s": 0.05, "floor_s": 0.04},
        {**row, "model": "cloudlstm_k3", "step_s": 0.2, "floor_s": 0.1},
        {"model": "stgcn", "n": 12, "c": 6, "failed": "MemoryError"},
    ]
    lines = bench.table(results).splitlines()
    assert len(lines) == 5
    assert [line.count("|") for line in lines[:4]] == [17] * 4  # header, rule and rows alike
    assert "| cloudlstm_k3 | 12 | 6 | 200.0 | 30.00 | 100.0 | 2.00 | 4.00 | 150 | 700 |" in lines[3]
    assert lines[4] == "| stgcn | 12 | 6 | failed: MemoryError |"
