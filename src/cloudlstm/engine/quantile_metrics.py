"""Metrics of quantile forecasts: pinball loss, CRPS, and the coverage and width of each
central interval, declared like the point metrics of :mod:`cloudlstm.engine.metrics`.

A quantile forecast gives, for every entry ``(b, j, n, c)``, Q values ``q_1 <= ... <= q_Q``
at the levels ``tau_1 < ... < tau_Q`` (``module.quantiles``); :class:`Snapshots` carries
them as ``quantiles (..., N, C, Q)``. With ``y`` the target and the pinball (quantile) loss
``rho_tau(u) = max(tau u, (tau - 1) u)`` of ``u = y - q``, per observed entry:

* ``pinball = mean_q rho_tau_q(y - q_q)``;
* ``crps = 2 sum_q w_q rho_tau_q(y - q_q)``: the CRPS, ``2 int_0^1 rho_tau(y - F^-1(tau))
  dtau``, as a Riemann sum over the levels, level q standing for the levels between the
  midpoints to its neighbours (0 and 1 at the ends): ``w_q = (tau_{q+1} - tau_{q-1}) / 2``
  with ``tau_0 = -tau_1`` and ``tau_{Q+1} = 2 - tau_Q``. With the median alone it is the
  absolute error, the CRPS of a point forecast;
* for each central interval ``[q_lo, q_hi]`` of levels ``tau`` and ``1 - tau`` (both
  forecast), named by its nominal coverage ``P = 100 (1 - 2 tau)`` percent:
  ``coverage<P> = 1[q_lo <= y <= q_hi]`` (a fraction) and ``width<P> = q_hi - q_lo``.

Each is then a snapshot's mean over its observed entries, aggregated over instances, steps,
channels and point groups exactly as the point metrics, by the same
:class:`~cloudlstm.engine.metrics.ForecastMetrics`
(:func:`~cloudlstm.engine.metrics.quantile_forecast_metrics`). Coverage has no better
direction (the nominal one is right), so compare bolds none of its cells; the others are
losses.

:data:`QUANTILE_DECLARED` lists them for the usual central intervals (50, 80, 90 and 95 %):
what ``compare --metrics`` offers, the W&B summaries and the per-horizon scalars read. A run
reports the intervals of its own levels, any percentage (``coverage60`` for levels 0.2 and
0.8); :func:`quantile_metric_info` knows each, :func:`any_metric_info` every metric.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from cloudlstm.engine.declared_metrics import MetricInfo, metric_info

if TYPE_CHECKING:
    from torch import Tensor

    from cloudlstm.engine.snapshots import Snapshots

# The levels whose metrics are declared (and offered by compare): the usual central
# intervals 95, 90, 80 and 50 % around the median.
USUAL_LEVELS = (0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.975)
INTERVAL_KINDS = ("coverage", "width")
_INTERVAL_NAME = re.compile(r"(coverage|width)(\d+(?:\.\d+)?)")
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class CoverageInfo(MetricInfo):
    """An interval's coverage: neither higher nor lower is better, its nominal value is
    (:attr:`~cloudlstm.engine.declared_metrics.MetricInfo.target`), so it has no best end
    for a checkpoint or a search to go by."""

    @property
    def best(self) -> str | None:  # type: ignore[override]
        return None


def pinball(tau: float | Tensor, error: Tensor) -> Tensor:
    """``rho_tau(error)``, ``error = target - quantile``: ``tau e`` above, ``(tau - 1) e``
    below (elementwise, any shapes that broadcast)."""
    return (tau * error).maximum((tau - 1) * error)


def crps_weights(levels: Sequence[float]) -> list[float]:
    """``w_q``: the share of (0, 1) that level q stands for (module docstring); sum 1."""
    taus = list(levels)
    edges = [0.0, *((a + b) / 2 for a, b in zip(taus, taus[1:], strict=False)), 1.0]
    return [hi - lo for lo, hi in zip(edges, edges[1:], strict=False)]


def interval_percent(tau: float) -> float:
    """The nominal coverage in percent of the central interval ``[tau, 1 - tau]``."""
    return round(100 * (1 - 2 * tau), 6)


def percent_text(percent: float) -> str:
    """``80.0`` -> ``"80"``, ``99.5`` -> ``"99.5"``: how metric names write a percentage."""
    return f"{percent:g}"


def central_intervals(levels: Sequence[float]) -> list[tuple[int, int]]:
    """Index pairs ``(lo, hi)`` of the levels ``tau < 0.5`` whose mirror ``1 - tau`` is
    also forecast, widest interval first."""
    pairs = []
    for lo, tau in enumerate(levels):
        if tau >= 0.5:
            break
        hi = next((i for i, t in enumerate(levels) if abs(t - (1 - tau)) < _TOLERANCE), None)
        if hi is not None:
            pairs.append((lo, hi))
    return pairs


def _pair(levels: Sequence[float], percent: float) -> tuple[int, int]:
    """The index pair of the central interval of nominal coverage ``percent``."""
    for lo, hi in central_intervals(levels):
        if abs(interval_percent(levels[lo]) - percent) < 1e-6:
            return lo, hi
    raise ValueError(f"the levels {list(levels)} have no central {percent:g} % interval")


# ------------------------------------------------------------- per-snapshot computations


def _errors(s: Snapshots) -> Tensor:
    """``(..., N, C, Q)``: target minus each quantile, 0 where unobserved."""
    return s.y.unsqueeze(-1) - s.quantiles


def _pinball(s: Snapshots) -> Tensor:
    taus = s.y.new_tensor(s.levels)
    return s.mean(pinball(taus, _errors(s)).mean(-1))


def _crps(s: Snapshots) -> Tensor:
    taus = s.y.new_tensor(s.levels)
    weights = s.y.new_tensor(crps_weights(s.levels))
    return s.mean(2 * (pinball(taus, _errors(s)) * weights).sum(-1))


def _coverage(s: Snapshots, percent: float) -> Tensor:
    lo, hi = _pair(s.levels, percent)
    q = s.quantiles
    inside = (q[..., lo] <= s.y) & (s.y <= q[..., hi])
    return s.mean(inside.to(s.y.dtype))


def _width(s: Snapshots, percent: float) -> Tensor:
    lo, hi = _pair(s.levels, percent)
    return s.mean(s.quantiles[..., hi] - s.quantiles[..., lo])


# ------------------------------------------------------------------ declarations

PINBALL = MetricInfo("pinball", "pinball loss", _pinball, at_validation=False)
CRPS = MetricInfo("crps", "CRPS", _crps)


def interval_info(kind: str, percent: float) -> MetricInfo:
    """The declaration of ``coverage<P>`` or ``width<P>`` (``kind``) of the central
    ``percent`` % interval; per horizon, not at validation."""
    name = f"{kind}{percent_text(percent)}"
    if kind == "coverage":
        label = f"{percent_text(percent)} % coverage"
        return CoverageInfo(
            name,
            label,
            partial(_coverage, percent=percent),
            at_validation=False,
            target=percent / 100,
        )
    label = f"{percent_text(percent)} % width"
    return MetricInfo(name, label, partial(_width, percent=percent), at_validation=False)


def quantile_infos(levels: Sequence[float]) -> tuple[MetricInfo, ...]:
    """The metrics of a forecast at ``levels``: CRPS, pinball, then coverage and width of
    each central interval, widest first."""
    intervals = [interval_percent(levels[lo]) for lo, _ in central_intervals(levels)]
    return (
        CRPS,
        PINBALL,
        *(interval_info(kind, p) for p in intervals for kind in INTERVAL_KINDS),
    )


# The declared quantile metrics, in the order of tables (compare's --metrics offers them).
QUANTILE_DECLARED: tuple[MetricInfo, ...] = quantile_infos(USUAL_LEVELS)


def quantile_metric_names() -> tuple[str, ...]:
    """The declared quantile metrics' names."""
    return tuple(info.name for info in QUANTILE_DECLARED)


