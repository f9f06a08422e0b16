"""Quantile forecasts (``module.quantiles``, ``module.calibrate``): the metrics and the loss
against hand computations, the head on every model of the zoo, the naive floors' residual
quantiles, conformal offsets through a checkpoint, and the forecast's quantile columns."""

from __future__ import annotations

import io
import json
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import PYTHON, ROOT, TINY, compose_train, one_line, run_python, subprocess_env
from omegaconf import DictConfig, OmegaConf
from test_anchor_heads import MODELS, SPEC, random_batch, tiny_model_config

from cloudlstm.assembly.calibration_split import check_calibration_split
from cloudlstm.compare import compare, find_runs
from cloudlstm.engine.metrics import quantile_forecast_metrics
from cloudlstm.engine.module import ForecastModule
from cloudlstm.engine.quantile_levels import check_calibration, check_quantiles, level_name
from cloudlstm.engine.quantile_metrics import any_metric_info, crps_weights, quantile_metric_info
from cloudlstm.engine.quantiles import (
    CALIBRATION_KEY,
    keep_order,
    pinball_loss,
    residual_quantiles,
)
from cloudlstm.engine.results import results_from
from cloudlstm.errors import UserError
from cloudlstm.forecast import FILLED_COLUMN, Forecaster
from cloudlstm.models.build import build_model
from cloudlstm.viz.series import plot_worst_series

LEVELS = (0.1, 0.5, 0.9)

# ------------------------------------------------------------------ hand computations


def one_snapshot() -> tuple[torch.Tensor, ...]:
    """1 instance, 1 step, 3 points, 1 channel; point 2 unobserved (NaN target).

    Quantiles (q10, q50, q90) and targets:
      point 0: (1, 2, 4), y = 3   -> inside the 80 % interval, width 3
      point 1: (0, 1, 2), y = -1  -> below, width 2
    """
    q = torch.tensor([[1.0, 2.0, 4.0], [0.0, 1.0, 2.0], [5.0, 6.0, 7.0]]).view(1, 1, 3, 1, 3)
    y = torch.tensor([3.0, -1.0, math.nan]).view(1, 1, 3, 1)
    mask = torch.tensor([True, True, False]).view(1, 1, 3, 1)
    return q, y, mask


def test_pinball_crps_coverage_and_width_by_hand() -> None:
    q, y, mask = one_snapshot()
    metrics = quantile_forecast_metrics(1, 1, ["pm25"], channel_std=[1.0], levels=LEVELS)
    metrics.update(q[..., 1], torch.nan_to_num(y), mask, quantiles=q)
    result = metrics.compute()
    # point 0, u = y - q = (2, 1, -1): rho = (0.1*2, 0.5*1, 0.1*1) = (0.2, 0.5, 0.1)
    # point 1, u = (-1, -2, -3):       rho = (0.9*1, 0.5*2, 0.1*3) = (0.9, 1.0, 0.3)
    pinball = ((0.2 + 0.5 + 0.1) / 3 + (0.9 + 1.0 + 0.3) / 3) / 2
    # CRPS weights of (0.1, 0.5, 0.9): midpoints 0.3, 0.7 -> (0.3, 0.4, 0.3)
    crps = (2 * (0.3 * 0.2 + 0.4 * 0.5 + 0.3 * 0.1) + 2 * (0.3 * 0.9 + 0.4 * 1.0 + 0.3 * 0.3)) / 2
    overall = result["overall"]
    assert overall["pinball"]["mean"] == pytest.approx(pinball)
    assert overall["crps"]["mean"] == pytest.approx(crps)
    assert overall["coverage80"]["mean"] == pytest.approx(0.5)
    assert overall["width80"]["mean"] == pytest.approx(2.5)
    assert overall["mae"]["mean"] == pytest.approx((1 + 2) / 2)  # the median is the forecast
    assert result["per_channel"]["pm25"]["crps"]["mean"] == pytest.approx(crps)
    assert result["per_step"]["coverage80"]["mean"] == pytest.approx([0.5])
    # the loss: the sum over the levels of the mean pinball loss (x 3 of the metric's mean)
    assert float(pinball_loss(q, y, mask, LEVELS)) == pytest.approx(3 * pinball)
    weighted = pinball_loss(q, y, mask, LEVELS, channel_weights=torch.tensor([2.0]))
    assert float(weighted) == pytest.approx(6 * pinball)


