"""The stream cache on disk: memory-mapped windows, chunked writing, bounded preparation memory."""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import socket
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import rebuilding_fails
from test_data import make_stream

from cloudlstm.data import (
    PointCloudDataModule,
    PointCloudStream,
    StandardScaler,
    SyntheticAdvectionDiffusion,
    SyntheticMobileTraffic,
    WindowDataset,
    chunks,
)
from cloudlstm.data import cache as cache_module
from cloudlstm.data.cache import (
    CachedSource,
    StreamWriter,
    load_stream_cache,
    save_stream_cache,
)
from cloudlstm.data.pipeline.summary import values_digest

MB = 1 << 20


def cached_copy(stream: PointCloudStream, folder: Path) -> PointCloudStream:
    cached = save_stream_cache(folder / "toy", stream, "k")
    assert cached is not None and cached.memory_mapped
    return cached


def items(dataset: WindowDataset) -> list[dict[str, torch.Tensor]]:
    return [dataset[i] for i in range(len(dataset))]


def assert_same_items(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            assert x[key].dtype == y[key].dtype
            torch.testing.assert_close(x[key], y[key], rtol=0, atol=0)


# ---------------------------------------------------------------- windows from the memory map
@pytest.mark.parametrize("score_filled", [False, True])
def test_memmap_windows_equal_the_in_memory_ones_and_normalising_first(tmp_path, score_filled):
    stream = make_stream(t=300, n=6, c=3, missing=0.2)
    stream.values[5:9, 2, 1] = 7.5  # filled (finite, mask False): kept, scored only when asked
    stream.mask[5:9, 2, 1] = False
    cached = cached_copy(stream, tmp_path)
    args = dict(input_steps=5, output_steps=3, batch_size=4, score_filled=score_filled)
    memory = PointCloudDataModule(stream, **args)
    mapped = PointCloudDataModule(cached, **args)
    memory.setup()
    mapped.setup()
    np.testing.assert_array_equal(mapped.scaler.mean, memory.scaler.mean)
    np.testing.assert_array_equal(mapped.scaler.std, memory.scaler.std)
    # what the datamodule did before reading windows lazily: one normalised float32 copy
    normed = stream.values - memory.scaler.mean.astype(np.float32)
    normed /= memory.scaler.std.astype(np.float32)
    np.nan_to_num(normed, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    observed = np.isfinite(stream.values) if score_filled else stream.mask
    for split in ("train", "val", "test"):
        ds = mapped.datasets[split]
        assert isinstance(ds.values, np.memmap) and ds.values is cached.values  # no copy
        assert_same_items(items(ds), items(memory.datasets[split]))
        for i in (0, len(ds) - 1):
            t0, t1, t2 = ds.time_range(i)
            item = ds[i]
            np.testing.assert_array_equal(item["x"].numpy(), normed[t0:t1])
            np.testing.assert_array_equal(item["y"].numpy(), normed[t1:t2])
            np.testing.assert_array_equal(item["x_mask"].numpy(), observed[t0:t1])
            np.testing.assert_array_equal(item["y_mask"].numpy(), observed[t1:t2])


def test_seasonal_windows_from_the_memmap_equal_the_in_memory_ones(tmp_path):
    stream = make_stream(t=400, n=4, c=2, missing=0.1)
    cached = cached_copy(stream, tmp_path)
    scaler = StandardScaler().fit(stream.values[:300], stream.mask[:300])
    offsets = [-48, -24, -3, -2, -1]  # a gather, not a slice
    args = dict(input_steps=5, output_steps=2, input_offsets=offsets, start=10, scaler=scaler)
    coords = np.zeros((4, 2))
    a = WindowDataset(stream.values, stream.mask, coords, **args)
    b = WindowDataset(cached.values, cached.mask, coords, **args)
    assert_same_items(items(a), items(b))
    mean, std = scaler.mean.astype(np.float32), scaler.std.astype(np.float32)
    normed = np.nan_to_num((stream.values - mean) / std, nan=0.0, posinf=0.0, neginf=0.0)
    t = int(a.window_starts[7]) + 48
    np.testing.assert_array_equal(b[7]["x"].numpy(), normed[t + np.array(offsets)])


def test_a_dataset_pickles_its_memory_map_by_file_name(tmp_path):
    cached = cached_copy(make_stream(t=2000, n=20, c=3), tmp_path)
    ds = WindowDataset(cached.values, cached.mask, np.zeros((20, 2)), 4, 2, scaler=None)
    blob = pickle.dumps(ds)
    assert len(blob) < cached.values.nbytes / 10  # DataLoader workers under "spawn"
    again = pickle.loads(blob)
    assert isinstance(again.values, np.memmap)
    assert_same_items([again[0], again[len(ds) - 1]], [ds[0], ds[len(ds) - 1]])


# ---------------------------------------------------------------- streamed statistics
def test_the_scaler_fitted_in_chunks_equals_one_pass(monkeypatch):
    rng = np.random.default_rng(1)
    x = rng.normal(450.0, 30.0, size=(500, 20, 3)).astype(np.float32)
    mask = rng.random(x.shape) > 0.3
    mask[:200, :, 2] = False  # a channel with nothing observed in the first chunks
    x[~mask] = np.nan
    whole = StandardScaler().fit(x, mask)
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 3 * 20 * 3 * 8)  # 3 steps a chunk
    chunked = StandardScaler().fit(x, mask)
    np.testing.assert_allclose(chunked.mean, whole.mean, rtol=1e-13)
    np.testing.assert_allclose(chunked.std, whole.std, rtol=1e-12)
    for c in range(3):
        observed = x[..., c][mask[..., c]].astype(np.float64)
        assert whole.mean[c] == pytest.approx(observed.mean(), rel=1e-12)
        assert whole.std[c] == pytest.approx(observed.std(), rel=1e-12)


# ---------------------------------------------------------------- chunked writing
def test_chunked_generators_write_what_they_make_in_memory(tmp_path, monkeypatch):
    small = dict(num_points=9, num_channels=2, num_steps=150, grid_size=16, spin_up=10)
    small |= dict(missing_rate=0.2, regional_share=0.3)
    in_memory = SyntheticAdvectionDiffusion(**small, cache_dir=None).load()
    gen = SyntheticAdvectionDiffusion(**small, cache_dir=tmp_path)
    gen.chunk_bytes = 7 * 9 * 2 * 4  # 7 steps a chunk: the draws must come in the same order
    written = gen.load()
    assert written.memory_mapped and not in_memory.memory_mapped
    np.testing.assert_array_equal(written.values, in_memory.values)
    np.testing.assert_array_equal(written.mask, in_memory.mask)
    assert not list(gen.cache_path.glob("scratch_*"))  # the simulation's scratch file is gone

    mobile = dict(num_antennas=8, num_services=4, num_days=3, events_per_day=4)
    a = SyntheticMobileTraffic(**mobile).load()
    b = SyntheticMobileTraffic(**mobile, cache_dir=tmp_path).load()  # one day at a time
    assert b.memory_mapped
    np.testing.assert_array_equal(a.values, b.values)
    assert a.metadata == b.metadata


class Ramp(CachedSource):
    """A cheap stream of any size, made and written a chunk at a time (a few gaps)."""

    cache_prefix = "ramp"

    def __init__(self, num_steps: int, num_points: int, num_channels: int, cache_dir: Path):
        self.shape = (num_steps, num_points, num_channels)
        self.cache_dir = cache_dir

    def config(self) -> dict:
        return {"shape": list(self.shape)}

    name = "ramp"

    def generate(self, cache_path: Path | None = None) -> PointCloudStream:
        t, n, c = self.shape
        with self.writer(cache_path, t, n, c) as out:
            for a, b in out.chunks():
                steps = np.arange(a, b, dtype=np.float32)[:, None, None]
                values = np.sin(steps / 50.0 + np.arange(n * c, dtype=np.float32).reshape(n, c))
                values[:, 0, 0] = np.nan  # one point never sees channel 0
                out.write(a, values)
            return out.finish(
                coords=np.random.default_rng(0).uniform(size=(n, 2)),
                channel_names=[f"c{i}" for i in range(c)],
                point_ids=[f"p{i}" for i in range(n)],
                name=self.name,
            )


def test_preparing_a_large_stream_keeps_peak_memory_bounded(tmp_path, monkeypatch):
    """200 MB of values made, cached, checked, fitted and windowed in 10 MB chunks: the
    peak of what NumPy allocates stays far below the stream's size."""
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 10 * MB)
    gen = Ramp(num_steps=51_200, num_points=256, num_channels=4, cache_dir=tmp_path)
    tracemalloc.start()
    try:
        dm = PointCloudDataModule(gen, input_steps=12, output_steps=12, batch_size=64)
        dm.prepare_data()
        dm.setup()
        batch = next(iter(dm.train_dataloader()))
        summary = dm.summary()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert dm.stream.values.nbytes == 200 * MB
    assert (gen.cache_path / "values.npy").stat().st_size > 200 * MB
    assert isinstance(dm.train_dataset.values, np.memmap)
    assert batch["x"].shape == (64, 12, 256, 4) and 0 < summary["missing_fraction"] < 0.01
    assert peak < 60 * MB, f"peak traced memory {peak / MB:.0f} MB"