def is_quantile_metric(name: str) -> bool:
    """Whether ``name`` is a metric of quantile forecasts (any interval percentage)."""
    return name in ("crps", "pinball") or _INTERVAL_NAME.fullmatch(name) is not None


def quantile_metric_info(name: str) -> MetricInfo | None:
    """The declaration of quantile metric ``name`` (``crps``, ``coverage60``, ...), or None."""
    for info in QUANTILE_DECLARED:
        if info.name == name:
            return info
    match = _INTERVAL_NAME.fullmatch(name)
    if match is None or not 0 < float(match.group(2)) < 100:
        return None
    return interval_info(match.group(1), float(match.group(2)))


def any_metric_info(name: str) -> MetricInfo:
    """The declaration of metric ``name``: a point metric's
    (:func:`~cloudlstm.engine.declared_metrics.metric_info`) or a quantile forecast's.

    Raises:
        KeyError: no metric of that name is declared.
    """
    info = quantile_metric_info(name)
    return metric_info(name) if info is None else info


def only_quantile_metrics(results: dict[str, Any]) -> dict[str, Any]:
    """:meth:`ForecastMetrics.compute`'s ``results`` cut to the quantile metrics (the
    uncalibrated forecast's report: its point metrics are the calibrated one's)."""
    keep = {
        "overall": {m: v for m, v in results["overall"].items() if is_quantile_metric(m)},
        "per_step": {m: v for m, v in results["per_step"].items() if is_quantile_metric(m)},
        "per_channel": {
            name: {m: v for m, v in stats.items() if is_quantile_metric(m)}
            for name, stats in results["per_channel"].items()
        },
    }
    return {**keep, "num_instances": results["num_instances"]}
