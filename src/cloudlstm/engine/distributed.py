"""Running under DDP: the ranks' results brought to rank 0, and batch limits that count per
process.

The validation and test loaders deal every window to exactly one rank
(:func:`cloudlstm.data.pipeline.loaders.each_window_once`); :func:`gather_on_rank_zero`
brings what each rank kept to rank 0, where it is put back in window order.
:func:`per_process_limits` words the warning for ``trainer.limit_<split>_batches``, which
Lightning applies in every process.
"""

from __future__ import annotations

import math
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

    Lightning applies ``trainer.limit_<split>_batches`` in every process. An integer then
    lets up to W times as many batches run with W processes as in one: e.g. a DDP test
    with ``limit_test_batches=2`` scores twice the windows. A fraction is of each process's
    batches, rounded down in each, so it may cover fewer windows than in one process: 0.5
    of 41 test windows in batches of 8 is 3 of 6 batches in one process (24 windows), 1 of
    3 in each of 2 (16). (0 disables the split everywhere.)

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
    parts, options, kinds = [], [], set()
    for split, limit in limits.items():
        if not _limits(limit):
            continue
        total, single, first = _limited_windows(
            split, limit, windows.get(split, 0), batch_size, world_size
        )
        if total == single and first:
            continue
        what = SPLIT_WORDS.get(split, f"{split} windows")
        other = f"{single} in one process" if total != single else "others than in one process"
        parts.append(f"{total} {what} in all ({other})")
        options.append(f"trainer.limit_{split}_batches={limit}")
        kinds.add(type(limit))
    if not parts:
        return None
    return (
        f"{' and '.join(options)} count{'s' if len(options) == 1 else ''} batches per process: "
        f"with {world_size} processes that is {' and '.join(parts)}. "
        + _advice(int in kinds, float in kinds, world_size)
    )


def _limits(limit: Any) -> bool:
    """Whether ``limit`` cuts a split: a whole number of batches, or a fraction below 1."""
    if isinstance(limit, bool):
        return False
    return (isinstance(limit, int) and limit >= 1) or (isinstance(limit, float) and 0 < limit < 1)


def _advice(whole: bool, fraction: bool, world_size: int) -> str:
    """How to get a one-process run's windows back, for the limits warned of: ``whole``
    numbers of batches, a ``fraction`` of them, or both."""
    divide = f"divide the limit by {world_size} for a one-process run's count"
    if not fraction:
        return f"{divide.capitalize()}, or leave it out to use every window."
    said = "A fraction is rounded down to whole batches in each process"
    if whole:
        said += f"; a whole number is counted in each process: {divide}"
    return f"{said}. Leave it out to use every window."


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
    split: str, limit: float, windows: int, batch_size: int, world_size: int
) -> tuple[int, int, bool]:
    """Windows a split's ``limit`` (batches, or a fraction of them) covers with
    ``world_size`` processes, in one, and whether the processes' are the first ones as in
    one process (training windows, shuffled, count as such).

    Rank r scores the first of its windows ``r, r + W, ...``: together the first ``total``
    windows where each rank has as many of those as it is dealt, which a fraction rounded
    down differently in the ranks breaks (17 and 16 windows in batches of 8 at 0.7: 16 and
    8, 24 windows as in one process of 33, but windows up to the 31st).
    """
    shares = rank_shares(split, windows, world_size)
    kept = [_windows_run(share, limit, batch_size) for share in shares]
    total = sum(kept)
    dealt = split in ("val", "test") and windows >= world_size
    first = not dealt or all(
        n == len(range(rank, total, world_size)) for rank, n in enumerate(kept)
    )
    return total, _windows_run(windows, limit, batch_size), first


def _windows_run(windows: int, limit: float, batch_size: int) -> int:
    """The windows of a process's ``windows`` that its first batches under ``limit`` hold."""
    batches = math.ceil(windows / max(batch_size, 1))
    kept = int(batches * limit) if isinstance(limit, float) else min(batches, limit)
    return min(windows, kept * batch_size)
