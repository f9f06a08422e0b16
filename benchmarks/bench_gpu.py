"""CloudLSTM on a GPU: a paper-size training epoch, a city-size step, the neighbour search.

    python benchmarks/bench_gpu.py [--steps 219] [--large-points 13000] [--quick]
        [--only knn|epoch|city] [--runs LABEL,...] [--skip LABEL,...]

Measured in one run on the first CUDA device (all timings synchronise the device):

1. Neighbour search on the device: the Triton kernels, ``insert`` (the default on CUDA up
   to 2,048 points; timed up to 16,384 to find where it meets the cell list) and
   ``passes`` (module doc of nn/knn_triton.py), the cell-list search (the default above)
   and chunked brute force, at the paper's size (B*U = 32 x 72 clouds of 274 points; a
   model's call searches 32 x 36) and at city size.
2. A paper-size training epoch: air quality, cluster A, N = 274 stations, C = 6, M = J =
   12, batch 32, 7,000 training windows (219 steps: forward, MSE, backward, Adam step),
   for CloudLSTM (conf/model/cloudlstm.yaml: K = 9, 36 channels, 2 layers) and for ConvLSTM
   (conf/model/convlstm.yaml) on the same windows, in float32, in bf16 autocast, CloudLSTM
   with ``torch.compile`` (the forward is one graph, its searches operators in it; also
   ``mode="reduce-overhead"``, r-o: that graph and its backward replayed as CUDA graphs) and
   with the former kNN kernel (``passes``), and whole training steps captured in one CUDA
   graph. ``--runs compile,graph`` times only the runs whose label contains one of those,
   ``--skip compile`` all but those. Windows are random values at fixed random station
   positions, resident on the GPU: this is the model's cost, not the data loader's.
   The paper reports 316 s per CloudLSTM epoch on a K40M, and CloudLSTM at +18-21 % of
   ConvLSTM's epoch time; the FLOP ratio of the two steps is printed beside our time ratio.
3. A city-size training step: N = 13,000 points (``layouts.city_layout``), C = 2,
   M = J = 6, K = 9, batch 1 and 4, with and without
   ``checkpointing``: time and peak GPU memory (``torch.cuda.max_memory_allocated``).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch
from layouts import city_layout
from torch.utils.flop_counter import FlopCounterMode

from cloudlstm.cli.models_table import model_for_shape
from cloudlstm.nn import knn_triton
from cloudlstm.nn.knn import knn

ROOT = Path(__file__).resolve().parents[1]
PAPER = {"points": 274, "channels": 6, "steps": 12, "batch": 32, "windows": 7000}
DEVICE = "cuda"  # --device cpu: a smoke check of this script where there is no GPU
PAPER_EPOCH_S = 316.0  # CloudLSTM, air quality, one K40M (the paper's appendix)
TARGET_EPOCH_S = 16.0  # issue 14's target on an H100


def synchronize() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def free_cache() -> None:
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def sync_time(fn: Callable[[], object]) -> float:
    """Wall seconds of ``fn()``, the device synchronised before and after."""
    synchronize()
    start = time.perf_counter()
    fn()
    synchronize()
    return time.perf_counter() - start


def best_ms(fn: Callable[[], object], repeats: int = 5) -> float:
    fn()
    return min(sync_time(fn) for _ in range(repeats)) * 1e3


def bench_knn(quick: bool) -> None:
    print("\n1. Neighbour search on the GPU, K = 9 (best of 5, ms; Triton: both algorithms):")
    print(
        f"   {'clouds x N':>18} {'insert':>8} {'passes':>8} {'cell list':>10} {'brute force':>12}"
    )
    cases = [(32 * 72, 274), (32 * 36, 274), (4 * 72, 1000), (72, 2000), (72, 5000), (8, 13000)]
    if not quick:
        cases.append((4 * 72, 13000))
    for clouds, n in cases:
        coords = torch.rand(clouds, n, 2, device=DEVICE)
        t_cells = best_ms(lambda c=coords: knn(c, 9, method="cells"))
        triton = {name: "-" for name in knn_triton.ALGORITHMS}
        # insert also past MAX_POINTS (N work per query, not K N): where it meets the cell
        # list decides MAX_POINTS
        limits = {"passes": knn_triton.MAX_POINTS, "insert": 16384}
        if knn_triton.triton_switch.ENABLED and DEVICE == "cuda":
            for name in triton:
                if n <= limits[name]:
                    ms = best_ms(lambda c=coords, a=name: knn_triton.knn_triton(c, 9, algorithm=a))
                    triton[name] = f"{ms:.2f}"
        brute_gb = clouds * 1024 * n * 12 / 1e9  # d2 + keys of one chunk of 1024 queries
        if brute_gb < 40:
            brute = f"{best_ms(lambda c=coords: knn(c, 9, method='brute'), repeats=2):12.1f}"
        else:
            brute = f"{'(' + format(brute_gb, '.0f') + ' GB)':>12}"
        print(
            f"   {clouds:>8} x {n:>7} {triton['insert']:>8} {triton['passes']:>8} "
            f"{t_cells:10.1f} {brute}"
        )


def train_epoch(
    model: torch.nn.Module, data: dict[str, torch.Tensor], steps: int, bf16: bool, graph: bool
) -> tuple[float, float]:
    """(seconds of the first step, seconds per step over ``steps`` steps after it).

    ``graph``: the whole training step (forward, loss, backward, Adam) captured once in a CUDA
    graph and replayed per batch, as in PyTorch's "whole network capture": one launch per
    step instead of thousands, which is what a launch-bound model needs. The first step's
    time is then the warm-up and the capture.
    """
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=graph)
    x_all, y_all = data["x"], data["y"]
    batch = PAPER["batch"]
    coords = data["coords"].expand(batch, -1, -1)
    order = torch.randperm(len(x_all), device=DEVICE)
    within = torch.arange(batch, device=DEVICE)

    def batch_at(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        index = order[(i * batch + within) % len(order)]  # full batches: a graph's shapes
        return x_all[index], y_all[index]

    def forward_backward(x: torch.Tensor, y: torch.Tensor) -> None:
        # no autocast weight cache under a graph: it would hold casts from the capture
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=bf16, cache_enabled=not graph):
            loss = torch.nn.functional.mse_loss(model(x, coords).float(), y)
        loss.backward()
        optimiser.step()

    def step(i: int) -> None:
        optimiser.zero_grad(set_to_none=True)
        forward_backward(*batch_at(i))

    if graph:
        x_static, y_static = batch_at(0)
        captured = torch.cuda.CUDAGraph()

        def capture() -> None:
            side = torch.cuda.Stream()  # warm-up (autotuning, allocator) off the main stream
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for i in range(3):
                    step(i)
            torch.cuda.current_stream().wait_stream(side)
            optimiser.zero_grad(set_to_none=True)  # the graph's backward allocates the grads
            with torch.cuda.graph(captured):
                forward_backward(x_static, y_static)

        def replay(i: int) -> None:
            x, y = batch_at(i)
            x_static.copy_(x)
            y_static.copy_(y)
            captured.replay()

        first = sync_time(capture)
        run = replay
    else:
        first = sync_time(lambda: step(0))
        for i in range(1, 3):  # warm-up: allocator, cuDNN / compile autotuning
            step(i)
        run = step
    total = sync_time(lambda: [run(i) for i in range(steps)])
    return first, total / steps


def forward_backward_once(model: torch.nn.Module, data: dict[str, torch.Tensor]) -> None:
    """One forward + backward at batch size PAPER['batch'], gradients cleared after."""
    x = data["x"][: PAPER["batch"]]
    model(x, data["coords"].expand(len(x), -1, -1)).square().mean().backward()
    model.zero_grad(set_to_none=True)


def step_flops(model: torch.nn.Module, data: dict[str, torch.Tensor]) -> float:
    """FLOPs of one training step at batch size PAPER['batch'] (forward + backward)."""
    counter = FlopCounterMode(display=False)
    with counter:
        forward_backward_once(model, data)
    return counter.get_total_flops()


def step_kernels(model: torch.nn.Module, data: dict[str, torch.Tensor]) -> int:
    """Device kernels one forward + backward at batch PAPER['batch'] runs (torch.profiler's
    device events: what a launch-bound step pays for one by one; 0 on CPU)."""
    if DEVICE != "cuda":
        return 0
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        forward_backward_once(model, data)
        synchronize()
    return sum(1 for event in prof.events() if event.device_type.name == "CUDA")


def bench_paper_epoch(steps: int, select: list[str], skip: list[str]) -> None:
    """``select`` / ``skip``: time only the runs whose label contains one of / none of these."""
    n, c, m = PAPER["points"], PAPER["channels"], PAPER["steps"]
    gen = torch.Generator().manual_seed(0)
    data = {
        "x": torch.randn(PAPER["windows"], m, n, c, generator=gen).to(DEVICE),
        "y": torch.randn(PAPER["windows"], m, n, c, generator=gen).to(DEVICE),
        "coords": torch.rand(1, n, 2, generator=gen).to(DEVICE),
    }
    epoch_steps = -(-PAPER["windows"] // PAPER["batch"])
    print(
        f"\n2. Paper-size training epoch: N={n}, C={c}, M=J={m}, batch {PAPER['batch']}, "
        f"{PAPER['windows']} windows = {epoch_steps} steps ({steps} timed, scaled to the epoch)"
    )
    print(f"   {'model':<28} {'first step s':>12} {'ms/step':>9} {'epoch s':>9}")
    epoch = {}
    static = {"neighbours": "static"}  # no search of hidden clouds (docs/design.md)
    runs = [  # label, model, precision, how it runs (eager | compile [mode] | graph), model keys
        ("cloudlstm", "cloudlstm", "fp32", "eager", {}),
        ("cloudlstm, passes kNN", "cloudlstm", "fp32", "eager", {}),
        ("cloudlstm tf32", "cloudlstm", "tf32", "eager", {}),
        ("cloudlstm bf16", "cloudlstm", "bf16", "eager", {}),
        ("cloudlstm compile", "cloudlstm", "fp32", "compile", {}),
        ("cloudlstm compile r-o bf16", "cloudlstm", "bf16", "compile reduce-overhead", {}),
        ("cloudlstm graph", "cloudlstm", "fp32", "graph", {}),
        ("cloudlstm graph bf16", "cloudlstm", "bf16", "graph", {}),
        ("cloudlstm static", "cloudlstm", "fp32", "eager", static),
        ("cloudlstm static bf16", "cloudlstm", "bf16", "eager", static),
        ("cloudlstm static graph bf16", "cloudlstm", "bf16", "graph", static),
        ("convlstm", "convlstm", "fp32", "eager", {}),
        ("convlstm tf32", "convlstm", "tf32", "eager", {}),
        ("convlstm bf16", "convlstm", "bf16", "eager", {}),
        ("convlstm graph bf16", "convlstm", "bf16", "graph", {}),
    ]
    runs = [
        run
        for run in runs
        if (not select or any(part in run[0] for part in select))
        and not any(part in run[0] for part in skip)
    ]
    flops, kernels = {}, {}
    default_algorithm = knn_triton.DEFAULT_ALGORITHM
    for label, name, precision, mode, keys in runs:
        if mode == "graph" and DEVICE != "cuda":
            print(f"   {label:<28} (CUDA graphs: CUDA only)")
            continue
        torch.manual_seed(0)
        tf32 = precision == "tf32"  # TensorFloat-32 matmuls: torch's "high" precision
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
        knn_triton.DEFAULT_ALGORITHM = "passes" if "passes" in label else default_algorithm
        model = model_for_shape(name, num_channels=c, input_steps=m, output_steps=m, **keys)
        model = model.to(DEVICE)
        if name not in flops:
            flops[name] = step_flops(model, data)
            kernels[name] = step_kernels(model, data)
        if mode.startswith("compile"):  # "compile reduce-overhead": CUDA graphs by Inductor
            model.compile(mode=mode.partition(" ")[2] or None)
        try:
            first, per_step = train_epoch(model, data, steps, precision == "bf16", mode == "graph")
        except Exception as error:  # a variant that cannot run here is reported, not fatal
            print(f"   {label:<28} failed: {type(error).__name__}: {str(error)[:200]}")
            continue
        finally:
            del model
            free_cache()
        epoch[label] = per_step * epoch_steps
        print(f"   {label:<28} {first:12.1f} {per_step * 1e3:9.1f} {epoch[label]:9.1f}")
    knn_triton.DEFAULT_ALGORITHM = default_algorithm
    summarise_epochs(epoch, flops, kernels)


def summarise_epochs(
    epoch: dict[str, float], flops: dict[str, float], kernels: dict[str, int]
) -> None:
    """The paper's and the target's comparisons, from the runs that were timed."""
    paper_model = [k for k in epoch if k.startswith("cloudlstm") and "static" not in k]
    if paper_model:
        best_label = min(paper_model, key=epoch.get)
        best = epoch[best_label]
        print(
            f"\n   CloudLSTM epoch: best {best:.1f} s ({best_label}); paper (K40M) "
            f"{PAPER_EPOCH_S:.0f} s = {PAPER_EPOCH_S / best:.0f}x ours; target <= "
            f"{TARGET_EPOCH_S:.0f} s"
        )
    if DEVICE == "cuda" and {"cloudlstm", "cloudlstm, passes kNN"} <= set(epoch):
        print(
            f"   kNN kernel {knn_triton.DEFAULT_ALGORITHM!r} against 'passes', float32 epoch: "
            f"{epoch['cloudlstm, passes kNN'] / epoch['cloudlstm']:.2f}x faster"
        )
    static_runs = ", ".join(f"{k} {v:.1f} s" for k, v in epoch.items() if "static" in k)
    if static_runs:
        print(f"   With model.neighbours=static (not the paper's model): {static_runs}")
    for suffix in ("", " tf32", " bf16", " graph bf16"):
        if "cloudlstm" + suffix not in epoch or "convlstm" + suffix not in epoch:
            continue
        ratio = epoch["cloudlstm" + suffix] / epoch["convlstm" + suffix]
        print(
            f"   CloudLSTM / ConvLSTM epoch time{suffix or ' fp32'}: {ratio:.2f}x "
            f"(paper +18-21 %: 1.18-1.21x)"
        )
    if {"cloudlstm", "convlstm"} <= set(flops):
        print(
            f"   FLOPs per training step: CloudLSTM {flops['cloudlstm'] / 1e9:.0f} G, ConvLSTM "
            f"{flops['convlstm'] / 1e9:.0f} G, ratio {flops['cloudlstm'] / flops['convlstm']:.2f}x"
        )
    if DEVICE == "cuda" and {"cloudlstm", "convlstm"} <= set(kernels):
        print(
            f"   GPU kernels per forward + backward (float32, eager): CloudLSTM "
            f"{kernels['cloudlstm']}, ConvLSTM {kernels['convlstm']}"
        )


def city_coords(n: int) -> torch.Tensor:
    """(1, n, 2) positions of a seeded city-like layout."""
    return torch.as_tensor(city_layout(n, seed=0)).float()[None]


def bench_city_step(n: int, quick: bool) -> None:
    print(f"\n3. City-size training step: N={n}, C=2, M=J=6, K=9 (forward + backward + Adam)")
    print(f"   {'batch':>5} {'checkpointing':>13} {'s/step':>8} {'peak GPU GB':>12}")
    coords = city_coords(n).to(DEVICE)
    for batch in (1,) if quick else (1, 4):
        for checkpointing in (False, True):
            model = model_for_shape(
                "cloudlstm", num_points=n, num_channels=2, input_steps=6, output_steps=6,
                checkpointing=checkpointing,
            ).to(DEVICE)  # fmt: skip
            optimiser = torch.optim.Adam(model.parameters())
            x = torch.randn(batch, 6, n, 2, device=DEVICE)
            y = torch.randn(batch, 6, n, 2, device=DEVICE)

            def step(model=model, optimiser=optimiser, x=x, y=y) -> None:
                loss = torch.nn.functional.mse_loss(model(x, coords.expand(len(x), -1, -1)), y)
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()

            step()
            if DEVICE == "cuda":
                torch.cuda.reset_peak_memory_stats()
            seconds = min(sync_time(step) for _ in range(2))
            peak = torch.cuda.max_memory_allocated() / 2**30 if DEVICE == "cuda" else math.nan
            print(f"   {batch:>5} {str(checkpointing):>13} {seconds:8.2f} {peak:12.2f}")
            del model, optimiser
            free_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=219, help="timed steps per epoch run")
    parser.add_argument("--large-points", type=int, default=13000)
    parser.add_argument("--quick", action="store_true", help="few steps, small sizes")
    parser.add_argument("--only", choices=["knn", "epoch", "city"], default=None)
    parser.add_argument("--device", default="cuda", help="cpu: smoke-check the script")
    parser.add_argument(
        "--runs", default="", help="epoch runs to time: comma-separated parts of their labels"
    )
    parser.add_argument("--skip", default="", help="epoch runs not to time, as --runs")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    os.environ.setdefault("PROJECT_ROOT", str(ROOT))  # conf/paths reads it
    if DEVICE == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("bench_gpu.py needs a CUDA GPU (torch.cuda.is_available() is False).")
        props = torch.cuda.get_device_properties(0)
        print(
            f"{props.name}, {props.total_memory / 2**30:.0f} GiB, torch {torch.__version__}, "
            f"CUDA {torch.version.cuda}"
        )
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 here
    torch.backends.cudnn.allow_tf32 = False
    if args.only in (None, "knn"):
        bench_knn(args.quick)
    if args.quick:  # a smoke check: small batches, few windows
        PAPER.update(batch=4, windows=64)
    if args.only in (None, "epoch"):
        parts = {key: [p for p in getattr(args, key).split(",") if p] for key in ("runs", "skip")}
        bench_paper_epoch(5 if args.quick else args.steps, parts["runs"], parts["skip"])
    if args.only in (None, "city"):
        bench_city_step(2000 if args.quick else args.large_points, args.quick)


if __name__ == "__main__":
    main()