def test_crps_of_the_median_alone_is_the_absolute_error() -> None:
    assert crps_weights([0.5]) == [1.0]
    pred = torch.tensor([1.0, 4.0]).view(1, 1, 2, 1)
    target = torch.tensor([2.0, 1.0]).view(1, 1, 2, 1)
    metrics = quantile_forecast_metrics(1, 1, levels=[0.5])
    metrics.update(pred, target, quantiles=pred.unsqueeze(-1))
    overall = metrics.compute()["overall"]
    assert overall["crps"]["mean"] == pytest.approx(overall["mae"]["mean"]) == 2.0


def test_crps_from_many_quantiles_approaches_the_gaussian_closed_form() -> None:
    """The CRPS of N(0, 1) at y is y (2 Phi(y) - 1) + 2 phi(y) - 1 / sqrt(pi)."""
    levels = np.linspace(0.005, 0.995, 199)
    normal = torch.distributions.Normal(0.0, 1.0)
    q = normal.icdf(torch.tensor(levels, dtype=torch.float64))
    y = torch.tensor([-1.5, 0.0, 0.7, 2.0], dtype=torch.float64)
    quantiles = q.expand(4, -1).reshape(1, 1, 4, 1, -1)
    metrics = quantile_forecast_metrics(1, 1, levels=levels.tolist())
    metrics.update(torch.zeros(1, 1, 4, 1), y.view(1, 1, 4, 1), quantiles=quantiles)
    cdf, pdf = normal.cdf(y), normal.log_prob(y).exp()
    exact = (y * (2 * cdf - 1) + 2 * pdf - 1 / math.sqrt(math.pi)).mean()
    assert metrics.compute()["overall"]["crps"]["mean"] == pytest.approx(float(exact), rel=2e-3)


def test_quantile_metrics_are_declared_with_their_directions() -> None:
    assert any_metric_info("crps").best == "min" and any_metric_info("width80").best == "min"
    assert any_metric_info("coverage80").best is None  # the nominal coverage is best
    assert quantile_metric_info("coverage60").name == "coverage60"  # any interval
    assert quantile_metric_info("coverage100") is None
    metrics = quantile_forecast_metrics(1, 1, levels=[0.2, 0.25, 0.5, 0.75, 0.8])
    assert metrics.metric_names[-6:] == (
        "crps",
        "pinball",
        "coverage60",
        "width60",
        "coverage50",
        "width50",
    )


def test_residual_quantiles_take_the_conservative_rank() -> None:
    """n = 9 residuals 1..9: tau = 0.9 -> rank ceil(10 * 0.9) = 9; 0.75 -> ceil(7.5) = 8;
    0.25 -> floor(2.5) = 2; 0.1 -> floor(1.0) = 1; the centre (0.5) stays 0; the
    unobserved tenth residual (100) counts nowhere."""
    residuals = torch.cat([torch.arange(1.0, 10.0), torch.tensor([100.0])]).view(10, 1, 1, 1)
    observed = torch.ones(10, 1, 1, dtype=torch.bool)
    observed[-1] = False
    levels = (0.1, 0.25, 0.5, 0.75, 0.9)
    offsets = residual_quantiles(residuals, observed, levels, centre=2)
    assert offsets.view(-1).tolist() == [1.0, 2.0, 0.0, 8.0, 9.0]


