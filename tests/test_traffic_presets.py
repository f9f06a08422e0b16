"""The traffic presets (experiment=metr_la, milan, milan_long, milan_held_out, losloop_tgcn)
and recipe=small: their job lists and the protocol each declares, composed as train.py
composes them."""

from __future__ import annotations

import pytest
from conftest import ROOT, compose_train
from omegaconf import OmegaConf, open_dict
from test_paper_presets import sweep_jobs

from cloudlstm.assembly.build import instantiate_datamodule

SHARED = ROOT.parent / "shared" / "data"
ZOO = {"persistence", "linear", "stid", "lstm", "convlstm", "predrnnpp", "stgcn"}
GRAPH = {"dcrnn", "graph_wavenet", "agcrn", "staeformer"}
FAMILY = {"cloudlstm_k3", "cloudgru_k3", "attention_cloudlstm_k3"}


def composed(tmp_path, preset: str) -> list:
    """Each seed-0 job's config, with its run directory (``sweep``: dir and subdir) resolved as
    the job resolves it (``${hydra:...}`` reads the job composed last)."""
    cfgs = []
    jobs = sweep_jobs(tmp_path, f"experiment={preset}")
    assert {job[0] for job in jobs} == {"seed=0", "seed=1", "seed=2"}
    for job in jobs:
        if job[0] != "seed=0":  # the other seeds change only the seed: not composed again
            continue
        cfg = compose_train(tmp_path, job)
        with open_dict(cfg):
            cfg.sweep = OmegaConf.to_container(cfg.hydra.sweep, resolve=True)
        cfgs.append(cfg)
    return cfgs


def test_small_recipe_is_the_default_recipe_with_a_small_budget_and_cadence(tmp_path):
    small = compose_train(tmp_path, ["recipe=small"])
    strong = compose_train(tmp_path, [])
    assert small.recipe_name == "small" and small.trainer.max_steps == 2000
    assert small.trainer.val_check_interval == 50 and small.scheduler.warmup_steps == 100
    assert small.callbacks.early_stopping.patience == 10
    assert small.scheduler.total_steps == 2000  # the cosine over the whole budget
    for key in ("module", "optimizer"):  # all else as the default recipe
        assert OmegaConf.to_container(small[key]) == OmegaConf.to_container(strong[key])
    assert small.monitor == strong.monitor == "val/mae"


def test_metr_la_preset_follows_dcrnn(tmp_path):
    cfgs = composed(tmp_path, "metr_la")
    assert len(cfgs) == 14
    models = {cfg.hydra.runtime.choices.model for cfg in cfgs}
    assert models == ZOO | GRAPH | FAMILY
    for cfg in cfgs:
        data = cfg.data
        assert (data.input_steps, data.output_steps) == (12, 12)
        assert data.source.missing_value == 0 and data.source.graph == "adj_mx.pkl"
        assert list(data.time_features) == ["hour"] and cfg.recipe_name == "small"
        assert cfg.sweep.dir.endswith("metr_la/small")


def test_milan_presets_follow_the_papers_mobile_protocol(tmp_path):
    cfgs = composed(tmp_path, "milan")
    assert {cfg.hydra.runtime.choices.model for cfg in cfgs} == ZOO | GRAPH | FAMILY
    assert {(c.data.input_steps, c.data.output_steps) for c in cfgs} == {(6, 6)}
    assert {(c.data.val_fraction, c.data.test_fraction) for c in cfgs} == {(0.1, 0.2)}
    assert all(not c.data.time_features for c in cfgs)  # the traffic alone, as the paper
    long = composed(tmp_path, "milan_long")
    assert {c.data.output_steps for c in long} == {36}
    assert "stid" not in {c.hydra.runtime.choices.model for c in long}  # recurrent ones
    assert long[0].sweep.dir.endswith("milan/small_long")
    ordinary = composed(tmp_path, "milan_ordinary_weeks")
    assert {c.hydra.runtime.choices.model for c in ordinary} == ZOO | GRAPH | FAMILY
    assert ordinary[0].sweep.dir.endswith("milan/small_ordinary_weeks")
    times = {"val": "2013-12-02", "test": "2013-12-09", "end": "2013-12-21"}
    assert all(OmegaConf.to_container(c.data.split_times) == times for c in ordinary)


def set_up_first_job(tmp_path, preset: str, shared: str):
    """The datamodule of the preset's first job, set up on ``../shared/data/<shared>``
    (skipped, saying so, where it is absent)."""
    if not (SHARED / shared).is_dir():
        pytest.skip(f"../shared/data/{shared} is absent")
    datamodule = instantiate_datamodule(composed(tmp_path, preset)[0])
    datamodule.setup("fit")
    return datamodule


def test_milan_ordinary_weeks_end_before_the_holidays(tmp_path):
    datamodule = set_up_first_job(tmp_path, "milan_ordinary_weeks", "milan_telecom")
    # hourly from 2013-11-04 00:00: 2 December is step 28 * 24, 21 December step 47 * 24
    assert datamodule.bounds == {"train": (0, 672), "val": (672, 840), "test": (840, 1128)}


def test_milan_held_out_preset_is_milans_protocol_with_ten_squares_held_out(tmp_path):
    cfgs = composed(tmp_path, "milan_held_out")
    models = {cfg.hydra.runtime.choices.model for cfg in cfgs}
    assert (
        models == {"persistence", "linear", "knn_lstm", "knn_lstm_k3", "convlstm", "stgcn"} | FAMILY
    )
    assert {(c.data.input_steps, c.data.output_steps, c.recipe_name) for c in cfgs} == {
        (6, 6, "small")
    }
    assert {(c.data.holdout_points, c.data.holdout_history) for c in cfgs} == {(10, True)}
    assert cfgs[0].sweep.dir.endswith("milan_held_out/small_history_True")


def test_milan_held_out_scores_ten_squares_apart_from_the_ninety_trained(tmp_path):
    datamodule = set_up_first_job(tmp_path, "milan_held_out", "milan_telecom")
    groups = datamodule.point_groups
    assert datamodule.held_out.shape == (100,) and datamodule.held_out.sum() == 10
    assert (groups["held_out"] == datamodule.held_out).all()
    assert (groups["trained"] == ~datamodule.held_out).all()


def test_losloop_preset_is_one_model_per_horizon(tmp_path):
    cfgs = composed(tmp_path, "losloop_tgcn")
    horizons = {(c.hydra.runtime.choices.model, c.data.output_steps) for c in cfgs}
    assert {j for _, j in horizons} == {3, 6, 9, 12} and len(cfgs) == 4 * 6
    for cfg in cfgs:
        assert cfg.data.input_steps == 12 and cfg.data.source.graph == "los_adj.csv.gz"
        assert (cfg.data.val_fraction, cfg.data.test_fraction) == (0.1, 0.2)
        assert not cfg.data.time_features
    subdirs = {c.sweep.subdir for c in cfgs}
    assert len(subdirs) == len(cfgs) and "stgcn/J9/seed_0" in subdirs


def test_metr_la_split_is_70_10_20(tmp_path):
    datamodule = set_up_first_job(tmp_path, "metr_la", "metr_la_week")
    steps = datamodule.summary()["steps"]
    total = sum(steps.values())
    assert total == 2016
    assert [round(steps[p] / total, 2) for p in ("train", "val", "test")] == [0.7, 0.1, 0.2]
