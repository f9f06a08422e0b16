"""ForecastMetrics / snapshot_metrics against an independent numpy computation; a metric
declared once is computed, logged and compared."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from metric_reference import METRICS, assert_close, numpy_reference, ref_snapshots

from cloudlstm.engine import declared_metrics
from cloudlstm.engine.declared_metrics import MetricInfo, metric_names
from cloudlstm.engine.metrics import ForecastMetrics, scale_free_mae
from cloudlstm.engine.snapshots import Snapshots

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


def reference(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> dict:
    return numpy_reference(pred.double(), target.double(), mask, NAMES)


def run(pred, target, mask=None, chunks=(None,), std=None, mean=None) -> dict:
    metric = ForecastMetrics(J, C, channel_names=NAMES, channel_std=std, channel_mean=mean)
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


def test_each_snapshots_metrics_match_the_reference(data) -> None:
    """One window at a time, each forecast step's value is that snapshot's metric (NaN
    where nothing is observed), with PSNR's peak the window's own."""
    pred, target, mask = data
    for b in range(B):
        metric = ForecastMetrics(J, C)
        metric.update(pred[b : b + 1].double(), target[b : b + 1].double(), mask[b : b + 1])
        result = metric.compute()
        arrays = [t[b : b + 1].double().numpy() for t in (pred, target)]
        snaps = ref_snapshots(*arrays, mask[b : b + 1].numpy(), result["v_max"])[0]
        for j in range(J):
            for m in METRICS:
                got = result["per_step"][m]["mean"][j]
                if snaps[j] is None:
                    assert math.isnan(got)
                else:
                    assert got == pytest.approx(snaps[j][m], rel=1e-9)


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


# ---------------------------------------------------------------- scale-free MAE


def test_scale_free_mae_by_hand() -> None:
    """2 instances, 2 steps, 2 points, 2 channels, all observed; step 2 errs twice step 1.

    Channel MAE / std at step 1: instance 0: 3 / 10, 0.2 / 0.5; instance 1: 4 / 10, 0.3 / 0.5.
    """
    err = torch.tensor(
        [  # (B, N, C) at step 1: |e| of channel 0 is 2, 4 and 6, 2; of channel 1 0.1, 0.3 ...
            [[2.0, -0.1], [-4.0, 0.3]],
            [[6.0, 0.5], [2.0, -0.1]],
        ],
        dtype=torch.float64,
    )
    err = torch.stack([err, 2 * err], 1)  # (B, J, N, C)
    target = torch.full_like(err, 5.0)
    result = run(target + err, target, std=[10.0, 0.5])
    # snapshots: instance 0: (0.3 + 0.4) / 2 = 0.35 and 0.7; instance 1: (0.4 + 0.6) / 2 = 0.5
    # and 1.0; instances: 0.525 and 0.75
    assert result["overall"]["smae"]["mean"] == pytest.approx(0.6375)
    assert result["overall"]["smae"]["std"] == pytest.approx(0.1125)
    assert result["per_step"]["smae"]["mean"] == pytest.approx([0.425, 0.85])
    assert result["per_step"]["smae"]["std"] == pytest.approx([0.075, 0.15])
    # channel MAE: (4.5 + 6) / 2 = 5.25 and (0.3 + 0.45) / 2 = 0.375
    assert result["per_channel"]["no2"]["smae"]["mean"] == pytest.approx(5.25 / 10)
    assert result["per_channel"]["pm25"]["smae"]["mean"] == pytest.approx(0.375 / 0.5)
    assert result["per_channel"]["pm25"]["smae"]["std"] == pytest.approx(0.075 / 0.5)
    # all observed: the mean of the per-channel MAEs in units of their std
    assert scale_free_mae(result, [10.0, 0.5]) == pytest.approx((5.25 / 10 + 0.375 / 0.5) / 2)
    assert scale_free_mae(result, [10.0, 0.5]) == pytest.approx(result["overall"]["smae"]["mean"])
    assert set(result["overall"]) == set(metric_names())
    assert "smae" not in run(target + err, target)["overall"]  # without std: as before


def test_mape_by_hand_leaves_out_zero_targets() -> None:
    """2 instances, 2 steps, 2 points, 2 channels; zeros (a reading of 0, and one that came
    back from the scaler's float32 round trip as 2e-4 in channel pm25, whose training mean
    is 2,000: within 4 float32 steps of it, 9.5e-4) are left out of MAPE, not of MAE.

    Instance 0, step 1: targets 10, 20 | 0, 5 with |e| 1, 4 | 3, 1: MAPE = (10 + 20 + 20) / 3.
    Instance 0, step 2: every target zero: no MAPE (its MAE counts).
    Instance 1, step 1: targets 4 everywhere, |e| 1: MAPE 25; step 2: unobserved.
    """
    target = torch.zeros(2, 2, 2, 2, dtype=torch.float64)
    target[0, 0] = torch.tensor([[10.0, 20.0], [0.0, 5.0]])
    target[0, 1] = torch.tensor([[0.0, 2e-4], [0.0, 0.0]])
    target[1, 0] = 4.0
    err = torch.zeros_like(target)
    err[0, 0] = torch.tensor([[1.0, -4.0], [3.0, 1.0]])
    err[0, 1] = 2.0
    err[1, 0] = -1.0
    mask = torch.ones_like(target, dtype=torch.bool)
    mask[1, 1] = False
    result = run(target + err, target, mask, mean=[5.0, -2000.0])
    first = (10 + 20 + 20) / 3
    assert result["overall"]["mape"]["mean"] == pytest.approx((first + 25) / 2)
    assert result["overall"]["mape"]["std"] == pytest.approx(abs(first - 25) / 2)
    assert result["per_step"]["mape"]["mean"] == pytest.approx(
        [(first + 25) / 2, math.nan], nan_ok=True
    )
    # MAE still counts the all-zero snapshot: instance 0 = (2.25 + 2) / 2, instance 1 = 1
    assert result["overall"]["mae"]["mean"] == pytest.approx((2.125 + 1) / 2)
    assert result["num_instances"] == 2
    # channel pm25 (index 1): instance 0 step 1 targets 20, 5 -> (20 + 20) / 2; instance 1: 25
    assert result["per_channel"]["pm25"]["mape"]["mean"] == pytest.approx((20 + 25) / 2)
    assert declared_metrics.metric_info("mape").best == "min"


def test_mape_counts_small_readings_of_a_channel_in_small_units() -> None:
    """Readings of 5e-4 in a channel whose mean is 0.002 (occupancy as a fraction) are
    readings: a bound of 1e-3 in real units took them for zeros and left them out. A zero
    of a channel whose mean is 1.1e5 comes back from float32 as -0.0078: a zero."""
    target = torch.full((1, J, 2, C), 5e-4, dtype=torch.float64)
    target[..., 1] = 1.1e5
    target[0, 0, 0, 1] = -0.0078125
    pred = target * 1.5
    pred[0, 0, 0, 1] = 3.0
    result = run(pred, target, mean=[0.002, 1.1e5])
    assert result["overall"]["mape"]["mean"] == pytest.approx(50.0)
    assert result["per_channel"]["no2"]["mape"]["mean"] == pytest.approx(50.0)
    assert run(pred, target, mean=[0.002, 1.0])["overall"]["mape"]["mean"] > 1e3


def test_scale_free_mae_matches_numpy_reference(data) -> None:
    """Partly observed snapshots average over the channels they observe."""
    pred, target, mask = data
    std = [2.0, 0.5]
    expected = numpy_reference(pred.double(), target.double(), mask, NAMES, channel_std=std)
    assert_close(run(pred, target, mask, std=std), expected)
    chunks = (torch.tensor([2, 0]), torch.tensor([3, 1]))
    assert_close(run(pred, target, mask, chunks=chunks, std=std), expected)
    # the other metrics do not depend on the std
    assert_close(run(pred, target, mask), reference(pred, target, mask))


def test_scale_free_mae_checks_its_std() -> None:
    for bad in ([1.0], [1.0, 0.0], [1.0, float("nan")]):
        with pytest.raises(ValueError, match=r"channel_std must be 2 finite .* > 0"):
            ForecastMetrics(J, C, channel_std=bad)
    with pytest.raises(ValueError, match="expected 2 standard deviations"):
        per_channel = {name: {"mae": {"mean": 1.0, "std": 0.0}} for name in NAMES}
        scale_free_mae({"per_channel": per_channel}, [1.0])


def test_every_declared_metric_is_computed_and_read_from_its_declaration() -> None:
    """The declarations are the one list: the metrics compute each declared metric, compare
    ranks by its direction, W&B keeps its best, the module logs its horizons."""
    from cloudlstm.compare.table import higher_is_better
    from cloudlstm.engine.module import horizon_metrics
    from cloudlstm.report.dashboard import best_summaries

    forecast = ForecastMetrics(2, 3, channel_std=[1.0, 2.0, 4.0])
    forecast.update(torch.rand(4, 2, 5, 3), torch.rand(4, 2, 5, 3))
    results = forecast.compute()
    for info in declared_metrics.declared():
        assert info.name in results["overall"] and info.name in results["per_step"], info.name
        assert higher_is_better(info.name) is info.higher_is_better
        assert best_summaries()[f"val/{info.name}"] == ("max" if info.higher_is_better else "min")
        assert (info.name in horizon_metrics()) is info.per_horizon


# ---------------------------------------------------------------- one declaration


def _mean_error(s: Snapshots) -> torch.Tensor:
    """A throwaway metric: the signed mean error of each snapshot."""
    return s.mean(s.error)


@pytest.fixture
def bias_declared(monkeypatch) -> MetricInfo:
    """A metric declared in :mod:`cloudlstm.engine.declared_metrics`, and nowhere else."""
    bias = MetricInfo("bias", "mean error", _mean_error)
    monkeypatch.setattr(declared_metrics, "DECLARED", (*declared_metrics.DECLARED, bias))
    return bias


def test_a_metric_declared_once_is_in_metrics_json_the_logs_and_compare(bias_declared, tiny_cfg):
    from cloudlstm.cli.train import train
    from cloudlstm.compare import compare, find_runs

    cfg = tiny_cfg("logger=csv", "module.save_predictions=true")
    results = train(cfg)
    run = Path(cfg.paths.output_dir)

    test = json.loads((run / "metrics.json").read_text())["test"]
    assert list(test["overall"]) == [*metric_names()[:-1], "bias"]  # in declaration order
    assert all("bias" in test[part] for part in ("overall", "per_step"))
    assert all("bias" in stats for stats in test["per_channel"].values())
    # its value, by hand from the tested forecasts (the synthetic data observe everything):
    # per window, the mean over steps of the snapshots' mean error
    with np.load(run / "predictions.npz") as saved:
        error = saved["prediction"].astype(np.float64) - saved["target"]
    per_window = error.mean(axis=(2, 3)).mean(axis=1)
    assert test["overall"]["bias"]["mean"] == pytest.approx(per_window.mean(), rel=1e-9)
    assert test["overall"]["bias"]["std"] == pytest.approx(per_window.std(), rel=1e-9)
    assert test["per_step"]["bias"]["mean"] == pytest.approx(
        error.mean(axis=(2, 3)).mean(axis=0).tolist(), rel=1e-9
    )

    # logged at every validation (and its best is the W&B summary), at test with its horizons
    assert "val/bias" in results["val"]
    header = pd.read_csv(next(run.glob("csv/version_*/metrics.csv"))).columns
    assert {"val/bias", "test/bias", "test/bias_std", "test/bias_h01", "test/bias_h03"} <= set(
        header
    )
    # a column of compare's table, best by its direction
    column = next(c for c in compare(find_runs([run])) if c.name == "bias")
    assert column.better == "min"
    assert column.cells[0].mean == pytest.approx(test["overall"]["bias"]["mean"])
