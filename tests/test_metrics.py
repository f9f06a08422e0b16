"""ForecastMetrics / snapshot_metrics against an independent numpy computation."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch

from cloudlstm.metrics import METRICS, ForecastMetrics, snapshot_metrics

B, J, N, C = 4, 2, 4, 2
NAMES = ["no2", "pm25"]


@pytest.fixture
def data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(0)
    target = rng.uniform(0.5, 10.0, (B, J, N, C))
    pred = target + rng.normal(0.0, 1.5, (B, J, N, C))
    mask = rng.random((B, J, N, C)) > 0.2
    mask[0, 1] = False  # a fully unobserved snapshot
    mask[1, :, :, 1] = False  # instance 1 never observes channel 1
    mask[3] = False  # a fully unobserved instance
    mask[2, 0, 0, 0] = True
    return (
        torch.tensor(pred, dtype=torch.float32),
        torch.tensor(target, dtype=torch.float32),
        torch.tensor(mask),
    )


# ---------------------------------------------------------------- numpy reference (loops)


def ref_snapshot(p: np.ndarray, t: np.ndarray, v_max: float) -> dict[str, float]:
    """Metrics of one snapshot from its observed values (1-D arrays)."""
    e = p - t
    mse = np.mean(e**2)
    mx, my = p.mean(), t.mean()
    vx, vy = np.mean((p - mx) ** 2), np.mean((t - my) ** 2)
    cov = np.mean((p - mx) * (t - my))
    c1, c2 = (0.1 * 2) ** 2, (0.3 * 2) ** 2
    return {
        "mae": np.mean(np.abs(e)),
        "rmse": np.sqrt(mse),
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


def instance_stats(snaps) -> dict[str, dict[str, float]]:
    out = {}
    for m in METRICS:
        per_instance = [np.mean([s[m] for s in row if s]) for row in snaps if any(row)]
        out[m] = mean_std(per_instance)
    return out


def reference(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> dict:
    pred, target, mask = pred.double().numpy(), target.double().numpy(), mask.numpy()
    v_max = float(target[mask].max())
    snaps = ref_snapshots(pred, target, mask, v_max)
    e = (pred - target)[mask]
    per_step = {m: {"mean": [], "std": []} for m in METRICS}
    for j in range(pred.shape[1]):
        for m in METRICS:
            stats = mean_std([row[j][m] for row in snaps if row[j]])
            per_step[m]["mean"].append(stats["mean"])
            per_step[m]["std"].append(stats["std"])
    return {
        "overall": instance_stats(snaps),
        "pooled": {"mae": float(np.abs(e).mean()), "rmse": float(np.sqrt((e**2).mean()))},
        "per_step": per_step,
        "per_channel": {
            name: instance_stats(ref_snapshots(pred, target, mask, v_max, channel=c))
            for c, name in enumerate(NAMES)
        },
        "num_instances": int(sum(mask[b].any() for b in range(pred.shape[0]))),
        "v_max": v_max,
    }


def assert_close(actual, expected, rel: float = 1e-9) -> None:
    """Recursive comparison of nested dicts / lists of floats."""
    if isinstance(expected, dict):
        assert set(actual) == set(expected)
        for k in expected:
            assert_close(actual[k], expected[k], rel)
    elif isinstance(expected, list):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_close(a, e, rel)
    else:
        assert actual == pytest.approx(expected, rel=rel, abs=1e-9)


def run(pred, target, mask=None, chunks=(None,)) -> dict:
    metric = ForecastMetrics(J, C, channel_names=NAMES)
    for idx in chunks:
        sel = slice(None) if idx is None else idx
        metric.update(pred[sel], target[sel], None if mask is None else mask[sel])
    return metric.compute()


# ---------------------------------------------------------------- tests


def test_matches_numpy_reference(data) -> None:
    pred, target, mask = data
    result = run(pred, target, mask)
    assert_close(result, reference(pred, target, mask))
    assert result["num_instances"] == 3
    assert isinstance(result["num_instances"], int)


def test_no_mask_means_all_observed(data) -> None:
    pred, target, _ = data
    full = torch.ones_like(pred, dtype=torch.bool)
    assert_close(run(pred, target), reference(pred, target, full))


def test_snapshot_metrics_matches_reference(data) -> None:
    pred, target, mask = data
    v_max = 12.0
    out = snapshot_metrics(pred.double(), target.double(), mask, v_max=v_max)
    assert set(out) == set(METRICS) and all(v.shape == (B, J) for v in out.values())
    snaps = ref_snapshots(pred.double().numpy(), target.double().numpy(), mask.numpy(), v_max)
    for b in range(B):
        for j in range(J):
            for m in METRICS:
                if snaps[b][j] is None:
                    assert math.isnan(out[m][b, j])
                else:
                    assert out[m][b, j].item() == pytest.approx(snaps[b][j][m], rel=1e-9)
    assert "psnr" not in snapshot_metrics(pred, target, mask)


def test_masked_entries_are_ignored(data) -> None:
    pred, target, mask = data
    pred2, target2 = pred.clone(), target.clone()
    pred2[~mask] = 1e6
    target2[~mask] = float("nan")
    target2[~mask & (torch.rand_like(pred) > 0.5)] = 1e6  # would change v_max if used
    assert_close(run(pred2, target2, mask), run(pred, target, mask), rel=1e-12)


def test_batch_split_and_order_invariance(data) -> None:
    pred, target, mask = data
    whole = run(pred, target, mask)
    perm = torch.tensor([2, 0, 3, 1])
    chunks = (perm[:1], perm[1:3], perm[3:])
    assert_close(run(pred, target, mask, chunks=chunks), whole, rel=1e-12)
    singles = tuple(torch.tensor([b]) for b in (3, 1, 0, 2))
    assert_close(run(pred, target, mask, chunks=singles), whole, rel=1e-12)


def test_merging_states_equals_single_pass(data) -> None:
    pred, target, mask = data
    whole = run(pred, target, mask)
    a, b = ForecastMetrics(J, C, NAMES), ForecastMetrics(J, C, NAMES)
    a.update(pred[:1], target[:1], mask[:1])
    b.update(pred[1:], target[1:], mask[1:])

    # simulated DDP reduction: sum every state, max the running max
    ddp = ForecastMetrics(J, C, NAMES)
    for name in ddp._defaults:
        x, y = getattr(a, name), getattr(b, name)
        setattr(ddp, name, torch.maximum(x, y) if name == "v_max" else x + y)
    ddp._update_count = 1
    assert_close(ddp.compute(), whole, rel=1e-12)

    a.merge_state(b)
    assert_close(a.compute(), whole, rel=1e-12)


def test_forward_accumulates_like_update(data) -> None:
    pred, target, mask = data
    metric = ForecastMetrics(J, C, NAMES)
    batch = metric(pred[:2], target[:2], mask[:2])  # batch-level result
    assert_close(batch, run(pred[:2], target[:2], mask[:2]), rel=1e-12)
    metric(pred[2:], target[2:], mask[2:])
    assert_close(metric.compute(), run(pred, target, mask), rel=1e-12)
    metric.reset()
    metric.update(pred, target, mask)
    assert_close(metric.compute(), run(pred, target, mask), rel=1e-12)


def test_perfect_prediction(data) -> None:
    _, target, mask = data
    result = run(target, target, mask)
    for section in [result["overall"], *result["per_channel"].values()]:
        assert section["mae"] == {"mean": 0.0, "std": 0.0}
        assert section["rmse"] == {"mean": 0.0, "std": 0.0}
        assert section["ssim"]["mean"] == pytest.approx(1.0)
        assert section["ssim"]["std"] == pytest.approx(0.0, abs=1e-12)
        assert section["psnr"]["mean"] == pytest.approx(20 * math.log10(result["v_max"]) + 120)
    assert result["pooled"] == {"mae": 0.0, "rmse": 0.0}
    assert result["per_step"]["ssim"]["mean"] == pytest.approx([1.0] * J)


@pytest.mark.parametrize(
    "pred_shape, target_shape, mask_shape",
    [
        ((B, J + 1, N, C), (B, J + 1, N, C), None),  # wrong number of steps
        ((B, J, N, C + 1), (B, J, N, C + 1), None),  # wrong number of channels
        ((B, J, N, C), (B, J, N + 1, C), None),  # pred / target differ
        ((B, J, N, C), (B, J, N, C), (B, J, N, 1)),  # mask differs
        ((J, N, C), (J, N, C), None),  # missing batch dimension
    ],
)
def test_wrong_shapes_raise(pred_shape, target_shape, mask_shape) -> None:
    metric = ForecastMetrics(J, C)
    mask = None if mask_shape is None else torch.ones(mask_shape, dtype=torch.bool)
    with pytest.raises(ValueError, match=rf"expected .*J={J}.*C={C}.*{re.escape(str(pred_shape))}"):
        metric.update(torch.zeros(pred_shape), torch.zeros(target_shape), mask)


def test_snapshot_metrics_shape_mismatch_raises() -> None:
    with pytest.raises(ValueError, match=r"same shape .*\(1, 2, 3, 4\).*\(1, 2, 3, 5\)"):
        snapshot_metrics(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 5))


def test_bad_channel_names_raise() -> None:
    with pytest.raises(ValueError, match="2 unique names"):
        ForecastMetrics(J, 2, channel_names=["a"])


def test_output_is_json_serialisable(data) -> None:
    pred, target, mask = data
    result = run(pred, target, mask)
    json.loads(json.dumps(result, allow_nan=False))
    assert list(result) == [
        "overall",
        "pooled",
        "per_step",
        "per_channel",
        "num_instances",
        "v_max",
    ]
    assert list(result["per_channel"]) == NAMES
    assert all(len(result["per_step"][m]["mean"]) == J for m in METRICS)
    default = ForecastMetrics(J, C)
    default.update(pred, target, mask)
    assert list(default.compute()["per_channel"]) == ["ch0", "ch1"]