def test_keep_order_clips_outwards_from_the_centre() -> None:
    q = torch.tensor([3.0, 1.0, 2.0, 1.5, 4.0, 3.5])  # centre index 2 (value 2)
    assert keep_order(q, 2).tolist() == [1.0, 1.0, 2.0, 2.0, 4.0, 4.0]


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ([0.1, 1.2], "module.quantiles=[0.1,1.2]: 1.2 outside (0, 1): give distinct levels "),
        ([0.5, 0.5], "module.quantiles=[0.5,0.5]: 0.5 given twice: give distinct levels"),
        # the levels at fault named, in a list long enough to miss them
        ([0.1, 0.25, 0.5, 0.5, 0.9], "module.quantiles=[0.1,0.25,0.5,0.5,0.9]: 0.5 given twice:"),
        (
            [10, 50, 90],
            "module.quantiles=[10,50,90]: 10, 50, 90 outside (0, 1) (percentages? "
            "module.quantiles=[0.1,0.5,0.9]): give distinct levels strictly between 0 and 1",
        ),
        ([0, 0.5, 1], "module.quantiles=[0,0.5,1]: 0, 1 outside (0, 1): give distinct"),
        (["a"], "module.quantiles=['a']: 'a' is text, not a number: give distinct levels"),
        ("0.5", "module.quantiles='0.5': '0.5' is text, not a number: give distinct levels"),
        (
            [0.1, 0.5, "0.9"],
            "module.quantiles=[0.1,0.5,'0.9']: '0.9' is text, not a number: give distinct levels",
        ),
        ([0.1, True, 0.9], "module.quantiles=[0.1,true,0.9]: true is not a number: give "),
        ([0.1, 0.9], "module.quantiles=[0.1,0.9]: the point forecast is the median, so the "),
        (
            [0.1, 0.1000000001, 0.5],
            "module.quantiles=[0.1,0.1000000001,0.5]: 0.1 and 0.1000000001 are closer than 1e-5",
        ),
        (  # named apart (q10, q10.0001), but closer than the 1e-5 the refusal asks for
            [0.1, 0.100001, 0.5, 0.9],
            "module.quantiles=[0.1,0.100001,0.5,0.9]: 0.1 and 0.100001 are closer than 1e-5 "
            "(columns q10 and q10.0001 of the forecast files): give levels that differ by",
        ),
    ],
)
def test_bad_levels_are_refused_in_one_line(value, fragment) -> None:
    with pytest.raises(UserError) as err:
        check_quantiles(value)
    assert str(err.value).startswith(fragment) and "\n" not in str(err.value)


def test_levels_are_sorted_and_calibration_needs_them() -> None:
    assert check_quantiles([0.9, 0.1, 0.5]) == LEVELS and check_quantiles(None) == ()
    assert level_name(0.1) == "q10" and level_name(0.025) == "q2.5"
    for levels in [(), (0.5,)]:  # no interval to calibrate
        with pytest.raises(UserError, match=r"^module.calibrate=conformal calibrates the inter"):
            check_calibration("conformal", levels)
    assert check_quantiles([0.12345, 0.12346, 0.5]) == (0.12345, 0.12346, 0.5)  # q12.345, q12.346
    with pytest.raises(UserError, match=r"^module.calibrate='cqr' is not one of"):
        check_calibration("cqr", LEVELS)


# ------------------------------------------------------------------ every model


@pytest.mark.parametrize("name", MODELS)
def test_every_model_forecasts_ordered_quantiles_around_its_point_forecast(tmp_path, name):
    """Every model config: the centre level is the (anchored) point forecast, the levels
    never cross, the outer levels train the head and not the model; a model without
    trainable parameters takes residual quantiles instead of a head."""
    torch.manual_seed(0)
    config = tiny_model_config(tmp_path, name)
    if "period" in config:  # seasonal naive: a season within the M input steps
        config.period = 2
    model = build_model(config, SPEC)
    module = ForecastModule(model, None, spec=SPEC, anchor="last", quantiles=[0.05, 0.5, 0.9])
    x, coords, target = random_batch()
    batch = {"x": x, "coords": coords, "y": target, "y_mask": torch.ones_like(target).bool()}
    if module.quantile_head is None:  # the naive floors
        assert not any(p.requires_grad for p in module.parameters()), name
        module.floor_offsets = torch.tensor([-1.0, 0.0, 2.0]).expand(SPEC.output_steps, 2, 3)
    point = module(x, coords)
    quantiles = module.quantile_forecast(point, batch)
    assert quantiles.shape == (*point.shape, 3)
    assert torch.equal(quantiles[..., 1], point), name
    assert (quantiles.diff(dim=-1) > 0).all(), f"{name}: quantiles cross"
    if module.quantile_head is None:
        return
    # the outer levels' losses reach the head, not the model (its fit is the median's)
    outer = pinball_loss(quantiles[..., [0, 2]], target, batch["y_mask"], [0.05, 0.9])
    outer.backward()
    assert all(p.grad is None or not p.grad.any() for p in module.model.parameters()), name
    assert any(p.grad is not None and p.grad.any() for p in module.quantile_head.parameters())


# ------------------------------------------------------------------ runs

