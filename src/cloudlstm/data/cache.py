"""Shared by the seeded generators: argument checks and a ``.npz`` cache keyed by config."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from cloudlstm.data.long_format import load_stream_cache, save_stream_cache
from cloudlstm.data.stream import PointCloudStream

__all__ = ["CachedGenerator", "check_float", "check_int"]


def check_int(owner: str, name: str, value: Any, lo: int) -> int:
    """``value`` as an int >= ``lo``, else a ``ValueError`` naming ``owner.name``."""
    try:
        ok = not isinstance(value, bool) and int(value) == value and value >= lo
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{owner}: {name} must be an integer >= {lo}; got {value!r}.")
    return int(value)


def check_float(owner: str, name: str, value: Any, lo: float, hi: float = np.inf) -> float:
    """``value`` as a finite float in ``[lo, hi]``, else a ``ValueError``."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = float("nan")
    if not (np.isfinite(value) and lo <= value <= hi):
        bound = f"in [{lo}, {hi}]" if np.isfinite(hi) else f">= {lo}"
        raise ValueError(f"{owner}: {name} must be a number {bound}; got {value}.")
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
