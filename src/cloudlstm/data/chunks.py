"""Time chunks: how the pipeline walks a stream too large to hold in memory at once.

Every pass over a whole stream (writing its cache, checking it, fitting the scaler) reads
and writes it ``[start, end)`` time steps at a time, each chunk about :data:`CHUNK_BYTES`
of float32 values, so the memory a pass needs depends on the chunk size and not on T.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["CHUNK_BYTES", "chunk_steps", "time_chunks"]

# About this many bytes of float32 values per chunk; passes hold a few such arrays at once.
CHUNK_BYTES = 8 << 20


def chunk_steps(step_entries: int, chunk_bytes: int | None = None, itemsize: int = 4) -> int:
    """Time steps per chunk when one step holds ``step_entries`` entries of ``itemsize``
    bytes: ``chunk_bytes`` (default :data:`CHUNK_BYTES`) worth, and at least one step."""
    budget = CHUNK_BYTES if chunk_bytes is None else int(chunk_bytes)
    return max(1, budget // max(1, int(step_entries) * int(itemsize)))


def time_chunks(
    start: int, end: int, step_entries: int, chunk_bytes: int | None = None, itemsize: int = 4
) -> Iterator[tuple[int, int]]:
    """``(a, b)`` ranges covering ``[start, end)`` in order, :func:`chunk_steps` steps each
    (the last one shorter)."""
    steps = chunk_steps(step_entries, chunk_bytes, itemsize)
    for a in range(int(start), int(end), steps):
        yield a, min(a + steps, int(end))
