"""Cold vs cached load times of the data sources, on this machine.

    python benchmarks/bench_data_cache.py [--repeats 3] [--beijing-root DIR]

For each source: the cold load (generate or parse the raw files, then write the ``.npz``
cache, into a fresh temporary folder) and the best of ``--repeats`` cached loads by a new
loader object. The tests check *that* the cache is used (the rebuild is made to raise);
the times are here. The Beijing data is timed when its folder exists (default: the
``CLOUDLSTM_BEIJING_ROOT`` environment variable, else ``../shared/data/beijing_multisite``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cloudlstm.data.sources.beijing import BeijingSource
from cloudlstm.data.sources.mobile import SyntheticMobileTraffic
from cloudlstm.data.sources.synthetic import SyntheticAdvectionDiffusion

ROOT = Path(__file__).resolve().parents[1]


def sources(beijing_root: Path) -> dict[str, Callable[[Path], object]]:
    """Name -> a factory of a fresh loader caching under the given folder."""
    found = {
        # conf/data/synthetic.yaml's demo size
        "synthetic (32 points, 4 ch, 1000 steps)": lambda cache: SyntheticAdvectionDiffusion(
            num_points=32, num_channels=4, num_steps=1000, grid_size=48, cache_dir=cache
        ),
        # conf/data/mobile.yaml's demo size
        "mobile (100 antennas, 38 services, 14 days)": lambda cache: SyntheticMobileTraffic(
            num_antennas=100, num_services=38, num_days=14, cache_dir=cache
        ),
    }
    if beijing_root.is_dir():
        found["beijing (12 stations, 35,064 h)"] = lambda cache: BeijingSource(
            beijing_root, cache_dir=cache
        )
    return found


def measure(make: Callable[[Path], object], repeats: int) -> tuple[float, float]:
    """(cold, best cached) load time in seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        loader = make(Path(tmp))
        loader.load()
        cold = time.perf_counter() - start
        assert not loader.last_load_from_cache
        cached = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            loader = make(Path(tmp))
            loader.load()
            cached = min(cached, time.perf_counter() - start)
            assert loader.last_load_from_cache
    return cold, cached


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    default_root = os.environ.get(
        "CLOUDLSTM_BEIJING_ROOT", str(ROOT.parent / "shared" / "data" / "beijing_multisite")
    )
    parser.add_argument("--beijing-root", type=Path, default=Path(default_root))
    args = parser.parse_args()
    print(f"{'source':<46} {'cold (s)':>9} {'cached (s)':>11} {'ratio':>7}")
    for name, make in sources(args.beijing_root).items():
        cold, cached = measure(make, args.repeats)
        print(f"{name:<46} {cold:>9.3f} {cached:>11.4f} {cold / cached:>6.0f}x")


if __name__ == "__main__":
    main()
