"""The GPU check: the kernels proven and the steps timed, in one run of under 8 minutes.

    python benchmarks/gpu_check.py [--out DIR] [--device cpu] [--only STEP,...]

On one CUDA GPU (an H100 or H200), each step a process of its own with a time limit
(:data:`STEPS`; a step that fails or runs over is recorded and the next one runs):

1. ``tests``: ``pytest -m gpu -x tests/test_gpu.py`` but its ``train.py`` runs, the
   kernels and the model on CUDA against the CPU, stopping at the first failure;
2. ``knn``: the neighbour search kernels at the size the paper's model searches
   (``bench_gpu.py --only knn --quick``);
3. ``paper_epoch``: where a CloudLSTM bf16 step's device time goes (:mod:`device_profile`),
   then the paper-size epoch, CloudLSTM and ConvLSTM, float32 and bf16, eager and (CloudLSTM)
   with the whole step captured in a CUDA graph, that one also with the ``insert`` search;
4. ``beijing_step``: the Beijing-size step, eager, captured and as ``model.compile=auto``
   trains it (compiling takes most of its time, so it goes last), against the 15 ms target.

``--only train_py`` runs what the 8 minutes leave out: the two ``train.py trainer=gpu``
tests (:data:`EXTRA_STEPS`), whose compiling takes minutes.

It writes ``gpu_check.json`` (every figure, each step's status, the commit) and
``gpu_check.txt`` (the same as tables) to ``--out``, by default ``$OUT`` or
``./gpu_check_out``. ``--device cpu`` is its smoke check where there is no GPU: the same
steps at the smallest sizes (the GPU tests skip, CUDA graph runs say "CUDA only").
``--only`` runs some steps alone: a second, shorter run after a fix
(``--only tests,beijing_step``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = [sys.executable, str(ROOT / "benchmarks" / "bench_gpu.py")]
PYTEST_GPU = [sys.executable, "-m", "pytest", "-m", "gpu"]
PAPER_LABELS = (
    "profile,cloudlstm,cloudlstm bf16,cloudlstm graph,cloudlstm graph bf16,"
    "cloudlstm graph bf16 insert kNN,convlstm,convlstm bf16"
)
BEIJING_LABELS = (
    "cloudlstm_k3,cloudlstm_k3 graph,cloudlstm_k3 graph bf16,convlstm,stgcn,cloudlstm_k3 auto"
)
GPU_TESTS = "tests/test_gpu.py"
# name -> (command, seconds allowed on a GPU): 460 s in all, under 8 minutes with the
# processes' start-up. A bench step writes its JSON after every run, so one cut short by
# its limit keeps what it measured. The limits follow the H200's times (2026-12-04, every
# step of the former ones overran): the 14 tests but train.py's passed within 160 s in 4
# processes; the kNN kernels autotune for each cloud size (two kernels at two sizes took
# up to 40 s, now three at one); the paper-size runs took under 60 s eagerly,
# model.compile=auto's first step 86 s there (so it is left to the Beijing step, where it
# is the target's measure) and 67 s at Beijing's.
STEPS: dict[str, tuple[list[str], int]] = {
    "tests": ([*PYTEST_GPU, "-x", "-q", "-n", "4", "-k", "not train_py", GPU_TESTS], 160),
    "knn": ([*BENCH, "--only", "knn", "--quick"], 50),
    "paper_epoch": ([*BENCH, "--only", "epoch", "--steps", "30", "--labels", PAPER_LABELS], 100),
    "beijing_step": (
        [*BENCH, "--only", "beijing", "--beijing-steps", "100", "--labels", BEIJING_LABELS],
        150,
    ),
}
# Run by --only alone: train.py trainer=gpu compiles its training, validation and test
# forwards (model.compile=auto); neither of its two tests ended within 190 s on the H200
# with 8 test processes compiling beside them.
EXTRA_STEPS: dict[str, tuple[list[str], int]] = {
    "train_py": ([*PYTEST_GPU, "-x", "-q", "-n", "2", "-k", "train_py", GPU_TESTS], 300),
}

CPU_LIMIT_FACTOR = 4  # --device cpu: each step's limit is 4 times its GPU limit


def run_step(name: str, command: list[str], limit_s: int, out: Path) -> dict[str, Any]:
    """Run one step with its output in ``out/<name>.log``: its status (passed, failed or
    timed out), seconds, and the figures its ``--json`` wrote."""
    figures = out / f"{name}.json"
    if command[:2] == BENCH:
        command = [*command, "--json", str(figures)]
    start = time.perf_counter()
    with (out / f"{name}.log").open("w") as log:
        try:
            done = subprocess.run(
                command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=limit_s
            )
            status = "passed" if done.returncode == 0 else f"failed (exit {done.returncode})"
        except subprocess.TimeoutExpired:
            status = f"timed out after {limit_s} s"
    step = {"status": status, "seconds": round(time.perf_counter() - start, 1)}
    if figures.exists():
        step["figures"] = json.loads(figures.read_text())
    step["last_line"] = _last_line(out / f"{name}.log")
    return step


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _cuda_visible() -> bool:
    """Whether torch sees a CUDA GPU (asked in a child process: this one stays light)."""
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([sys.executable, "-c", probe], cwd=ROOT).returncode == 0


def commit() -> str:
    """The checked-out commit, with ``+`` when the working tree has changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
    except OSError:
        return "unknown"
    return (head or "unknown") + ("+" if dirty else "")


