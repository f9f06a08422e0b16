"""Where a training step's time goes, at the cloud sizes of real networks, against its floor.

    python benchmarks/bench_step.py [--models cloudlstm_k3 cloudlstm convlstm stgcn]
        [--sizes 12 35 100 207 274] [--channels 1 6] [--batch 32] [--repeats 5] [--quick]

For each model, number of points N and channels C (batch 32, M = J = 12 by default), one
fresh process builds the model as a run does (``model_for_shape``: Hydra, ``build_model``),
keeps freed memory as ``train.py`` does by default, and times whole training steps
(forward, MAE loss, backward, Adam) on random data: the best of ``--repeats`` after two
warm-up steps. It then measures, in the same process:

* **GFLOP per step**: torch's ``FlopCounterMode`` over one step (products and convolutions).
* **the floor**: every product of one step (matrix products, convolutions and their
  backwards, DConv's oneDNN linear) is recorded with its shapes and strides, then run
  again alone, on the same path, one after the other: the step's time if it did nothing
  but its arithmetic. ``step/floor`` is the ratio the step is judged by.
* **a profile of one step by part** (``torch.profiler``, main thread): the neighbour search,
  the neighbourhood gather (forward and backward), the products, the pointwise work (every
  other op, the fused LSTM update included), the optimiser, and what is left: autograd,
  dispatch and Python between the ops.
* **peak RSS** of the process (MB).

The table also gives each step's ratio to ConvLSTM's step at the same N and C, when
ConvLSTM is among the models. Run it on otherwise idle cores; ``--quick`` is a smoke check
(N = 12, C = 1, two models, one repeat). The processes get the caller's environment:
``OMP_WAIT_POLICY=PASSIVE`` (torch's threads sleep between ops instead of spinning a
while) makes small steps about 1.2x (CloudLSTM) to 2x (ConvLSTM) slower, so the header
says which policy ran.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import cloudlstm  # noqa: F401 (first: its GOMP_SPINCOUNT must precede torch's OpenMP)

# isort: split
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from cloudlstm.cli.arguments import at_least_one

ROOT = Path(__file__).resolve().parents[1]
MODELS = ["cloudlstm_k3", "cloudlstm", "convlstm", "stgcn"]
SIZES = [12, 35, 100, 207, 274]
PARTS = ["search", "gather", "product", "pointwise", "optimiser", "overhead"]
PRODUCT_OPS = {
    "mm", "addmm", "bmm", "baddbmm", "convolution", "convolution_backward", "_linear_pointwise",
    "mkldnn_rnn_layer", "mkldnn_rnn_layer_backward",
}  # fmt: skip
# Ops that only describe memory: their time is dispatch overhead, not work.
VIEW_OPS = {
    "view", "reshape", "_reshape_alias", "transpose", "permute", "as_strided", "detach",
    "expand", "slice", "select", "unsqueeze", "squeeze", "t", "alias", "empty",
    "empty_strided", "unflatten", "flatten", "chunk", "split", "split_with_sizes", "narrow",
    "unbind", "lift_fresh", "resolve_conj", "resolve_neg", "_unsafe_view", "numpy_T",
}  # fmt: skip


def _op(name: str) -> str:
    """``aten::mm`` / ``mkldnn::_linear_pointwise`` -> the op's own name."""
    return name.split("::")[-1]


class ProductRecorder(TorchDispatchMode):
    """A dispatch mode noting every product a step runs, ``(op, args, kwargs)`` with each
    tensor as ``(shape, stride, dtype)``. It knows DConv's oneDNN op, so the step runs
    the products it runs unobserved (see ``cloudlstm.nn.onednn_matmul``)."""

    knows_onednn_linear = True

    def __init__(self) -> None:
        super().__init__()
        self.calls: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _op(func.name()).split(".")[0] in PRODUCT_OPS:
            self.calls.append((func, _spec(args), _spec(kwargs)))
        return func(*args, **kwargs)


@dataclass(frozen=True)
class TensorSpec:
    """What a product's run takes from a tensor argument (a pytree leaf)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    def make(self) -> torch.Tensor:
        tensor = torch.empty_strided(self.shape, self.stride, dtype=self.dtype)
        return tensor.uniform_(-1, 1) if self.dtype.is_floating_point else tensor.zero_()


def _spec(tree):
    return tree_map(
        lambda v: (
            TensorSpec(tuple(v.shape), v.stride(), v.dtype) if isinstance(v, torch.Tensor) else v
        ),
        tree,
    )


def _materialise(tree):
    return tree_map(lambda v: v.make() if isinstance(v, TensorSpec) else v, tree)


def floor_seconds(calls: list, repeats: int) -> float:
    """The recorded products run alone, in order, on fresh tensors: best of ``repeats``."""
    runnable = [(func, _materialise(args), _materialise(kwargs)) for func, args, kwargs in calls]
    with torch.no_grad():
        best = float("inf")
        for _ in range(repeats + 1):  # the first pass warms oneDNN's primitive cache
            start = time.perf_counter()
            for func, args, kwargs in runnable:
                func(*args, **kwargs)
            best = min(best, time.perf_counter() - start)
    return best


def worker(model_name: str, n: int, c: int, batch: int, repeats: int) -> dict:
    """One configuration's measurements (run in a fresh process by :func:`main`)."""
    from flops import rnn_layer_flops  # noqa: F401 (registers the RNN layers' FLOP formulas)
    from profiled import profiled_step
    from torch.profiler import record_function
    from torch.utils.flop_counter import FlopCounterMode

    from cloudlstm.cli.models_table import model_for_shape
    from cloudlstm.engine.host_memory import keep_freed_memory

    keep_freed_memory()  # as train.py runs a step by default (keep_freed_memory=auto)
    torch.manual_seed(0)
    model = model_for_shape(model_name, num_points=n, num_channels=c)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-4)
    x, y = torch.randn(batch, 12, n, c), torch.randn(batch, 12, n, c)
    coords = torch.rand(batch, n, 2)

    def step() -> float:
        start = time.perf_counter()
        optimiser.zero_grad(set_to_none=True)
        (model(x, coords) - y).abs().mean().backward()
        with record_function("bench::optimiser"):
            optimiser.step()
        return time.perf_counter() - start

    step(), step()
    best = min(step() for _ in range(repeats))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    with FlopCounterMode(display=False) as counter:
        step()
    with ProductRecorder() as recorder:
        step()
    floor = floor_seconds(recorder.calls, repeats)

    prof, profiled = profiled_step(step, "bench::search")
    return {
        "model": model_name,
        "n": n,
        "c": c,
        "step_s": best,
        "gflop": counter.get_total_flops() / 1e9,
        "floor_s": floor,
        "products": len(recorder.calls),
        "peak_mb": peak,
        "profiled_s": profiled,
        "parts_s": parts(prof.events(), profiled),
        "threads": torch.get_num_threads(),
    }


