"""NaN / inf point coordinates, which no neighbour search ranks: refused at once, or once
for a whole block of searches.

:func:`check_finite` checks the coordinates as the searches take them, ``(R, N, L)`` float32.
Inside :func:`deferred_finite_check` the searches whose indices stay in range on NaN (brute
force, the Triton kernel) leave the refusal to the block's end: each records a ``bool``
scalar, or the Triton kernel sets the block's int32 ``(1,)`` flag on its device
(:meth:`_DeferredBlock.flag`), so a GPU forward synchronises once, not once per search.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch


class NonFiniteCoordinatesError(ValueError):
    """Neighbours were asked among NaN / inf coordinates (a diverged model's features)."""


NON_FINITE = "kNN: the point coordinates hold NaN or inf."


class _DeferredBlock:
    """The open :func:`deferred_finite_check`: device tensors, nonzero where a search met
    a non-finite coordinate."""

    def __init__(self) -> None:
        self.bad: list[torch.Tensor] = []
        self._flags: dict[torch.device, torch.Tensor] = {}

    def flag(self, device: torch.device) -> torch.Tensor:
        """The block's int32 flag on ``device``, which Triton searches set in place."""
        if device not in self._flags:
            self._flags[device] = torch.zeros(1, dtype=torch.int32, device=device)
            self.bad.append(self._flags[device])
        return self._flags[device]


_deferred = threading.local()  # .block: the open _DeferredBlock of this thread, or None


def open_block() -> _DeferredBlock | None:
    """This thread's open :func:`deferred_finite_check`, if any."""
    return getattr(_deferred, "block", None)


def check_finite(flat: torch.Tensor, deferrable: bool) -> None:
    """Refuse NaN / inf coordinates, checked in float32 where the searches run: the grid
    kernels would return indices out of range.

    On a GPU the check is a host synchronisation; inside :func:`deferred_finite_check`, a
    search whose result stays in range on NaN (brute force) leaves it to the block's end.
    """
    block = open_block()
    if deferrable and block is not None:
        block.bad.append(~torch.isfinite(flat).all())
    elif not bool(torch.isfinite(flat).all()):
        raise NonFiniteCoordinatesError(NON_FINITE)


@contextmanager
def deferred_finite_check() -> Iterator[None]:
    """One finiteness check for all the searches in the block, at its end.

    A CloudLSTM forward searches dozens of clouds; on a GPU, checking each one's
    coordinates on the host would stall the launch queue dozens of times per step (and
    makes the step impossible to capture in a CUDA graph). Inside this block the Triton
    and brute-force searches, which return in-range indices on NaN coordinates, record a
    device flag instead (the Triton kernel sets one flag per block as it reads the
    coordinates, no extra launch); the block's end raises
    :class:`NonFiniteCoordinatesError` if any is set, with one synchronisation per flag.
    Nothing is checked while a CUDA graph is being captured (a synchronisation is not
    allowed there). Blocks nest: the outermost checks.
    """
    if open_block() is not None:  # nested: the outer block checks
        yield
        return
    _deferred.block = block = _DeferredBlock()
    try:
        yield
    finally:
        _deferred.block = None
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return
    if any(bool(bad.any()) for bad in block.bad):
        raise NonFiniteCoordinatesError(NON_FINITE)
