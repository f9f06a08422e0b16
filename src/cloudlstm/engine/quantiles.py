"""Quantile forecasts for every model, added once in the training module.

``module.quantiles=[0.1,0.5,0.9]`` (any ascending levels in (0, 1)) makes
:class:`~cloudlstm.engine.module.ForecastModule` forecast Q quantiles of every entry
``(b, j, n, c)`` beside its point forecast:

* **The centre is the point forecast.** Level 0.5 (the *centre*; the levels must include
  it) is the model's own forecast, anchored as the recipe says; every point metric scores
  it, so tables stay comparable. The model is trained by the centre's pinball loss alone
  (half the absolute error at 0.5: the fit of ``module.loss=mae``).
* **The other levels never cross.** A small head, the same for every model
  (:class:`QuantileHead`: a per-point MLP reading the point's input window, the time
  features of the forecast steps and the point forecast, detached), gives Q - 1 gaps made
  positive by a softplus; the levels below the centre are the point forecast minus the
  running sums of theirs, those above plus theirs. So ``q_1 < ... < q_Q`` always.
* **The naive floors** (persistence, seasonal naive: any model without trainable
  parameters) learn nothing: their levels are the point forecast plus empirical quantiles
  of their residuals on the training split, per forecast step and channel
  (:func:`residual_quantiles`), ordered as below.
* **The loss** is the sum over the levels of the masked mean pinball loss on normalised
  values, each channel weighted by its training std with ``module.loss_weights=real_units``
  (the pinball loss is linear in the scale, so that is the loss in real units).
  ``module.loss`` is not used.

``module.calibrate=conformal`` (split-conformal, conformalized quantile regression in its
one-sided form): on the validation split, the residuals ``r = y - q_tau`` of each level
other than the centre give per forecast step and channel an offset, the tau-quantile of r
at the conservative rank (``ceil((n + 1) tau)`` of the n observed residuals above the
median, ``floor((n + 1) tau)`` below it, clipped to 1..n), added to that level. Then each
level's one-sided coverage is at least its nominal one, and a central interval's coverage at
least ``1 - 2 tau``, for data exchangeable with the validation split. The centre is never
moved. Offsets that would cross are clipped outwards from the centre (:func:`keep_order`).
They are measured on the validation split at every validation of a fit, so every
checkpoint holds the offsets of its own weights (:data:`CALIBRATION_KEY`); a test whose
weights have none measures them then.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from cloudlstm.engine.quantile_levels import centre_index

# What a checkpoint stores of a quantile forecast, beside the weights: the naive floors'
# residual quantiles and the conformal offsets, with the global step of the weights they
# were measured for.
CALIBRATION_KEY = "quantile_offsets"
DEFAULT_HIDDEN = 64


def keep_order(quantiles: Tensor, centre: int) -> Tensor:
    """``quantiles (..., Q)`` with each level above the centre at least the one below it
    and each below at most the one above it (running max / min outwards from the centre),
    the centre unchanged."""
    above = torch.cummax(quantiles[..., centre:], -1).values
    below = torch.cummin(quantiles[..., : centre + 1].flip(-1), -1).values.flip(-1)
    return torch.cat([below[..., :-1], above], -1)


def pinball_loss(
    quantiles: Tensor,
    target: Tensor,
    mask: Tensor,
    levels: Sequence[float],
    channel_weights: Tensor | None = None,
) -> Tensor:
    """Sum over the levels of the mean pinball loss over observed entries.

    ``quantiles (B, J, N, C, Q)``, ``target`` and bool ``mask`` ``(B, J, N, C)``; each
    channel's loss times ``channel_weights (C,)``. Unobserved entries reach neither the loss
    nor the gradient (a NaN target there included).
    """
    mask = mask.bool()
    taus = torch.tensor(levels, dtype=quantiles.dtype, device=quantiles.device)
    error = torch.where(mask[..., None], target[..., None] - quantiles, 0)
    loss = torch.maximum(taus * error, (taus - 1) * error).sum(-1)
    if channel_weights is not None:
        loss = loss * channel_weights.to(loss)
    return loss.sum() / mask.sum().clamp_min(1).to(loss.dtype)


def residual_quantiles(
    residuals: Tensor, observed: Tensor, levels: Sequence[float], centre: int
) -> Tensor:
    """``(J, C, Q)`` offsets: per step and channel, the conservative-rank level-quantile of
    the observed residuals (module docstring), 0 for the centre and where none is observed.

    ``residuals (R, J, C, Q')``: target minus each level's forecast (``Q' = Q``) or minus
    the point forecast (``Q' = 1``, every level read from it); ``observed (R, J, C)`` bool.
    """
    _, steps, channels, width = residuals.shape
    offsets = torch.zeros(steps, channels, len(levels), dtype=residuals.dtype)
    for j in range(steps):
        for c in range(channels):
            values = residuals[observed[:, j, c], j, c].sort(0).values  # (n, Q')
            n = values.shape[0]
            for q, tau in enumerate(levels):
                if q == centre or n == 0:
                    continue
                rank = math.ceil((n + 1) * tau) if tau > 0.5 else math.floor((n + 1) * tau)
                offsets[j, c, q] = values[min(max(rank, 1), n) - 1, min(q, width - 1)]
    return offsets


class ResidualBank(Metric):
    """Residuals ``target - forecast`` of observed entries, kept whole (DDP: every rank's,
    concatenated) for :func:`residual_quantiles`.

    ``update(forecast (B, J, N, C, Q'), target (B, J, N, C), mask)``; :meth:`compute` returns
    ``(residuals (R, J, C, Q'), observed (R, J, C))``, one row per (window, point).
    """

    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("residuals", default=[], dist_reduce_fx="cat")
        self.add_state("observed", default=[], dist_reduce_fx="cat")

    def update(self, forecast: Tensor, target: Tensor, mask: Tensor) -> None:
        b, j, n, c, width = forecast.shape
        residual = (target.unsqueeze(-1) - forecast).detach().float()
        self.residuals.append(residual.transpose(1, 2).reshape(b * n, j, c, width))
        self.observed.append(mask.bool().transpose(1, 2).reshape(b * n, j, c))

    def compute(self) -> tuple[Tensor, Tensor]:
        # synced over DDP ranks, each state is one gathered tensor, no longer a list
        if isinstance(self.residuals, list) and not self.residuals:
            return torch.zeros(0, 0, 0, 0), torch.zeros(0, 0, 0, dtype=torch.bool)
        return dim_zero_cat(self.residuals).cpu(), dim_zero_cat(self.observed).cpu()

    def offsets(self, levels: Sequence[float], centre: int) -> Tensor | None:
        """:func:`residual_quantiles` of what was collected; None if nothing was."""
        residuals, observed = self.compute()
        if residuals.numel() == 0:
            return None
        return residual_quantiles(residuals, observed, levels, centre)


class QuantileHead(nn.Module):
    """Q - 1 positive gaps around the point forecast, per point (module docstring).

    Args:
        levels: the Q ascending levels.
        input_steps, input_channels: M and C_in of the model's input window.
        output_steps, channels: J and C_out of its forecast.
        future_channels: F time features of each forecast step (0: none).
        hidden: the MLP's width.

    ``forward(point (B, J, N, C), x (B, M, N, C_in), future (B, J, N, F) | None)`` ->
    ``(B, J, N, C, Q)`` (normalised), level ``centre`` equal to ``point``.
    """

    def __init__(
        self,
        levels: Sequence[float],
        input_steps: int,
        input_channels: int,
        output_steps: int,
        channels: int,
        future_channels: int = 0,
        hidden: int = DEFAULT_HIDDEN,
    ) -> None:
        super().__init__()
        self.levels = tuple(levels)
        self.centre = centre_index(self.levels)
        self.output_steps, self.channels = output_steps, channels
        features = input_steps * input_channels + output_steps * (channels + future_channels)
        gaps = output_steps * channels * (len(self.levels) - 1)
        self.net = None  # the median alone: no gap to learn, and no weights
        if gaps:
            self.net = nn.Sequential(
                nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, gaps)
            )
            # every gap starts at softplus(0) = 0.69 training std, whatever the input
            nn.init.zeros_(self.net[-1].weight)
            nn.init.zeros_(self.net[-1].bias)

    def forward(self, point: Tensor, x: Tensor, future: Tensor | None = None) -> Tensor:
        if self.net is None:
            return point.unsqueeze(-1)
        b, j, n, c = point.shape
        parts = [x, point.detach()] + ([] if future is None else [future])
        # (B, N, features): each point's window, point forecast and time features
        features = torch.cat([p.transpose(1, 2).reshape(b, n, -1) for p in parts], -1)
        gaps = nn.functional.softplus(self.net(features))  # (B, N, J * C * (Q - 1))
        gaps = gaps.view(b, n, j, c, -1).transpose(1, 2)  # (B, J, N, C, Q - 1)
        return around(point.detach(), point, gaps, self.centre)


def around(detached: Tensor, point: Tensor, gaps: Tensor, centre: int) -> Tensor:
    """``(B, J, N, C, Q)``: ``point`` at ``centre``; the ``centre`` levels below it
    ``detached`` minus the running sums of the first ``centre`` gaps (nearest first), the
    levels above plus those of the rest."""
    below = detached.unsqueeze(-1) - gaps[..., :centre].cumsum(-1)
    above = detached.unsqueeze(-1) + gaps[..., centre:].cumsum(-1)
    return torch.cat([below.flip(-1), point.unsqueeze(-1), above], -1)


def apply_offsets(quantiles: Tensor, offsets: Tensor, centre: int) -> Tensor:
    """``quantiles (B, J, N, C, Q)`` plus ``offsets (J, C, Q)`` (per step, channel and
    level), kept in order (:func:`keep_order`)."""
    return keep_order(quantiles + offsets.to(quantiles)[:, None], centre)
