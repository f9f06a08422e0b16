"""The stream cache shared by every data source, and argument checks.

A cached stream is a directory (``<name>_<key>/``) whose big arrays are plain ``.npy``
files, memory-mapped on load, so a stream larger than RAM can be read a window at a time:

* ``values.npy`` float32 ``(T, N, C)``, ``mask.npy`` bool ``(T, N, C)`` and, for moving
  points, ``trajectory.npy`` float64 ``(T, N, L)``;
* ``meta.npz``: the small arrays (coordinates, timestamps, channel names, point ids);
* ``meta.json``: the format version, the key, the name and metadata, and per big array its
  shape, dtype, byte count and CRC-32.

Writing goes through :class:`StreamWriter`, time chunk by time chunk, into a temporary
directory renamed into place at the end (atomic: a killed run leaves no half-written cache).
On load every ``.npy`` must hold exactly the bytes its header announces and match the
metadata, and when the big arrays total at most :data:`VERIFY_BYTES` their checksums are
verified too; any mismatch reads as ``None`` (rebuild it), with a warning.

* :func:`save_stream_cache` / :func:`load_stream_cache`: a stream tagged with a key;
* :func:`file_signature`: a cheap key part that changes when raw files change;
* :class:`CachedSource`: the base of every source, ``load()`` = ``generate()`` cached under
  a hash of ``config()`` and the input files' signatures.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import secrets
import shutil
import socket
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cloudlstm.data.chunks import chunk_steps, time_chunks
from cloudlstm.data.stream import UNITS_KEY, PointCloudStream
from cloudlstm.errors import UserError

__all__ = [
    "FORMAT",
    "SIGNATURE_BYTES",
    "VERIFY_BYTES",
    "CachedSource",
    "StreamWriter",
    "check_float",
    "check_int",
    "file_signature",
    "load_stream_cache",
    "save_stream_cache",
]

log = logging.getLogger(__name__)

FORMAT = 2  # 1 was a single .npz file, loaded whole
# Checksums are verified on load up to this many bytes of big arrays (~0.5 s); above it only
# the sizes and headers are (a checksum would read the whole stream at every start).
VERIFY_BYTES = 512 << 20
_TEMP = ".tmp-"


class StreamWriter:
    """Receives a stream time chunk by time chunk, into a new cache directory or into memory.

    With a ``path`` the arrays :attr:`values`, :attr:`mask` (and :attr:`trajectory`) are
    ``.npy`` files memory-mapped for writing in a temporary directory next to ``path``, their
    disk space reserved up front (a full disk fails here, with a warning, and not later in a
    write); :meth:`finish` writes the metadata, renames the directory to ``path`` and returns
    the stream reading from it. A preparation that writes chunk by chunk (:meth:`write`,
    :meth:`chunks`) therefore never holds the whole stream in memory. Without a ``path``
    (or when the directory cannot be created) the arrays are in memory.

    Use it as a context manager: an exception inside removes the temporary directory.

    Args:
        path: the cache directory to create (``None``: in memory).
        key: stored with the cache; :func:`load_stream_cache` accepts only this key.
        num_steps, num_points, num_channels: T, N, C.
        num_dims: L for moving points (a ``trajectory`` is written), else ``None``.
        chunk_bytes: size of the chunks :meth:`chunks` proposes (default
            :data:`cloudlstm.data.chunks.CHUNK_BYTES`).
    """

    def __init__(
        self,
        path: str | os.PathLike | None,
        key: str,
        num_steps: int,
        num_points: int,
        num_channels: int,
        num_dims: int | None = None,
        chunk_bytes: int | None = None,
    ) -> None:
        self.path = None if path is None else Path(path)
        self.key = str(key)
        self.shape = (int(num_steps), int(num_points), int(num_channels))
        self.chunk_steps = chunk_steps(num_points * num_channels, chunk_bytes)
        self._finished = False
        self._tmp: Path | None = None
        self._scratch: list[Path] = []
        layout = {"values": (self.shape, np.float32), "mask": (self.shape, np.bool_)}
        if num_dims is not None:
            layout["trajectory"] = ((*self.shape[:2], int(num_dims)), np.float64)
        self.arrays: dict[str, np.ndarray] = {}
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                _remove_stale_temps(self.path)
                tag = f"{self.path.name}{_TEMP}{socket.gethostname()}-{os.getpid()}-"
                # not mkdtemp, whose folder (0700) becomes the cache: other users of a shared
                # data directory could not read it, and would each build their own over it
                self._tmp = self.path.parent / f"{tag}{secrets.token_hex(6)}"
                self._tmp.mkdir(mode=0o777)  # less the umask, as the files inside
                for name, (shape, dtype) in layout.items():
                    self.arrays[name] = _new_npy(self._tmp / f"{name}.npy", shape, dtype)
            except OSError as err:  # a read-only or full disk must not stop training
                log.warning(
                    "Could not write the data cache %s (%s); keeping the stream in memory.",
                    self.path,
                    err,
                )
                self._discard()
        if self._tmp is None:
            self.arrays = {name: np.empty(shape, dtype) for name, (shape, dtype) in layout.items()}

    @property
    def on_disk(self) -> bool:
        """True when the stream is being written to the cache (not kept in memory)."""
        return self._tmp is not None

    @property
    def values(self) -> np.ndarray:
        return self.arrays["values"]

    @property
    def mask(self) -> np.ndarray:
        return self.arrays["mask"]

    @property
    def trajectory(self) -> np.ndarray | None:
        return self.arrays.get("trajectory")

    def chunks(self) -> Iterator[tuple[int, int]]:
        """``(start, end)`` time ranges of about ``chunk_bytes`` of values each, in order."""
        steps = self.chunk_steps
        for a in range(0, self.shape[0], steps):
            yield a, min(a + steps, self.shape[0])

    def write(
        self,
        start: int,
        values: np.ndarray,
        mask: np.ndarray | None = None,
        trajectory: np.ndarray | None = None,
    ) -> None:
        """Store the steps ``[start, start + len(values))``; ``mask=None`` means
        ``isfinite(values)``."""
        end = int(start) + len(values)
        if not 0 <= start < end <= self.shape[0]:
            raise ValueError(
                f"StreamWriter.write: steps [{start}, {end}) are outside [0, {self.shape[0]})."
            )
        self.values[start:end] = values
        # as stored (float32): a float64 value beyond its range is no value
        self.mask[start:end] = np.isfinite(self.values[start:end]) if mask is None else mask
        if trajectory is not None:
            self.trajectory[start:end] = trajectory

    def scratch(self, name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A work array of the preparation, as large as it needs: a ``.npy`` file next to the
        cache while it is written (removed by :meth:`finish`), else (or when the disk is
        full) in memory."""
        if self._tmp is not None:
            path = self._tmp / f"scratch_{name}.npy"
            try:
                array = _new_npy(path, shape, dtype)
                self._scratch.append(path)
                return array
            except OSError as err:
                log.warning("No disk space for the scratch array %s (%s); using memory.", path, err)
        return np.empty(shape, dtype)

    def finish(
        self,
        coords: np.ndarray,
        channel_names: Sequence[str],
        point_ids: Sequence[str],
        timestamps: np.ndarray | None = None,
        name: str = "stream",
        metadata: dict | None = None,
    ) -> PointCloudStream:
        """The complete stream: written to the cache and read from it (memory-mapped), or in
        memory. ``ValueError`` when the parts do not make a valid :class:`PointCloudStream`
        (nothing is cached then)."""
        self._finished = True
        parts = dict(
            coords=np.asarray(coords, dtype=np.float64),
            channel_names=[str(c) for c in channel_names],
            point_ids=[str(p) for p in point_ids],
            timestamps=timestamps,
            name=str(name),
            metadata=dict(metadata or {}),
        )
        if self._tmp is None:
            return PointCloudStream(
                values=self.values, mask=self.mask, trajectory=self.trajectory, **parts
            )
        tmp = self._tmp
        try:
            for array in self.arrays.values():
                array.flush()
            self._drop_scratch()
            _write_meta(tmp, self.key, self.arrays, parts)
            self.arrays = {}  # the files are complete; closed before the rename
            _commit(tmp, self.path, self.key)
            self._tmp = None
        except OSError as err:
            log.warning(
                "Could not write the data cache %s (%s); keeping the stream in memory.",
                self.path,
                err,
            )
            arrays = {
                n: np.load(tmp / f"{n}.npy")
                for n in ("values", "mask", "trajectory")
                if (tmp / f"{n}.npy").exists()
            }
            self._discard()
            return PointCloudStream(**arrays, **parts)
        try:
            stream = _open_cache(self.path, self.key, verify=False)
        except ValueError:  # not a valid stream: do not leave it cached
            shutil.rmtree(self.path, ignore_errors=True)
            raise
        if stream is None:  # cannot happen unless another process wrote another format here
            raise OSError(f"the data cache {self.path} was replaced while it was written")
        return stream

    def _drop_scratch(self) -> None:
        for path in self._scratch:
            path.unlink(missing_ok=True)
        self._scratch = []

    def _discard(self) -> None:
        self.arrays = {}
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> StreamWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._finished:
            self._discard()


