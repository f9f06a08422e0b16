"""CPU time per training epoch of each model of the paper's comparison, on one data set.

    python benchmarks/bench_epoch_time.py [--data beijing] [--batches 20] [--models ...]

Each model trains two short epochs of ``--batches`` batches (``python train.py`` in a fresh
process, no validation, no checkpoints); the second epoch's time, free of first-call costs
such as numba compilation, is scaled to the data set's full epoch (training windows /
batch size). Prints seconds per epoch and the ratio to ConvLSTM's, the paper's runner-up,
whose CloudLSTM epoch took +18-21 % of ConvLSTM's on a GPU. Run it on an idle machine.

Next to each time it prints the FLOPs of one training step (forward + backward at the
run's batch size and data shape, torch's ``FlopCounterMode``: matrix products and
convolutions) and their ratio to ConvLSTM's, and the speed the model reaches (GFLOP/s):
where a model's time ratio exceeds its FLOP ratio, it spends its time on something else
than arithmetic (neighbour search, gathers, memory traffic).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import yaml
from flops import rnn_layer_flops  # noqa: F401 (registers the RNN layers' FLOP formulas)
from torch.utils.flop_counter import FlopCounterMode

from cloudlstm.cli.arguments import at_least_one
from cloudlstm.cli.models_table import model_for_shape

ROOT = Path(__file__).resolve().parents[1]
MODELS = [
    "lstm",
    "knn_lstm",
    "convlstm",
    "predrnnpp",
    "stgcn",
    "cloudcnn",
    "cloudlstm_k3",
    "cloudlstm_k6",
    "cloudlstm",
    "cloudgru",
    "attention_cloudlstm",
]


def epoch_seconds(model: str, data: str, batches: int, tmp: Path) -> tuple[float, int]:
    """Warm seconds per training batch of ``model`` and the full epoch's batch count."""
    run_dir = tmp / model
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    env.update(PROJECT_ROOT=str(ROOT))  # OMP_WAIT_POLICY as the caller has it
    cmd = [
        sys.executable,
        "train.py",
        f"data={data}",
        f"model={model}",
        "trainer=cpu",
        "trainer.max_epochs=2",
        f"trainer.limit_train_batches={batches}",
        "trainer.limit_val_batches=0",
        "trainer.enable_progress_bar=false",
        "test=false",
        "scheduler=null",  # ReduceLROnPlateau needs the validation this skips
        "callbacks=none",
        "+callbacks.epoch_timer._target_=cloudlstm.engine.callbacks.EpochTimer",
        "logger=csv",
        f"hydra.run.dir={run_dir}",
        f"paths.data_dir={tmp / 'data'}",
    ]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
    with next(run_dir.glob("csv/version_*/metrics.csv")).open() as f:
        rows = csv.DictReader(f)
        times = [float(r["perf/epoch_time_s"]) for r in rows if r["perf/epoch_time_s"]]
    summary = json.loads((run_dir / "data_summary.json").read_text())
    batch_size = yaml.safe_load((run_dir / "config.yaml").read_text())["data"]["batch_size"]
    full = math.ceil(summary["windows"]["train"] / batch_size)
    return times[-1] / batches, full


def step_gflops(model: str, run_dir: Path) -> float:
    """GFLOPs of one training step of ``model`` as the run in ``run_dir`` trained it: its
    data's shapes and batch size (weights and values random: they do not change the count)."""
    batch = yaml.safe_load((run_dir / "config.yaml").read_text())["data"]["batch_size"]
    data = json.loads((run_dir / "data_summary.json").read_text())
    info = {key: data[key] for key in ("num_points", "num_channels", "input_steps")}
    info.update(output_steps=data["output_steps"], coord_features=data["num_dims"])
    torch.manual_seed(0)
    net = model_for_shape(model, steps_per_day=data["steps_per_day"], **info)
    shape = (batch, info["input_steps"], info["num_points"], info["num_channels"])
    coords = torch.rand(batch, info["num_points"], info["coord_features"])
    with FlopCounterMode(display=False) as counter:
        net(torch.randn(shape), coords).square().mean().backward()
    return counter.get_total_flops() / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="beijing")
    parser.add_argument("--batches", type=at_least_one, default=20)
    parser.add_argument("--models", nargs="*", default=MODELS)
    args = parser.parse_args()
    seconds, gflops, speed = {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            per_batch, full = epoch_seconds(model, args.data, args.batches, Path(tmp))
            seconds[model] = per_batch * full
            gflops[model] = step_gflops(model, Path(tmp) / model)
            speed[model] = gflops[model] / per_batch
            print(f"  {model}: {1000 * per_batch:.0f} ms/batch x {full} batches", flush=True)
    base = "convlstm" if "convlstm" in seconds else None
    print(
        f"\n{'model':22s} {'s/epoch':>9s} {'time ratio':>11s} "
        f"{'GFLOP/step':>11s} {'FLOP ratio':>11s} {'GFLOP/s':>8s}"
    )
    for model in seconds:
        time_ratio = f"{seconds[model] / seconds[base]:11.2f}" if base else " " * 11
        flop_ratio = f"{gflops[model] / gflops[base]:11.2f}" if base else " " * 11
        print(
            f"{model:22s} {seconds[model]:9.0f} {time_ratio} {gflops[model]:11.1f} "
            f"{flop_ratio} {speed[model]:8.1f}"
        )
    if base:
        print("\n(ratios against convlstm, the paper's runner-up)")


if __name__ == "__main__":
    main()
