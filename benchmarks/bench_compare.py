"""How long ``python -m cloudlstm.cli.compare DIR`` takes to print a table, and where the
time goes: the start (imports) and the reading of the runs' configs.

    python benchmarks/bench_compare.py [DIR] [--repeats 5]

DIR defaults to docs/results (every committed run). Prints, each as a median of
``--repeats`` in one run of this script:

* the whole command in a fresh interpreter, as a shell starts it, and the same command
  after importing torch and matplotlib first (what its start cost when the metric
  declarations came with torch and the plots were imported for every table);
* reading the runs (``find_runs``) with configs already in today's form taken as they are,
  and with every config upgraded through a DictConfig; with libyaml's parser and with
  PyYAML's pure-Python one.

Run it on quiet cores.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from cloudlstm.cli.arguments import at_least_one
from cloudlstm.compare import runs
from cloudlstm.rundir import old_configs

ROOT = Path(__file__).resolve().parents[1]
COMMAND = (
    "import runpy, sys\n"
    "{preload}"
    "sys.argv = ['compare', sys.argv[1], '--include-evals']\n"
    "runpy.run_module('cloudlstm.cli.compare', run_name='__main__')\n"
)
PRELOADS = {"as it is": "", "torch + matplotlib first": "import torch, matplotlib.pyplot\n"}


def median_seconds(work: Callable[[], object], repeats: int) -> float:
    """The median wall time of ``work()`` over ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def whole_command(folder: Path, preload: str) -> None:
    """``compare folder`` in a fresh interpreter; its table is thrown away."""
    code = COMMAND.format(preload=preload)
    subprocess.run([sys.executable, "-c", code, str(folder)], check=True, stdout=subprocess.DEVNULL)


def read_runs(folder: Path, shortcut: bool, loader: type) -> None:
    """``find_runs(folder)`` with or without today's configs taken as they are, and with the
    given YAML loader."""
    keep_shortcut, keep_loader = old_configs._already_current, runs.YAML_LOADER
    if not shortcut:
        old_configs._already_current = lambda config: False
    runs.YAML_LOADER = loader
    try:
        runs.find_runs([folder], include_evals=True)
    finally:
        old_configs._already_current, runs.YAML_LOADER = keep_shortcut, keep_loader


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, default=ROOT / "docs" / "results")
    parser.add_argument("--repeats", type=at_least_one, default=5)
    args = parser.parse_args()
    count = len(runs.find_runs([args.folder], include_evals=True))
    print(f"{count} runs under {args.folder}; medians of {args.repeats}")

    whole = {
        name: median_seconds(lambda p=preload: whole_command(args.folder, p), args.repeats)
        for name, preload in PRELOADS.items()
    }
    for name, seconds in whole.items():
        print(f"  the command, {name}: {seconds:.2f} s")
    print(f"  ratio: {whole['as it is'] / whole['torch + matplotlib first']:.2f}")

    cases = {
        "today's configs as they are, libyaml": (True, runs.YAML_LOADER),
        "every config upgraded, libyaml": (False, runs.YAML_LOADER),
        "today's configs as they are, pure-Python YAML": (True, yaml.SafeLoader),
    }
    reading = {
        name: median_seconds(lambda c=case: read_runs(args.folder, *c), args.repeats)
        for name, case in cases.items()
    }
    fastest = reading["today's configs as they are, libyaml"]
    for name, seconds in reading.items():
        print(f"  reading the runs, {name}: {seconds:.2f} s ({seconds / fastest:.1f}x)")


if __name__ == "__main__":
    main()