def _new_npy(path: Path, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A new ``.npy`` file memory-mapped for writing, its disk space reserved (``OSError``
    now rather than a crash in a later write when the disk is full)."""
    array = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
    if hasattr(os, "posix_fallocate") and array.nbytes:
        fd = os.open(path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
        except OSError as err:
            if err.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):  # unsupported
                raise
        finally:
            os.close(fd)
    return array


def _crc32(array: np.ndarray) -> int:
    """CRC-32 of the array's bytes, read a time chunk at a time."""
    crc = 0
    step_bytes = array[0].nbytes if array.ndim > 1 else array.itemsize
    for a, b in time_chunks(0, len(array), step_bytes, itemsize=1):
        crc = zlib.crc32(np.ascontiguousarray(array[a:b]).view(np.uint8).reshape(-1), crc)
    return crc


def _write_meta(folder: Path, key: str, arrays: dict[str, np.ndarray], parts: dict) -> None:
    small = dict(
        coords=parts["coords"],
        channel_names=np.array(parts["channel_names"]),
        point_ids=np.array(parts["point_ids"]),
    )
    if parts["timestamps"] is not None:
        small["timestamps"] = np.asarray(parts["timestamps"])
    with open(folder / "meta.npz", "wb") as fh:
        np.savez(fh, **small)
    info = {
        name: {
            "shape": list(array.shape),
            "dtype": array.dtype.str,
            "bytes": int(array.nbytes),
            "crc32": _crc32(array),
        }
        for name, array in arrays.items()
    }
    meta = {
        "format": FORMAT,
        "key": key,
        "name": parts["name"],
        "metadata": parts["metadata"],
        "arrays": info,
    }
    (folder / "meta.json").write_text(json.dumps(meta))


def _commit(tmp: Path, path: Path, key: str) -> None:
    """Rename the finished directory ``tmp`` to ``path``, replacing what is there when it is
    a damaged or stale cache. A valid cache with this key there was committed by another
    process while this one wrote the same stream (parallel jobs sharing a data directory):
    it is kept, since that process may be reading it, and ``tmp`` is dropped."""
    try:
        os.rename(tmp, path)
        return
    except OSError:
        if not path.exists():
            raise
    try:  # checked as a load checks it (checksums up to VERIFY_BYTES): a cache found
        # damaged on load is here again, and must not be kept
        current = _open_cache(path, key) is not None
    except Exception:  # damaged, half-written by an older version, or moved away meanwhile
        current = False
    if current:
        shutil.rmtree(tmp, ignore_errors=True)
        return
    stale = path.with_name(f"{path.name}.stale-{secrets.token_hex(4)}")
    with contextlib.suppress(FileNotFoundError):  # another process moved it away first
        os.rename(path, stale)
    shutil.rmtree(stale, ignore_errors=True)
    try:
        os.rename(tmp, path)
    except OSError:
        if not path.exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # another process committed the same stream


def _remove_stale_temps(path: Path) -> None:
    """Remove temporary directories of ``path`` left by killed runs on this host (their
    process is gone); those of live processes, or of other hosts, are left alone."""
    host = socket.gethostname()
    for tmp in path.parent.glob(f"{path.name}{_TEMP}{host}-*"):
        try:
            pid = int(tmp.name[len(f"{path.name}{_TEMP}{host}-") :].split("-")[0])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(tmp, ignore_errors=True)
        except (ValueError, OSError):
            continue


def _open_npy(path: Path, info: dict, verify: bool) -> np.ndarray:
    array = np.load(path, mmap_mode="r")
    if list(array.shape) != info["shape"] or array.dtype.str != info["dtype"]:
        raise ValueError(
            f"{path.name} holds {array.dtype.str} {list(array.shape)}, the metadata says "
            f"{info['dtype']} {info['shape']}"
        )
    size = path.stat().st_size
    if size != array.offset + array.nbytes or array.nbytes != info["bytes"]:
        raise ValueError(
            f"{path.name} is {size} bytes long, its header announces {array.offset + array.nbytes}"
        )
    if verify and _crc32(array) != info["crc32"]:
        raise ValueError(f"{path.name} does not match its checksum (changed or damaged)")
    return array


def _open_cache(path: Path, key: str, verify: bool | None = None) -> PointCloudStream | None:
    """The stream of the cache directory ``path`` (``None`` if it has another key or format);
    raises on anything unreadable or inconsistent."""
    meta = json.loads((path / "meta.json").read_text())
    if meta.get("format") != FORMAT or meta.get("key") != key:
        return None
    info = meta["arrays"]
    if verify is None:
        verify = sum(int(i["bytes"]) for i in info.values()) <= VERIFY_BYTES
    arrays = {name: _open_npy(path / f"{name}.npy", i, verify) for name, i in info.items()}
    with np.load(path / "meta.npz", allow_pickle=False) as z:
        small = {k: z[k] for k in z.files}
    return PointCloudStream(
        values=arrays["values"],
        mask=arrays["mask"],
        coords=small["coords"],
        channel_names=small["channel_names"].tolist(),
        point_ids=small["point_ids"].tolist(),
        timestamps=small.get("timestamps"),
        name=str(meta["name"]),
        metadata=meta["metadata"],
        trajectory=arrays.get("trajectory"),
    )


def save_stream_cache(path: Path, stream: PointCloudStream, key: str) -> PointCloudStream | None:
    """Write ``stream`` to the cache directory ``path`` tagged with ``key``, time chunk by
    time chunk; returns the stream read back from it (memory-mapped), or ``None`` (with a
    warning) when it could not be written."""
    writer = StreamWriter(
        path,
        key,
        stream.num_steps,
        stream.num_points,
        stream.num_channels,
        stream.num_dims if stream.moving else None,
    )
    if not writer.on_disk:
        return None
    with writer:
        for a, b in writer.chunks():
            writer.write(
                a,
                stream.values[a:b],
                stream.mask[a:b],
                None if stream.trajectory is None else stream.trajectory[a:b],
            )
        cached = writer.finish(
            coords=stream.coords,
            channel_names=stream.channel_names,
            point_ids=stream.point_ids,
            timestamps=stream.timestamps,
            name=stream.name,
            metadata=stream.metadata,
        )
    return cached if cached.memory_mapped else None


def load_stream_cache(path: Path, key: str, verify: bool | None = None) -> PointCloudStream | None:
    """The stream cached in the directory ``path`` if it exists and was written with ``key``
    (memory-mapped), else ``None``.

    ``verify``: check the big arrays' checksums (default: when they total at most
    :data:`VERIFY_BYTES`). Sizes and headers are always checked. A damaged cache logs a
    warning and reads as ``None``; an old ``.npz`` cache file is not looked at.
    """
    path = Path(path)
    if not path.is_dir():
        return None
    try:
        return _open_cache(path, key, verify)
    except Exception as err:  # truncated / corrupt / half-deleted: rebuild from the raw files
        log.warning("Data cache %s is unreadable (%s); rebuilding it.", path, err)
        return None


#: bytes read from each end of an input file for its signature's digest
SIGNATURE_BYTES = 1 << 16


def file_signature(paths: Sequence[Path]) -> list[tuple[str, int, int, str | None]]:
    """``(name, size, mtime_ns, digest)`` of each file: cheap to compute, changes when a
    file does. The digest (of the file's first and last :data:`SIGNATURE_BYTES`) tells apart
    files that share a name, a size and a time but not their readings, such as two sites'
    exports unpacked from one archive (whole-second times), which would share a cache."""
    out = []
    for p in paths:
        path = Path(p)
        st = path.stat()
        out.append((path.name, st.st_size, st.st_mtime_ns, _ends_digest(path, st.st_size)))
    return out


def _ends_digest(path: Path, size: int) -> str | None:
    """16 hex digits of the SHA-256 of the file's first and last :data:`SIGNATURE_BYTES`;
    None where it cannot be read (the reading that follows says why, in one line)."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as f:
            digest.update(f.read(SIGNATURE_BYTES))
            if size > SIGNATURE_BYTES:
                f.seek(max(SIGNATURE_BYTES, size - SIGNATURE_BYTES))
                digest.update(f.read(SIGNATURE_BYTES))
    except OSError:
        return None
    return digest.hexdigest()[:16]


def check_int(owner: str, name: str, value: Any, lo: int) -> int:
    """``value`` as an int >= ``lo``, else a ``ValueError`` naming ``owner.name``."""
    try:
        ok = not isinstance(value, bool) and int(value) == value and value >= lo
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise UserError(f"{owner}: {name} must be an integer >= {lo}; got {value!r}.")
    return int(value)


def check_float(
    owner: str, name: str, value: Any, lo: float, hi: float = np.inf, lo_open: bool = False
) -> float:
    """``value`` as a finite float ``>= lo`` (``> lo`` if ``lo_open``) and ``<= hi``, else a
    ``ValueError`` naming ``owner.name`` and the bounds."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = float("nan")
    if not (np.isfinite(value) and (value > lo if lo_open else value >= lo) and value <= hi):
        bound = f"> {lo}" if lo_open else f">= {lo}"
        if np.isfinite(hi):
            bound += f" and <= {hi}"
        raise UserError(f"{owner}: {name} must be a number {bound}; got {value}.")
    return value


# Keys of a stream's metadata (and so of data_summary.json's source_metadata) listing the
# ids of the points its source dropped, and why, in the order a source drops them
DROPPED_POINTS = {
    "dropped_points_without_position": "without a position",
    "dropped_points": "with no data at all",
}


def warn_dropped_points(
    name: str, dropped: Sequence[str], why: str = DROPPED_POINTS["dropped_points"]
) -> None:
    """Warn of the points ``dropped`` (none: no warning) ``why`` (:data:`DROPPED_POINTS`);
    a stream read from its cache warns from its metadata, as the run that built it did."""
    if dropped:  # a warning: the user's file named them, and the model will not know them
        log.warning(
            "%s: dropping %d point(s) %s: %s",
            name,
            len(dropped),
            why,
            ", ".join(dropped[:20]) + (" ..." if len(dropped) > 20 else ""),
        )


class CachedSource:
    """Base of every data source: ``load()`` = the stream made once, then read from the cache.

    A source turns raw files (a reader) or a seed (a generator) into a
    :class:`PointCloudStream`. Subclasses set ``cache_dir`` (``None``: no caching) and
    ``cache_prefix``, and define:

    * ``config()``: every argument that determines the stream (not ``cache_dir``), with a
      version to bump when the preparation changes;
    * ``input_files()`` (readers): the raw files read; their names, sizes and modification
      times join the key, so an edited file is read again;
    * ``generate(cache_path=None)``: makes the stream and, given a path, also caches it
      there: a source that can write its stream a time chunk at a time does so through
      :meth:`writer` (so preparing it never holds it whole); others build it in memory and
      return :meth:`cached`.

    The cache directory is ``<cache_dir>/<cache_prefix>_<key>``, the key a hash of the
    config and the files' signatures (:attr:`cache_key`).

    What a source declares of its data besides the stream (the data-source protocol) is
    the class attributes ``bad_values``, ``path``, ``time_col``, ``id_col``, ``coord_cols``,
    ``missing_value``, ``wide_time_col``, ``time_format``, ``time_unit``, ``graph`` and the
    methods :meth:`physical_ranges` and :meth:`units`: the defaults here are those of a
    source that declares nothing, and a subclass that knows more sets them (e.g.
    :class:`~cloudlstm.data.sources.long_format.LongFormatSource` from its arguments). The
    datamodule also takes a bare stream or any object with ``load()``;
    these declare nothing (:meth:`declared_by`).
    """

    cache_prefix = "stream"
    cache_dir: Path | None = None
    last_load_from_cache = False
    chunk_bytes: int | None = None  # writer chunks; None: chunks.CHUNK_BYTES

    # ---- the data-source protocol (see the class docstring)
    # What an absurd or out-of-range value does ("error" or "warn", see
    # cloudlstm.data.pipeline.absurd_values); None: the source has no such option, so such a
    # value is an error whose message names no data.source.bad_values. Read by the
    # datamodule's preparation.
    bad_values: str | None = None
    # The one data file the stream is read from, named in messages about the data; None:
    # they name the stream. Read by the datamodule's preparation.
    path: Path | None = None
    # Column names of a long-format table of this data: the time, the point id and the
    # coordinates (None: x, y[, z]). Stored in the data description (DataSpec, read by
    # forecasting, whose histories must use them) and labels of the report's maps.
    time_col: str = "timestamp"
    id_col: str = "id"
    coord_cols: list[str] | None = None
    # The value that means "no reading" in this data's files (METR-LA's 0), or None. Stored
    # in the data description, so that a forecast's history reads it as missing too.
    missing_value: float | None = None
    # The column of the times in a wide table of this data (one column per point) as the
    # user named it (data.source.time_col), or None: found by its form. Stored in the data
    # description, so that a forecast's wide history is read as the training table was.
    wide_time_col: str | None = None
    # How this data's files write their times (data.source.time_format, a strftime format,
    # or data.source.time_unit, numbers since 1970), or None: dates pandas infers. Stored in
    # the data description, so that a forecast's history is read as the training file was.
    time_format: str | None = None
    time_unit: str | None = None
    # The file of the graph that adjacency() gives (data.source.graph), or None. Stored in
    # the data description, so that an evaluation on another graph names both.
    graph: Path | None = None

    def physical_ranges(self) -> dict[str, tuple[float | None, float | None]]:
        """``{channel: (lo, hi)}``: the values each channel can physically take (None for
        an open end; a channel not named is not checked). Read by the datamodule's
        preparation, which refuses observed values outside them
        (:mod:`cloudlstm.data.pipeline.absurd_values`). None declared here."""
        return {}

    def units(self) -> dict[str, str]:
        """``{channel: unit}``: the unit this source gives each channel's values in (a
        channel not named: unknown). :meth:`load` records them in the stream's metadata
        (:data:`~cloudlstm.data.stream.UNITS_KEY`), so the data summary holds them and
        ``eval.py`` refuses data in other units than its run's. None declared here."""
        return {}

    def adjacency(self, point_ids: list[str]) -> np.ndarray | None:
        """``(N, N)`` weights of a graph the data gives of the points ``point_ids``, in that
        order (e.g. a road network's, ``data.source.graph``); None: the data has no graph,
        and the models that take one build it from the positions. Read into the data's
        description (``DataSpec.adjacency``), which hands it to the models. None here."""
        return None

    @staticmethod
    def declared_by(source: Any) -> CachedSource:
        """What ``source`` declares: itself when it is a :class:`CachedSource`; else (a
        :class:`PointCloudStream`, another object with ``load()``, None) a bare
        :class:`CachedSource`, which declares the defaults."""
        return source if isinstance(source, CachedSource) else CachedSource()

    def config(self) -> dict:
        raise NotImplementedError

    def input_files(self) -> list[Path]:
        """The raw files the stream is read from; none for a generator."""
        return []

    def generate(self, cache_path: Path | None = None) -> PointCloudStream:
        raise NotImplementedError

    @property
    def cache_key(self) -> str:
        """16 hex digits of the SHA-256 of :meth:`config`, with the input files' signatures
        when there are input files (a generator's key is that of its config alone)."""
        payload = self.config()
        files = self.input_files()
        if files:
            payload = {**payload, "input_files": file_signature(files)}
        blob = json.dumps(payload, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    @property
    def cache_path(self) -> Path | None:
        """The cache directory (``None``: no caching)."""
        if self.cache_dir is None:
            return None
        return self.cache_dir / f"{self.cache_prefix}_{self.cache_key}"

    def load(self) -> PointCloudStream:
        """The stream, from the cache when a valid cache exists (else made into it)."""
        path = self.cache_path
        stream = None if path is None else load_stream_cache(path, self.cache_key)
        self.last_load_from_cache = stream is not None
        if stream is None:
            stream = self.generate(path)
        else:  # every run leaves these points out, not only the one that built the cache
            for key, why in DROPPED_POINTS.items():
                warn_dropped_points(stream.name, stream.metadata.get(key) or [], why)
        # at every load, not into the cache: a stream cached before units were recorded
        # gets them too
        units = self.units()
        if units:
            stream.metadata[UNITS_KEY] = dict(units)
        return stream

    def writer(
        self,
        cache_path: Path | None,
        num_steps: int,
        num_points: int,
        num_channels: int,
        num_dims: int | None = None,
    ) -> StreamWriter:
        """A :class:`StreamWriter` into ``cache_path`` (``None``: in memory) under this key."""
        return StreamWriter(
            cache_path,
            self.cache_key,
            num_steps,
            num_points,
            num_channels,
            num_dims,
            chunk_bytes=self.chunk_bytes,
        )

    def cached(self, stream: PointCloudStream, cache_path: Path | None) -> PointCloudStream:
        """``stream`` written to ``cache_path`` and read back from it, or itself (no path, or
        the cache could not be written)."""
        if cache_path is None:
            return stream
        return save_stream_cache(cache_path, stream, self.cache_key) or stream

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items() if k != "version")
        return f"{type(self).__name__}({args})"
