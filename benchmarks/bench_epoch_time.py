"""CPU time per training epoch of each model of the paper's comparison, on one data set.

    python benchmarks/bench_epoch_time.py [--data beijing] [--batches 20] [--models ...]

Each model trains two short epochs of ``--batches`` batches (``python train.py`` in a fresh
process, no validation, no checkpoints); the second epoch's time, free of first-call costs
such as numba compilation, is scaled to the data set's full epoch (training windows /
batch size). Prints seconds per epoch and the ratio to ConvLSTM's, the paper's runner-up,
whose CloudLSTM epoch took +18-21 % of ConvLSTM's on a GPU. Run it on an idle machine.
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

import yaml

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
    env.update(OMP_WAIT_POLICY="PASSIVE", PROJECT_ROOT=str(ROOT))
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
        "+callbacks.epoch_timer._target_=cloudlstm.callbacks.EpochTimer",
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="beijing")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--models", nargs="*", default=MODELS)
    args = parser.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            per_batch, full = epoch_seconds(model, args.data, args.batches, Path(tmp))
            rows[model] = per_batch * full
            print(f"  {model}: {1000 * per_batch:.0f} ms/batch x {full} batches", flush=True)
    base = rows.get("convlstm")
    print(f"\n{'model':22s} {'s/epoch':>9s} {'vs convlstm':>12s}")
    for model, seconds in rows.items():
        ratio = f"{seconds / base:12.2f}" if base else ""
        print(f"{model:22s} {seconds:9.0f} {ratio}")


if __name__ == "__main__":
    main()
