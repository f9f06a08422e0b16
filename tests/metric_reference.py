"""The paper's metrics computed by hand in numpy, snapshot by snapshot (loops, float64).

An independent reading of the definitions in :mod:`cloudlstm.engine.metrics`, used by
``test_metrics.py`` (ForecastMetrics on synthetic arrays) and ``test_reported_metrics.py``
(metrics.json of a whole run against the raw data)::

    from metric_reference import assert_close, numpy_reference
    assert_close(metric.compute(), numpy_reference(pred, target, mask, channel_names))
"""

from __future__ import annotations

import numpy as np
import pytest

METRICS = ("mae", "rmse", "mape", "psnr", "ssim")


def ref_snapshot(p: np.ndarray, t: np.ndarray, v_max: float) -> dict[str, float]:
    """Metrics of one snapshot from its observed values (1-D arrays); MAPE is None where
    every target is zero."""
    e = p - t
    nonzero = t != 0  # MAPE leaves zero readings out
    mse = np.mean(e**2)
    mx, my = p.mean(), t.mean()
    vx, vy = np.mean((p - mx) ** 2), np.mean((t - my) ** 2)
    cov = np.mean((p - mx) * (t - my))
    c1, c2 = (0.1 * 2) ** 2, (0.3 * 2) ** 2
    return {
        "mae": np.mean(np.abs(e)),
        "rmse": np.sqrt(mse),
        "mape": 100 * np.mean(np.abs(e[nonzero]) / np.abs(t[nonzero])) if nonzero.any() else None,
        "psnr": 20 * np.log10(v_max) - 10 * np.log10(max(mse, 1e-12)),
        "ssim": ((2 * mx * my + c1) * (2 * cov + c2)) / ((mx**2 + my**2 + c1) * (vx + vy + c2)),
    }


def ref_snapshots(pred, target, mask, v_max, channel=None):
    """snaps[b][j] = dict of metrics, or None when nothing is observed."""
    snaps = []
    for b in range(pred.shape[0]):
        row = []
        for j in range(pred.shape[1]):
            p, t, m = pred[b, j], target[b, j], mask[b, j]
            if channel is not None:
                p, t, m = p[:, channel], t[:, channel], m[:, channel]
            row.append(ref_snapshot(p[m], t[m], v_max) if m.any() else None)
        snaps.append(row)
    return snaps


def mean_std(values: list[float]) -> dict[str, float]:
    return {"mean": float(np.mean(values)), "std": float(np.std(values))}


def instance_stats(snaps, metrics=METRICS) -> dict[str, dict[str, float]]:
    out = {}
    for m in metrics:
        per_instance = [
            np.mean(defined)
            for row in snaps
            if (defined := [s[m] for s in row if s and s[m] is not None])
        ]
        out[m] = mean_std(per_instance)
    return out


def add_scale_free(snaps, channel_snaps, std) -> None:
    """Add ``"smae"`` to every snapshot: the mean over the channels it observes of the
    channel's MAE divided by ``std[c]``; and to every channel snapshot: its MAE / ``std[c]``."""
    for c, rows in enumerate(channel_snaps):
        for row in rows:
            for snap in filter(None, row):
                snap["smae"] = snap["mae"] / std[c]
    for b, row in enumerate(snaps):
        for j, snap in enumerate(row):
            if snap is not None:
                seen = [rows[b][j]["smae"] for rows in channel_snaps if rows[b][j] is not None]
                snap["smae"] = float(np.mean(seen))


def numpy_reference(pred, target, mask, channel_names, channel_std=None) -> dict:
    """What ``ForecastMetrics.compute()`` must return for ``(B, J, N, C)`` arrays or tensors
    (``mask`` True = observed), with ``smae`` where ``channel_std`` ``(C,)`` is given."""
    pred, target, mask = (np.asarray(a) for a in (pred, target, mask))
    pred, target, mask = pred.astype(np.float64), target.astype(np.float64), mask.astype(bool)
    v_max = float(target[mask].max())
    snaps = ref_snapshots(pred, target, mask, v_max)
    channel_snaps = [
        ref_snapshots(pred, target, mask, v_max, channel=c) for c in range(len(channel_names))
    ]
    metrics = METRICS
    if channel_std is not None:
        add_scale_free(snaps, channel_snaps, channel_std)
        metrics = (*METRICS, "smae")
    e = (pred - target)[mask]
    per_step = {m: {"mean": [], "std": []} for m in metrics}
    for j in range(pred.shape[1]):
        for m in metrics:
            stats = mean_std([row[j][m] for row in snaps if row[j] and row[j][m] is not None])
            per_step[m]["mean"].append(stats["mean"])
            per_step[m]["std"].append(stats["std"])
    return {
        "overall": instance_stats(snaps, metrics),
        "pooled": {"mae": float(np.abs(e).mean()), "rmse": float(np.sqrt((e**2).mean()))},
        "per_step": per_step,
        "per_channel": {
            name: instance_stats(channel_snaps[c], metrics) for c, name in enumerate(channel_names)
        },
        "num_instances": int(sum(mask[b].any() for b in range(pred.shape[0]))),
        "v_max": v_max,
    }


def assert_close(actual, expected, rel: float = 1e-9, abs: float = 1e-9, at: str = "") -> None:
    """Recursive comparison of nested dicts / lists of floats; a failure names the entry."""
    if isinstance(expected, dict):
        assert set(actual) == set(expected), at
        for k in expected:
            assert_close(actual[k], expected[k], rel, abs, f"{at}[{k!r}]")
    elif isinstance(expected, list):
        assert len(actual) == len(expected), at
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_close(a, e, rel, abs, f"{at}[{i}]")
    else:
        assert actual == pytest.approx(expected, rel=rel, abs=abs), f"{at}: {actual} != {expected}"
