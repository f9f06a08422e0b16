"""benchmarks/bench_scale.py: one configuration's measurement and the table, in-process
at 60 points (the benchmark itself runs each configuration in a fresh process)."""

import pytest
from conftest import benchmark_module


@pytest.fixture(scope="module")
def bench():
    yield from benchmark_module("bench_scale")


def test_measures_time_memory_and_the_parts_of_a_step(bench):
    results = [
        bench.worker(60, 1, checkpointing, repeats=1, seed=0) for checkpointing in (False, True)
    ]
    for r in results:
        assert r["step_s"] > 0 and r["peak_mb"] >= r["before_mb"] > 0
        # the profiler saw every part under the names the benchmark sums
        assert min(r["knn_s"], r["gather_s"], r["matmul_s"]) > 0
        assert r["knn_s"] + r["gather_s"] + r["matmul_s"] < r["profiled_s"]
    results.append({"n": 60, "batch": 4, "checkpointing": False, "skipped": "skipped"})
    text = bench.table(results)
    assert text.count("\n") == 4 and "| 60 | 1 | yes | " in text and "skipped" in text
