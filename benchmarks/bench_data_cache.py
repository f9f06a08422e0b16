"""Data cache: cold vs cached load times, and memory-mapped vs in-memory windows.

    python benchmarks/bench_data_cache.py [--repeats 3] [--beijing-root DIR]
                                          [--stream-mb 200] [--chunk-mb 8] [--seconds 3]

Part 1, for each source: the cold load (generate or parse the raw files, then write the
cache, into a fresh temporary folder) and the best of ``--repeats`` cached loads by a new
loader object. The tests check *that* the cache is used (the rebuild is made to raise);
the times are here. The Beijing data is timed when its folder exists (default: the
``CLOUDLSTM_BEIJING_ROOT`` environment variable, else ``../shared/data/beijing_multisite``).

Part 2, a stream of ``--stream-mb`` MB of values (a cheap generator writing ``--chunk-mb``
chunks): the peak memory NumPy allocates (``tracemalloc``) while it is prepared (made,
cached, checked, the scaler fitted, the datamodule set up), and the training windows read
per second (shuffled batches of 32, for ``--seconds``) when the datamodule reads them from
the memory-mapped cache (just written, so from the page cache) or from the same stream held
in memory. Cold reads from disk are not measured (that needs dropping the page cache).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np

from cloudlstm.cli.arguments import at_least_one, positive_number
from cloudlstm.data import chunks
from cloudlstm.data.cache import CachedSource
from cloudlstm.data.pipeline.datamodule import PointCloudDataModule
from cloudlstm.data.sources.beijing import BeijingSource
from cloudlstm.data.sources.mobile import SyntheticMobileTraffic
from cloudlstm.data.sources.synthetic import SyntheticAdvectionDiffusion
from cloudlstm.data.stream import PointCloudStream

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


class Waves(CachedSource):
    """A cheap stream of any size (sines, a few gaps), made and cached a chunk at a time."""

    cache_prefix = "waves"
    name = "waves"

    def __init__(self, num_steps: int, num_points: int, num_channels: int, cache_dir: Path | None):
        self.shape = (num_steps, num_points, num_channels)
        self.cache_dir = cache_dir

    def config(self) -> dict:
        return {"shape": list(self.shape)}

    def generate(self, cache_path: Path | None = None) -> PointCloudStream:
        t, n, c = self.shape
        phase = np.random.default_rng(0).uniform(0, 6.3, size=(n, c)).astype(np.float32)
        with self.writer(cache_path, t, n, c) as out:
            for a, b in out.chunks():
                steps = np.arange(a, b, dtype=np.float32)[:, None, None]
                values = np.sin(steps / 24.0 + phase)
                values[:, 0, 0] = np.nan  # one point never sees channel 0
                out.write(a, values)
            return out.finish(
                coords=np.random.default_rng(1).uniform(size=(n, 2)),
                channel_names=[f"c{i}" for i in range(c)],
                point_ids=[f"p{i}" for i in range(n)],
                name=self.name,
            )


def prepare(source: Waves) -> tuple[PointCloudDataModule, float]:
    """The datamodule set up on ``source``, and the peak MB NumPy allocated meanwhile."""
    tracemalloc.start()
    try:
        dm = PointCloudDataModule(source, input_steps=12, output_steps=12, batch_size=32)
        dm.prepare_data()
        dm.setup()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return dm, peak / 2**20


def windows_per_second(dm: PointCloudDataModule, seconds: float) -> float:
    """Training windows per second through the shuffled train loader."""
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for batch in dm.train_dataloader():
            count += len(batch["x"])
            if time.perf_counter() - start >= seconds:
                break
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=at_least_one, default=3)
    default_root = os.environ.get(
        "CLOUDLSTM_BEIJING_ROOT", str(ROOT.parent / "shared" / "data" / "beijing_multisite")
    )
    parser.add_argument("--beijing-root", type=Path, default=Path(default_root))
    parser.add_argument("--stream-mb", type=positive_number, default=200.0, help="values of part 2")
    parser.add_argument("--chunk-mb", type=positive_number, default=8.0, help="chunks of part 2")
    parser.add_argument(
        "--seconds", type=positive_number, default=3.0, help="reading time per case"
    )
    args = parser.parse_args()
    print(f"{'source':<46} {'cold (s)':>9} {'cached (s)':>11} {'ratio':>7}")
    for name, make in sources(args.beijing_root).items():
        cold, cached = measure(make, args.repeats)
        print(f"{name:<46} {cold:>9.3f} {cached:>11.4f} {cold / cached:>6.0f}x")

    chunks.CHUNK_BYTES = int(args.chunk_mb * 2**20)
    n, c = 256, 4
    steps = max(100, int(args.stream_mb * 2**20 / (n * c * 4)))
    print(
        f"\n{n} points x {c} channels x {steps} steps = {steps * n * c * 4 / 2**20:.0f} MB of "
        f"values, {args.chunk_mb:g} MB chunks"
    )
    print(f"{'windows read from':<46} {'prep. peak (MB)':>15} {'windows/s':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for label, cache in (("the memory-mapped cache", Path(tmp)), ("memory", None)):
            dm, peak = prepare(Waves(steps, n, c, cache))
            rate = windows_per_second(dm, args.seconds)
            print(f"{label:<46} {peak:>15.1f} {rate:>10.0f}")
            del dm


if __name__ == "__main__":
    main()
