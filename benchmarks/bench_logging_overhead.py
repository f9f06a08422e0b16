"""Wall-time cost of the W&B logging, figures and cost report on the default job.

    python benchmarks/bench_logging_overhead.py [--repeats 2] [-- extra train.py overrides]

Runs ``python train.py`` (what ``make train`` runs) in fresh processes, alternating the
variants so that drifts of the machine hit each alike, and prints each variant's best wall
time and its ratio to ``logger=none report.figures=false`` (no experiment logger, no
figures) and to ``logger=none``. Every run gets a fresh run directory; the data cache is
shared and warmed first, so data generation is not timed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cloudlstm.cli.arguments import at_least_one

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {
    "default (wandb, figures)": [],
    "logger=none": ["logger=none"],
    "logger=none, no figures": ["logger=none", "report.figures=false"],
}


def run(overrides: list[str], run_dir: Path, data_dir: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    env.update(OMP_WAIT_POLICY="PASSIVE", WANDB_SILENT="true", PROJECT_ROOT=str(ROOT))
    cmd = [
        sys.executable,
        "train.py",
        *overrides,
        f"hydra.run.dir={run_dir}",
        f"paths.data_dir={data_dir}",
    ]
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=at_least_one, default=2)
    parser.add_argument("overrides", nargs="*", help="extra train.py overrides for every run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        data_dir = tmp_path / "data"
        warm = ["trainer.max_epochs=1", "trainer.limit_train_batches=1", "logger=none"]
        run([*warm, *args.overrides], tmp_path / "warm", data_dir)  # builds the data cache
        times: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for rep in range(args.repeats):
            for i, (name, extra) in enumerate(VARIANTS.items()):
                seconds = run([*extra, *args.overrides], tmp_path / f"{rep}-{i}", data_dir)
                times[name].append(seconds)
                print(f"  repeat {rep}: {name}: {seconds:.1f} s", flush=True)
    best = {name: min(values) for name, values in times.items()}
    base, no_logger = best["logger=none, no figures"], best["logger=none"]
    print(f"\n{'variant':28s} {'best s':>8s} {'vs bare':>8s} {'vs logger=none':>15s}")
    for name, seconds in best.items():
        print(f"{name:28s} {seconds:8.1f} {seconds / base:8.3f} {seconds / no_logger:15.3f}")


if __name__ == "__main__":
    main()
