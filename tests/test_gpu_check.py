"""benchmarks/gpu_check.py: the GPU check's steps, their limits, its JSON and its tables; and,
marked slow, the whole check in its CPU smoke mode (the GPU tests skip there)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, benchmark_module, subprocess_env

FAKE_BENCH = """
import json, sys
out = sys.argv[sys.argv.index("--json") + 1]
runs = {"cloudlstm_k3": {"first_s": 1.5, "ms_per_step": 12.5},
        "cloudlstm_k3 graph": {"skipped": "CUDA graphs: CUDA only"},
        "convlstm": {"failed": "RuntimeError: out of memory"}}
json.dump({"device": "Fake GPU", "beijing_step": {"runs": runs}}, open(out, "w"))
print("CloudLSTM K = 3 step: best 12.5 ms")
"""


@pytest.fixture
def check(tmp_path, monkeypatch):
    module = next(gen := benchmark_module("gpu_check"))
    fake = tmp_path / "fake_bench.py"
    fake.write_text(FAKE_BENCH)
    monkeypatch.setattr(module, "BENCH", [sys.executable, str(fake)])
    yield module
    next(gen, None)


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_step_is_passed_failed_or_timed_out_with_its_last_line(check, tmp_path) -> None:
    passed = check.run_step("a", _python("print('one'); print('  all good  ')"), 30, tmp_path)
    assert passed["status"] == "passed" and passed["last_line"] == "all good"
    assert (tmp_path / "a.log").read_text() == "one\n  all good  \n"
    failed = check.run_step("b", _python("import sys; print('boom'); sys.exit(3)"), 30, tmp_path)
    assert failed["status"] == "failed (exit 3)" and failed["last_line"] == "boom"
    slow = check.run_step("c", _python("import time; time.sleep(30)"), 1, tmp_path)
    assert slow["status"] == "timed out after 1 s" and slow["seconds"] < 20


def test_a_bench_step_writes_its_figures_beside_its_log(check, tmp_path) -> None:
    step = check.run_step("beijing_step", list(check.BENCH), 30, tmp_path)
    assert step["status"] == "passed"
    assert step["figures"]["beijing_step"]["runs"]["cloudlstm_k3"]["ms_per_step"] == 12.5
    assert json.loads((tmp_path / "beijing_step.json").read_text()) == step["figures"]


def test_the_check_writes_json_and_tables_and_fails_if_a_step_does(
    check, tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(
        check, "STEPS",
        {"tests": (_python("print('3 passed in 1.0s')"), 30),
         "beijing_step": (list(check.BENCH), 30),
         "broken": (_python("raise SystemExit(2)"), 30)},
    )  # fmt: skip
    monkeypatch.setattr(check, "_cuda_visible", lambda: True)  # as on the GPU machine
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--out", str(tmp_path / "out")])
    assert check.main() == 1  # one step failed
    results = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert results["device"] == "Fake GPU" and results["commit"]
    assert [s["status"] for s in results["steps"].values()] == [
        "passed", "passed", "failed (exit 2)",
    ]  # fmt: skip
    text = (tmp_path / "out" / "gpu_check.txt").read_text()
    assert "tests: 3 passed in 1.0s" in text
    assert "cloudlstm_k3" in text and "12.5" in text
    assert "CUDA graphs: CUDA only" in text and "failed: RuntimeError: out of memory" in text
    assert "broken         failed (exit 2)" in text


def test_the_tables_give_the_paper_step_by_part(check) -> None:
    profile = {
        "ms": {"search": 40.0, "matmul": 20.5, "other": 9.5, "total": 70.0, "unlinked": 38.2},
        "top": [["_knn_insert_kernel", 38.2], ["nvjet_hsh_128x256", 12.0]],
    }
    figures = {"paper_epoch": {"runs": {}, "profile": profile}}
    results = {"date": "today", "commit": "abc", "device": "Fake GPU",
               "steps": {"paper_epoch": {"status": "passed", "seconds": 1.0,
                                         "figures": figures}}}  # fmt: skip
    text = check.tables(results)
    assert (
        "by part (ms): search 40.0, matmul 20.5, other 9.5, total 70.0 (of which tied to no op, "
        "placed by name: 38.2)"
    ) in text
    assert "38.20  _knn_insert_kernel" in text and "12.00  nvjet_hsh_128x256" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_without_a_gpu_the_check_says_so_in_one_line(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py", "--out", str(tmp_path)],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "gpu_check.py: torch sees no CUDA GPU here: run it on the GPU machine, or --device cpu "
        "for its smoke check."
    )
    assert not list(tmp_path.iterdir())


def test_only_runs_the_steps_named_and_refuses_an_unknown_one(check, tmp_path, monkeypatch):
    monkeypatch.setattr(check, "_cuda_visible", lambda: True)
    monkeypatch.setattr(
        check, "STEPS", {"a": (_python("print(1)"), 30), "b": (_python("print(2)"), 30)}
    )
    monkeypatch.setattr(check, "EXTRA_STEPS", {"slow": (_python("print(3)"), 30)})

    def steps_run(*only: str) -> list[str]:
        out = tmp_path / "_".join(only or ("all",))
        monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--out", str(out), *only])
        assert check.main() == 0
        return list(json.loads((out / "gpu_check.json").read_text())["steps"])

    assert steps_run() == ["a", "b"]  # an extra step runs only when named
    assert steps_run("--only", "b") == ["b"]
    assert steps_run("--only", "slow,a") == ["a", "slow"]
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--only", "b,knn"])
    with pytest.raises(SystemExit, match="gpu_check.py: no step knn; the steps: a, b, slow."):
        check.main()


def _gpu_tests_selected(command: list[str]) -> set[str]:
    """The test ids a ``pytest -m gpu ...`` step of the check would run (collected here,
    where they would skip)."""
    options = [part for part in command[3:] if part not in ("-x", "-q")]
    if "-n" in options:  # collecting needs no worker processes
        at = options.index("-n")
        del options[at : at + 2]
    done = subprocess.run(
        [*command[:3], "--collect-only", "-q", "-p", "no:cacheprovider", *options],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line for line in done.stdout.splitlines() if "::" in line}


def test_the_test_steps_run_every_gpu_test_once(check) -> None:
    """The 8-minute check and its train_py step split tests/test_gpu.py between them."""
    quick = _gpu_tests_selected(check.STEPS["tests"][0])
    slow = _gpu_tests_selected(check.EXTRA_STEPS["train_py"][0])
    every = _gpu_tests_selected([*check.PYTEST_GPU, check.GPU_TESTS])
    assert quick and slow and not quick & slow and quick | slow == every
    assert all("train_py" in test for test in slow)


def test_the_tables_give_each_search_in_milliseconds(check) -> None:
    knn = {"2304x274": {"insert": 1.26, "passes": 2.7, "cells": 27.359367, "brute": None}}
    results = {"date": "today", "commit": "abc", "device": "Fake GPU",
               "steps": {"knn": {"status": "passed", "seconds": 1.0,
                                 "figures": {"knn_ms": knn}}}}  # fmt: skip
    assert "  2304x274     insert 1.26, passes 2.70, cells 27.36\n" in check.tables(results)


def test_the_steps_fit_in_eight_minutes(check) -> None:
    assert sum(limit for _, limit in check.STEPS.values()) <= 8 * 60 - 15


@pytest.mark.slow
def test_the_smoke_check_runs_every_step_on_cpu(tmp_path) -> None:
    """The whole check on CPU: every step passes at the smallest sizes, the CUDA-graph runs
    say why they did not run, and model.compile=auto runs eagerly."""
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py", "--device", "cpu", "--out", str(tmp_path)],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=2400,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "gpu_check.json").read_text())
    assert set(results["steps"]) == {"tests", "knn", "paper_epoch", "beijing_step"}
    beijing = results["steps"]["beijing_step"]["figures"]["beijing_step"]["runs"]
    assert beijing["cloudlstm_k3 graph"] == {"skipped": "CUDA graphs: CUDA only"}
    assert beijing["cloudlstm_k3 auto"]["ms_per_step"] > 0
    assert "model.compile=auto: eager" in (tmp_path / "beijing_step.log").read_text()
    assert (tmp_path / "gpu_check.txt").read_text().startswith("GPU check, ")
