"""The datamodule's dataloaders.

Training batches are shuffled anew each epoch by a loader that a run resumed in the middle
of an epoch continues exactly (:mod:`cloudlstm.data.pipeline.resumable`; under DDP Lightning
puts in its ``DistributedSampler`` instead). Validation and test batches come in window
(chronological) order.

Under DDP Lightning's ``DistributedSampler`` pads the ranks to equal length by repeating
windows, and a repeated window would be scored twice: validation and test loaders take
:func:`each_window_once` instead, a sampler without repeats (the ranks may then run one
batch more or fewer, which is safe without gradients), so that their metrics are a
one-process run's. The training engine brings the ranks' results together on rank 0
(``gather_on_rank_zero``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import DataLoader, Dataset, Sampler

from cloudlstm.data.pipeline.resumable import ResumableLoader, ShuffleSampler

__all__ = [
    "each_window_once",
    "epoch_progress",
    "move_epoch_progress",
    "ordered_loader",
    "training_loader",
]

log = logging.getLogger(__name__)


def each_window_once(dataset: Dataset, trainer: Any) -> Sampler | None:
    """Under DDP, a sampler giving rank ``r`` the windows ``r, r + world_size, ...``, in
    order and none twice; None outside DDP (``trainer`` None or a single process), and
    where there are fewer windows than processes: every process must run a batch (the
    first forward pass of a DDP model, and the metrics' reduction, are collective), so
    Lightning's sampler then repeats windows, which the metrics count twice (said once)."""
    if trainer is None or trainer.world_size < 2:
        return None
    if len(dataset) < trainer.world_size:
        log.warning(
            "%d windows for %d processes: every process needs one, so some are scored "
            "twice and the metrics differ from one process's (fewer processes, or a larger "
            "part, avoid it).",
            len(dataset),
            trainer.world_size,
        )
        return None
    return UnrepeatedDistributedSampler(
        dataset, num_replicas=trainer.world_size, rank=trainer.global_rank, shuffle=False
    )


def ordered_loader(
    dataset: Dataset | None,
    batch_size: int,
    num_workers: int,
    pin_memory: bool,
    sampler: Sampler | None = None,
) -> DataLoader | list:
    """Batches of ``dataset``'s windows in their order (or ``sampler``'s); an empty list
    when the split is disabled (``dataset`` None: a zero fraction)."""
    if dataset is None:
        return []
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=False,
        sampler=sampler,
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=num_workers > 0,
        drop_last=False,
    )


def training_loader(
    dataset: Dataset,
    batch_size: int,
    num_workers: int,
    pin_memory: bool,
    trainer: Any,
    progress: Callable[[], tuple[int, float] | None],
    move_progress: Callable[[int], None] | None = None,
) -> ResumableLoader:
    """Batches of ``dataset``'s windows shuffled anew each pass, resumable mid-epoch.

    Args:
        trainer: the Lightning trainer, or None; under DDP (``world_size > 1``) the loader
            leaves the shuffle to the ``DistributedSampler`` Lightning puts in (shuffled by
            seed and epoch).
        progress: the trainer's progress through its epoch (:func:`epoch_progress`), read
            when a checkpoint is saved.
        move_progress: moves that progress (:func:`move_epoch_progress`), where a resumed
            pass continues elsewhere than the checkpoint's count says.
    """
    ddp = trainer is not None and trainer.world_size > 1
    return ResumableLoader(
        dataset,
        batch_size=batch_size,
        shuffle=ddp,
        sampler=None if ddp else ShuffleSampler(len(dataset)),
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=num_workers > 0,
        drop_last=False,
        progress=progress,
        move_progress=move_progress,
    )


def epoch_progress(trainer: Any) -> tuple[int, float] | None:
    """The trainer's progress through its epoch: (batches finished, its
    ``limit_train_batches``: an int, batches an epoch takes from a pass at most; a float,
    the fraction it takes); None without a trainer. The limit, not the trainer's count of
    an epoch's batches: a resumed run asks before it has counted those of its own loader."""
    if trainer is None:
        return None
    done = trainer.fit_loop.epoch_loop.batch_progress.current.processed
    return done, trainer.limit_train_batches


def move_epoch_progress(trainer: Any, batches: int) -> None:
    """Move the trainer's count of the batches its epoch has given out and finished by
    ``batches``, its fields alike, so the epoch ends when the training loader's pass does."""
    current = trainer.fit_loop.epoch_loop.batch_progress.current
    for field in ("ready", "started", "processed", "completed"):
        setattr(current, field, getattr(current, field) + batches)
