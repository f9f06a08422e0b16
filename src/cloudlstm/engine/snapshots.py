"""A batch of snapshots: what every metric's per-snapshot value is computed from
(:mod:`cloudlstm.engine.metrics` says how snapshots are aggregated)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import torch
from torch import Tensor

# A zero reading de-normalised by ``z * std + mean`` in float32 comes back within a few
# float32 steps of |mean| (-0.0078 for a channel whose mean is 1.1e5): a target within
# ZERO_ULPS of them is a zero for MAPE. A bound in real units, whatever the channel's scale,
# would take readings of a channel in small units (0.0005) for zeros.
ZERO_ULPS = 4 * torch.finfo(torch.float32).eps


def zero_bounds(channel_mean: Sequence[float]) -> list[float]:
    """``(C,)``: the size below which a channel's de-normalised target is a zero reading
    (:data:`ZERO_ULPS` of the scaler's mean)."""
    return [ZERO_ULPS * abs(float(m)) for m in channel_mean]


class Snapshots:
    """A batch of snapshots, what every metric's per-snapshot value is computed from.

    ``pred``, ``target`` and the bool ``mask`` (True = observed; None = all observed) are
    ``(B, ..., N, C)``; each index of ``(B, ...)`` is a snapshot (``(B, J)``: one instance at
    one forecast step), reduced over its observed entries. :attr:`channels` makes each
    channel of a snapshot a snapshot of its own.

    Attributes:
        x, y: prediction and target, 0 where unobserved.
        weight: the mask as 0 / 1 in their dtype.
        count: ``(...)`` observed entries of each snapshot.
        channel_std: the channels' training standard deviations, broadcastable to
            ``(..., C)``; None where not known (metrics that need them are then left out).
        quantiles: ``(B, ..., N, C, Q)`` quantile forecasts at ``levels`` (ascending), 0
            where unobserved; None for a point forecast
            (:mod:`cloudlstm.engine.quantile_metrics`).
        zero_bound: broadcastable to ``(..., C)``: a target at or below it in size is a
            zero reading (:func:`zero_bounds`); None: only 0 is.
    """

    dims = (-2, -1)  # a snapshot's points and channels, the dimensions it reduces over

    def __init__(
        self,
        pred: Tensor,
        target: Tensor,
        mask: Tensor | None = None,
        channel_std: Tensor | None = None,
        quantiles: Tensor | None = None,
        levels: Sequence[float] = (),
        zero_bound: Tensor | None = None,
    ) -> None:
        self.pred, self.target = pred, target
        self.zero_bound = zero_bound
        self.mask = torch.ones_like(pred, dtype=torch.bool) if mask is None else mask.bool()
        self.weight = self.mask.to(pred.dtype)
        self.x = torch.where(self.mask, pred, torch.zeros_like(pred))
        self.y = torch.where(self.mask, target, torch.zeros_like(target))
        self.count = self.weight.sum(self.dims)  # 0 -> NaN results via 0/0
        self.channel_std = channel_std
        self.levels = tuple(levels)
        self.quantiles = quantiles
        if quantiles is not None:
            self.quantiles = torch.where(self.mask[..., None], quantiles, 0).to(pred.dtype)

    def mean(self, values: Tensor) -> Tensor:
        """``(...)``: the mean of ``values (..., N, C)`` over each snapshot's observed
        entries (NaN where it has none)."""
        return (self.weight * values).sum(self.dims) / self.count

    @cached_property
    def error(self) -> Tensor:
        """``x - y``: the error where observed, 0 elsewhere."""
        return self.x - self.y

    @cached_property
    def mse(self) -> Tensor:
        return self.mean(self.error.square())

    @cached_property
    def nonzero_target(self) -> Tensor:
        """``(..., N, C)`` True where an entry is observed and its target is not zero
        (MAPE's entries; computed once for its value and where it is defined)."""
        bound = 0.0 if self.zero_bound is None else self.zero_bound
        return self.mask & (self.target.abs() > bound)

    @cached_property
    def observed(self) -> Tensor:
        """``(...)`` True where a snapshot has an observed entry."""
        return self.count > 0

    @cached_property
    def channels(self) -> Snapshots:
        """Each channel of each snapshot as a snapshot of its N values: ``(B, ..., C, N, 1)``
        (its ``channel_std`` the channel's own)."""

        def split(t: Tensor) -> Tensor:  # (B, ..., N, C) -> (B, ..., C, N, 1)
            # through (B, -1, N, 1), a copy or a view as reshape decides: the layout, so the
            # order of the sums and their last bits, that the results have always had
            b, *lead, n, c = t.shape
            flat = t.transpose(-2, -1).reshape(b, -1, n, 1)
            return flat.unflatten(1, (*lead, c))

        std = None if self.channel_std is None else self.channel_std.unsqueeze(-1)
        # (C,) -> (C, 1, 1), against (B, ..., C, N, 1)
        zero = None if self.zero_bound is None else self.zero_bound[..., None, None]
        quantiles = None
        if self.quantiles is not None:  # (B, ..., N, C, Q) -> (B, ..., C, N, 1, Q)
            quantiles = torch.stack([split(q) for q in self.quantiles.unbind(-1)], -1)
        return Snapshots(
            split(self.pred),
            split(self.target),
            split(self.mask),
            std,
            quantiles,
            self.levels,
            zero,
        )