# ---------------------------------------------------------------- damage, old caches, disks
def test_a_values_file_of_the_wrong_length_is_rebuilt(tmp_path, caplog):
    kw = dict(num_points=6, num_channels=2, num_steps=60, grid_size=8, spin_up=0)
    gen = SyntheticAdvectionDiffusion(**kw, cache_dir=tmp_path)
    first = np.array(gen.load().values)
    with open(gen.cache_path / "values.npy", "ab") as fh:  # longer than its header says
        fh.write(b"\0" * 8)
    with caplog.at_level(logging.WARNING, logger="cloudlstm.data.cache"):
        again = SyntheticAdvectionDiffusion(**kw, cache_dir=tmp_path)
        np.testing.assert_array_equal(again.load().values, first)
    assert not again.last_load_from_cache and "its header announces" in caplog.text


def test_checksums_are_verified_only_up_to_a_size(tmp_path, monkeypatch):
    stream = make_stream(t=50, n=3, c=2)
    save_stream_cache(tmp_path / "s", stream, "k")
    values = tmp_path / "s" / "values.npy"
    data = bytearray(values.read_bytes())
    data[-1] ^= 0x01  # a flipped bit in the last value: sizes and headers still fit
    values.write_bytes(bytes(data))
    assert load_stream_cache(tmp_path / "s", "k") is None  # small: checksum verified
    monkeypatch.setattr(cache_module, "VERIFY_BYTES", 0)
    assert load_stream_cache(tmp_path / "s", "k") is not None  # large: only sizes checked
    assert load_stream_cache(tmp_path / "s", "k", verify=True) is None
    assert load_stream_cache(tmp_path / "s", "other key") is None


