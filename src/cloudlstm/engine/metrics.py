"""Forecast metrics of the paper (MAE, RMSE, PSNR, SSIM), exact and DDP-safe.

Inputs are de-normalised tensors ``pred, target`` of shape ``(B, J, N, C)`` and an optional
bool ``mask`` of the same shape (True = observed; None = all observed). Masked-out entries
are ignored everywhere.

A *snapshot* is one (test instance ``b``, forecast step ``j``): its N x C values. With
``e = pred - target`` over the snapshot's observed entries:

* ``MAE  = mean |e|``
* ``RMSE = sqrt(mean e^2)``
* ``PSNR = 20 log10(v_max) - 10 log10(max(mean e^2, 1e-12))``, ``v_max`` = maximum observed
  target over the whole test set (accumulated as a running max; the per-snapshot
  ``-10 log10(mse)`` term is accumulated and ``20 log10(v_max)`` added at compute time).
  NaN if ``v_max <= 0``.
* ``MAPE = 100 mean |e| / |y|`` over the observed entries whose target is not zero, as
  BasicTS and DCRNN mask zeros; a snapshot with no such entry has no MAPE and is left out of
  MAPE's means (its other metrics count). Given the channels' training means, a target
  within four float32 steps of its channel's mean in size is a zero: the scaler's float32
  round trip of a zero reading (:func:`~cloudlstm.engine.snapshots.zero_bounds`); without
  them, only 0 is.
* ``SSIM`` = global SSIM over the snapshot's values, x = pred, y = target:
  ``((2 mu_x mu_y + c1)(2 cov_xy + c2)) / ((mu_x^2 + mu_y^2 + c1)(var_x + var_y + c2))``
  with population (biased) variance/covariance, ``c1 = (k1 L)^2``, ``c2 = (k2 L)^2``,
  ``L = 2, k1 = 0.1, k2 = 0.3`` as in the paper (whose printed formula is garbled; this
  standard form is our documented choice).

Aggregation (the paper's "mean +- std across test instances"):

* per-instance value = mean over its J steps of the snapshot metric (only steps with >= 1
  observed entry count; instances with none are skipped); ``overall`` reports mean and
  population std of that across instances;
* ``per_step[j]``: mean / std across instances of the snapshot metric at step j;
* ``per_channel[c]``: as ``overall`` with snapshots restricted to channel c (N values);
* ``pooled``: exact MAE / RMSE over every observed entry of the test set.

Scale-free MAE (``smae``; only when the metric is given the per-channel training standard
deviations ``s_c``, the scaler's ``std``): real-data channels have different units and
scales (Beijing: PM2.5 ~ 80 ug/m3, SO2 ~ 15), so the MAE over all channels is dominated by the
largest. ``smae`` divides each channel's error by its ``s_c`` before averaging over channels:

* snapshot value = mean over the channels it observes of ``MAE_c / s_c``, ``MAE_c`` the
  snapshot's MAE over channel c's observed entries; it is then aggregated like the other
  metrics (``overall``, ``per_step``). When every snapshot observes every channel,
  ``overall["smae"]["mean"] = mean_c per_channel[c]["mae"]["mean"] / s_c``
  (:func:`scale_free_mae`), and ``per_step["smae"]["mean"][j]`` the same at step j; with
  partly observed snapshots the two differ slightly, as the MAE of all channels differs from
  the mean of the per-channel MAEs;
* ``per_channel[c]["smae"]`` = that channel's MAE statistics divided by ``s_c``.

States are float64 sums, sums of squares and counts (``dist_reduce_fx="sum"``) plus a running
max (``dist_reduce_fx="max"``); no predictions are stored, so results do not depend on how
the data is split into batches or processes.

A metric is one declaration: a :class:`~cloudlstm.engine.declared_metrics.MetricInfo` in
:data:`~cloudlstm.engine.declared_metrics.DECLARED` holds its name, label, direction and
where it is logged, and its per-snapshot computation (``per_snapshot``, a function of
:class:`~cloudlstm.engine.snapshots.Snapshots`). :class:`ForecastMetrics` computes and
aggregates every declared metric, so a new entry is in ``metrics.json``, the ``val/`` and
``test/`` logs, compare's table, the W&B summaries and tables, with nothing else to change.
The readers take the declarations when they run (``declared``, ``metric_names``,
``metric_info``), not as a copy made at import.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor
from torchmetrics import Metric

from cloudlstm.engine.declared_metrics import SSIM_K2, SSIM_L, MetricInfo, declared
from cloudlstm.engine.quantile_metrics import quantile_infos
from cloudlstm.engine.snapshots import Snapshots, zero_bounds


def _moments(values: Tensor, valid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Sum, sum of squares and count (over dim 0) of ``values (B, ..., K)`` where
    ``valid (B, ..., K)``."""
    v = torch.where(valid, values, torch.zeros_like(values))
    return v.sum(0), v.square().sum(0), valid.sum(0).to(values.dtype)


