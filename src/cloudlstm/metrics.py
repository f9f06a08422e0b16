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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from torchmetrics import Metric


@dataclass(frozen=True)
class MetricInfo:
    """What every part that reports a metric needs to know of it, declared once.

    Attributes:
        name: its key in results (``overall[name]``) and logs (``test/<name>``).
        label: how tables and figures name it.
        higher_is_better: PSNR, SSIM; the others are errors.
        at_validation: logged as ``val/<name>`` at every validation (W&B summary: its best).
        per_horizon: logged per forecast step as ``<stage>/<name>_hNN`` scalars.
    """

    name: str
    label: str
    higher_is_better: bool = False
    at_validation: bool = True
    per_horizon: bool = True

    @property
    def best(self) -> str:
        """``max`` or ``min``: how the best of a column or a curve is chosen."""
        return "max" if self.higher_is_better else "min"


# The reported metrics, in the order of tables. Their per-snapshot values come from
# snapshot_metrics (the paper's four) and from the channels' std (smae).
DECLARED: tuple[MetricInfo, ...] = (
    MetricInfo("mae", "MAE"),
    MetricInfo("rmse", "RMSE"),
    MetricInfo("psnr", "PSNR (dB)", higher_is_better=True, per_horizon=False),
    MetricInfo("ssim", "SSIM", higher_is_better=True, per_horizon=False),
    MetricInfo("smae", "scale-free MAE"),
)
METRIC_INFO: dict[str, MetricInfo] = {m.name: m for m in DECLARED}
METRICS: tuple[str, ...] = ("mae", "rmse", "psnr", "ssim")  # the paper's, per snapshot
SMAE = "smae"  # scale-free MAE, reported when ForecastMetrics knows the channels' std
ALL_METRICS: tuple[str, ...] = tuple(METRIC_INFO)
SSIM_L, SSIM_K1, SSIM_K2 = 2.0, 0.1, 0.3
MSE_EPS = 1e-12


def _check_same_shape(pred: Tensor, target: Tensor, mask: Tensor | None) -> None:
    if (
        pred.ndim != 4
        or target.shape != pred.shape
        or (mask is not None and mask.shape != pred.shape)
    ):
        raise ValueError(
            "expected pred, target (and mask) of the same shape (B, J, N, C); got "
            f"pred {tuple(pred.shape)}, target {tuple(target.shape)}, "
            f"mask {None if mask is None else tuple(mask.shape)}"
        )


def snapshot_metrics(
    pred: Tensor, target: Tensor, mask: Tensor | None = None, v_max: float | Tensor | None = None
) -> dict[str, Tensor]:
    """Per-snapshot metrics.

    Args:
        pred, target: ``(B, J, N, C)``.
        mask: ``(B, J, N, C)`` bool, True = observed; None = all observed.
        v_max: peak value for PSNR; PSNR is returned only if given.

    Returns:
        ``{"mae", "rmse", "ssim"[, "psnr"]}`` each ``(B, J)``, computed in the input dtype and
        reduced over the observed entries of ``(N, C)``; NaN where a snapshot has none.
    """
    _check_same_shape(pred, target, mask)
    mask = torch.ones_like(pred, dtype=torch.bool) if mask is None else mask.bool()
    w = mask.to(pred.dtype)
    x = torch.where(mask, pred, torch.zeros_like(pred))
    y = torch.where(mask, target, torch.zeros_like(target))
    dims = (-2, -1)
    n = w.sum(dims)  # (B, J); 0 -> NaN results via 0/0

    def mean(t: Tensor) -> Tensor:
        return (w * t).sum(dims) / n

    e = x - y
    mse = mean(e.square())
    mu_x, mu_y = mean(x), mean(y)
    dx, dy = x - mu_x[..., None, None], y - mu_y[..., None, None]
    var_x, var_y, cov = mean(dx.square()), mean(dy.square()), mean(dx * dy)
    c1, c2 = (SSIM_K1 * SSIM_L) ** 2, (SSIM_K2 * SSIM_L) ** 2
    ssim = ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / (
        (mu_x.square() + mu_y.square() + c1) * (var_x + var_y + c2)
    )
    out = {"mae": mean(e.abs()), "rmse": mse.sqrt(), "ssim": ssim}
    if v_max is not None:
        v_max = torch.as_tensor(v_max, dtype=pred.dtype, device=pred.device)
        out["psnr"] = 20 * torch.log10(v_max) - 10 * torch.log10(mse.clamp_min(MSE_EPS))
    return out


