"""How long a Python that has imported train.py's modules takes to end, with and without
``gc.freeze()`` before its end (what the programs do: src/cloudlstm/cli/scripts.py).

The interpreter's last garbage collections go through every object the imports made
(torch, Lightning, sympy...), to free memory the exit frees anyway; frozen objects are
left out of them.

    python benchmarks/bench_exit.py [--repeats 5]

Prints, for each mode, the median seconds from the program's last line to the end of its
process, and their ratio. Run it on quiet cores.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from cloudlstm.cli.arguments import at_least_one

PROGRAM = """
import gc, sys, time
import cloudlstm.cli.train, cloudlstm.cli.evaluate
if sys.argv[1] == "frozen":
    gc.freeze()
print(repr(time.time()), flush=True)
"""


def seconds_to_end(mode: str) -> float:
    """Seconds from the program's last line to the end of its process."""
    proc = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, mode], stdout=subprocess.PIPE, text=True
    )
    last_line = float(proc.stdout.readline())
    proc.wait()
    return time.time() - last_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=at_least_one, default=5)
    repeats = parser.parse_args().repeats
    medians = {}
    for mode in ("collected", "frozen"):
        medians[mode] = statistics.median(seconds_to_end(mode) for _ in range(repeats))
        ended = medians[mode]
        print(f"{mode:>9}: {ended:.2f} s from the last line to the end (median of {repeats})")
    print(f"frozen / collected: {medians['frozen'] / medians['collected']:.2f}")


if __name__ == "__main__":
    main()
