"""The training dataloader: one that a run resumed in the middle of an epoch continues
exactly where the checkpoint left it.

Lightning saves the ``state_dict()`` of a training dataloader that has one in every
checkpoint (``loops.fit_loop.state_dict.combined_loader``) and hands it to
``load_state_dict()`` before the loader is iterated again. :class:`ResumableLoader`'s
state is where the current pass over the windows stands: the seed of its shuffle and the
batches already given out. A resumed pass shuffles with that seed and skips those batches
(their windows are not read), so the rest of the epoch brings the batches the uninterrupted
run trained on, in the same order.

Runs that are never interrupted draw exactly what ``DataLoader(shuffle=True)`` draws: each
pass's shuffle seed (:class:`ShuffleSampler`) and each new iterator's base seed come from
torch's global generator, in that loader's order. They are drawn as the pass's first batch
is asked for (a ``DataLoader`` draws the base seed as its iterator is made): an iterator
never read draws nothing (``ResumableLoader._pass`` says why). A resumed pass draws
neither: the uninterrupted run drew both at the start of the pass, before the checkpoint,
and the generator's state restored from the checkpoint (by the training engine's
``RngState`` callback) already follows those draws. So every later draw (dropout, the next
epochs' shuffles) is the uninterrupted run's too.

A resume that serves the windows in batches of another size (``data.batch_size`` changed
with ``allow_changes``) continues the checkpoint's pass from the first window it had not
trained on, rounded down to a whole batch of the new size (a few windows of the pass may be
trained on twice), and moves the trainer's count of the epoch's batches to match
(``move_progress``), so the epoch ends with the pass. An epoch that takes fewer batches than
a pass (``trainer.limit_train_batches``, an int) takes that many batches of the new size:
where the checkpoint's epoch had trained on as many windows as that or more, the resumed
epoch is over, and the next starts a new pass. Where the windows themselves changed,
no position in the old pass means anything: the resumed epoch is a whole new pass, counted
from its first batch.

Worker processes (``num_workers > 0``) are seeded from the base seed; their generators'
states are not saved. The window datasets draw no random numbers, so this changes nothing
here; a dataset that drew some in its workers would not resume exactly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils.data import DataLoader, Sampler

__all__ = ["ResumableLoader", "ShuffleSampler"]

log = logging.getLogger(__name__)


def _draw_seed() -> int:
    """A seed from torch's global generator, drawn as ``RandomSampler`` draws it."""
    return int(torch.empty((), dtype=torch.int64).random_().item())


class ShuffleSampler(Sampler[int]):
    """Each pass a random permutation of ``range(size)``: torch's ``RandomSampler`` (the
    sampler of ``DataLoader(shuffle=True)``), the same permutation from the same draw, with
    the pass's seed kept (:attr:`seed`) so that a resumed pass can shuffle alike.

    As ``RandomSampler`` does, a pass draws its seed from the global generator when its
    first index is asked for; :meth:`load_state_dict` makes the next pass use a saved seed
    instead, without drawing.
    """

    def __init__(self, size: int) -> None:
        self.size = int(size)
        self.seed: int | None = None  # the current pass's seed; None: not drawn yet
        self._restored: int | None = None

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        seed, self._restored = self._restored, None
        if seed is None:
            seed = _draw_seed()
        self.seed = seed
        generator = torch.Generator()
        generator.manual_seed(seed)
        yield from torch.randperm(self.size, generator=generator).tolist()

    def new_pass(self) -> None:
        """Forget the last pass's seed (the loader starts a new pass)."""
        self.seed = None

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._restored = state.get("seed")


class _SkipFirst:
    """The loader's batch sampler, less the batches a resumed pass has had already
    (:attr:`ResumableLoader._skip`, taken when a pass starts): their indices are drawn and
    dropped, their windows never read."""

    def __init__(self, loader: ResumableLoader, batches: Any) -> None:
        self.loader = loader
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Any]:
        skip, self.loader._skip = self.loader._skip, 0
        if skip >= len(self.batches):
            return  # a pass given out whole: no shuffle drawn for it
        batches = iter(self.batches)
        for _ in range(skip):
            next(batches)
        yield from batches