T, N = 240, 6
CHANNELS = ["no2", "pm25"]
STAMPS = pd.Timestamp("2021-01-01") + pd.to_timedelta(np.arange(T), unit="h")


def write_stream(path: Path, noise: float = 2.0, seed: int = 0) -> Path:
    """A long-format CSV of daily cycles plus Gaussian noise, 2 channels at N points."""
    rng = np.random.default_rng(seed)
    t = np.arange(T)[:, None, None]
    phase = rng.uniform(0, 2 * np.pi, (1, N, len(CHANNELS)))
    values = 50 + 20 * np.sin(2 * np.pi * t / 24 + phase) + rng.normal(0, noise, (T, N, 2))
    coords = rng.uniform(0, 10, (N, 2))
    rows = [[STAMPS[s], f"p{p}", *coords[p], *values[s, p]] for s in range(T) for p in range(N)]
    pd.DataFrame(rows, columns=["timestamp", "id", "x", "y", *CHANNELS]).to_csv(path, index=False)
    return path


def run_overrides(stream: Path, *extra: str) -> list[str]:
    keep = [o for o in TINY if not o.startswith("data.source.")]
    return [*keep, "data=points", f"data.source.path={stream}", "logger=none", *extra]


@pytest.fixture(scope="module")
def quantile_run(tmp_path_factory):
    """A tiny CloudLSTM run with 80 % and 50 % intervals, calibrated, with its figures, two
    of its points held out of training (groups scored apart)."""
    from cloudlstm.cli.train import train

    tmp = tmp_path_factory.mktemp("quantiles")
    stream = write_stream(tmp / "stream.csv")
    levels = "module.quantiles=[0.1,0.25,0.5,0.75,0.9]"
    overrides = run_overrides(
        stream,
        levels,
        "module.calibrate=conformal",
        "report.figures=true",
        "data.holdout_points=2",
        "module.save_predictions=true",
    )
    cfg = compose_train(tmp, overrides)
    results = train(cfg)
    return Path(cfg.paths.output_dir), results, stream


def test_a_calibrated_run_reports_before_and_after(quantile_run):
    run, results, _ = quantile_run
    test = json.loads((run / "metrics.json").read_text())["test"]
    assert test == results["test"]
    for name in ("crps", "pinball", "coverage80", "width80", "coverage50", "width50"):
        assert name in test["overall"] and name in test["per_step"], name
        assert all(name in stats for stats in test["per_channel"].values())
        assert name in test["uncalibrated"]["overall"], name
    assert "mae" not in test["uncalibrated"]["overall"]  # the point forecast is not moved
    before = test["uncalibrated"]["overall"]["width80"]["mean"]
    assert before != test["overall"]["width80"]["mean"]  # the offsets moved the levels
    assert len(test["per_step"]["crps"]["mean"]) == 3
    # wider intervals are wider
    assert test["overall"]["width80"]["mean"] > test["overall"]["width50"]["mean"] > 0
    assert "val/crps" in results["val"]
    assert (run / "figures" / "worst_points.png").is_file()
    # the tested quantiles are saved beside the forecasts, the median the point forecast
    with np.load(run / "predictions.npz") as saved:
        quantiles, levels = saved["quantiles"], saved["levels"]
        assert quantiles.shape == (*saved["prediction"].shape, 5)
        np.testing.assert_array_equal(levels, [0.1, 0.25, 0.5, 0.75, 0.9])
        np.testing.assert_allclose(quantiles[..., 2], saved["prediction"], rtol=1e-6)
        assert (np.diff(quantiles, axis=-1) >= 0).all()
    # each point group before calibration too, of the quantile metrics alone
    for group in ("held_out", "trained"):
        raw = test["uncalibrated"]["groups"][group]["overall"]
        assert set(raw) == set(test["uncalibrated"]["overall"])
        assert raw["width80"]["mean"] != test["groups"][group]["overall"]["width80"]["mean"]