def test_an_old_npz_cache_is_ignored(tmp_path):
    kw = dict(num_points=6, num_channels=2, num_steps=60, grid_size=8, spin_up=0)
    gen = SyntheticAdvectionDiffusion(**kw, cache_dir=tmp_path)
    old = gen.cache_path.with_suffix(".npz")  # where the single-file format put it
    old.write_bytes(b"an old cache")
    stream = gen.load()
    assert not gen.last_load_from_cache and stream.memory_mapped and gen.cache_path.is_dir()
    with rebuilding_fails(SyntheticAdvectionDiffusion, "generate"):
        assert SyntheticAdvectionDiffusion(**kw, cache_dir=tmp_path).load().memory_mapped
    assert old.read_bytes() == b"an old cache"  # left alone


def test_an_unwritable_cache_keeps_the_stream_in_memory(tmp_path, caplog):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    kw = dict(num_points=6, num_channels=2, num_steps=60, grid_size=8, spin_up=0)
    with caplog.at_level(logging.WARNING, logger="cloudlstm.data.cache"):
        stream = SyntheticAdvectionDiffusion(**kw, cache_dir=blocker / "cache").load()
    assert "Could not write the data cache" in caplog.text and not stream.memory_mapped
    expected = SyntheticAdvectionDiffusion(**kw, cache_dir=None).load()
    np.testing.assert_array_equal(stream.values, expected.values)


