"""Running under DDP: the ranks' results brought to rank 0, and batch limits that count per
process.

The validation and test loaders deal every window to exactly one rank
(:func:`cloudlstm.data.pipeline.loaders.each_window_once`); :func:`gather_on_rank_zero`
brings what each rank kept to rank 0, where it is put back in window order.
:func:`per_process_limits` words the warning for ``trainer.limit_<split>_batches``, which
Lightning applies in every process.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

__all__ = ["gather_on_rank_zero", "per_process_limits", "rank_shares"]

SPLIT_WORDS = {
    "train": "training windows per epoch",
    "val": "validation windows per validation",
    "test": "test windows",
}


def gather_on_rank_zero(obj: Any) -> list[Any] | None:
    """Every rank's ``obj`` (picklable) on global rank 0, in rank order, and None on the
    other ranks; ``[obj]`` outside DDP. Every rank must call it."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return [obj]
    parts = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(obj, parts, dst=0)
    return parts


def per_process_limits(
    limits: dict[str, Any], windows: dict[str, int], batch_size: int, world_size: int
) -> str | None:
    """The warning for batch limits that count per process, or None when there is none.

    Lightning applies an integer ``trainer.limit_<split>_batches`` in every process, so with
    W processes up to W times as many batches run as in a one-process run: e.g. a DDP test
    with ``limit_test_batches=2`` scores twice the windows. (A fraction is of each
    process's share, so it keeps the one-process total; 0 disables the split everywhere.)

    Args:
        limits: split (``train``, ``val``, ``test``) -> its ``limit_<split>_batches``.
        windows: split -> its windows (the data summary's ``windows``).
        batch_size: windows per batch.
        world_size: the processes (``trainer.world_size``).

    Returns:
        One line naming each limit whose total differs from a one-process run's, the
        windows it covers in all and in one process, and how to get the one-process total.
    """
    if world_size < 2:
        return None
    parts, options = [], []
    for split, limit in limits.items():
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            continue
        total, single = _limited_windows(
            split, limit, windows.get(split, 0), batch_size, world_size
        )
        if total == single:
            continue
        what = SPLIT_WORDS.get(split, f"{split} windows")
        parts.append(f"{total} {what} in all ({single} in one process)")
        options.append(f"trainer.limit_{split}_batches={limit}")
    if not parts:
        return None
    return (
        f"{' and '.join(options)} count{'s' if len(options) == 1 else ''} batches per process: "
        f"with {world_size} processes that is {' and '.join(parts)}. Divide the limit by "
        f"{world_size} for a one-process run's count, or leave it out to use every window."
    )


def rank_shares(split: str, windows: int, world_size: int) -> list[int]:
    """The windows of a split each of ``world_size`` processes gets, by rank.

    Validation and test windows are dealt out without repeats
    (:func:`~cloudlstm.data.pipeline.loaders.each_window_once`: rank r gets
    ``r, r + W, ...``); Lightning's sampler for training, and for a split of fewer windows
    than processes, gives every rank ``ceil(n / W)`` windows, repeating some to even the
    ranks out.
    """
    if split in ("val", "test") and windows >= world_size:
        return [len(range(rank, windows, world_size)) for rank in range(world_size)]
    return [-(-windows // world_size)] * world_size


def _limited_windows(
    split: str, limit: int, windows: int, batch_size: int, world_size: int
) -> tuple[int, int]:
    """Windows a split's ``limit`` batches cover with ``world_size`` processes, and in one."""
    cap = limit * batch_size
    single = min(cap, windows)
    shares = rank_shares(split, windows, world_size)
    return sum(min(cap, share) for share in shares), single