def _stacked(pred: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """``snapshot_metrics`` stacked in ``METRICS`` order: ``(B, J, 4)``.

    Uses ``v_max=1``, so the psnr column holds ``-10 log10(mse)``; ``20 log10(v_max)`` is added
    at compute time once the test-set maximum is known.
    """
    out = snapshot_metrics(pred, target, mask, v_max=1.0)
    return torch.stack([out[m] for m in METRICS], -1)


def _moments(values: Tensor, valid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Sum, sum of squares (over dim 0) of ``values (B, ..., K)`` where ``valid (B, ...)``."""
    v = torch.where(valid[..., None], values, torch.zeros_like(values))
    return v.sum(0), v.square().sum(0), valid.sum(0).to(values.dtype)


def _instance_means(snap: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """Mean over steps of ``snap (B, J, ..., K)`` where ``valid (B, J, ...)``.

    Returns ``(B, ..., K)`` values and the ``(B, ...)`` mask of instances with a valid step.
    """
    k = valid.sum(1)
    total = torch.where(valid[..., None], snap, torch.zeros_like(snap)).sum(1)
    return total / k.clamp_min(1)[..., None].to(snap.dtype), k > 0


def _scaled_mae(mae_c: Tensor, valid_c: Tensor, std: Tensor) -> tuple[Tensor, Tensor]:
    """Scale-free MAE of snapshots from their per-channel MAE.

    Args:
        mae_c: ``(B, J, C)`` MAE of each snapshot's channel (NaN where unobserved).
        valid_c: ``(B, J, C)`` True where the channel has an observed entry.
        std: ``(C,)`` the channels' training standard deviations.

    Returns:
        ``(B, J)`` mean over the observed channels of ``mae_c / std`` (NaN where none is) and
        ``(B, J, C)`` ``mae_c / std``.
    """
    scaled = mae_c / std
    total = torch.where(valid_c, scaled, torch.zeros_like(scaled)).sum(-1)
    return total / valid_c.sum(-1).to(scaled.dtype), scaled


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
    """MAE / RMSE / PSNR / SSIM of a forecast, aggregated as described in the module docstring.

    ``update(pred, target, mask=None)`` takes ``(B, J, N, C)`` tensors with
    ``J == num_steps`` and ``C == num_channels`` (N is free); ``compute()`` returns a
    JSON-serialisable nested dict of Python floats::

        {"overall": {m: {"mean": float, "std": float} for m in metrics},
         "pooled": {"mae": float, "rmse": float},
         "per_step": {m: {"mean": [J floats], "std": [J floats]} for m in metrics},
         "per_channel": {name: {m: {"mean": float, "std": float} for m in metrics}},
         "num_instances": int, "v_max": float}

    with ``metrics`` = ``METRICS``, plus ``"smae"`` when ``channel_std`` (``(C,)``, the
    training standard deviations of the channels, all > 0) is given.
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
        self.metric_names = METRICS if self.channel_std is None else ALL_METRICS
        k, f64 = len(self.metric_names), torch.float64
        for group, shape in (("overall", ()), ("step", (num_steps,)), ("channel", (num_channels,))):
            self.add_state(f"{group}_sum", torch.zeros(*shape, k, dtype=f64), dist_reduce_fx="sum")
            self.add_state(
                f"{group}_sumsq", torch.zeros(*shape, k, dtype=f64), dist_reduce_fx="sum"
            )
            self.add_state(f"{group}_count", torch.zeros(shape, dtype=f64), dist_reduce_fx="sum")
        for name in ("abs_sum", "sq_sum", "entry_count"):
            self.add_state(name, torch.zeros((), dtype=f64), dist_reduce_fx="sum")
        self.add_state("v_max", torch.tensor(-math.inf, dtype=f64), dist_reduce_fx="max")

    def update(self, pred: Tensor, target: Tensor, mask: Tensor | None = None) -> None:
        """Accumulate a batch of shape ``(B, num_steps, N, num_channels)`` (mask optional).

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
        pred, target = pred.detach().double(), target.detach().double()
        mask = torch.ones_like(pred, dtype=torch.bool) if mask is None else mask.bool()
        b, j, n, c = pred.shape
        if pred.numel() == 0:
            return

        observed = torch.where(mask, target, torch.full_like(target, -math.inf))
        self.v_max = torch.maximum(self.v_max, observed.max())
        e = torch.where(mask, pred - target, torch.zeros_like(pred))
        self.abs_sum += e.abs().sum()
        self.sq_sum += e.square().sum()
        self.entry_count += mask.sum()

        snap = _stacked(pred, target, mask)  # (B, J, 4)
        valid = mask.any(-1).any(-1)  # (B, J)

        def per_channel(t: Tensor) -> Tensor:  # (B, J, N, C) -> (B, J*C, N, 1)
            return t.transpose(2, 3).reshape(b, j * c, n, 1)

        snap_c = _stacked(per_channel(pred), per_channel(target), per_channel(mask))
        snap_c = snap_c.reshape(b, j, c, len(METRICS))  # (B, J, C, 4)
        valid_c = mask.any(2)  # (B, J, C)
        if self.channel_std is not None:
            std = torch.tensor(self.channel_std, dtype=pred.dtype, device=pred.device)
            smae, smae_c = _scaled_mae(snap_c[..., METRICS.index("mae")], valid_c, std)
            snap = torch.cat([snap, smae[..., None]], -1)  # (B, J, 5)
            snap_c = torch.cat([snap_c, smae_c[..., None]], -1)  # (B, J, C, 5)

        for group, values, ok in (
            ("overall", *_instance_means(snap, valid)),
            ("step", snap, valid),
            ("channel", *_instance_means(snap_c, valid_c)),
        ):
            for suffix, moment in zip(("sum", "sumsq", "count"), _moments(values, ok), strict=True):
                getattr(self, f"{group}_{suffix}").add_(moment)

    def compute(self) -> dict:
        """Nested dict of Python floats (see class docstring); NaN where nothing was observed."""
        v_max = float(self.v_max)
        shift = 20 * math.log10(v_max) if v_max > 0 else math.nan

        def stats(group: str) -> tuple[list, list]:
            n = getattr(self, f"{group}_count")[..., None]
            mean = getattr(self, f"{group}_sum") / n
            std = (getattr(self, f"{group}_sumsq") / n - mean.square()).clamp_min(0).sqrt()
            mean[..., METRICS.index("psnr")] += shift
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
            "num_instances": int(self.overall_count),
            "v_max": v_max,
        }


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