def _instance_means(snap: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """Mean over steps of ``snap (B, J, ..., K)`` where ``valid (B, J, ..., K)``.

    Returns ``(B, ..., K)`` values and the ``(B, ..., K)`` mask of instances with a valid
    step.
    """
    k = valid.sum(1)
    total = torch.where(valid, snap, torch.zeros_like(snap)).sum(1)
    return total / k.clamp_min(1).to(snap.dtype), k > 0


def scale_free_mae(results: dict, std: Sequence[float]) -> float:
    """Mean over channels of each channel's MAE divided by its training std ``std[c]``.

    Args:
        results: :meth:`ForecastMetrics.compute`'s dict; its ``per_channel`` MAE means are
            read in channel order.
        std: ``(C,)`` per-channel standard deviations (``StandardScaler.std``).

    Equals ``results["overall"]["smae"]["mean"]`` when every snapshot observes every channel
    (module docstring); useful for results computed without ``channel_std``.
    """
    mae = [stats["mae"]["mean"] for stats in results["per_channel"].values()]
    if len(mae) != len(std):
        raise ValueError(
            f"expected {len(mae)} standard deviations, one per channel; got {len(std)}"
        )
    return math.fsum(m / float(s) for m, s in zip(mae, std, strict=True)) / len(mae)


class ForecastMetrics(Metric):
    """The declared metrics of a forecast, aggregated as described in the module docstring.

    ``update(pred, target, mask=None)`` takes ``(B, J, N, C)`` tensors with
    ``J == num_steps`` and ``C == num_channels`` (N is free); ``compute()`` returns a
    JSON-serialisable nested dict of Python floats::

        {"overall": {m: {"mean": float, "std": float} for m in metrics},
         "pooled": {"mae": float, "rmse": float},
         "per_step": {m: {"mean": [J floats], "std": [J floats]} for m in metrics},
         "per_channel": {name: {m: {"mean": float, "std": float} for m in metrics}},
         "num_instances": int, "v_max": float}

    with ``metrics`` the declared ones (:func:`declared`, in their order) less those that
    need ``channel_std`` (``smae``) when it is not given (``(C,)``, the training standard
    deviations of the channels, all > 0). :attr:`metric_infos` are the ones computed.
    """

    full_state_update = False
    is_differentiable = False
    higher_is_better = None

    def __init__(
        self,
        num_steps: int,
        num_channels: int,
        channel_names: Sequence[str] | None = None,
        channel_std: Sequence[float] | None = None,
        quantile_levels: Sequence[float] | None = None,
        quantile_metrics: Sequence[MetricInfo] = (),
        channel_mean: Sequence[float] | None = None,
    ) -> None:
        super().__init__()
        if channel_names is None:
            channel_names = [f"ch{c}" for c in range(num_channels)]
        if len(channel_names) != num_channels or len(set(channel_names)) != num_channels:
            raise ValueError(
                f"channel_names must be {num_channels} unique names, got {list(channel_names)}"
            )
        self.num_steps, self.num_channels = num_steps, num_channels
        self.channel_names = [str(c) for c in channel_names]
        self.channel_std = None if channel_std is None else _checked_std(channel_std, num_channels)
        self.zero_bound = None if channel_mean is None else zero_bounds(channel_mean)
        if self.zero_bound is not None and len(self.zero_bound) != num_channels:
            raise ValueError(f"channel_mean must be {num_channels} means, one per channel")
        self.metric_infos = tuple(
            info
            for info in declared()
            if self.channel_std is not None or not info.needs_channel_std
        )
        # quantile forecasts at these levels (update's ``quantiles``): their metrics too
        # (quantile_forecast_metrics gives both)
        self.quantile_levels = tuple(float(t) for t in quantile_levels or ())
        self.metric_infos += tuple(quantile_metrics)
        self.metric_names = tuple(info.name for info in self.metric_infos)
        k, f64 = len(self.metric_names), torch.float64
        for group, shape in (("overall", ()), ("step", (num_steps,)), ("channel", (num_channels,))):
            self.add_state(f"{group}_sum", torch.zeros(*shape, k, dtype=f64), dist_reduce_fx="sum")
            self.add_state(
                f"{group}_sumsq", torch.zeros(*shape, k, dtype=f64), dist_reduce_fx="sum"
            )
            self.add_state(
                f"{group}_count", torch.zeros(*shape, k, dtype=f64), dist_reduce_fx="sum"
            )
        for name in ("abs_sum", "sq_sum", "entry_count"):
            self.add_state(name, torch.zeros((), dtype=f64), dist_reduce_fx="sum")
        self.add_state("v_max", torch.tensor(-math.inf, dtype=f64), dist_reduce_fx="max")

    def update(
        self,
        pred: Tensor,
        target: Tensor,
        mask: Tensor | None = None,
        quantiles: Tensor | None = None,
    ) -> None:
        """Accumulate a batch of shape ``(B, num_steps, N, num_channels)`` (mask optional;
        ``quantiles`` ``(B, J, N, C, Q)`` at ``quantile_levels``, given exactly with them).

        Raises:
            ValueError: naming the expected and actual shapes if they do not match.
        """
        shapes = {tuple(t.shape) for t in (pred, target, mask) if t is not None}
        if (
            pred.ndim != 4
            or pred.shape[1::2] != (self.num_steps, self.num_channels)
            or len(shapes) > 1
        ):
            raise ValueError(
                f"expected pred, target (and mask) of shape "
                f"(B, J={self.num_steps}, N, C={self.num_channels}), got pred {tuple(pred.shape)}, "
                f"target {tuple(target.shape)}, mask {None if mask is None else tuple(mask.shape)}"
            )
        want = (*pred.shape, len(self.quantile_levels))
        if (quantiles is None) != (not self.quantile_levels) or (
            quantiles is not None and tuple(quantiles.shape) != want
        ):
            got = None if quantiles is None else tuple(quantiles.shape)
            raise ValueError(f"expected quantiles of shape {want if want[-1] else None}, got {got}")
        pred, target = pred.detach().double(), target.detach().double()
        if quantiles is not None:
            quantiles = quantiles.detach().double()
        mask = torch.ones_like(pred, dtype=torch.bool) if mask is None else mask.bool()
        if pred.numel() == 0:
            return

        observed = torch.where(mask, target, torch.full_like(target, -math.inf))
        self.v_max = torch.maximum(self.v_max, observed.max())
        e = torch.where(mask, pred - target, torch.zeros_like(pred))
        self.abs_sum += e.abs().sum()
        self.sq_sum += e.square().sum()
        self.entry_count += mask.sum()

        std = None
        if self.channel_std is not None:
            std = torch.tensor(self.channel_std, dtype=pred.dtype, device=pred.device)
        zero = None
        if self.zero_bound is not None:
            zero = torch.tensor(self.zero_bound, dtype=pred.dtype, device=pred.device)
        snapshots = Snapshots(pred, target, mask, std, quantiles, self.quantile_levels, zero)
        snap = self._per_snapshot(snapshots)  # (B, J, K)
        snap_c = self._per_snapshot(snapshots.channels)  # (B, J, C, K)
        valid, valid_c = self._defined(snapshots), self._defined(snapshots.channels)

        for group, values, ok in (
            ("overall", *_instance_means(snap, valid)),
            ("step", snap, valid),
            ("channel", *_instance_means(snap_c, valid_c)),
        ):
            for suffix, moment in zip(("sum", "sumsq", "count"), _moments(values, ok), strict=True):
                getattr(self, f"{group}_{suffix}").add_(moment)

    def _per_snapshot(self, snapshots: Snapshots) -> Tensor:
        """``(..., K)``: the K metrics' values of each snapshot, in :attr:`metric_names`
        order; a peak term is added at :meth:`compute`."""
        return torch.stack([info.per_snapshot(snapshots) for info in self.metric_infos], -1)

    def _defined(self, snapshots: Snapshots) -> Tensor:
        """``(..., K)``: where each metric has a value (:attr:`MetricInfo.defined`)."""
        return torch.stack(
            [
                snapshots.observed if info.defined is None else info.defined(snapshots)
                for info in self.metric_infos
            ],
            -1,
        )

    def compute(self) -> dict:
        """Nested dict of Python floats (see class docstring); NaN where nothing was observed."""
        v_max = float(self.v_max)
        peak_terms = [
            (i, info.peak_term(v_max))
            for i, info in enumerate(self.metric_infos)
            if info.peak_term is not None
        ]

        def stats(group: str) -> tuple[list, list]:
            n = getattr(self, f"{group}_count")
            mean = getattr(self, f"{group}_sum") / n
            std = (getattr(self, f"{group}_sumsq") / n - mean.square()).clamp_min(0).sqrt()
            for i, term in peak_terms:
                mean[..., i] += term
            return mean.tolist(), std.tolist()

        def by_metric(mean: list, std: list) -> dict:
            return {m: {"mean": mean[i], "std": std[i]} for i, m in enumerate(self.metric_names)}

        om, os_ = stats("overall")
        sm, ss = stats("step")
        cm, cs = stats("channel")
        count = float(self.entry_count)
        return {
            "overall": by_metric(om, os_),
            "pooled": {
                "mae": float(self.abs_sum) / count if count else math.nan,
                "rmse": math.sqrt(float(self.sq_sum) / count) if count else math.nan,
            },
            "per_step": {
                m: {"mean": [r[i] for r in sm], "std": [r[i] for r in ss]}
                for i, m in enumerate(self.metric_names)
            },
            "per_channel": {
                name: by_metric(cm[k], cs[k]) for k, name in enumerate(self.channel_names)
            },
            # every metric is defined where MAE is: on each instance with an observation
            "num_instances": int(self.overall_count[0]),
            "v_max": v_max,
        }


def ssim_blind_channels(std: Sequence[float], names: Sequence[str]) -> list[str]:
    """The channels whose training spread ``std`` lies below the SSIM constants' scale
    (``k2 L = 0.6`` in the data's units, the paper's ``L = 2``): ``c2`` outweighs their
    variances, so their SSIM is near 1 whatever the forecast (a channel in fractions,
    0.002 ± 0.001, scored 1 where the same data times 1,000 scored 0.84)."""
    return [n for n, s in zip(names, std, strict=True) if float(s) < SSIM_K2 * SSIM_L]


def _checked_std(std: Sequence[float], num_channels: int) -> tuple[float, ...]:
    """``std`` as a tuple of floats (a tuple, not a state: fixed, and the same on every rank).

    Raises:
        ValueError: not ``num_channels`` finite values > 0.
    """
    values = tuple(float(s) for s in std)
    if len(values) != num_channels or not all(math.isfinite(s) and s > 0 for s in values):
        raise ValueError(
            f"channel_std must be {num_channels} finite standard deviations > 0, one per "
            f"channel; got {list(values)}"
        )
    return values


def quantile_forecast_metrics(
    num_steps: int,
    num_channels: int,
    channel_names: Sequence[str] | None = None,
    channel_std: Sequence[float] | None = None,
    levels: Sequence[float] = (),
    channel_mean: Sequence[float] | None = None,
) -> ForecastMetrics:
    """:class:`ForecastMetrics` of point forecasts and, with ``levels``, of quantile
    forecasts at them (:func:`~cloudlstm.engine.quantile_metrics.quantile_infos`)."""
    levels = tuple(levels)
    return ForecastMetrics(
        num_steps,
        num_channels,
        channel_names,
        channel_std=channel_std,
        quantile_levels=levels or None,
        quantile_metrics=quantile_infos(levels) if levels else (),
        channel_mean=channel_mean,
    )
