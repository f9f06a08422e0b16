"""The numbers a run reports, recomputed by hand from the raw data.

One persistence run (no training) through ``train()`` on a small long-format CSV whose
values encode their time index: ``value(t, p, c) = BASE[c] + SLOPE[p, c] * t``, with
missing cells and rows (filled by the loader, mask False). Persistence makes every
forecast known in advance (the value at the last input step), so metrics.json, the
group metrics and predictions.npz can be recomputed in numpy from the raw table alone:
the split, the windows, the de-normalisation and the mask all have to be right. The loss
(``masked_loss``, MSE) is checked on its own at the end.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import TINY, compose_train
from metric_reference import assert_close, numpy_reference

from cloudlstm.cli.train import train
from cloudlstm.engine.module import masked_loss

T, N, M, J = 200, 6, 4, 3
CHANNELS = ["no2", "pm25"]
# no2 rises and pm25 falls with time, at a different rate at every point
BASE = np.array([10.0, 300.0])
SLOPE = np.outer(0.1 * np.arange(1, N + 1), [1.0, -1.0]) + np.array([0.0, -0.03])  # (N, C)
IDS = [f"p{p}" for p in range(N)]  # sorted, so point p is the loader's point p
FIRST_TARGET = T - round(0.2 * T)  # the test part is [160, 200): its first target step


def raw_stream(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(values (T, N, C), observed (T, N, C))``: the full series and what the CSV holds."""
    t = np.arange(T)[:, None, None]
    values = BASE + SLOPE[None] * t
    rng = np.random.default_rng(seed)
    observed = rng.random(values.shape) > 0.1
    observed[rng.random((T, N)) < 0.03] = False  # whole rows missing
    observed[:, 0, 0] = True  # point 0 has a row at every time, so the time grid is complete
    # The largest test target (pm25 of point 0 at the first target step) is missing and
    # filled by the reading before it: the PSNR peak must come from observed targets only.
    observed[FIRST_TARGET - 1 : FIRST_TARGET + 2, 0, 1] = [True, False, True]
    return values, observed


def write_csv(path: Path, values: np.ndarray, observed: np.ndarray) -> None:
    """One row per (time, point) with any observed value; missing cells left empty."""
    rng = np.random.default_rng(1)
    coords = rng.uniform(0, 10, (N, 2))
    stamps = pd.Timestamp("2021-01-01") + pd.to_timedelta(np.arange(T), unit="h")
    rows = []
    for t in range(T):
        for p in range(N):
            if observed[t, p].any():
                cells = np.where(observed[t, p], values[t, p], np.nan)
                rows.append([stamps[t], IDS[p], *coords[p], *cells])
    pd.DataFrame(rows, columns=["timestamp", "id", "x", "y", *CHANNELS]).to_csv(path, index=False)