def parts(events, wall: float) -> dict[str, float]:
    """Seconds of a profiled step by part (see the module docstring); ``overhead`` is the
    step's wall time not spent inside any op's own work."""
    share = dict.fromkeys(PARTS, 0.0)
    searches = [e for e in events if e.name == "bench::search"]
    share["search"] = sum(e.cpu_time_total for e in searches) / 1e6
    share["optimiser"] = sum(e.cpu_time_total for e in events if e.name == "bench::optimiser") / 1e6

    def inside(event, spans) -> bool:
        return any(s.time_range.start <= event.time_range.start < s.time_range.end for s in spans)

    skip = searches + [e for e in events if e.name == "bench::optimiser"]
    for event in events:
        name = _op(event.name)
        if event.name.startswith("bench::") or inside(event, skip):
            continue
        if name.startswith("_GatherNeighbours"):
            share["gather"] += event.self_cpu_time_total / 1e6
        elif name.split(".")[0] in PRODUCT_OPS:
            share["product"] += event.self_cpu_time_total / 1e6
        elif (event.name.startswith("aten::") and name not in VIEW_OPS) or name.startswith(
            "_LSTMPointwise"
        ):
            share["pointwise"] += event.self_cpu_time_total / 1e6
    share["overhead"] = max(0.0, wall - sum(share.values()))
    return share


def run_config(model: str, n: int, c: int, batch: int, repeats: int) -> dict:
    """:func:`worker` in a fresh process, so that its peak RSS is its own."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import bench_step; "
        "print(json.dumps(bench_step.worker(sys.argv[2], *map(int, sys.argv[3:]))))"
    )
    env = dict(os.environ)  # OMP_WAIT_POLICY as the caller has it: it moves every figure
    args = [str(Path(__file__).parent), model, str(n), str(c), str(batch), str(repeats)]
    done = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        return {"model": model, "n": n, "c": c, "failed": done.stderr.strip().splitlines()[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: list[dict]) -> str:
    """The Markdown table: one row per configuration, parts as shares of the profiled step."""
    convlstm = {(r["n"], r["c"]): r["step_s"] for r in results if r["model"] == "convlstm"}
    head = "| model | N | C | ms / step | GFLOP / step | floor ms | step / floor | / ConvLSTM "
    head += "| GFLOP/s | peak RSS MB | " + " | ".join(PARTS) + " |"
    lines = [head, "|---|" + "---:|" * (9 + len(PARTS))]  # N to peak RSS, then the parts
    for r in results:
        if "failed" in r:
            lines.append(f"| {r['model']} | {r['n']} | {r['c']} | failed: {r['failed']} |")
            continue
        base = convlstm.get((r["n"], r["c"]))
        ratio = f"{r['step_s'] / base:.2f}" if base else ""
        shares = " | ".join(f"{r['parts_s'][p] / r['profiled_s']:.0%}" for p in PARTS)
        lines.append(
            f"| {r['model']} | {r['n']} | {r['c']} | {1000 * r['step_s']:.1f} | {r['gflop']:.2f} "
            f"| {1000 * r['floor_s']:.1f} | {r['step_s'] / r['floor_s']:.2f} | {ratio} "
            f"| {r['gflop'] / r['step_s']:.0f} | {r['peak_mb']:,.0f} | {shares} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--sizes", nargs="+", type=at_least_one, default=SIZES)
    parser.add_argument("--channels", nargs="+", type=at_least_one, default=[1, 6])
    parser.add_argument("--batch", type=at_least_one, default=32)
    parser.add_argument("--repeats", type=at_least_one, default=5)
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--quick", action="store_true", help="smoke check: N=12, C=1, 1 repeat")
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.sizes, args.channels, args.repeats = (
            ["cloudlstm_k3", "stgcn"],
            [12],
            [1],
            1,
        )
    policy = os.environ.get("OMP_WAIT_POLICY", "unset")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, OMP_WAIT_POLICY={policy}")
    results = []
    for n in args.sizes:
        for c in args.channels:
            for model in args.models:
                results.append(run_config(model, n, c, args.batch, args.repeats))
                r = results[-1]
                done = (
                    r.get("failed")
                    or f"{1000 * r['step_s']:.1f} ms, floor {1000 * r['floor_s']:.1f} ms"
                )
                print(f"  {model} N={n} C={c}: {done}", flush=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
