"""CloudLSTM on a GPU: neighbour search, paper-size epoch, Beijing-size and city-size step.

    python benchmarks/bench_gpu.py [--steps 219] [--beijing-steps 200] [--large-points 13000]
        [--quick] [--only knn|epoch|beijing|city] [--runs LABEL,...] [--skip LABEL,...]
        [--labels LABEL,...] [--json results.json] [--device cpu]

Measured in one run on the first CUDA device (all timings synchronise the device):

1. Neighbour search on the device: the Triton kernels, ``sorted`` (the default on CUDA up
   to 2,048 points; timed up to 16,384 to find where it meets the cell list), ``insert``
   and ``passes`` (module doc of nn/knn_triton.py), the cell-list search (the default above)
   and chunked brute force, at the paper's size (B*U = 32 x 72 clouds of 274 points; a
   model's call searches 32 x 36) and at city size.
2. A paper-size training epoch: air quality, cluster A, N = 274 stations, C = 6, M = J =
   12, batch 32, 7,000 training windows (219 steps: forward, MSE, backward, Adam step),
   for CloudLSTM (conf/model/cloudlstm.yaml: K = 9, 36 channels, 2 layers) and for ConvLSTM
   (conf/model/convlstm.yaml) on the same windows, in float32, in bf16 autocast, CloudLSTM
   with ``torch.compile`` (the forward is one graph, its searches operators in it; also
   ``mode="reduce-overhead"``, r-o: that graph and its backward replayed as CUDA graphs;
   ``auto``: what ``model.compile=auto`` chooses here) and with the former kNN kernel
   (``passes``), and whole training steps captured in one CUDA graph. ``--runs
   compile,graph`` times only the runs whose label contains one of those, ``--skip
   compile`` all but those (in sections 2 and 3). Windows are random values at fixed random station
   positions, resident on the GPU: this is the model's cost, not the data loader's.
   The paper reports 316 s per CloudLSTM epoch on a K40M, and CloudLSTM at +18-21 % of
   ConvLSTM's epoch time; the FLOP ratio of the two steps is printed beside our time ratio.
   First, the device time of one CloudLSTM step in bf16 by part (benchmarks/device_profile.py:
   searches, matrix products, gathers, state update, the rest) and its costliest kernels
   (``--labels`` must name ``profile`` for it).
3. A Beijing-size training step (N = 12, C = 6, M = J = 12, batch 32: launch-bound on a
   GPU) for CloudLSTM K = 3 eager, as ``model.compile=auto`` runs it (reduce-overhead on
   CUDA), and captured whole in one CUDA graph, in float32 and bf16; ConvLSTM and STGCN
   beside it. The target: a captured CloudLSTM step of at most 15 ms.
4. A city-size training step: N = 13,000 points (``layouts.city_layout``), C = 2,
   M = J = 6, K = 9, batch 1 and 4, with and without
   ``checkpointing``: time and peak GPU memory (``torch.cuda.max_memory_allocated``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from device_profile import step_parts
from layouts import city_layout
from torch.utils.flop_counter import FlopCounterMode

from cloudlstm.cli.arguments import at_least_one
from cloudlstm.cli.models_table import model_for_shape
from cloudlstm.models.capture import RunDevice, auto_compile
from cloudlstm.nn import knn_triton
from cloudlstm.nn.knn import knn

ROOT = Path(__file__).resolve().parents[1]
PAPER = {"points": 274, "channels": 6, "steps": 12, "batch": 32, "windows": 7000}
DEVICE = "cuda"  # --device cpu: a smoke check of this script where there is no GPU
# Beijing's stations: 12 points, 6 pollutants, M = J = 12 hours, batch 32, K = 3
BEIJING = {"points": 12, "channels": 6, "steps": 12, "batch": 32, "windows": 2048}
TARGET_BEIJING_MS = 15.0  # the target of a captured Beijing-size CloudLSTM step
RESULTS: dict[str, Any] = {}  # every figure printed, by section: written to --json
LABELS: list[str] = []  # --labels: the runs of sections 2 and 3 to time, in this order
JSON_PATH: Path | None = None


def save_results() -> None:
    """Write :data:`RESULTS` to ``--json`` (after every run: a run cut short by a time limit
    leaves the figures measured before it)."""
    if JSON_PATH is not None:
        JSON_PATH.write_text(json.dumps(RESULTS, indent=2))


PAPER_EPOCH_S = 316.0  # CloudLSTM, air quality, one K40M (the paper's appendix)
TARGET_EPOCH_S = 16.0  # the project's target for the same epoch on an H100 (docs/performance.md)


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
    print("\n1. Neighbour search on the GPU, K = 9 (best of 5, ms; Triton: every algorithm):")
    print(
        f"   {'clouds x N':>18} {'sorted':>8} {'insert':>8} {'passes':>8} {'cell list':>10} "
        f"{'brute force':>12}"
    )
    cases = [(32 * 72, 274), (32 * 36, 274), (4 * 72, 1000), (72, 2000), (72, 5000), (8, 13000)]
    if quick:  # the size the paper's model searches: each kernel autotunes, ~10 s each
        cases = cases[1:2]
    else:
        cases.append((4 * 72, 13000))
    if DEVICE != "cuda":  # a smoke check of the code on CPU, where these sizes take minutes
        cases = [(16, 274), (2, 1000)]
    section = RESULTS["knn_ms"] = {}
    for clouds, n in cases:
        coords = torch.rand(clouds, n, 2, device=DEVICE)
        t_cells = best_ms(lambda c=coords: knn(c, 9, method="cells"))
        triton = {name: "-" for name in knn_triton.ALGORITHMS}
        # insert and sorted also past MAX_POINTS (N work per query, not K N): where they
        # meet the cell list decides MAX_POINTS
        limits = {"passes": knn_triton.MAX_POINTS, "insert": 16384, "sorted": 16384}
        if knn_triton.triton_switch.ENABLED and DEVICE == "cuda":
            for name in triton:
                if n <= limits[name]:
                    ms = best_ms(lambda c=coords, a=name: knn_triton.knn_triton(c, 9, algorithm=a))
                    triton[name] = f"{ms:.2f}"
        brute_gb = clouds * 1024 * n * 12 / 1e9  # d2 + keys of one chunk of 1024 queries
        t_brute = None
        if brute_gb < 40:
            t_brute = best_ms(lambda c=coords: knn(c, 9, method="brute"), repeats=2)
            brute = f"{t_brute:12.1f}"
        else:
            brute = f"{'(' + format(brute_gb, '.0f') + ' GB)':>12}"
        print(
            f"   {clouds:>8} x {n:>7} {triton['sorted']:>8} {triton['insert']:>8} "
            f"{triton['passes']:>8} "
            f"{t_cells:10.1f} {brute}",
            flush=True,
        )
        section[f"{clouds}x{n}"] = {
            **{name: float(ms) for name, ms in triton.items() if ms != "-"},
            "cells": t_cells, "brute": t_brute,
        }  # fmt: skip
        save_results()


def train_step(
    model: torch.nn.Module,
    optimiser: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    coords: torch.Tensor,
    bf16: bool,
    graph: bool = False,
) -> None:
    """Forward, MSE, backward and the optimiser's step on windows ``x``, ``y`` ``(B, M, N,
    C)`` at positions ``coords (B, N, 2)``; gradients accumulate (the caller clears them)."""
    # no autocast weight cache under a graph: it would hold casts from the capture
    with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=bf16, cache_enabled=not graph):
        loss = torch.nn.functional.mse_loss(model(x, coords).float(), y)
    loss.backward()
    optimiser.step()


def profile_paper_step(data: dict[str, torch.Tensor], shape: dict[str, int]) -> None:
    """Where the device time of one paper-size CloudLSTM step in bf16 autocast goes
    (:mod:`device_profile`), printed and saved in the epoch's section; on CPU, float32."""
    torch.manual_seed(0)
    model = model_for_shape("cloudlstm", num_points=data["coords"].shape[1], **shape)
    model = model.to(DEVICE)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch = PAPER["batch"]
    x, y, coords = data["x"][:batch], data["y"][:batch], data["coords"].expand(batch, -1, -1)

    def step() -> None:
        optimiser.zero_grad(set_to_none=True)
        train_step(model, optimiser, x, y, coords, bf16=DEVICE == "cuda")
        synchronize()

    step(), step()  # autotuning, the allocator
    profile = RESULTS["paper_epoch"]["profile"] = step_parts(step, device=DEVICE == "cuda")
    ms = profile["ms"]
    parts = " + ".join(f"{part} {ms[part]:.1f}" for part in ms if part not in ("total", "unlinked"))
    what = "bf16, device ms" if DEVICE == "cuda" else "float32, CPU ms of the ops' own time"
    print(f"\n   Profile of a CloudLSTM step ({what}): {ms['total']:.1f} = {parts}")
    if "unlinked" in ms:
        print(f"   of which kernels tied to no op, placed by name: {ms['unlinked']:.1f} ms")
    for name, t in profile["top"]:
        print(f"     {t:8.2f}  {name}")
    save_results()