def tables(results: dict[str, Any]) -> str:
    """The results as text: each step's status, then each bench step's runs."""
    lines = [
        f"GPU check, {results['date']}, commit {results['commit']}, {results['device']}",
        "",
        f"{'step':<14} {'status':<28} {'seconds':>8}",
    ]
    for name, step in results["steps"].items():
        lines.append(f"{name:<14} {step['status']:<28} {step['seconds']:8.1f}")
    for name in ("tests", *EXTRA_STEPS):
        if name in results["steps"]:
            lines += ["", f"{name}: {results['steps'][name]['last_line']}"]
    for name, step in results["steps"].items():
        section = step.get("figures", {}).get(name)
        if not section or "runs" not in section:
            continue
        lines += ["", f"{name}: {'run':<28} {'first step s':>12} {'ms/step':>9} {'epoch s':>8}"]
        for label, run in section["runs"].items():
            if "ms_per_step" not in run:  # failed, or skipped (CUDA graphs on CPU)
                why = f"failed: {run['failed']}" if "failed" in run else run.get("skipped", "")
                lines.append(f"  {label:<34} {why[:90]}")
                continue
            epoch = f"{run['epoch_s']:8.1f}" if "epoch_s" in run else ""
            lines.append(f"  {label:<34} {run['first_s']:12.1f} {run['ms_per_step']:9.1f} {epoch}")
    epoch_figures = results["steps"].get("paper_epoch", {}).get("figures", {})
    profile = epoch_figures.get("paper_epoch", {}).get("profile")
    if profile:
        ms = dict(profile["ms"])
        unlinked = ms.pop("unlinked", None)
        parts = ", ".join(f"{part} {t}" for part, t in ms.items())
        if unlinked is not None:
            parts += f" (of which tied to no op, placed by name: {unlinked})"
        lines += ["", f"paper-size CloudLSTM step by part (ms): {parts}"]
        lines += [f"  {t:8.2f}  {name}" for name, t in profile["top"]]
    knn = results["steps"].get("knn", {}).get("figures", {}).get("knn_ms")
    if knn:
        lines += ["", "knn (ms per call, K = 9):"]
        for size, per_method in knn.items():
            calls = ", ".join(f"{m} {ms:.2f}" for m, ms in per_method.items() if ms is not None)
            lines.append(f"  {size:<12} {calls}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_check_out")))
    parser.add_argument("--device", default="cuda", help="cpu: the smoke check of this script")
    parser.add_argument(
        "--only",
        default="",
        help=f"these steps alone, comma-separated: {', '.join([*STEPS, *EXTRA_STEPS])}",
    )
    args = parser.parse_args()
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    steps = {**STEPS, **EXTRA_STEPS}
    unknown = sorted(set(only) - set(steps))
    if unknown:
        sys.exit(f"gpu_check.py: no step {', '.join(unknown)}; the steps: {', '.join(steps)}.")
    if args.device == "cuda" and not _cuda_visible():
        sys.exit(
            "gpu_check.py: torch sees no CUDA GPU here: run it on the GPU machine, or "
            "--device cpu for its smoke check."
        )
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "device": args.device,
        "steps": {},
    }
    for name, (command, limit_s) in steps.items():
        if name not in (only or STEPS):
            continue
        if command[:2] == BENCH:
            command = [*command, "--device", args.device]
            if args.device != "cuda":  # the smoke check: small sizes, no bf16 (slow on CPU)
                command += [*(["--quick"] if "--quick" not in command else []), "--skip", "bf16"]
        if args.device != "cuda":
            # the limits are the GPU's budget; the smoke check asks whether each step runs,
            # on a CPU that may be shared: a longer limit, still one against a hang
            limit_s *= CPU_LIMIT_FACTOR
        print(f"{name}: {' '.join(command[1:])}", flush=True)
        step = results["steps"][name] = run_step(name, command, limit_s, out)
        results["device"] = step.get("figures", {}).get("device", results["device"])
        print(f"  {step['status']} in {step['seconds']} s: {step['last_line']}", flush=True)
        (out / "gpu_check.json").write_text(json.dumps(results, indent=2))
    (out / "gpu_check.txt").write_text(tables(results))
    print(f"\n{tables(results)}")
    return 0 if all(s["status"] == "passed" for s in results["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