def filled_by_hand(values: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """Gaps filled from the past: each series holds its last observed value, a leading gap
    takes the first one (as documented)."""
    out = np.empty_like(values)
    for p in range(N):
        for c in range(len(CHANNELS)):
            seen = observed[:, p, c]
            out[:, p, c] = pd.Series(np.where(seen, values[:, p, c], np.nan)).ffill().bfill()
    return out


def persistence_windows(values, observed):
    """Prediction, target and mask ``(W, J, N, C)`` of every test window, by hand.

    Test part: the last 20 % of the steps (T=200: [160, 200)); a window's J targets lie in it
    (its inputs may reach back into validation); persistence repeats the last input step.
    """
    filled = filled_by_hand(values, observed)
    splits = range(FIRST_TARGET, T - J + 1)  # first target step of each window
    pred = np.stack([np.repeat(filled[s - 1][None], J, axis=0) for s in splits])
    target = np.stack([filled[s : s + J] for s in splits])
    mask = np.stack([observed[s : s + J] for s in splits])
    return pred, target, mask


def training_std(saved: dict) -> np.ndarray:
    """``(C,)`` population std of the observed training values (the scaler's), by hand."""
    assert "smae" in saved["test"]["overall"], "every run reports the scale-free MAE"
    values, observed = raw_stream()
    start, stop = saved["data"]["bounds"]["train"]
    part, seen = values[start:stop], observed[start:stop]
    return np.array([part[..., c][seen[..., c]].std() for c in range(len(CHANNELS))])


def run_on_csv(tmp: Path, values: np.ndarray, observed: np.ndarray, *extra: str) -> Path:
    """A run through ``train()`` on ``values`` written where ``observed`` as the CSV of
    :func:`write_csv` (``data=points``, persistence unless ``extra`` names a model), every
    test window tested; its run directory."""
    write_csv(tmp / "stream.csv", values, observed)
    skipped = ("data.source.", "model.", "trainer.limit_test", "report.")
    keep = [o for o in TINY if not o.startswith(skipped)]
    path = f"data.source.path={tmp / 'stream.csv'}"
    base = [*keep, "data=points", path, "model=persistence", "logger=none"]
    cfg = compose_train(tmp, [*base, *extra])
    train(cfg)
    return Path(cfg.paths.output_dir)


@pytest.fixture(scope="module")
def persistence_run(tmp_path_factory):
    values, observed = raw_stream()
    outliers = ["data.outlier_shift=1.0", "data.outlier_count=2"]
    saving = ["module.save_predictions=true", "report.figures=false"]
    run = run_on_csv(tmp_path_factory.mktemp("reported"), values, observed, *outliers, *saving)
    saved = json.loads((run / "metrics.json").read_text())
    with np.load(run / "predictions.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    return saved, arrays, persistence_windows(values, observed)


def test_metrics_json_equals_a_hand_computation_from_the_raw_stream(persistence_run):
    saved, _, (pred, target, mask) = persistence_run
    assert saved["data"]["channel_names"] == CHANNELS
    expected = numpy_reference(pred, target, mask, CHANNELS, training_std(saved))
    assert expected["num_instances"] == len(pred) == 38
    reported = {key: saved["test"][key] for key in expected}  # overall, per_step, pooled, ...
    # float32 normalisation and back: ~1e-5 relative on values of ~10-300
    assert_close(reported, expected, rel=2e-5, abs=1e-4)


def test_saved_predictions_and_targets_are_the_raw_stream_at_the_test_times(persistence_run):
    _, arrays, (pred, target, mask) = persistence_run
    assert arrays["target"].shape == target.shape == (38, J, N, len(CHANNELS))
    # a target without a reading is NaN, not the loader's filled value, and said so
    np.testing.assert_array_equal(arrays["observed"], mask)
    np.testing.assert_array_equal(arrays["scored"], mask)
    assert arrays["point_ids"].tolist() == IDS  # the N axis, by the CSV's ids
    assert (~mask).sum() > 30
    np.testing.assert_allclose(
        arrays["target"], np.where(mask, target, np.nan), rtol=1e-6, atol=1e-4
    )
    np.testing.assert_allclose(arrays["prediction"], pred, rtol=1e-6, atol=1e-4)
    # the time of each forecast step, as the CSV stamps it
    stamps = (pd.Timestamp("2021-01-01") + pd.to_timedelta(np.arange(T), unit="h")).values
    splits = range(FIRST_TARGET, T - J + 1)
    np.testing.assert_array_equal(arrays["forecast_time"], [stamps[s : s + J] for s in splits])


def saved_arrays(run: Path) -> dict[str, np.ndarray]:
    """Every array of the run's ``predictions.npz``."""
    with np.load(run / "predictions.npz") as npz:
        return {k: npz[k] for k in npz.files}


def test_with_score_filled_the_saved_predictions_tell_readings_from_filled_gaps(tmp_path):
    """data.score_filled=true scores the filled gaps too: ``observed`` was then all True,
    the scoring mask, and a filled gap could not be told from a reading."""
    values, observed = raw_stream()
    extra = ["data.score_filled=true", "module.save_predictions=true", "report.figures=false"]
    arrays = saved_arrays(run_on_csv(tmp_path, values, observed, *extra))
    _, target, mask = persistence_windows(values, observed)
    np.testing.assert_array_equal(arrays["observed"], mask)
    assert (~mask).sum() > 30
    # every gap is filled (from the past, a leading one from the future): all scored
    assert arrays["scored"].all()
    np.testing.assert_allclose(arrays["target"], target, rtol=1e-6, atol=1e-4)


def test_a_point_subset_saves_each_forecast_under_its_points_id(tmp_path):
    """data.num_points keeps some points: the saved N axis maps back to the CSV's ids."""
    values, observed = raw_stream()
    extra = ["data.num_points=4", "module.save_predictions=true", "report.figures=false"]
    run = run_on_csv(tmp_path, values, observed, *extra)
    arrays = saved_arrays(run)
    pred, target, mask = persistence_windows(values, observed)
    points = [IDS.index(i) for i in arrays["point_ids"]]
    assert len(set(points)) == 4
    np.testing.assert_array_equal(arrays["observed"], mask[:, :, points])
    expected = np.where(mask, target, np.nan)[:, :, points]
    np.testing.assert_allclose(arrays["target"], expected, rtol=1e-6, atol=1e-4)
    np.testing.assert_allclose(arrays["prediction"], pred[:, :, points], rtol=1e-6, atol=1e-4)
    summary = json.loads((run / "data_summary.json").read_text())
    assert summary["point_ids"] == arrays["point_ids"].tolist()


def group_members(saved: dict) -> dict[str, np.ndarray]:
    """Point indices of each reported group (ids as listed in the data summary)."""
    groups = saved["data"]["point_groups"]
    return {name: np.array([IDS.index(i) for i in ids]) for name, ids in groups.items()}


def test_group_metrics_equal_the_metrics_of_those_points_alone(persistence_run):
    saved, _, (pred, target, mask) = persistence_run
    members = group_members(saved)
    assert len(members["outliers"]) == 2 and len(members["inliers"]) == N - 2
    assert sorted(np.concatenate(list(members.values())).tolist()) == list(range(N))
    for name, points in members.items():
        expected = numpy_reference(
            pred[:, :, points],
            target[:, :, points],
            mask[:, :, points],
            CHANNELS,
            training_std(saved),
        )
        reported = {key: saved["test"]["groups"][name][key] for key in expected}
        assert_close(reported, expected, rel=2e-5, abs=1e-4)


def test_group_pooled_errors_add_up_to_the_overall_pooled_error(persistence_run):
    saved, _, (_, _, mask) = persistence_run
    members = group_members(saved)
    count = {name: mask[:, :, points].sum() for name, points in members.items()}
    pooled = {name: saved["test"]["groups"][name]["pooled"] for name in members}
    total = saved["test"]["pooled"]
    abs_sum = sum(count[g] * pooled[g]["mae"] for g in members)
    sq_sum = sum(count[g] * pooled[g]["rmse"] ** 2 for g in members)
    assert abs_sum == pytest.approx(mask.sum() * total["mae"], rel=1e-9)
    assert sq_sum == pytest.approx(mask.sum() * total["rmse"] ** 2, rel=1e-9)


# ---------------------------------------------------------------------------- the loss


def test_masked_mse_is_the_mean_over_observed_entries_only():
    gen = torch.Generator().manual_seed(0)
    pred = torch.randn(3, 2, 5, 2, generator=gen, requires_grad=True)
    target = torch.randn(3, 2, 5, 2, generator=gen)
    mask = torch.rand(3, 2, 5, 2, generator=gen) > 0.4
    loss = masked_loss(pred, target, mask, "mse")
    expected = ((pred.detach() - target)[mask] ** 2).mean()
    torch.testing.assert_close(loss.detach(), expected)
    (grad,) = torch.autograd.grad(loss, pred)

    # unobserved entries of both tensors altered: the loss and its gradient do not move
    pred2 = torch.where(mask, pred.detach(), torch.randn(pred.shape, generator=gen) * 1e3)
    pred2.requires_grad_(True)
    target2 = torch.where(mask, target, torch.full_like(target, -7e3))
    loss2 = masked_loss(pred2, target2, mask, "mse")
    (grad2,) = torch.autograd.grad(loss2, pred2)
    assert loss2.item() == pytest.approx(loss.item(), rel=1e-6)
    torch.testing.assert_close(grad2, grad)
    assert (grad[~mask] == 0).all() and (grad[mask] != 0).all()
    # non-finite values where nothing is observed leave the loss and gradient finite
    target3 = torch.where(mask, target, torch.full_like(target, float("nan")))
    loss3 = masked_loss(pred, target3, mask, "mse")
    (grad3,) = torch.autograd.grad(loss3, pred)
    assert loss3.item() == pytest.approx(loss.item(), rel=1e-6)
    torch.testing.assert_close(grad3, grad)
    # nothing observed: 0, not NaN
    assert masked_loss(pred, target, torch.zeros_like(mask), "mse").item() == 0.0


def test_the_worst_points_figure_draws_no_filled_input_as_a_reading(tmp_path, monkeypatch):
    """The history line of worst_points.png drew the loader's filled inputs as readings,
    where the truth line already left out the unobserved targets."""
    from cloudlstm.report import figures

    drawn = {}
    real = figures.plot_worst_series

    def spy(history, truth, forecast, **kwargs):
        drawn["history"] = history
        return real(history, truth, forecast, **kwargs)

    monkeypatch.setattr(figures, "plot_worst_series", spy)
    values, observed = raw_stream()
    run_on_csv(tmp_path, values, observed, "report.figures=true")
    # the first test window's inputs: the M steps before the first target
    read = observed[FIRST_TARGET - M : FIRST_TARGET]
    assert (~read).any()
    np.testing.assert_array_equal(np.isnan(drawn["history"]), ~read)
    np.testing.assert_allclose(
        drawn["history"][read], values[FIRST_TARGET - M : FIRST_TARGET][read], rtol=1e-5
    )


def test_channels_the_ssim_constants_outweigh_are_warned_of(tmp_path, caplog):
    """The paper's SSIM constants are in the data's units: a channel in small units (no2
    here in thousands, spread 0.001-0.02) scores near 1 whatever the forecast, which the run
    says once; pm25, spread over tens, is not named."""
    values, observed = raw_stream()
    with caplog.at_level(logging.WARNING, logger="cloudlstm.engine.module"):
        run_on_csv(tmp_path, values * [1e-3, 1.0], observed, "model=linear", "report.figures=false")
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("SSIM")]
    assert said == [
        "SSIM takes the paper's constants in the data's units (L = 2, c2 = 0.36): channel(s) "
        "'no2' spread less than 0.6 over the training part (their std), which c2 outweighs, "
        "so their SSIM is near 1 whatever the forecast; rank on MAE, RMSE or smae."
    ]
