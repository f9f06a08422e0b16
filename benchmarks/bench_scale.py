"""Cost of training CloudLSTM on city-scale point clouds: time and peak memory per sample.

    python benchmarks/bench_scale.py [--sizes 274,1000,5000,13000] [--batch 1,4]
                                     [--repeats 2] [--quick] [--max-gb G]

For each N, a seeded city-like layout (:func:`layouts.city_layout`) and the
paper's CloudLSTM (C=2 channels, M=J=6, K=9, 36 hidden channels, 2 layers; built as a run
builds it, :func:`cloudlstm.cli.models_table.model_for_shape`): one training
sample's forward + backward at batch 1 and batch 4, with and without
``model.checkpointing``. Every configuration runs in a fresh subprocess, so its peak
memory (``ru_maxrss``) is its own; the process first trains a 50-point sample (imports,
JIT caches, thread pool), and "before" is the peak after that: the fixed cost of a
process, in every figure. A batch > 1 is skipped when the batch-1 figures say it would
need more than ``--max-gb`` (default: 80 % of the memory available at the start).

Printed per configuration: the best wall time of ``--repeats`` steps per sample, per
point and sample relative to the smallest N, the peak RSS, and the shares of neighbour
search, gather (forward and backward, the numba kernel) and matmul (oneDNN's
``mkldnn::_linear_pointwise``, or ``aten::addmm`` and ``aten::mm`` where DConv leaves it to
torch: the DConv weighting, forward and backward) in one more step run under
``torch.profiler`` (knn wrapped in a ``record_function``; wall time of the main thread,
which waits for the kernels' worker threads). With checkpointing the recomputed
forwards are in the gather and matmul shares. Timings need otherwise idle cores: the
load average is printed before and after; memory does not depend on it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from cloudlstm.cli.arguments import at_least_one, positive_number

C, M, J, K, HIDDEN, LAYERS = 2, 6, 6, 9, 36, 2
WARM_POINTS = 50


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def available_gb() -> float:
    with open("/proc/meminfo") as f:
        info = dict(line.split(":", 1) for line in f)
    return int(info["MemAvailable"].split()[0]) / 2**20


# ------------------------------------------------------------------ one configuration


def worker(n: int, batch: int, checkpointing: bool, repeats: int, seed: int) -> dict:
    import torch
    from layouts import city_layout
    from profiled import profiled_step

    from cloudlstm.cli.models_table import model_for_shape
    from cloudlstm.engine.host_memory import keep_freed_memory, keeps_freed_memory

    if keeps_freed_memory("auto", checkpointing):  # as train.py runs a step by default
        keep_freed_memory()
    torch.manual_seed(seed)
    coords = torch.from_numpy(city_layout(n, seed)).expand(batch, -1, -1).contiguous()
    x, y = torch.randn(batch, M, n, C), torch.randn(batch, J, n, C)
    model = model_for_shape(  # points in Z-order: what a city-size run would use
        "cloudlstm", num_points=n, num_channels=C, input_steps=M, output_steps=J, k=K,
        hidden_channels=HIDDEN, num_layers=LAYERS, checkpointing=checkpointing,
        spatial_order=True,
    )  # fmt: skip

    def step(points: int = n) -> float:
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        forecast = model(x[:, :, :points], coords[:, :points])
        (forecast - y[:, :, :points]).pow(2).mean().backward()
        return time.perf_counter() - start

    step(WARM_POINTS)
    before = peak_rss_mb()
    best = min(step() for _ in range(repeats))
    peak = peak_rss_mb()  # before the profiler's own memory

    prof, profiled = profiled_step(step, "bench::knn")
    ops = {e.key: e for e in prof.key_averages()}

    def self_s(*names: str) -> float:
        return sum(ops[name].self_cpu_time_total for name in names if name in ops) / 1e6

    return {
        "n": n,
        "batch": batch,
        "checkpointing": checkpointing,
        "step_s": best,
        "before_mb": before,
        "peak_mb": peak,
        "profiled_s": profiled,
        "knn_s": ops["bench::knn"].cpu_time_total / 1e6 if "bench::knn" in ops else 0.0,
        "gather_s": self_s("_GatherNeighbours", "_GatherNeighboursBackward"),
        "matmul_s": self_s("mkldnn::_linear_pointwise", "aten::addmm", "aten::mm"),
        "threads": torch.get_num_threads(),
    }


def run_config(n: int, batch: int, checkpointing: bool, repeats: int, seed: int) -> dict:
    """One configuration in a fresh interpreter: its own peak memory."""
    spec = json.dumps([n, batch, checkpointing, repeats, seed])
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    done = subprocess.run(
        [sys.executable, __file__, "--worker", spec], capture_output=True, text=True, env=env
    )
    if done.returncode != 0:
        reason = "killed (out of memory?)" if done.returncode < 0 else done.stderr[-400:]
        return {"n": n, "batch": batch, "checkpointing": checkpointing, "failed": reason}
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------- report


def table(results: list[dict]) -> str:
    ok = [r for r in results if "step_s" in r]
    if not ok:
        return "no configuration ran"
    smallest = min(r["n"] for r in ok)
    # per point and sample at the smallest N, batch 1, same checkpointing
    base = {
        r["checkpointing"]: r["step_s"] / r["batch"] / r["n"]
        for r in ok
        if r["n"] == smallest and r["batch"] == 1
    }
    lines = [
        f"| N | batch | checkpointing | s / sample | per point, rel. to N={smallest} "
        "| peak RSS MB (before the step) | kNN | gather | matmul | rest |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        head = f"| {r['n']:,} | {r['batch']} | {'yes' if r['checkpointing'] else 'no'} "
        if "step_s" not in r:
            lines.append(head + f"| {r.get('skipped') or r.get('failed')} | | | | | | |")
            continue
        per_sample = r["step_s"] / r["batch"]
        rel = per_sample / r["n"] / base[r["checkpointing"]] if r["checkpointing"] in base else 0
        total = r["profiled_s"]
        parts = [r["knn_s"], r["gather_s"], r["matmul_s"]]
        shares = [p / total for p in parts] + [1 - sum(parts) / total]
        lines.append(
            head
            + f"| {per_sample:.2f} | {rel:.2f} | {r['peak_mb']:,.0f} ({r['before_mb']:,.0f}) "
            + " ".join(f"| {s:.0%}" for s in shares)
            + " |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="274,1000,5000,13000")
    parser.add_argument("--batch", default="1,4", help="batch sizes, comma-separated")
    parser.add_argument("--repeats", type=at_least_one, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-gb", type=positive_number, default=None)
    parser.add_argument(
        "--quick", action="store_true", help="smoke check: the first size only, batch 1, one repeat"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*json.loads(args.worker))))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    batches = [int(b) for b in args.batch.split(",")]
    if args.quick:
        sizes, batches, args.repeats = sizes[:1], [1], 1
    limit_gb = args.max_gb or 0.8 * available_gb()
    print(
        f"CloudSeq2Seq C={C}, M=J={M}, K={K}, {HIDDEN} hidden channels, {LAYERS} layers; "
        f"city_layout(N, seed={args.seed}) in Z-order; best of {args.repeats}; batches over "
        f"{limit_gb:.1f} GB skipped; load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs",
        flush=True,
    )
    results = []
    for n in sizes:
        for batch in batches:
            for checkpointing in (False, True):
                one = [
                    r
                    for r in results
                    if (r["n"], r["batch"], r["checkpointing"]) == (n, 1, checkpointing)
                    and "peak_mb" in r
                ]
                if batch > 1 and one:
                    r = one[0]
                    need = (r["before_mb"] + batch * (r["peak_mb"] - r["before_mb"])) / 1024
                    if need > limit_gb:
                        results.append(
                            {
                                "n": n,
                                "batch": batch,
                                "checkpointing": checkpointing,
                                "skipped": f"skipped: needs ~{need:.0f} GB",
                            }
                        )
                        print(f"N={n} batch={batch} ckpt={checkpointing}: skipped", flush=True)
                        continue
                r = run_config(n, batch, checkpointing, args.repeats, args.seed)
                results.append(r)
                print(json.dumps(r), flush=True)
    print(f"\nload average after: {os.getloadavg()[0]:.1f}\n")
    print(table(results))


if __name__ == "__main__":
    main()
