"""Held-out sites (``data.holdout_points``): which points, what the windows hide of them,
that their readings never reach training, the point groups scored, the models refused, and
eval.py and compare reproducing the selection."""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from cloudlstm.cli.compare.command import main as compare_main
from cloudlstm.cli.evaluate import evaluate
from cloudlstm.cli.train import train
from cloudlstm.data import PointCloudDataModule, PointCloudStream
from cloudlstm.data.pipeline.held_out import check_holdout
from cloudlstm.data.pipeline.splits import split_bounds
from cloudlstm.data.sources.long_format import LongFormatSource
from cloudlstm.data.spec import DataSpec
from cloudlstm.errors import UserError
from cloudlstm.models.build import build_model
from cloudlstm.models.held_out import held_out_refusal
from tests.conftest import ROOT, TINY, compose_train, one_line, run_python
from tests.test_eval import compose_eval
from tests.wandb_reader import finished_run

# ---------------------------------------------------------------- a long-format file
STEPS, POINTS, CHANNELS = 160, 10, ["no2", "pm25"]
IDS = [f"st{i:02d}" for i in range(POINTS)]
HELD = ["st02", "st07"]
TEST_START = split_bounds(STEPS, 0.1, 0.2)["test"][0]  # the data options' default fractions
# the tiny job of conftest on a file instead of the synthetic source
JOB = [
    *(o for o in TINY if not o.startswith("data.source.")),
    "data=points",
    "logger=none",
    "report.figures=false",
]


def long_table(seed: int = 0) -> pd.DataFrame:
    """Hourly readings of two daily waves at scattered stations, one row per (step, id)."""
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 10, size=(POINTS, 2))
    t = np.arange(STEPS)[:, None]
    phase = 2 * np.pi * t / 24
    no2 = 50 + 20 * np.sin(phase + xy[:, 0] / 3) + 2 * xy[:, 1]
    pm25 = 30 + 10 * np.cos(phase + xy[:, 1] / 3) + 3 * xy[:, 0]
    noise = rng.normal(0, 1, size=(2, STEPS, POINTS))
    times = pd.Timestamp("2024-01-01") + pd.to_timedelta(np.arange(STEPS), unit="h")
    return pd.DataFrame(
        {
            "timestamp": np.repeat(times, POINTS),
            "step": np.repeat(np.arange(STEPS), POINTS),
            "id": np.tile(IDS, STEPS),
            "x": np.tile(xy[:, 0], STEPS),
            "y": np.tile(xy[:, 1], STEPS),
            "no2": (no2 + noise[0]).ravel(),
            "pm25": (pm25 + noise[1]).ravel(),
        }
    )