class ResumableLoader(DataLoader):
    """A ``DataLoader`` with ``state_dict`` / ``load_state_dict`` (Lightning's stateful
    loader protocol): a checkpoint holds where the current pass stands, and a resumed run's
    first pass continues it (the module's docstring says how).

    Args:
        progress: the trainer's progress through its epoch: the batches it has finished
            (a batch given out but not yet trained on, when a signal has a checkpoint
            saved inside a step, is given again by the resumed pass) and its
            ``limit_train_batches``, what it takes from each pass (an int: that many
            batches at most; a float: that fraction of them; a pass that has given as
            many is over); None (or a function giving None): every batch given out is
            finished, and an epoch is a whole pass.
        move_progress: moves the trainer's count of the batches its epoch has finished by
            the number given, when a resumed pass continues at another position than the
            checkpoint's count (batches of another size, or a new pass); None: no trainer.
        Everything else as ``DataLoader``.
    """

    _skip = 0  # batches the next pass drops (read by _SkipFirst)

    def __init__(
        self,
        *args: Any,
        progress: Callable[[], tuple[int, float] | None] | None = None,
        move_progress: Callable[[int], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.progress = progress
        self.move_progress = move_progress
        self._batches = 0  # batches the current pass has given out
        self._started = False  # a pass was started (its iterator made)
        self._pending: dict[str, Any] | None = None  # a state to continue from

    @property
    def _index_sampler(self) -> Any:
        return _SkipFirst(self, super()._index_sampler)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        current = self._pending.get("pass") if self._pending else None
        self._batches = int(current["batches"]) if current is not None else 0
        self._started = False
        return self._pass()

    def _pass(self) -> Iterator[Any]:
        """The batches of a pass, begun (a restored state taken, a new pass's seeds drawn)
        as its first batch is asked for, not as its iterator is made.

        Why: resumed from a checkpoint saved at an epoch's last step (its validation's, or a
        pending one's), Lightning makes an iterator for the epoch it restores, which asks it
        for no batch, and then the next epoch's. Begun as it was made, that first iterator
        drew the next pass's seeds from the restored generator (or took the restored state),
        and the next epoch then drew again: its shuffle and every later draw differed from
        the uninterrupted run's.
        """
        state, self._pending = self._pending, None
        current = state.get("pass") if state else None
        sampler = self.sampler if hasattr(self.sampler, "new_pass") else None
        skip = 0
        if current is not None:
            if sampler is not None and current.get("seed") is not None:
                sampler.load_state_dict({"seed": current["seed"]})
            skip = int(current["batches"])
        elif sampler is not None:
            sampler.new_pass()
        # The uninterrupted run drew the iterator's base seed before the checkpoint (at the
        # start of the pass in progress) or drew none (its persistent workers were running).
        quiet = current is not None or bool(state and state.get("workers_started"))
        self._skip = self._batches = skip
        self._started = True
        with self._drawing_nothing() if quiet else _nothing():
            batches = super().__iter__()
        for batch in batches:
            self._batches += 1
            yield batch

    @contextmanager
    def _drawing_nothing(self) -> Iterator[None]:
        """Make the iterator's base seed from a generator of its own, not the global one."""
        saved = self.generator
        self.generator = torch.Generator()
        try:
            yield
        finally:
            self.generator = saved

    def _position(self) -> tuple[int, int]:
        """(batches of the current pass finished, batches an epoch takes from it)."""
        known = self.progress() if self.progress is not None else None
        if known is None:
            return self._batches, len(self)
        done, limit = known
        return min(int(done), self._batches), self._epoch_length(limit)

    def _epoch_length(self, limit: float) -> int:
        """Batches an epoch takes from a pass under ``limit_train_batches=limit``, as
        Lightning counts them."""
        if isinstance(limit, int):
            return min(limit, len(self))
        return int(len(self) * limit)

    def state_dict(self) -> dict[str, Any]:
        if self._pending is not None:  # a restored state no pass has begun from: still where it is
            return {**self._pending, **self._batching()}
        current = None
        done, length = self._position()
        if self._started and done < length:
            seed = getattr(self.sampler, "seed", None)
            current = {"batches": done, "seed": seed}
        return {
            **self._batching(),
            "pass": current,
            "workers_started": bool(self.persistent_workers and self._iterator is not None),
        }

    def _batching(self) -> dict[str, Any]:
        """How this loader cuts its windows into batches (a state's passes are counted in
        them)."""
        return {
            "num_batches": len(self),
            "batch_size": self.batch_size,
            "windows": len(self.dataset),  # type: ignore[arg-type]
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("pass") is not None and not self._same_batches(state):
            state = {**state, "pass": self._rebatched(state)}
        elif state.get("pass") is not None and state["pass"]["batches"] >= self._position()[1]:
            # given out whole (a state of an earlier version, for a pending validation)
            state = {**state, "pass": None}
        self._pending = dict(state)

    def _same_batches(self, state: dict[str, Any]) -> bool:
        """Whether the checkpoint's passes were cut into this loader's batches (a state
        that does not record its batch size or windows: as many batches)."""
        return (
            state.get("num_batches") == len(self)
            and state.get("batch_size", self.batch_size) == self.batch_size
            and state.get("windows", len(self.dataset)) == len(self.dataset)  # type: ignore[arg-type]
        )

    def _rebatched(self, state: dict[str, Any]) -> dict[str, Any] | None:
        """Where the checkpoint's pass, cut into batches of another number, continues in
        this loader's batches; None: a new pass. Moves the trainer's count to match."""
        current = state["pass"]
        done = int(current["batches"])
        old_size = state.get("batch_size")
        same_windows = state.get("windows") == len(self.dataset)  # type: ignore[arg-type]
        if old_size and same_windows and isinstance(self.sampler, ShuffleSampler):
            size = int(self.batch_size)  # type: ignore[arg-type]
            seen = done * int(old_size)
            skip = seen // size
            length = self._position()[1]
            if skip >= length:
                log.info(
                    "The checkpoint's epoch had trained on %s windows in batches of %s; this "
                    "run's epochs take %s batches of %s: the resumed epoch is over, and the "
                    "next starts a new pass.",
                    seen,
                    old_size,
                    length,
                    size,
                )
                self._move(length - done)
                return None
            log.info(
                "The checkpoint's epoch was cut into batches of %s windows, this run's into "
                "batches of %s: the resumed epoch goes on from window %s of %s of its pass "
                "(%s windows of it trained on twice), at batch %s of %s.",
                old_size,
                size,
                skip * size,
                len(self.dataset),  # type: ignore[arg-type]
                seen - skip * size,
                skip,
                length,
            )
            self._move(skip - done)
            return {**current, "batches": skip}
        log.warning(
            "The checkpoint's epochs had %s training batches, this run's have %s (the "
            "training data changed, or the batch size in a checkpoint that does not record "
            "it): the resumed epoch is a new pass over the windows, not "
            "the rest of the checkpoint's, so the run will not match an uninterrupted one.",
            state.get("num_batches"),
            len(self),
        )
        self._move(-done)
        return None

    def _move(self, batches: int) -> None:
        if batches and self.move_progress is not None:
            self.move_progress(batches)


@contextmanager
def _nothing() -> Iterator[None]:
    yield