def test_a_failed_preparation_leaves_nothing_and_stale_temporaries_are_removed(tmp_path):
    dead = tmp_path / f"toy.tmp-{socket.gethostname()}-999999999-x"  # a killed writer's
    dead.mkdir()
    other_host = tmp_path / "toy.tmp-elsewhere-1-x"
    other_host.mkdir()
    with pytest.raises(RuntimeError), StreamWriter(tmp_path / "toy", "k", 10, 2, 1) as out:
        assert out.on_disk and not dead.exists() and other_host.exists()
        out.write(0, np.ones((5, 2, 1), dtype=np.float32))
        raise RuntimeError("the generator failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == [other_host.name]
    with StreamWriter(tmp_path / "toy", "k", 10, 2, 1) as out:
        out.write(0, np.full((10, 2, 1), np.nan, dtype=np.float32), np.ones((10, 2, 1), bool))
        with pytest.raises(ValueError, match="NaN/inf entries where mask is True"):
            out.finish(coords=np.zeros((2, 1)), channel_names=["a"], point_ids=["p", "q"])
    assert not (tmp_path / "toy").exists()  # an invalid stream is not cached
    assert os.listdir(tmp_path) == [other_host.name]


def test_a_job_finishing_second_keeps_the_cache_the_first_committed(tmp_path):
    """Parallel jobs sharing a data directory (a joblib or SLURM sweep) can prepare the same
    stream at once. The one that finishes second must not move away the cache the first has
    just committed and may be reading (a sweep's job failed so: values.npy not found)."""
    stream = make_stream()
    first = save_stream_cache(tmp_path / "toy", stream, "k")  # job 1 committed, reading it
    inode = os.stat(tmp_path / "toy" / "values.npy").st_ino
    second = save_stream_cache(tmp_path / "toy", stream, "k")  # job 2 finishes the same stream
    assert os.stat(tmp_path / "toy" / "values.npy").st_ino == inode  # job 1's files stay
    np.testing.assert_array_equal(np.asarray(first.values), np.asarray(second.values))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy"]  # job 2's temporary is gone


def test_a_damaged_cache_is_still_replaced_on_commit(tmp_path):
    stream = make_stream()
    save_stream_cache(tmp_path / "toy", stream, "k")
    (tmp_path / "toy" / "meta.json").write_text("{not json")
    again = save_stream_cache(tmp_path / "toy", stream, "k")
    assert again is not None
    np.testing.assert_array_equal(np.asarray(again.values), stream.values)
    assert load_stream_cache(tmp_path / "toy", "k") is not None


def test_the_readings_digest_reads_what_was_observed_in_chunks(tmp_path):
    """metrics.json's ``data.values_digest``, which tells compare runs on other data apart:
    the same for the memory map and the arrays it came from, read in any chunks; blind to
    what unobserved cells were filled with; changed by one reading."""
    stream = make_stream(t=300, n=6, c=3, missing=0.2)
    digest = values_digest(stream)
    assert values_digest(cached_copy(stream, tmp_path), chunk_steps=7) == digest
    filled = stream.values.copy()
    filled[~stream.mask] = 123.0
    assert values_digest(dataclasses.replace(stream, values=filled)) == digest
    edited = stream.values.copy()
    edited[tuple(np.argwhere(stream.mask)[0])] += 1.0
    assert values_digest(dataclasses.replace(stream, values=edited)) != digest


def test_a_cache_is_as_readable_as_its_files(tmp_path):
    """The cache folder gets the permissions of the files inside it (0777 less the umask),
    as a folder made by ``mkdir`` would: a shared data directory's cache, built by one user,
    is read by the others, not rebuilt by each over the others'."""
    old = os.umask(0o022)
    try:
        save_stream_cache(tmp_path / "toy", make_stream(), "k")
    finally:
        os.umask(old)
    assert (tmp_path / "toy").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "toy" / "values.npy").stat().st_mode & 0o777 == 0o644
