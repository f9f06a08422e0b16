"""Forecast latency of CloudLSTM per sample at the air-quality size, at batch 1 and 32.

    python benchmarks/bench_inference.py [--repeats 5] [--threads N]

The model is conf/model/cloudlstm.yaml as configured (the paper's K=9, 36 hidden channels,
2 layers) for the Urban Air shape: N = 274 stations, C = 6 pollutants, M = J = 12 steps, 2-D
coordinates. Weights and inputs are random: the cost of a forward pass does not depend on
them. Prints the best wall time per sample (one warm-up, then round-robin repeats, see
``bench_dconv.timed_together``) on the CPU, and on CUDA when there is a GPU, with the ratio
to the targets: 30 ms per sample at batch 32 on a CPU, and the paper's < 0.3 s per sample
on a GPU.

It also prints the forward pass's floating-point operations per sample (torch's
``FlopCounterMode``: all of them are the DConv weightings' matrix products) and the time
they take at this machine's speed for one such product (a ``(B*N, U*K*F) @ (U*K*F, 4*U*F)``
matmul of the first cell at batch 32): the floor no implementation of this model can beat
on this device.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
from bench_dconv import timed_together
from torch.utils.flop_counter import FlopCounterMode

from cloudlstm.cli.arguments import at_least_one
from cloudlstm.cli.models_table import model_for_shape
from cloudlstm.models.build import count_parameters
from cloudlstm.nn import onednn_matmul

ROOT = Path(__file__).resolve().parents[1]
SHAPE = {"points": 274, "channels": 6, "input_steps": 12, "output_steps": 12, "dims": 2}
# model_for_shape's keyword for each entry of SHAPE
SIZES = {
    "num_points": "points",
    "num_channels": "channels",
    "input_steps": "input_steps",
    "output_steps": "output_steps",
    "coord_features": "dims",
}
BATCHES = (1, 32)
TARGET_MS = {"cpu": 30.0, "cuda": 300.0}  # per sample at batch 32; GPU: the paper's 0.3 s


def build_model() -> torch.nn.Module:
    """CloudLSTM from conf/model/cloudlstm.yaml, sized for the Urban Air data."""
    os.environ.setdefault("PROJECT_ROOT", str(ROOT))  # conf/paths reads it
    sizes = {key: SHAPE[name] for key, name in SIZES.items()}
    return model_for_shape("cloudlstm", **sizes).eval()


@torch.no_grad()
def ms_per_sample(model: torch.nn.Module, device: str, repeats: int) -> dict[int, float]:
    """Best forward time per sample, in ms, at each batch size of BATCHES."""
    model = model.to(device)
    calls = {}
    for batch in BATCHES:
        x = torch.randn(batch, SHAPE["input_steps"], SHAPE["points"], SHAPE["channels"])
        coords = torch.rand(batch, SHAPE["points"], SHAPE["dims"])
        x, coords = x.to(device), coords.to(device)

        def forward(x=x, coords=coords) -> None:
            model(x, coords)
            if device == "cuda":
                torch.cuda.synchronize()

        calls[batch] = forward
    best = timed_together({str(b): fn for b, fn in calls.items()}, repeats)
    return {b: best[str(b)] / b for b in BATCHES}


@torch.no_grad()
def flops_per_sample(model: torch.nn.Module) -> float:
    """Floating-point operations of one forward pass at batch 1."""
    x = torch.randn(1, SHAPE["input_steps"], SHAPE["points"], SHAPE["channels"])
    coords = torch.rand(1, SHAPE["points"], SHAPE["dims"])
    with FlopCounterMode(display=False) as counter:
        model.cpu()(x, coords)
    return float(counter.get_total_flops())


def matmul_gflops(model: torch.nn.Module, device: str, repeats: int) -> float:
    """This device's speed on the cells' matrix product at batch 32, in GFLOP/s."""
    hidden, k, feats = model.embed.out_channels, model.k, 1 + SHAPE["dims"]
    rows, inner, cols = 32 * SHAPE["points"], 2 * hidden * k * feats, 4 * hidden * feats
    a = torch.randn(rows, inner, device=device)
    b = torch.randn(inner, cols, device=device)

    def product() -> None:
        onednn_matmul.addmm(None, a, b)  # as DConv runs it (oneDNN on x86 CPUs)
        if device == "cuda":
            torch.cuda.synchronize()

    seconds = timed_together({"mm": product}, repeats)["mm"] / 1000
    return 2 * rows * inner * cols / seconds / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=at_least_one, default=5)
    parser.add_argument("--threads", type=at_least_one, default=None, help="torch CPU threads")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_model()
    params = count_parameters(model)
    print(
        f"CloudLSTM (K={model.k}, {params:,} parameters), N={SHAPE['points']}, "
        f"C={SHAPE['channels']}, M=J={SHAPE['input_steps']}; CPU threads: "
        f"{torch.get_num_threads()}"
    )
    flops = flops_per_sample(model)
    print(f"forward: {flops / 1e9:.1f} GFLOP per sample")
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        gflops = matmul_gflops(model, device, args.repeats)
        floor_ms = flops / gflops / 1e6
        print(f"{device:4s} matmul speed {gflops:.0f} GFLOP/s: floor {floor_ms:.1f} ms/sample")
        times = ms_per_sample(model, device, args.repeats)
        target = TARGET_MS[device]
        for batch, ms in times.items():
            print(
                f"{device:4s} batch {batch:2d}: {ms:8.2f} ms/sample "
                f"({ms / target:.2f} x the {target:g} ms target, {ms / floor_ms:.2f} x the floor)"
            )


if __name__ == "__main__":
    main()