def test_the_tested_checkpoint_holds_the_offsets_of_its_own_weights(quantile_run):
    run = quantile_run[0]
    tested = run / json.loads((run / "metrics.json").read_text())["checkpoint"]
    stored = torch.load(tested, weights_only=False)
    offsets = stored[CALIBRATION_KEY]
    assert offsets["calibrated_at"] == stored["global_step"]
    assert offsets["levels"] == [0.1, 0.25, 0.5, 0.75, 0.9]
    conformal = torch.tensor(offsets["conformal"])
    assert conformal.shape == (3, 2, 5) and not conformal[..., 2].any()  # (J, C, Q)
    # round trip: the forecaster restores them, the last checkpoint's weights have none
    best = Forecaster.load(run, device="cpu").module
    assert best.calibration == "conformal" and best.quantile_levels == (0.1, 0.25, 0.5, 0.75, 0.9)
    assert torch.equal(best.conformal_offsets, conformal)
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    fits = last[CALIBRATION_KEY]["calibrated_at"] == last["global_step"]
    assert (Forecaster.load(run, ckpt="last").module.conformal_offsets is not None) is fits


def test_an_evaluation_without_calibration_tests_the_uncalibrated_forecast(quantile_run, tmp_path):
    """module.calibrate=none on a calibrated run: the checkpoint's offsets were applied all
    the same, so the evaluation reported the calibrated intervals as uncalibrated."""
    from test_eval import compose_eval

    from cloudlstm.cli.evaluate import evaluate

    run = quantile_run[0]
    trained = json.loads((run / "metrics.json").read_text())["test"]
    results = evaluate(compose_eval(run, tmp_path / "eval", "module.calibrate=none"))
    for name in ("coverage80", "width80", "crps"):
        plain = results["test"]["overall"][name]["mean"]
        assert plain == pytest.approx(trained["uncalibrated"]["overall"][name]["mean"], rel=1e-5)
        assert plain != pytest.approx(trained["overall"][name]["mean"], rel=1e-3), name
    assert "uncalibrated" not in results["test"]


def test_forecast_and_predict_py_write_one_column_per_quantile(quantile_run, tmp_path):
    from cloudlstm.cli.predict import main

    run, _, stream = quantile_run
    history = pd.read_csv(stream)
    history = history[pd.to_datetime(history["timestamp"]) < STAMPS[200]]
    forecaster = Forecaster.load(run, device="cpu")
    out = forecaster.forecast(history)
    names = [f"{c}_q{p}" for c in CHANNELS for p in (10, 25, 50, 75, 90)]
    assert list(out.columns) == [
        "timestamp",
        "horizon",
        "id",
        "x",
        "y",
        *CHANNELS,
        *names,
        FILLED_COLUMN,
    ]
    for c in CHANNELS:
        np.testing.assert_allclose(out[f"{c}_q50"], out[c], rtol=1e-6)  # the median
        levels = out[[f"{c}_q{p}" for p in (10, 25, 50, 75, 90)]].to_numpy()
        assert (np.diff(levels, axis=1) >= 0).all()
    # the calibrated quantiles of the module, by hand: raw plus offsets (then in order)
    module = forecaster.module
    assert module.conformal_offsets is not None and module.conformal_offsets.abs().sum() > 0
    history.to_csv(tmp_path / "recent.csv", index=False)
    cfg = OmegaConf.create(
        {
            "run": str(run),
            "ckpt": "best",
            "out": str(tmp_path / "forecast.csv"),
            "device": "cpu",
            "data": {"path": str(tmp_path / "recent.csv"), "source": {"path": None}},
        }
    )
    written = pd.read_csv(main(cfg))
    assert list(written.columns) == list(out.columns)
    np.testing.assert_allclose(written[names].to_numpy(), out[names].to_numpy(), rtol=1e-5)


def test_the_median_alone_trains_and_is_the_forecast(tmp_path):
    """``module.quantiles=[0.5]``: a head without gaps to learn, and without weights (no
    parameters counted that compute nothing), whose one level is the point forecast."""
    from cloudlstm.cli.train import train

    stream = write_stream(tmp_path / "stream.csv")
    overrides = run_overrides(stream, "model=linear", "module.quantiles=[0.5]")
    overrides = [o for o in overrides if not o.startswith(("model.k", "model.hidden"))]
    cfg = compose_train(tmp_path, [*overrides, "report.figures=false"])
    train(cfg)
    metrics = json.loads((Path(cfg.paths.output_dir) / "metrics.json").read_text())
    tested = Path(cfg.paths.output_dir) / metrics["checkpoint"]
    state = torch.load(tested, weights_only=False)["state_dict"]
    assert not [key for key in state if "quantile_head" in key]
    overall = metrics["test"]["overall"]
    assert overall["crps"]["mean"] == pytest.approx(overall["mae"]["mean"], rel=1e-6)
    assert overall["pinball"]["mean"] == pytest.approx(overall["mae"]["mean"] / 2, rel=1e-6)


