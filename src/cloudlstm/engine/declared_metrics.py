"""The declared metrics: what each is, how a snapshot's value is computed, and how every
part that reports it treats it (:class:`MetricInfo`, :data:`DECLARED`).

The formulas, the aggregation and the masking are in :mod:`cloudlstm.engine.metrics`, whose
:class:`~cloudlstm.engine.metrics.ForecastMetrics` computes every declared metric. This
module imports no torch (the per-snapshot computations use only the methods of the tensors
they are given), so the programs that read results, ``compare`` and the report, start
without it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

    from cloudlstm.engine.snapshots import Snapshots

SSIM_L, SSIM_K1, SSIM_K2 = 2.0, 0.1, 0.3
MSE_EPS = 1e-12


# ------------------------------------------------------------- per-snapshot computations


def _mae(s: Snapshots) -> Tensor:
    return s.mean(s.error.abs())


def _rmse(s: Snapshots) -> Tensor:
    return s.mse.sqrt()


def _psnr_without_peak(s: Snapshots) -> Tensor:
    """PSNR less its ``20 log10(v_max)`` term, which needs the whole set's peak."""
    return -10 * s.mse.clamp_min(MSE_EPS).log10()


def _psnr_peak(v_max: float) -> float:
    return 20 * math.log10(v_max) if v_max > 0 else math.nan


def _mape(s: Snapshots) -> Tensor:
    nonzero = s.nonzero_target
    ratio = ((s.pred - s.target).abs() / s.target.abs()).where(nonzero, 0.0)
    return 100 * ratio.sum(s.dims) / nonzero.sum(s.dims)


def _has_nonzero_target(s: Snapshots) -> Tensor:
    return s.nonzero_target.any(-1).any(-1)


def _ssim(s: Snapshots) -> Tensor:
    mu_x, mu_y = s.mean(s.x), s.mean(s.y)
    dx, dy = s.x - mu_x[..., None, None], s.y - mu_y[..., None, None]
    var_x, var_y, cov = s.mean(dx.square()), s.mean(dy.square()), s.mean(dx * dy)
    c1, c2 = (SSIM_K1 * SSIM_L) ** 2, (SSIM_K2 * SSIM_L) ** 2
    return ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / (
        (mu_x.square() + mu_y.square() + c1) * (var_x + var_y + c2)
    )


def _scale_free_mae(s: Snapshots) -> Tensor:
    """The mean over the channels a snapshot observes of the channel's MAE over its std."""
    channels = s.channels
    scaled = _mae(channels) / s.channel_std  # (..., C)
    total = scaled.where(channels.observed, 0.0).sum(-1)
    return total / channels.observed.sum(-1).to(scaled.dtype)


@dataclass(frozen=True)
class MetricInfo:
    """A metric, declared once: what it is, how a snapshot's value is computed, and how
    every part that reports it treats it.

    Attributes:
        name: its key in results (``overall[name]``) and logs (``test/<name>``).
        label: how tables and figures name it.
        per_snapshot: :class:`Snapshots` ``(...)`` -> its value for each snapshot ``(...)``,
            NaN where a snapshot has no observed entry; computed in the snapshots' dtype.
        higher_is_better: PSNR, SSIM; the others are errors.
        at_validation: logged as ``val/<name>`` at every validation (W&B summary: its best).
        per_horizon: logged per forecast step as ``<stage>/<name>_hNN`` scalars.
        needs_channel_std: computed only where the channels' training standard deviations
            are known (``ForecastMetrics(channel_std=...)``; training always gives them).
        peak_term: ``v_max`` -> a term added to every mean once the whole set's peak
            observed target ``v_max`` is known (PSNR's ``20 log10(v_max)``); the snapshots'
            values are accumulated without it.
        defined: :class:`Snapshots` ``(...)`` -> ``(...)`` bool, the snapshots where the
            metric has a value (MAPE: a target that is not zero); None: every snapshot with
            an observed entry. Snapshots outside it are left out of the metric's means.
        lowest, highest: the values it can take (an error is at least 0, SSIM lies in
            [-1, 1]); a results file with a value outside them was not written by a run.
        target: the value that is best where neither end is (an interval's coverage: its
            nominal one, 0.8 for ``coverage80``); tables mark the value closest to it.
            None: the best is an end (:attr:`best`). No declared point metric is signed
            (a bias, whose best is 0): each is an error or a score with a best end.
    """

    name: str
    label: str
    per_snapshot: Callable[[Snapshots], Tensor]
    higher_is_better: bool = False
    at_validation: bool = True
    per_horizon: bool = True
    needs_channel_std: bool = False
    peak_term: Callable[[float], float] | None = None
    defined: Callable[[Snapshots], Tensor] | None = None
    lowest: float = 0.0
    highest: float = math.inf
    target: float | None = None

    def can_be(self, value: float) -> bool:
        """Whether ``value`` is one this metric takes (NaN, nothing scored, is)."""
        return math.isnan(value) or self.lowest <= value <= self.highest

    @property
    def best(self) -> str:
        """``max`` or ``min``: how the best of a column or a curve is chosen."""
        return "max" if self.higher_is_better else "min"


# The reported metrics, in the order of tables and results. Read them through declared(),
# metric_names() and metric_info(): a copy taken at import would miss a metric added later.
DECLARED: tuple[MetricInfo, ...] = (
    MetricInfo("mae", "MAE", _mae),
    MetricInfo("rmse", "RMSE", _rmse),
    MetricInfo("mape", "MAPE (%)", _mape, defined=_has_nonzero_target),
    MetricInfo(
        "psnr",
        "PSNR (dB)",
        _psnr_without_peak,
        higher_is_better=True,
        per_horizon=False,
        peak_term=_psnr_peak,
        lowest=-math.inf,  # an error beyond the peak: a ratio below 1
    ),
    MetricInfo(
        "ssim", "SSIM", _ssim, higher_is_better=True, per_horizon=False, lowest=-1.0, highest=1.0
    ),
    MetricInfo("smae", "scale-free MAE", _scale_free_mae, needs_channel_std=True),
)


def declared() -> tuple[MetricInfo, ...]:
    """The declared metrics (:data:`DECLARED`), in the order of tables."""
    return DECLARED


def metric_names() -> tuple[str, ...]:
    """The declared metrics' names, in the order of tables."""
    return tuple(info.name for info in DECLARED)


def metric_info(name: str) -> MetricInfo:
    """The declaration of metric ``name``.

    Raises:
        KeyError: no metric of that name is declared.
    """
    for info in DECLARED:
        if info.name == name:
            return info
    raise KeyError(f"no metric {name!r} is declared; the metrics: {', '.join(metric_names())}")


def monitor_mode(key: str, default: str | None = "min") -> str | None:
    """``min`` or ``max``: which way a logged key such as ``val/ssim`` improves, read from
    its metric's declaration (:attr:`MetricInfo.best`), so that checkpointing, early
    stopping, a plateau scheduler and a search all follow the one declaration.

    ``<stage>/<name>`` with an optional ``_best`` (``val/mae_best``) or per-horizon
    ``_hNN`` suffix; a loss (``val/loss``, ``train/loss_step``) is ``min``. ``default`` for
    any other key (one this package does not log: its direction is not known here).
    """
    name = key.rsplit("/", 1)[-1]
    if name == "loss" or name.startswith("loss_"):
        return "min"
    horizon = re.fullmatch(r"(.+)_h\d+", name)
    for candidate in (name, name.removesuffix("_best"), horizon and horizon.group(1)):
        for info in DECLARED:
            if info.name == candidate:
                return info.best
    return default