def write(table: pd.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    table.drop(columns="step").to_csv(path, index=False)
    return path


def train_on(folder: Path, table: pd.DataFrame, *overrides: str) -> tuple[dict, dict]:
    """Train the tiny job on ``table``: its results and its final weights."""
    csv = write(table, folder / "stream.csv")
    cfg = compose_train(folder, [*JOB, f"data.source.path={csv}", *overrides])
    results = train(cfg)
    final = torch.load(Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt", weights_only=False)
    return results, final["state_dict"]


def held_out_rows(table: pd.DataFrame, ids: list[str]) -> pd.Series:
    """The rows of ``ids`` before the test part: the training and validation readings."""
    return table.id.isin(ids) & (table.step < TEST_START)


# ---------------------------------------------------------------- the selection
def test_a_fraction_or_count_is_drawn_with_its_seed_and_ids_are_named():
    ids = [f"p{i}" for i in range(12)]
    quarter = check_holdout(0.25, 0, True).mask(ids)
    assert quarter.sum() == 3  # 12 x 0.25
    assert (check_holdout(0.25, 0, True).mask(ids) == quarter).all()  # the same draw
    draws = {tuple(np.flatnonzero(check_holdout(3, s, True).mask(ids))) for s in range(5)}
    assert len(draws) > 1  # the seed draws others
    assert check_holdout(0.04, 0, True).mask(ids).sum() == 1  # at least one
    named = check_holdout(["p3", "p10"], 0, False).mask(ids)
    assert np.flatnonzero(named).tolist() == [3, 10]
    assert check_holdout(None, 0, True) is None


@pytest.mark.parametrize(
    "points, seed, message",
    [
        (1.5, 0, r"data.holdout_points=1.5: use a fraction in \(0, 1\)"),
        (0, 0, r"data.holdout_points=0: use a fraction"),
        # not "use ... a number of points >= 1", which 3.0 is: say how to write it
        (
            3.0,
            0,
            r"^data.holdout_points=3.0 is no fraction in \(0, 1\): .*write it whole, "
            r"data.holdout_points=3\.$",
        ),
        (1.0, 0, r"data.holdout_points=1.0 is no fraction in \(0, 1\): a fraction of 1 or "),
        (True, 0, r"data.holdout_points=True: use a fraction"),
        ("p1", 0, r"data.holdout_points='p1': use a fraction"),
        ([], 0, r"holds out no point"),
        (["p1", "p1"], 0, r"names p1 twice"),
        (0.5, None, r"data.holdout_seed=None: use a whole number >= 0"),
    ],
)
def test_a_bad_selection_is_refused_before_any_data_is_read(points, seed, message):
    with pytest.raises(UserError, match=message):
        check_holdout(points, seed, True)


@pytest.mark.parametrize("points", [None, 0.25])
def test_a_holdout_history_that_is_not_a_boolean_is_refused_with_or_without_points(points):
    """Without held-out points the value is unused, but a typo there is still no choice."""
    with pytest.raises(UserError, match=r"data.holdout_history='maybe': use true or false"):
        check_holdout(points, 0, "maybe")


def test_no_history_without_held_out_points_is_refused_as_changing_nothing():
    """An evaluation "without the held-out points' readings" of a run that holds none out
    would be the ordinary one, under another name."""
    with pytest.raises(UserError) as refused:
        check_holdout(None, 0, False)
    assert str(refused.value) == (
        "data.holdout_history=false hides the held-out points' readings at test, and no "
        "point is held out (data.holdout_points is null): hold points out, e.g. "
        "data.holdout_points=3, or leave data.holdout_history out."
    )
    assert check_holdout(None, 0, True) is None


def test_a_selection_the_data_cannot_give_names_its_points():
    ids = [f"p{i}" for i in range(4)]
    with pytest.raises(UserError, match=r"names p9, not points of the data, whose 4 points"):
        check_holdout(["p1", "p9"], 0, True).mask(ids)
    with pytest.raises(UserError, match=r"holds out 4 of the 4 points.*no point is left"):
        check_holdout(4, 0, True).mask(ids)
    with pytest.raises(UserError, match=r"holds out all 4 points"):
        check_holdout(ids, 0, True).mask(ids)
    # a point of the file left out of the drawn subset: the subset is named, not the file
    stream = toy_stream(np.random.default_rng(0).normal(size=(60, 6, 1)))
    with pytest.raises(UserError) as err:
        PointCloudDataModule(
            stream, input_steps=3, output_steps=2, num_points=3, holdout_points=stream.point_ids
        ).setup()
    assert "not points of the data.num_points=3 drawn from stream 'toy', whose 3 points" in str(
        err.value
    )


def test_a_point_the_loading_dropped_is_named_as_dropped_not_unknown(tmp_path):
    """A point of the file without any reading is dropped as it is read: naming it was
    refused as "not points of file ...", which the file shows it is."""
    table = long_table()
    table.loc[table.id == "st03", CHANNELS] = np.nan
    source = LongFormatSource(write(table, tmp_path / "stream.csv"))
    with pytest.raises(UserError) as err:
        PointCloudDataModule(
            source, input_steps=3, output_steps=2, holdout_points=["st01", "st03"]
        ).setup()
    assert str(err.value) == (
        f"data.holdout_points names st03, point(s) of file {source.path} that the loading "
        "dropped for having no reading at all (as its warning said): there is nothing to "
        "score there; name points with readings, or give these readings in the file."
    )


# ---------------------------------------------------------------- what the windows hide
def toy_stream(values: np.ndarray) -> PointCloudStream:
    steps, points = values.shape[:2]
    times = np.datetime64("2021-01-01T00:00") + np.arange(steps) * np.timedelta64(1, "h")
    coords = np.random.default_rng(0).uniform(0, 10, size=(points, 2))
    return PointCloudStream.from_values(values, coords, timestamps=times, name="toy")


def test_a_channel_that_does_not_vary_in_training_is_warned_of(caplog):
    """Its test error is about 0 whatever the model: a table would read it as skill."""
    from cloudlstm.data.pipeline.preparation import fitted_scaler

    values = toy_values()
    values[..., 1] = 3.0  # the second channel: the same reading everywhere
    with caplog.at_level(logging.WARNING):
        fitted_scaler(toy_stream(values), (0, 150), None, "toy", max_abs_z=None)
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "toy: channel 'ch1' does not vary over the training part (every reading is 3): there "
        "is nothing to forecast in it, and its test error will be about 0 whatever the model."
    ]


def toy_values(steps: int = 200, points: int = 6) -> np.ndarray:
    """values[t, n, c] = t + 1000 n + 0.5 c: every entry tells where it came from."""
    t, n, c = np.arange(steps), np.arange(points), np.arange(2)
    return (t[:, None, None] + 1000.0 * n[None, :, None] + 0.5 * c).astype(np.float32)


@pytest.mark.parametrize("history", [True, False])
def test_windows_hide_held_out_readings_but_score_them_at_test(history):
    dm = PointCloudDataModule(
        toy_stream(toy_values()), 4, 2, holdout_points=["p002", "p003"], holdout_history=history
    )
    dm.setup()
    held = np.array([False, False, True, True, False, False])
    assert (dm.held_out == held).all()
    assert {g: m.tolist() for g, m in dm.point_groups.items()} == {
        "trained": (~held).tolist(),
        "held_out": held.tolist(),
    }
    # the scaler's mean: the training part's steps 0..143 at the trained points 0, 1, 4, 5
    train_end = dm.bounds["train"][1]
    mean = (train_end - 1) / 2 + 1000 * np.mean([0, 1, 4, 5])
    np.testing.assert_allclose(dm.scaler.mean, [mean, mean + 0.5])
    for split in ("train", "val"):
        item = dm.datasets[split][0]
        for part in ("x", "y"):
            assert (item[part][:, held] == 0).all() and not item[f"{part}_mask"][:, held].any()
            assert item[f"{part}_mask"][:, ~held].all()
    item = dm.test_dataset[0]
    t0 = dm.test_dataset.time_range(0)[0]
    raw = dm.scaler.inverse_transform(item["x"]).numpy()
    assert item["y_mask"].all()  # the held-out points are scored
    np.testing.assert_allclose(raw[:, 4, 0], np.arange(t0, t0 + 4) + 4000, atol=1e-3)
    if history:
        assert item["x_mask"].all()
        np.testing.assert_allclose(raw[:, 2, 0], np.arange(t0, t0 + 4) + 2000, atol=1e-3)
        np.testing.assert_allclose(raw[:, 3, 1], np.arange(t0, t0 + 4) + 3000.5, atol=1e-3)
    else:
        assert (item["x"][:, held] == 0).all() and not item["x_mask"][:, held].any()
    assert dm.summary()["point_groups"]["held_out"] == ["p002", "p003"]
    assert dm.summary()["holdout_history"] is history


def test_held_out_readings_change_nothing_a_training_window_or_the_scaler_holds():
    values = toy_values()
    dm = PointCloudDataModule(toy_stream(values), 4, 2, holdout_points=["p002", "p003"])
    dm.setup()
    test_start = dm.bounds["test"][0]
    garbage = values.copy()
    garbage[:test_start, 2] = np.nan
    garbage[:test_start, 3] = -7.0 * garbage[:test_start, 3]  # finite, far from the rest
    other = PointCloudDataModule(toy_stream(garbage), 4, 2, holdout_points=["p002", "p003"])
    other.setup()
    assert other.scaler.to_dict() == dm.scaler.to_dict()
    for split in ("train", "val"):
        for i in (0, len(dm.datasets[split]) - 1):
            a, b = dm.datasets[split][i], other.datasets[split][i]
            assert all(torch.equal(a[k], b[k]) for k in a)


def covariate_only_stream(silent_in_test: tuple[int, ...] = ()) -> PointCloudStream:
    """The toy stream with its second channel a measured covariate; point 2 reads the
    covariate alone, and the points ``silent_in_test`` read nothing from step 150 on (the
    test part is steps 160-199)."""
    from cloudlstm.data.covariates import COVARIATES_KEY

    values = toy_values()
    values[:, 2, 0] = np.nan
    for point in silent_in_test:
        values[150:, point, 0] = np.nan
    stream = toy_stream(values)
    stream.metadata[COVARIATES_KEY] = ["ch1"]
    return stream


def test_a_point_without_a_reading_of_a_forecast_channel_is_refused_as_held_out():
    """Its held_out scores were null: a point of covariates only has nothing to score."""
    dm = PointCloudDataModule(covariate_only_stream(), 4, 2, holdout_points=["p001", "p002"])
    with pytest.raises(UserError) as err:
        dm.setup()
    assert str(err.value) == (
        "data.holdout_points=[p001,p002] holds out p002, a point that reads no forecast "
        "channel at any step of stream 'toy' (covariates only): nothing to score; name points "
        "with readings of the forecast channels, or leave it out of the data."
    )
    drawn = PointCloudDataModule(covariate_only_stream(), 4, 2, holdout_points=1, holdout_seed=1)
    with pytest.raises(UserError, match=r"holds out p002, .* draw others \(another data.hold"):
        drawn.setup()  # seed 1 draws point 2


def test_held_out_points_none_of_which_reads_in_the_test_part_are_refused():
    """One silent in the test part among others is scored by the others (and warned of by
    the datamodule); all of them silent there left the held_out scores empty."""
    some = PointCloudDataModule(
        covariate_only_stream(silent_in_test=(3,)), 4, 2, holdout_points=["p003", "p004"]
    )
    some.setup()
    every = PointCloudDataModule(
        covariate_only_stream(silent_in_test=(3, 4)), 4, 2, holdout_points=2, holdout_seed=0
    )
    with pytest.raises(UserError, match=r"none of which reads a forecast channel in the test "):
        every.setup()


def test_held_out_points_of_data_without_a_test_part_are_taken():
    """data.test_fraction=0 tests nothing: no test readings is no empty score, and the
    selection was refused as if it left the held_out group nothing to score."""
    dm = PointCloudDataModule(
        covariate_only_stream(), 4, 2, holdout_points=["p003"], test_fraction=0.0
    )
    dm.setup()
    assert dm.bounds["test"][0] == dm.bounds["test"][1]
    assert dm.summary()["point_groups"]["held_out"] == ["p003"]


def test_train_py_refuses_a_held_out_point_of_covariates_only_in_one_line(tmp_path):
    table = long_table().assign(temp=lambda t: 10 + np.sin(t.step / 5))
    table.loc[table.id == "st03", ["no2", "pm25"]] = np.nan
    csv = write(table, tmp_path / "stream.csv")
    proc = run_python(
        "train.py",
        *JOB,
        f"data.source.path={csv}",
        "data.source.value_cols=[no2,pm25]",
        "data.source.covariate_cols=[temp]",
        "data.holdout_points=[st03]",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert one_line(proc) == (
        f"data.holdout_points=[st03] holds out st03, a point that reads no forecast channel at "
        f"any step of file {csv} (covariates only): nothing to score; name points with "
        "readings of the forecast channels, or leave it out of the data."
    )


def test_eval_py_evaluates_a_run_whose_held_out_point_reads_covariates_only(tmp_path, caplog):
    """A run that held out a point with readings of covariates alone (trained before such a
    selection was refused, or evaluated on data where the point reads nothing else) could
    not be evaluated: eval.py refused it with ways out (other points, another draw) that
    its training's held-out points cannot take. It is evaluated, with a warning, and its
    held_out scores are null, as its training's were; with data.score_filled=true they are
    those of the point's filled values, which the warning called null."""
    table = long_table().assign(temp=lambda t: 10 + np.sin(t.step / 5))
    cols = ["data.source.value_cols=[no2,pm25]", "data.source.covariate_cols=[temp]"]
    csv = write(table, tmp_path / "stream.csv")
    cfg = compose_train(
        tmp_path, [*JOB, f"data.source.path={csv}", *cols, "data.holdout_points=[st03]"]
    )
    train(cfg)
    table.loc[table.id == "st03", ["no2", "pm25"]] = np.nan
    other = write(table, tmp_path / "covariates_only.csv")
    with caplog.at_level(logging.WARNING):
        results = evaluate(
            compose_eval(Path(cfg.paths.output_dir), tmp_path / "eval", f"data.source.path={other}")
        )
    assert (
        f"data.holdout_points=[st03] holds out st03, a point that reads no forecast channel at "
        f"any step of file {other} (covariates only): nothing to score; the evaluated run held "
        "these out in training, so it is evaluated all the same: its held_out scores cover "
        "only what the held-out points read (null where they read nothing)."
    ) in caplog.messages
    held = results["test"]["groups"]["held_out"]["overall"]["mae"]["mean"]
    assert held is None or math.isnan(held)  # null in metrics.json
    assert results["test"]["groups"]["trained"]["overall"]["mae"]["mean"] > 0
    # data.score_filled=true scores the point's filled values: its warning said "null"
    filled = ["data.score_filled=true", f"data.source.path={other}"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        results = evaluate(compose_eval(Path(cfg.paths.output_dir), tmp_path / "filled", *filled))
    assert (
        "(covariates only): nothing to score; the evaluated run held these out in training, so "
        "it is evaluated all the same: its held_out scores count the values filled in where "
        "the held-out points read nothing as if they were read (data.score_filled=true)."
    ) in "\n".join(caplog.messages)
    assert results["test"]["groups"]["held_out"]["overall"]["mae"]["mean"] > 0


def test_held_out_points_silent_in_the_test_part_say_what_their_scores_would_be(caplog):
    """With data.score_filled=true the held-out scores of points that read nothing in the
    test part are those of their filled values, not empty (nor null, as eval.py's warning
    said)."""
    ids = [f"st{i:02d}" for i in range(4)]
    observed = np.ones((10, 4, 1), bool)  # (T, N, C)
    observed[6:, :2] = False  # st00, st01: no reading in the test part, steps [6, 10)
    holdout = check_holdout(["st00", "st01"], 0, True)
    held = holdout.mask(ids)
    part = "none of which reads a forecast channel in the test part of the data (steps [6, 10))"
    with pytest.raises(UserError, match=re.escape(f"{part}: the held-out scores would be empty")):
        holdout.check_scored(held, observed, (6, 10), ids)
    with pytest.raises(UserError, match=r"would be of filled values alone; name points with"):
        holdout.check_scored(held, observed, (6, 10), ids, score_filled=True)
    with caplog.at_level(logging.WARNING):
        holdout.check_scored(held, observed, (6, 10), ids, trained=True, score_filled=True)
    assert caplog.messages[-1].endswith(
        "would be of filled values alone; the evaluated run held these out in training, so it "
        "is evaluated all the same: its held_out scores count the values filled in where the "
        "held-out points read nothing as if they were read (data.score_filled=true)."
    )


# ---------------------------------------------------------------- the trained weights
def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"weights differ: {different}"


HOLDOUT = f"data.holdout_points=[{','.join(HELD)}]"


@pytest.mark.parametrize("history", [True, False])
def test_held_out_readings_never_reach_training(tmp_path, history):
    """NaN in the held-out points' training and validation readings: the same weights and
    validation metrics, bit for bit; the same test results too where the test inputs hold
    none of their readings (holdout_history=false)."""
    table = long_table()
    options = (HOLDOUT, f"data.holdout_history={history}")
    base, weights = train_on(tmp_path / "clean", table, *options)
    nan = table.copy()
    nan.loc[held_out_rows(table, HELD), CHANNELS] = np.nan
    results, nan_weights = train_on(tmp_path / "nan", nan, *options)
    assert_same_weights(weights, nan_weights)
    assert results["val"] == base["val"] and results["steps"] == base["steps"] > 0
    assert set(base["test"]["groups"]) == {"trained", "held_out"}
    if not history:
        assert results["test"] == base["test"]


def test_both_modes_train_alike_so_eval_py_gives_the_no_history_test(tmp_path):
    """Training never reads the held-out points in either mode, so a run trained with their
    history and tested again by eval.py without it (data.holdout_history=false) has the
    weights and the test results of a run trained without it: the campaign trains once."""
    table = long_table()
    kept, kept_weights = train_on(tmp_path / "kept", table, HOLDOUT)
    none, none_weights = train_on(tmp_path / "none", table, HOLDOUT, "data.holdout_history=false")
    assert_same_weights(kept_weights, none_weights)
    assert kept["val"] == none["val"] and kept["test"] != none["test"]
    run = next((tmp_path / "kept").rglob("metrics.json")).parent
    again = evaluate(compose_eval(run, tmp_path / "eval", "data.holdout_history=false"))
    assert again["test"] == none["test"]


@pytest.mark.slow
def test_garbage_held_out_readings_never_reach_training_but_trained_ones_do(tmp_path):
    """Finite garbage instead of NaN: the same weights and validation metrics; the same
    garbage at a trained point changes the weights (the property is no tautology)."""
    table = long_table()
    base, weights = train_on(tmp_path / "clean", table, HOLDOUT)
    for name, ids in (("garbage", HELD), ("control", ["st05"])):
        garbage = table.copy()
        rows = held_out_rows(table, ids)
        garbage.loc[rows, CHANNELS] = 200.0 - 3.0 * table.loc[rows, CHANNELS]
        results, changed = train_on(tmp_path / name, garbage, HOLDOUT)
        if name == "garbage":
            assert_same_weights(weights, changed)
            assert results["val"] == base["val"]
        else:
            assert any(not torch.equal(weights[k], changed[k]) for k in weights)
            assert results["val"] != base["val"]


# ---------------------------------------------------------------- the point groups scored
def test_metrics_json_scores_both_groups_as_by_hand(tmp_path):
    """Persistence (no training): each group's MAE is the mean |last input - target| over
    its points, every test window and forecast step."""
    table = long_table()
    csv = write(table, tmp_path / "stream.csv")
    overrides = [
        f"data.source.path={csv}",
        "model=persistence",
        f"data.holdout_points=[{','.join(HELD)}]",
        "trainer.limit_test_batches=1.0",
    ]
    base = [o for o in JOB if not o.startswith("model.")]
    cfg = compose_train(tmp_path, [*base, *overrides])
    train(cfg)
    test = json.loads(Path(cfg.paths.output_dir, "metrics.json").read_text())["test"]
    values = table.set_index(["step", "id"])[CHANNELS].unstack("id").to_numpy()  # (T, C*N)
    values = values.reshape(STEPS, len(CHANNELS), POINTS).transpose(0, 2, 1)  # (T, N, C)
    horizon = 3  # data.output_steps of the tiny job
    firsts = range(TEST_START, STEPS - horizon + 1)  # the first forecast step of each window
    errors = np.stack([np.abs(values[s : s + horizon] - values[s - 1]) for s in firsts])
    held = np.isin(sorted(IDS), HELD)  # the file's points are read in id order
    for group, points in (("held_out", held), ("trained", ~held)):
        got = test["groups"][group]
        assert got["num_instances"] == len(firsts)
        np.testing.assert_allclose(got["overall"]["mae"]["mean"], errors[:, :, points].mean())
    np.testing.assert_allclose(test["overall"]["mae"]["mean"], errors.mean())


# ---------------------------------------------------------------- the models refused
def compose_model(name: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("train", overrides=[f"model={name}"]).model


# learns parameters of each training point: refused in both modes
POINT_PARAMETERS = {"stid", "agcrn", "graph_wavenet", "staeformer", "lstm", "mlp"}
# forecasts a point from its own readings alone: refused without them
OWN_HISTORY = {"persistence", "seasonal_naive", "linear", "knn_lstm", "knn_mlp"}
MODELS = sorted(p.stem for p in (ROOT / "conf" / "model").glob("*.yaml"))


@pytest.mark.parametrize("name", MODELS)
def test_every_model_forecasts_held_out_points_or_says_why_not(name):
    spec = DataSpec.sized(12, 2, input_steps=24, output_steps=3, steps_per_day=24)
    model = build_model(compose_model(name), spec)
    with_history, without = held_out_refusal(model, True), held_out_refusal(model, False)
    if name in POINT_PARAMETERS:
        assert with_history == without and not with_history.needs_history
    elif name in OWN_HISTORY:
        assert with_history is None and without.needs_history
    else:  # CloudLSTM family, point-cloud, grid and distance-graph models
        assert with_history is None and without is None
    if name in ("knn_lstm", "knn_mlp", "cloudlstm"):  # K = 1 reads no other point
        config = compose_model(name)
        config.k = 1 if name == "cloudlstm" else 3
        refusal = held_out_refusal(build_model(config, spec), False)
        assert (refusal is None) == (name != "cloudlstm")


@pytest.mark.parametrize(
    "overrides, start",
    [
        (
            ["model=stid", "data.holdout_points=0.25"],
            "model=stid cannot forecast points held out of training (data.holdout_points): it "
            "learns an embedding for each training point",
        ),
        (
            ["model=linear", "data.holdout_points=3", "data.holdout_history=false"],
            "model=linear cannot forecast the held-out points without their readings "
            "(data.holdout_history=false): each point's forecast is a linear map",
        ),
    ],
)
def test_train_py_refuses_a_model_in_one_line(tmp_path, overrides, start):
    base = [o for o in TINY if not o.startswith("model.")]
    cmd = [
        *base,
        *overrides,
        "logger=none",
        f"hydra.run.dir={tmp_path / 'run'}",
        f"paths.data_dir={tmp_path / 'data'}",
    ]
    proc = run_python("train.py", *cmd)
    assert one_line(proc).startswith(start)
    assert not (tmp_path / "run" / "metrics.json").exists()


@pytest.mark.parametrize(
    "model, history", [(["model=cnn", "model.num_layers=2"], False), (["model=stgcn"], True)]
)
def test_grid_and_graph_models_score_held_out_points(tmp_path, model, history):
    base = [o for o in TINY if not o.startswith("model.")]
    extra = ["logger=none", "report.figures=false", "data.holdout_points=0.25"]
    cfg = compose_train(tmp_path, [*base, *model, *extra, f"data.holdout_history={history}"])
    groups = train(cfg)["test"]["groups"]
    assert set(groups) == {"trained", "held_out"}
    assert all(np.isfinite(g["overall"]["mae"]["mean"]) for g in groups.values())


# ---------------------------------------------------------------- W&B, eval.py, compare
@pytest.fixture(scope="module")
def held_out_run(tmp_path_factory) -> Path:
    """A trained CloudLSTM run directory with 3 of its 12 points held out, logged to W&B
    offline."""
    tmp = tmp_path_factory.mktemp("held_out")
    cfg = compose_train(tmp, [*TINY, "logger=wandb", "data.holdout_points=0.25"])
    train(cfg)
    return Path(cfg.paths.output_dir)


def metrics(path: Path) -> dict:
    return json.loads((path / "metrics.json").read_text())


def test_wandb_gets_both_point_groups(held_out_run):
    groups = metrics(held_out_run)["test"]["groups"]
    _, run = finished_run(held_out_run)
    last = run.history[-1] | run.summary
    for group in ("held_out", "trained"):
        mae = groups[group]["overall"]["mae"]["mean"]
        assert last[f"test_{group}/mae"] == pytest.approx(mae)
    (table,) = held_out_run.glob("wandb/offline-run-*/files/**/group_table_*.table.json")
    rows = json.loads(table.read_text())["data"]
    assert [row[0] for row in rows] == ["trained", "held_out"]


def test_eval_py_holds_out_the_runs_points(held_out_run, tmp_path):
    trained = metrics(held_out_run)
    held = trained["data"]["point_groups"]["held_out"]
    assert len(held) == 3
    again = evaluate(compose_eval(held_out_run, tmp_path / "again"))
    assert again["data"]["point_groups"] == trained["data"]["point_groups"]
    assert again["test"] == trained["test"]
    kriging = evaluate(
        compose_eval(held_out_run, tmp_path / "kriging", "data.holdout_history=false")
    )
    before, now = (r["test"]["groups"] for r in (trained, kriging))
    assert now["held_out"]["overall"] != before["held_out"]["overall"]
    every = evaluate(compose_eval(held_out_run, tmp_path / "every", "data.holdout_points=null"))
    assert "groups" not in every["test"]


def test_eval_py_refuses_to_score_other_points_as_held_out(held_out_run, tmp_path):
    held = metrics(held_out_run)["data"]["point_groups"]["held_out"]
    with pytest.raises(UserError) as err:
        evaluate(compose_eval(held_out_run, tmp_path / "other", "data.holdout_seed=12345"))
    # the data's points are the run's: the draw differs, where it read "its points changed"
    assert re.search(
        r"was trained with .* held out, but the data now holds out .* \(another selection: "
        r"data.holdout_points or data.holdout_seed is not the run's\)\. Evaluate on",
        str(err.value),
    )
    named = f"data.holdout_points=[{','.join(held)}]"
    assert "groups" in evaluate(compose_eval(held_out_run, tmp_path / "named", named))["test"]


def test_eval_py_refuses_to_hold_out_points_a_run_trained_on(tmp_path):
    cfg = compose_train(tmp_path / "every", TINY)
    train(cfg)
    run = Path(cfg.paths.output_dir)
    with pytest.raises(UserError) as err:
        evaluate(compose_eval(run, tmp_path / "held", "data.holdout_points=2"))
    assert re.fullmatch(
        rf"{re.escape(str(run))}/checkpoints/\S+\.ckpt was trained on every point, \S+, \S+ "
        r"too, so a held_out group of them would not measure forecasts at sites the model "
        r"never saw\. Train with data.holdout_points to measure that, or evaluate without it\.",
        str(err.value),
    )


def write_run(path: Path, seed: int, held_mae: float, trained_mae: float) -> None:
    """A run directory as train.py leaves it, with the two point groups."""
    path.mkdir(parents=True)

    def result(mae: float) -> dict:
        # a quantile forecast's CRPS, taken here as half the MAE
        return {"overall": {"mae": {"mean": mae, "std": 0.1}, "crps": {"mean": mae / 2, "std": 0}}}

    test = {
        **result((held_mae + 3 * trained_mae) / 4),
        "per_step": {"mae": {"mean": [1.0], "std": [0.1]}},
        "groups": {"held_out": result(held_mae), "trained": result(trained_mae)},
    }
    (path / "metrics.json").write_text(
        json.dumps({"run": {"model": "cloudlstm", "data": "beijing"}, "test": test})
    )
    config = {
        "seed": seed,
        "data": {"holdout_points": 0.25, "holdout_seed": seed, "holdout_history": True},
    }
    (path / "config.yaml").write_text(json.dumps(config))


def test_compare_shows_both_groups_with_the_draws_of_a_setting_in_one_row(tmp_path, capsys):
    write_run(tmp_path / "s0", 0, held_mae=12.0, trained_mae=8.0)
    write_run(tmp_path / "s1", 1, held_mae=14.0, trained_mae=10.0)
    assert compare_main([str(tmp_path), "--metrics", "mae", "--format", "csv"]) == 0
    [row] = list(csv_rows(capsys.readouterr().out))
    assert row["n"] == "2"
    assert float(row["held_out/mae_mean"]) == 13.0 and float(row["trained/mae_mean"]) == 9.0
    assert compare_main([str(tmp_path), "--groups", "outliers"]) == 2
    assert (
        "no run has point group(s) outliers; groups: held_out, trained" in capsys.readouterr().err
    )


def test_compare_shows_a_quantile_metric_of_each_group(tmp_path, capsys):
    write_run(tmp_path / "s0", 0, held_mae=12.0, trained_mae=8.0)
    write_run(tmp_path / "s1", 1, held_mae=14.0, trained_mae=10.0)
    argv = [str(tmp_path), "--metrics", "crps", "--group-metric", "crps", "--format", "csv"]
    assert compare_main(argv) == 0
    [row] = list(csv_rows(capsys.readouterr().out))
    assert float(row["held_out/crps_mean"]) == 6.5 and float(row["trained/crps_mean"]) == 4.5


def csv_rows(text: str) -> csv.DictReader:
    return csv.DictReader(io.StringIO(text))