def test_a_point_model_refuses_quantiles_it_has_not(tmp_path):
    module = ForecastModule(build_model(tiny_model_config(tmp_path, "linear"), SPEC), None, SPEC)
    x, coords, _ = random_batch()
    with pytest.raises(UserError, match=r"^this model was trained without module.quantiles"):
        module.predict_quantiles({"x": x, "coords": coords})


def test_naive_floors_take_empirical_quantiles_of_their_training_residuals(tmp_path):
    """Persistence: its levels are its forecast plus the conservative-rank quantiles of its
    residuals over every training window (all of them: fewer than 200 batches), per step
    and channel, computed here by hand from the training split."""
    from cloudlstm.assembly.assemble import assemble

    stream = write_stream(tmp_path / "stream.csv")
    overrides = run_overrides(stream, "model=persistence", "module.quantiles=[0.1,0.5,0.9]")
    overrides = [o for o in overrides if not o.startswith(("model.k", "model.hidden"))]
    cfg = compose_train(tmp_path, [*overrides, "report.figures=false"])
    (out := Path(cfg.paths.output_dir)).mkdir(parents=True)
    job = assemble(cfg, out)
    returned = job.trainer.test(job.module, datamodule=job.datamodule, verbose=False)
    train = job.datamodule.train_dataset
    windows = [train[i] for i in range(len(train))]
    x = np.stack([w["x"][-1, :, :2].numpy() for w in windows])  # (W, N, C) last frame
    y = np.stack([w["y"].numpy() for w in windows])  # (W, J, N, C)
    residual = y - x[:, None]
    expected = np.zeros((3, 2, 3))
    for j in range(3):
        for c in range(2):
            r = np.sort(residual[:, j, :, c].ravel())
            n = len(r)
            expected[j, c, 0] = r[max(math.floor((n + 1) * 0.1), 1) - 1]
            expected[j, c, 2] = r[min(math.ceil((n + 1) * 0.9), n) - 1]
    np.testing.assert_allclose(job.module.floor_offsets.numpy(), expected, rtol=1e-5, atol=1e-6)
    test = results_from(returned)
    assert 0.5 < test["overall"]["coverage80"]["mean"] <= 1
    assert "uncalibrated" not in test  # module.calibrate=none


def test_compare_ranks_by_crps_and_bolds_the_coverage_nearest_nominal(quantile_run, tmp_path):
    """Two rows, the calibrated run and persistence with residual quantiles: ranked by
    CRPS when it comes first; coverage's best cell is the one nearest 0.8, no end."""
    from cloudlstm.cli.compare.command import main as compare_main
    from cloudlstm.cli.train import train

    stream = quantile_run[2]
    overrides = run_overrides(
        stream, "model=persistence", "module.quantiles=[0.1,0.25,0.5,0.75,0.9]"
    )
    overrides = [o for o in overrides if not o.startswith(("model.k", "model.hidden"))]
    floor = compose_train(tmp_path, [*overrides, "report.figures=false"])
    train(floor)
    runs = find_runs([quantile_run[0], Path(floor.paths.output_dir)])
    table = compare(runs, metrics=["crps", "coverage80", "width80", "mae"])
    crps = next(c for c in table if c.name == "crps")
    means = [cell.mean for cell in crps.cells]
    assert means == sorted(means) and crps.better == "min"
    assert next(c for c in table if c.name == "coverage80").better == pytest.approx(0.8)
    assert compare_main([str(quantile_run[0]), "--metrics", "crps", "mae"]) == 0