def train_epoch(
    model: torch.nn.Module,
    data: dict[str, torch.Tensor],
    steps: int,
    bf16: bool,
    graph: bool,
    batch: int,
) -> tuple[float, float]:
    """(seconds of the first step, seconds per step over ``steps`` steps after it), batches
    of ``batch`` windows of ``data``.

    ``graph``: the whole training step (forward, loss, backward, Adam) captured once in a CUDA
    graph and replayed per batch, as in PyTorch's "whole network capture": one launch per
    step instead of thousands, which is what a launch-bound model needs. The first step's
    time is then the warm-up and the capture.
    """
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=graph)
    x_all, y_all = data["x"], data["y"]
    coords = data["coords"].expand(batch, -1, -1)
    order = torch.randperm(len(x_all), device=DEVICE)
    within = torch.arange(batch, device=DEVICE)

    def batch_at(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        index = order[(i * batch + within) % len(order)]  # full batches: a graph's shapes
        return x_all[index], y_all[index]

    def forward_backward(x: torch.Tensor, y: torch.Tensor) -> None:
        train_step(model, optimiser, x, y, coords, bf16, graph)

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


def forward_backward_once(
    model: torch.nn.Module, data: dict[str, torch.Tensor], batch: int
) -> None:
    """One forward + backward at batch size ``batch``, gradients cleared after."""
    x = data["x"][:batch]
    model(x, data["coords"].expand(len(x), -1, -1)).square().mean().backward()
    model.zero_grad(set_to_none=True)


def step_flops(model: torch.nn.Module, data: dict[str, torch.Tensor], batch: int) -> float:
    """FLOPs of one training step at batch size ``batch`` (forward + backward)."""
    counter = FlopCounterMode(display=False)
    with counter:
        forward_backward_once(model, data, batch)
    return counter.get_total_flops()


def step_kernels(model: torch.nn.Module, data: dict[str, torch.Tensor], batch: int) -> int:
    """Device kernels one forward + backward at batch ``batch`` runs (torch.profiler's
    device events: what a launch-bound step pays for one by one; 0 on CPU)."""
    if DEVICE != "cuda":
        return 0
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        forward_backward_once(model, data, batch)
        synchronize()
    return sum(1 for event in prof.events() if event.device_type.name == "CUDA")


def random_windows(sizes: dict[str, int]) -> dict[str, torch.Tensor]:
    """Seeded random windows of ``sizes`` on the device: inputs and targets ``x``, ``y``
    ``(windows, steps, points, channels)`` and the points' positions ``coords (1, points, 2)``."""
    gen = torch.Generator().manual_seed(0)
    shape = (sizes["windows"], sizes["steps"], sizes["points"], sizes["channels"])
    return {
        "x": torch.randn(*shape, generator=gen).to(DEVICE),
        "y": torch.randn(*shape, generator=gen).to(DEVICE),
        "coords": torch.rand(1, sizes["points"], 2, generator=gen).to(DEVICE),
    }


def bench_paper_epoch(steps: int, select: list[str], skip: list[str]) -> None:
    """``select`` / ``skip``: time only the runs whose label contains one of / none of these."""
    n, c, m = PAPER["points"], PAPER["channels"], PAPER["steps"]
    data = random_windows(PAPER)
    epoch_steps = -(-PAPER["windows"] // PAPER["batch"])
    print(
        f"\n2. Paper-size training epoch: N={n}, C={c}, M=J={m}, batch {PAPER['batch']}, "
        f"{PAPER['windows']} windows = {epoch_steps} steps ({steps} timed, scaled to the epoch)"
    )
    static = {"neighbours": "static"}  # no search of hidden clouds (docs/design.md)
    runs = [  # label, model, precision, how it runs (time_runs), model keys
        ("cloudlstm", "cloudlstm", "fp32", "eager", {}),
        ("cloudlstm, passes kNN", "cloudlstm", "fp32", "eager", {}),
        ("cloudlstm tf32", "cloudlstm", "tf32", "eager", {}),
        ("cloudlstm bf16", "cloudlstm", "bf16", "eager", {}),
        ("cloudlstm compile", "cloudlstm", "fp32", "compile", {}),
        ("cloudlstm compile r-o bf16", "cloudlstm", "bf16", "compile reduce-overhead", {}),
        ("cloudlstm auto", "cloudlstm", "fp32", "auto", {}),
        ("cloudlstm graph", "cloudlstm", "fp32", "graph", {}),
        ("cloudlstm graph bf16", "cloudlstm", "bf16", "graph", {}),
        ("cloudlstm graph bf16 insert kNN", "cloudlstm", "bf16", "graph", {}),
        ("cloudlstm static", "cloudlstm", "fp32", "eager", static),
        ("cloudlstm static bf16", "cloudlstm", "bf16", "eager", static),
        ("cloudlstm static graph bf16", "cloudlstm", "bf16", "graph", static),
        ("convlstm", "convlstm", "fp32", "eager", {}),
        ("convlstm tf32", "convlstm", "tf32", "eager", {}),
        ("convlstm bf16", "convlstm", "bf16", "eager", {}),
        # no whole-step capture of a grid model: each forward maps the points to cells on
        # the host (NumPy, a cached mapping), which a CUDA graph cannot hold
    ]
    shape = {"num_channels": c, "input_steps": m, "output_steps": m}
    section = RESULTS["paper_epoch"] = {"epoch_steps": epoch_steps, "timed_steps": steps}
    if not LABELS or "profile" in LABELS:  # first: a compiling run after it may be cut short
        profile_paper_step(data, shape)
        print()
    print(f"   {'model':<28} {'first step s':>12} {'ms/step':>9} {'epoch s':>9}")
    timed, flops, kernels = time_runs(
        runs, data, shape, PAPER["batch"], steps, select, skip, section, epoch_steps
    )
    epoch = {label: run["epoch_s"] for label, run in timed.items() if "epoch_s" in run}
    summarise_epochs(epoch, flops, kernels)


def time_runs(
    runs: list[tuple[str, str, str, str, dict]],
    data: dict[str, torch.Tensor],
    shape: dict[str, int],
    batch: int,
    steps: int,
    select: list[str],
    skip: list[str],
    section: dict[str, Any],
    epoch_steps: int | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, float], dict[str, int]]:
    """Train each run of ``runs`` (label, model, precision, how it runs: eager | auto |
    compile [mode] | graph, model keys) for ``steps`` steps on ``data``: ``{label:
    {first_s, ms_per_step[, epoch_s]}}`` (or ``{failed}``, ``{skipped}``), and each model's
    FLOPs and kernels per forward + backward. ``auto`` is what ``model.compile=auto`` chooses for a
    run on this device. Each run is printed, and saved into ``section`` of the results, as
    it ends; with ``epoch_steps`` its epoch time too. ``select`` / ``skip``: time only the
    runs whose label contains one of / none of these."""
    if LABELS:  # these runs exactly, in this order
        runs = [run for label in LABELS for run in runs if run[0] == label]
    runs = [
        run
        for run in runs
        if (not select or any(part in run[0] for part in select))
        and not any(part in run[0] for part in skip)
    ]
    timed = section["runs"] = {}
    flops, kernels = section["gflop_per_step"], section["kernels_per_step"] = {}, {}
    default_algorithm = knn_triton.DEFAULT_ALGORITHM
    for label, name, precision, mode, keys in runs:
        if mode == "graph" and DEVICE != "cuda":
            print(f"   {label:<28} (CUDA graphs: CUDA only)")
            timed[label] = {"skipped": "CUDA graphs: CUDA only"}
            continue
        torch.manual_seed(0)
        tf32 = precision == "tf32"  # TensorFloat-32 matmuls: torch's "high" precision
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
        named = [a for a in knn_triton.ALGORITHMS if f"{a} kNN" in label]  # "... passes kNN"
        knn_triton.DEFAULT_ALGORITHM = named[0] if named else default_algorithm
        model = model_for_shape(name, num_points=data["coords"].shape[1], **shape, **keys)
        model = model.to(DEVICE)
        if name not in flops:  # GFLOP and device kernels per forward + backward
            flops[name] = step_flops(model, data, batch) / 1e9
            kernels[name] = step_kernels(model, data, batch)
        if mode == "auto":
            device = RunDevice(cuda=DEVICE == "cuda", devices=1)
            capture = auto_compile(model, data["coords"].shape[1], data["coords"].shape[2], device)
            mode = "compile " + capture.mode if capture.mode else "eager"
            print(f"   {label:<28} model.compile=auto: {mode} ({capture.why})")
        if mode.startswith("compile"):  # "compile reduce-overhead": CUDA graphs by Inductor
            model.compile(mode=mode.partition(" ")[2] or None)
        try:
            first, per_step = train_epoch(
                model, data, steps, precision == "bf16", mode == "graph", batch
            )
        except Exception as error:  # a variant that cannot run here is reported, not fatal
            print(f"   {label:<28} failed: {type(error).__name__}: {str(error)[:200]}")
            timed[label] = {"failed": f"{type(error).__name__}: {str(error)[:500]}"}
            save_results()
            continue
        finally:
            del model
            free_cache()
            torch._dynamo.reset()  # each compiled run compiles afresh, not from the last
        run = timed[label] = {"first_s": first, "ms_per_step": per_step * 1e3}
        line = f"   {label:<28} {first:12.1f} {per_step * 1e3:9.1f}"
        if epoch_steps:
            run["epoch_s"] = per_step * epoch_steps
            line += f" {run['epoch_s']:9.1f}"
        print(line, flush=True)
        save_results()
    knn_triton.DEFAULT_ALGORITHM = default_algorithm
    return timed, flops, kernels


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
    if {"cloudlstm graph bf16", "cloudlstm graph bf16 insert kNN"} <= set(epoch):
        ratio = epoch["cloudlstm graph bf16 insert kNN"] / epoch["cloudlstm graph bf16"]
        print(
            f"   kNN kernel {knn_triton.DEFAULT_ALGORITHM!r} against 'insert', bf16 captured "
            f"epoch: {ratio:.2f}x faster"
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
            f"   FLOPs per training step: CloudLSTM {flops['cloudlstm']:.0f} G, ConvLSTM "
            f"{flops['convlstm']:.0f} G, ratio {flops['cloudlstm'] / flops['convlstm']:.2f}x"
        )
    if DEVICE == "cuda" and {"cloudlstm", "convlstm"} <= set(kernels):
        print(
            f"   GPU kernels per forward + backward (float32, eager): CloudLSTM "
            f"{kernels['cloudlstm']}, ConvLSTM {kernels['convlstm']}"
        )


def bench_beijing_step(steps: int, select: list[str], skip: list[str]) -> None:
    """A training step at Beijing's size, launch-bound on a GPU: eager, as
    ``model.compile=auto`` runs it (reduce-overhead on CUDA), and whole-step captured."""
    n, c, m, batch = (BEIJING[key] for key in ("points", "channels", "steps", "batch"))
    data = random_windows(BEIJING)
    print(
        f"\n3. Beijing-size training step: N={n}, C={c}, M=J={m}, batch {batch}, "
        f"{steps} timed steps (target: CloudLSTM K = 3 captured <= {TARGET_BEIJING_MS:.0f} ms)"
    )
    print(f"   {'model':<28} {'first step s':>12} {'ms/step':>9}")
    runs = [
        ("cloudlstm_k3", "cloudlstm_k3", "fp32", "eager", {}),
        ("cloudlstm_k3 bf16", "cloudlstm_k3", "bf16", "eager", {}),
        ("cloudlstm_k3 auto", "cloudlstm_k3", "fp32", "auto", {}),
        ("cloudlstm_k3 auto bf16", "cloudlstm_k3", "bf16", "auto", {}),
        ("cloudlstm_k3 graph", "cloudlstm_k3", "fp32", "graph", {}),
        ("cloudlstm_k3 graph bf16", "cloudlstm_k3", "bf16", "graph", {}),
        ("convlstm", "convlstm", "fp32", "eager", {}),
        ("convlstm auto", "convlstm", "fp32", "auto", {}),
        ("stgcn", "stgcn", "fp32", "eager", {}),
    ]
    shape = {"num_channels": c, "input_steps": m, "output_steps": m}
    section = RESULTS["beijing_step"] = {"timed_steps": steps, "target_ms": TARGET_BEIJING_MS}
    timed, _, _ = time_runs(runs, data, shape, batch, steps, select, skip, section)
    cloud = {
        k: v["ms_per_step"]
        for k, v in timed.items()
        if k.startswith("cloudlstm_k3") and "ms_per_step" in v
    }
    if cloud:
        best = min(cloud, key=cloud.get)
        section["best"] = {"label": best, "ms_per_step": cloud[best]}
        print(
            f"\n   CloudLSTM K = 3 step: best {cloud[best]:.1f} ms ({best}); target <= "
            f"{TARGET_BEIJING_MS:.0f} ms: {'met' if cloud[best] <= TARGET_BEIJING_MS else 'missed'}"
        )
    save_results()


def city_coords(n: int) -> torch.Tensor:
    """(1, n, 2) positions of a seeded city-like layout."""
    return torch.as_tensor(city_layout(n, seed=0)).float()[None]


def bench_city_step(n: int, quick: bool) -> None:
    print(f"\n4. City-size training step: N={n}, C=2, M=J=6, K=9 (forward + backward + Adam)")
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
            RESULTS.setdefault("city_step", {})[f"batch {batch}, checkpointing {checkpointing}"] = {
                "points": n, "s_per_step": seconds, "peak_gb": None if peak != peak else peak,
            }  # fmt: skip
            save_results()
            del model, optimiser
            free_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=at_least_one, default=219, help="timed steps per epoch run")
    parser.add_argument(
        "--beijing-steps", type=at_least_one, default=200, help="timed Beijing steps"
    )
    parser.add_argument("--large-points", type=at_least_one, default=13000)
    parser.add_argument("--quick", action="store_true", help="few steps, small sizes")
    parser.add_argument("--only", choices=["knn", "epoch", "beijing", "city"], default=None)
    parser.add_argument("--device", default="cuda", help="cpu: smoke-check the script")
    parser.add_argument(
        "--runs", default="", help="runs to time: comma-separated parts of their labels"
    )
    parser.add_argument("--skip", default="", help="runs not to time, as --runs")
    parser.add_argument(
        "--labels", default="", help="runs to time: exactly these labels, in this order"
    )
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = parser.parse_args()
    global DEVICE, JSON_PATH
    DEVICE, JSON_PATH = args.device, args.json
    LABELS.extend(label.strip() for label in args.labels.split(",") if label.strip())
    os.environ.setdefault("PROJECT_ROOT", str(ROOT))  # conf/paths reads it
    RESULTS["device"] = "cpu"
    if DEVICE == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("bench_gpu.py needs a CUDA GPU (torch.cuda.is_available() is False).")
        props = torch.cuda.get_device_properties(0)
        RESULTS["device"] = f"{props.name}, {props.total_memory / 2**30:.0f} GiB"
    RESULTS["torch"], RESULTS["cuda"] = torch.__version__, torch.version.cuda
    print(f"{RESULTS['device']}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 here
    torch.backends.cudnn.allow_tf32 = False
    parts = {key: [p for p in getattr(args, key).split(",") if p] for key in ("runs", "skip")}
    if args.only in (None, "knn"):
        bench_knn(args.quick)
    quick_steps = 5 if DEVICE == "cuda" else 2
    if args.quick:  # a smoke check: small batches, few windows
        PAPER.update(batch=4, windows=64)
        BEIJING.update(batch=4, windows=64)
        if DEVICE != "cuda":  # and on CPU, a small cloud
            PAPER.update(points=24)
    if args.only in (None, "epoch"):
        steps = quick_steps if args.quick else args.steps
        bench_paper_epoch(steps, parts["runs"], parts["skip"])
    if args.only in (None, "beijing"):
        steps = quick_steps if args.quick else args.beijing_steps
        bench_beijing_step(steps, parts["runs"], parts["skip"])
    if args.only in (None, "city"):
        bench_city_step(2000 if args.quick else args.large_points, args.quick)
    save_results()


if __name__ == "__main__":
    main()
