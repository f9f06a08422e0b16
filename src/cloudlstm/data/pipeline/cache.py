"""The ``.npz`` stream cache shared by every loader and generator, and argument checks.

* :func:`save_stream_cache` / :func:`load_stream_cache`: a stream tagged with a key, written
  atomically; a missing, stale or unreadable file reads as ``None`` (rebuild it);
* :func:`file_signature`: a cheap key part that changes when raw files change;
* :class:`CachedGenerator`: ``load()`` = ``generate()`` cached under a hash of ``config()``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cloudlstm.data.pipeline.stream import PointCloudStream
from cloudlstm.errors import UserError

__all__ = [
    "CachedGenerator",
    "check_float",
    "check_int",
    "file_signature",
    "load_stream_cache",
    "save_stream_cache",
]

log = logging.getLogger(__name__)


def save_stream_cache(path: Path, stream: PointCloudStream, key: str) -> None:
    """Write ``stream`` to ``path`` (atomically) tagged with ``key``; warns instead of failing."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
        arrays = dict(
            key=np.array(key),
            values=stream.values,
            mask=stream.mask,
            coords=stream.coords,
            timestamps=stream.timestamps,
            channel_names=np.array(stream.channel_names),
            point_ids=np.array(stream.point_ids),
            name=np.array(stream.name),
            metadata=np.array(json.dumps(stream.metadata)),
        )
        if stream.trajectory is not None:
            arrays["trajectory"] = stream.trajectory
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    except OSError as err:  # a read-only or full disk must not stop training
        log.warning("Could not write the data cache %s (%s).", path, err)
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)


def load_stream_cache(path: Path, key: str) -> PointCloudStream | None:
    """The stream cached at ``path`` if it exists and was written with ``key``, else ``None``."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            if str(z["key"]) != key:
                return None
            return PointCloudStream(
                values=z["values"],
                mask=z["mask"],
                coords=z["coords"],
                channel_names=z["channel_names"].tolist(),
                point_ids=z["point_ids"].tolist(),
                timestamps=z["timestamps"],
                name=str(z["name"]),
                metadata=json.loads(str(z["metadata"])),
                trajectory=z["trajectory"] if "trajectory" in z.files else None,
            )
    except Exception as err:  # truncated / corrupt / old format: rebuild from the raw files
        log.warning("Data cache %s is unreadable (%s); rebuilding it.", path, err)
        return None


def file_signature(paths: Sequence[Path]) -> list[tuple[str, int, int]]:
    """``(name, size, mtime_ns)`` of each file: cheap to compute, changes when a file does."""
    out = []
    for p in paths:
        st = Path(p).stat()
        out.append((Path(p).name, st.st_size, st.st_mtime_ns))
    return out


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


class CachedGenerator:
    """Base of the seeded generators: ``load()`` = ``generate()``, cached as ``.npz``.

    Subclasses set ``cache_dir`` and ``cache_prefix`` and define ``config()`` (every
    argument that determines the output), ``generate()`` and ``name``.
    """

    cache_prefix = "stream"
    cache_dir: Path | None = None
    last_load_from_cache = False

    def config(self) -> dict:
        raise NotImplementedError

    def generate(self) -> PointCloudStream:
        raise NotImplementedError

    @property
    def cache_key(self) -> str:
        blob = json.dumps(self.config(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    @property
    def cache_path(self) -> Path | None:
        if self.cache_dir is None:
            return None
        return self.cache_dir / f"{self.cache_prefix}_{self.cache_key}.npz"

    def load(self) -> PointCloudStream:
        """The stream, from the cache when a valid cache file exists."""
        path = self.cache_path
        stream = None if path is None else load_stream_cache(path, self.cache_key)
        self.last_load_from_cache = stream is not None
        if stream is None:
            stream = self.generate()
            if path is not None:
                save_stream_cache(path, stream, self.cache_key)
        return stream

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items() if k != "version")
        return f"{type(self).__name__}({args})"