def test_compare_reads_the_quantile_metrics_before_calibration(quantile_run, capsys, tmp_path):
    from cloudlstm.cli.compare.command import main as compare_main

    run = quantile_run[0]
    test = json.loads((run / "metrics.json").read_text())["test"]
    for flag, part in (([], test), (["--uncalibrated"], test["uncalibrated"])):
        args = [str(run), "--metrics", "coverage80", "mae", "--format", "csv", *flag]
        args += ["--groups", "held_out", "--group-metric", "coverage80"]
        assert compare_main(args) == 0
        row = pd.read_csv(io.StringIO(capsys.readouterr().out))
        assert row["coverage80_mean"][0] == pytest.approx(part["overall"]["coverage80"]["mean"])
        assert row["mae_mean"][0] == pytest.approx(test["overall"]["mae"]["mean"])  # not moved
        # the held-out points' coverage before calibration too, not the calibrated one
        group = part["groups"]["held_out"]["overall"]["coverage80"]["mean"]
        assert row["held_out/coverage80_mean"][0] == pytest.approx(group)
    # a run from before the groups were scored uncalibrated: no group cell, not the
    # calibrated one among the uncalibrated
    old = tmp_path / "old"
    shutil.copytree(run, old)
    results = json.loads((old / "metrics.json").read_text())
    del results["test"]["uncalibrated"]["groups"]
    (old / "metrics.json").write_text(json.dumps(results))
    args = [str(old), "--metrics", "coverage80", "--format", "csv", "--uncalibrated"]
    assert compare_main([*args, "--groups", "held_out", "--group-metric", "coverage80"]) == 0
    row = pd.read_csv(io.StringIO(capsys.readouterr().out))
    column = "held_out/coverage80_mean"
    assert column not in row or math.isnan(row[column][0])


def test_the_fan_is_drawn_around_the_forecast(tmp_path):
    """One shaded band per central interval, labelled with its coverage."""
    from matplotlib.collections import PolyCollection

    from cloudlstm.viz import series

    drawn = []
    real = series._draw_fan

    def spy(ax, quantiles, levels):
        real(ax, quantiles, levels)
        drawn.append([c.get_label() for c in ax.collections if isinstance(c, PolyCollection)])

    j, n, c = 3, 2, 1
    truth = np.arange(j * n * c, dtype=float).reshape(j, n, c)
    quantiles = truth[..., None] + np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(series, "_draw_fan", spy)
        path = plot_worst_series(
            np.zeros((4, n, c)),
            truth + 1,
            truth,
            channel=0,
            channel_name="no2",
            path=tmp_path / "fan.png",
            quantiles=quantiles,
            levels=[0.1, 0.25, 0.5, 0.75, 0.9],
        )
    assert path.is_file() and drawn == [["80 % interval", "50 % interval"]] * n


