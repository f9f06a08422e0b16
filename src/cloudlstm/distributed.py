"""Testing under DDP: every test window on exactly one rank, and the ranks' results on rank 0.

For test dataloaders Lightning puts in a ``DistributedSampler``, which pads the ranks to equal
length by repeating windows: the repeats would be scored twice. :func:`each_window_once`
gives a sampler without repeats instead (the ranks may then run one batch more or fewer,
which is safe without gradients), and :func:`gather_on_rank_zero` brings what each rank kept
to rank 0, where it is put back in window order.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import Dataset, Sampler

__all__ = ["each_window_once", "gather_on_rank_zero"]


def each_window_once(dataset: Dataset, trainer: Any) -> Sampler | None:
    """Under DDP, a sampler giving rank ``r`` the windows ``r, r + world_size, ...``, in
    order and none twice; None outside DDP (``trainer`` None or a single process)."""
    if trainer is None or trainer.world_size < 2:
        return None
    return UnrepeatedDistributedSampler(
        dataset, num_replicas=trainer.world_size, rank=trainer.global_rank, shuffle=False
    )


def gather_on_rank_zero(obj: Any) -> list[Any] | None:
    """Every rank's ``obj`` (picklable) on global rank 0, in rank order, and None on the
    other ranks; ``[obj]`` outside DDP. Every rank must call it."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return [obj]
    parts = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(obj, parts, dst=0)
    return parts