def test_conformal_calibration_without_a_validation_window_is_refused_before_training(tmp_path):
    """It trained to the end, then failed at the test with a torchmetrics warning and a
    line blaming module.quantiles, leaving a run that no rerun with a validation part took."""
    done = run_python(
        "train.py",
        *run_overrides(write_stream(tmp_path / "stream.csv")),
        "module.quantiles=[0.1,0.5,0.9]",
        "module.calibrate=conformal",
        "data.val_fraction=0",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert one_line(done) == (
        "module.calibrate=conformal measures its offsets on the validation split, which has "
        "no window: give the data a validation part (data.val_fraction > 0) and validate it, "
        "or train without calibration: module.calibrate=none."
    )
    assert not (tmp_path / "run" / "checkpoints").exists()


def _calibrated_job(levels: list[float], **trainer: object) -> DictConfig:
    return OmegaConf.create(
        {
            "train": True,
            "test": True,
            "module": {"quantiles": levels, "calibrate": "conformal"},
            "trainer": trainer,
        }
    )


def test_a_validation_split_too_small_for_the_outermost_level_is_warned_of(caplog):
    """One validation window of a few points narrowed an 80 % interval to 50 % coverage."""
    job = _calibrated_job([0.1, 0.5, 0.9])
    assert not check_calibration_split(job, {"val": 10}, 8)
    assert check_calibration_split(job, {"val": 9}, 8)
    assert "on 9 validation window(s), and the level 0.1 needs at least 10" in caplog.text
    assert check_calibration_split(_calibrated_job([0.25, 0.5, 0.99]), {"val": 50}, 8)
    assert "the level 0.99 needs at least 100" in caplog.text
    with pytest.raises(UserError, match=r"of which trainer\.limit_val_batches=0 runs no batch"):
        check_calibration_split(
            _calibrated_job([0.1, 0.5, 0.9], limit_val_batches=0), {"val": 50}, 8
        )
    uncalibrated = OmegaConf.merge(job, {"module": {"calibrate": "none"}})
    assert not check_calibration_split(uncalibrated, {"val": 0}, 8)


@pytest.mark.parametrize(
    ("limit", "batch_size", "validated"),
    [(1, 2, 2), (3, 2, 6), (2, 5, 10), (100, 2, 12), (0.5, 2, 6), (0.25, 5, 0), (1.0, 2, 12)],
)
def test_the_calibration_split_counts_the_windows_limit_val_batches_lets_through(
    caplog, limit, batch_size, validated
):
    """``trainer.limit_val_batches=1`` with ``data.batch_size=2`` calibrated on 2 of 12
    validation windows without the warning that 7 windows of a smaller split got."""
    job = _calibrated_job([0.1, 0.5, 0.9], limit_val_batches=limit)
    if validated == 0:  # 0.25 of 3 batches: Lightning runs none
        with pytest.raises(UserError, match=r"limit_val_batches=0\.25 runs no batch"):
            check_calibration_split(job, {"val": 12}, batch_size)
        return
    assert check_calibration_split(job, {"val": 12}, batch_size) == (validated < 10)
    if validated < 10:
        assert f"on {validated} validation window(s), and the level 0.1 needs" in caplog.text
        assert f"a larger trainer.limit_val_batches than {limit} (1.0: all of them)." in caplog.text


@pytest.mark.parametrize(
    ("trainer", "warned"),
    [
        ({}, True),  # one process: 2 batches of 4, 8 windows
        ({"devices": 2}, False),  # two share the 12 windows, 2 batches each: all 12
        ({"devices": [0, 1]}, False),
        ({"devices": "0,1"}, False),  # Lightning's text forms: two devices, counted as one
        ({"devices": "2", "accelerator": "cpu"}, False),
        ({"devices": 1, "num_nodes": 2}, False),
        ({"devices": "auto"}, True),  # resolved by Lightning: counted as one
    ],
)
def test_the_calibration_split_counts_every_process_s_batches(trainer, warned):
    """Lightning applies ``trainer.limit_val_batches`` to each process and the residuals
    are pooled over them: two processes with a limit of 2 batches of 4 validate all 12
    windows, where one process's count (8) warned."""
    job = _calibrated_job([0.1, 0.5, 0.9], limit_val_batches=2, **trainer)
    assert check_calibration_split(job, {"val": 12}, 4) == warned


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        (
            "[0.1,1.5]",
            "module.quantiles=[0.1,1.5]: 1.5 outside (0, 1): give distinct levels strictly "
            "between 0 and 1, e.g. "
            "module.quantiles=[0.1,0.5,0.9] (null: point forecasts only).",
        ),
        (  # was read as null: point forecasts, without a word
            "[]",
            "module.quantiles=[] lists no level: give module.quantiles=null for point "
            "forecasts only, or levels such as module.quantiles=[0.1,0.5,0.9].",
        ),
    ],
    ids=["outside", "empty"],
)
def test_train_py_refuses_bad_levels_in_one_line(tmp_path, levels, message):
    done = subprocess.run(
        [
            *PYTHON,
            "train.py",
            "experiment=demo",
            "model=linear",
            f"module.quantiles={levels}",
            "logger=none",
            f"hydra.run.dir={tmp_path / 'run'}",
            f"paths.data_dir={tmp_path / 'data'}",
        ],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert one_line(done) == message
    assert "Traceback" not in done.stderr + done.stdout


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("module.quantiles=[0.2,0.25,0.5,0.75,0.8]", "module.quantiles=[0.2,0.25,0.5,0.75,0.8]"),
        ("module.quantiles=[0.1,0.5,0.9]", "module.quantiles=[0.1,0.5,0.9]"),
        ("module.anchor=none", "module.anchor=none"),
    ],
)
def test_eval_refuses_levels_or_an_anchor_the_weights_were_not_trained_for(
    quantile_run, tmp_path, override, said
):
    """Other levels of the same count would relabel the head's columns in silence, another
    count would not fit its weights: both are refused for what they change."""
    from test_eval import compose_eval

    from cloudlstm.cli.evaluate import evaluate

    run = quantile_run[0]
    with pytest.raises(UserError) as err:
        evaluate(compose_eval(run, tmp_path / "eval", override))
    trained = "[0.1,0.25,0.5,0.75,0.9]" if "quantiles" in override else "last"
    key = override.split("=")[0]
    assert f"was trained with {key}={trained}; its weights do not forecast for {said}." in str(
        err.value
    )
    assert "\n" not in str(err.value)
