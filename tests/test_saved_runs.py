"""The committed runs under docs/results/ (configs and metrics, no checkpoints) still build:
their configs, written before the data's description replaced ``data_info`` and before a
data source's arguments moved into ``data.source``, make the same models, with the
parameter counts their metrics.json recorded, and the same data."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import hydra
import numpy as np
import pandas as pd
import pytest
import yaml
from omegaconf import DictConfig, OmegaConf

from cloudlstm.assembly.build import instantiate_datamodule
from cloudlstm.data.pipeline.datamodule import PointCloudDataModule
from cloudlstm.data.sources.beijing import BeijingSource
from cloudlstm.data.sources.long_format import LongFormatSource
from cloudlstm.data.sources.mobile import SyntheticMobileTraffic
from cloudlstm.data.sources.stand_in import SyntheticClusters
from cloudlstm.data.sources.synthetic import SyntheticAdvectionDiffusion
from cloudlstm.data.spec import DataSpec
from cloudlstm.engine.module import ForecastModule
from cloudlstm.models.build import build_model, count_parameters
from cloudlstm.rundir import old_configs
from cloudlstm.rundir.old_configs import (
    DATAMODULE,
    OLD_DATAMODULES,
    current_config,
    current_form,
    move_source_keys,
    rename_old_targets,
)
from tests.conftest import ROOT


def _data_targets(path: Path) -> str:
    """The ``_target_`` of a run config's data node and of its source, read by libyaml:
    OmegaConf's reader took a minute of every test process's collection for these."""
    data = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["data"]
    return f"{data.get('_target_', '')} {(data.get('source') or {}).get('_target_', '')}"


# the committed Beijing runs (results.md's tables); the traffic runs have their own data
RUNS = sorted(
    path
    for path in (ROOT / "docs" / "results").rglob("seed_0/config.yaml")
    if "beijing" in _data_targets(path).lower()
)
BEIJING = ROOT.parent / "shared" / "data" / "beijing_multisite"
# what a data summary must repeat for the same data (not where the files were)
SAME_DATA = (
    "name",
    "num_points",
    "num_channels",
    "channel_names",
    "total_steps",
    "steps",
    "windows",
    "bounds",
    "window_bounds",
    "stride",
    "steps_per_day",
)


def _spec(summary: dict, cfg: DictConfig) -> DataSpec:
    """The description of the data a saved run trained on, from its data summary (and its
    config's time features)."""
    return DataSpec.sized(
        summary["num_points"],
        summary["num_channels"],
        summary["input_steps"],
        summary["output_steps"],
        coord_features=summary["num_dims"],
        steps_per_day=summary["steps_per_day"],
        covariates=len(summary.get("covariates", [])),
        time_features=list(cfg.data.get("time_features") or []),
    )


def _saved_before_sources(cfg: DictConfig) -> bool:
    """The run's config names the old ``BeijingDataModule`` (source keys in ``data``)."""
    return cfg.data._target_ == "cloudlstm.data.sources.beijing.BeijingDataModule"


def _run_id(path: Path) -> str:
    return "/".join(path.parts[-4:-2])


@pytest.mark.parametrize("config", RUNS, ids=_run_id)
def test_a_saved_run_builds_its_model_again(config: Path, tmp_path) -> None:
    cfg = OmegaConf.load(config)
    metrics = json.loads((config.parent / "metrics.json").read_text())
    model = build_model(cfg.model, _spec(metrics["data"], cfg), compile=False)
    assert count_parameters(model) == metrics["num_params"]
    # the training module as the run configured it (its target renamed where it moved)
    rename_old_targets(cfg.module)
    module = hydra.utils.instantiate(cfg.module, _partial_=True)(model=model, optimizer=None)
    assert isinstance(module, ForecastModule)
    # runs of the paper recipe (no anchor key) output absolute values; the default recipe's
    # are anchored, persistence aside
    anchored = cfg.module.get("anchor", "none") == "last" and model.anchorable
    assert module.anchored is anchored
    if not _saved_before_sources(cfg):  # today's layout: nothing to convert
        assert cfg.data._target_ == DATAMODULE
        return
    with pytest.MonkeyPatch.context() as patch:  # the data's classes, without their files
        patch.setattr(hydra.utils, "instantiate", lambda node, **_: node)
        merged = OmegaConf.merge(cfg, {"paths": {"data_dir": str(tmp_path)}})
        data = instantiate_datamodule(current_config(merged))
    # the old BeijingDataModule is today's datamodule around a BeijingSource
    assert data._target_ == DATAMODULE and hydra.utils.get_class(data._target_)
    assert hydra.utils.get_class(data.source._target_) is BeijingSource
    # runs from before the key read the files' units; later ones say theirs
    assert data.source.co_units == cfg.data.get("co_units", "ug/m3")
    assert {"root", "stations", "cache_dir"} <= set(data.source)
    assert not {"root", "stations", "cache_dir", "co_units"} & set(data)
    assert (data.input_steps, data.stride) == (metrics["data"]["input_steps"], cfg.data.stride)


@pytest.fixture(scope="module")
def beijing_cache(tmp_path_factory) -> Path:
    """One stream cache for every saved run's data (the real copy is read once)."""
    return tmp_path_factory.mktemp("beijing_cache")


@pytest.mark.skipif(not BEIJING.is_dir(), reason=f"the real Beijing copy is not at {BEIJING}")
@pytest.mark.parametrize("config", RUNS, ids=_run_id)
def test_a_saved_runs_data_config_builds_the_same_data(config: Path, beijing_cache) -> None:
    """The converted config instantiates today's classes, and they make the data the run
    was trained and tested on: its recorded data summary (the files are the same UCI copy,
    in another folder)."""
    cfg = OmegaConf.load(config)
    recorded = json.loads((config.parent / "metrics.json").read_text())["data"]
    source = cfg.data if _saved_before_sources(cfg) else cfg.data.source
    source.root, source.cache_dir = str(BEIJING), str(beijing_cache)
    dm = instantiate_datamodule(current_config(cfg))
    assert type(dm) is PointCloudDataModule and type(dm.source) is BeijingSource
    saved = OmegaConf.load(config).data
    assert dm.source.co_units == saved.get("source", saved).get("co_units", "ug/m3")
    dm.setup()
    summary = dm.summary()
    assert {k: summary[k] for k in SAME_DATA} == {k: recorded[k] for k in SAME_DATA}
    assert summary["missing_fraction"] == pytest.approx(recorded["missing_fraction"], rel=1e-12)


def test_runs_are_found() -> None:
    assert len(RUNS) >= 12


# ---------------------------------------------------------------- a freshly written old config
def _fleet_csv(path: Path) -> Path:
    """A small long-format file: 6 points, 40 hourly steps, 2 channels."""
    times = pd.date_range("2024-01-01", periods=40, freq="1h")
    rows = [
        {"timestamp": t, "id": f"p{i}", "x": i % 3, "y": i // 3, "a": s + i, "b": s * i % 7}
        for s, t in enumerate(times)
        for i in range(6)
    ]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


# Data nodes as the configs of runs saved before the ``source`` node held them (the old
# conf/data/*.yaml, resolved but for the paths), and the source each one describes.
OLD_NODES = {
    "points": (
        {
            "_target_": "cloudlstm.data.sources.long_format.PointsDataModule",
            "path": "${paths.data_dir}/fleet.csv",
            "time_col": "timestamp",
            "id_col": "id",
            "coord_cols": ["x", "y"],
            "value_cols": None,
            "freq": None,
            "moving": None,
            "name": None,
            "bad_values": "error",
            "input_steps": 4,
            "output_steps": 2,
            "batch_size": 4,
        },
        lambda data: LongFormatSource(data / "fleet.csv"),
    ),
    "mobile": (
        {
            "_target_": "cloudlstm.data.sources.mobile.MobileDataModule",
            "path": None,
            "city": "city2",
            "num_antennas": 6,
            "num_services": 3,
            "num_days": 2,
            "seed": 1,
            "cache_dir": "${paths.data_dir}/mobile",
            "time_col": "timestamp",
            "id_col": "id",
            "coord_cols": ["x", "y"],
            "input_steps": 6,
            "output_steps": 6,
            "batch_size": 4,
            "num_points": 4,
        },
        lambda data: SyntheticMobileTraffic(
            num_antennas=6, num_services=3, num_days=2, seed=1, city="city2"
        ),
    ),
    "stand_in": (  # the flat cloudlstm.data layout's name, as the oldest runs wrote it
        {
            "_target_": "cloudlstm.data.stand_in.SyntheticClusters",
            "_recursive_": False,
            "cluster": "B",
            "clusters": {"A": {"num_points": 7, "seed": 1}, "B": {"num_points": 5, "seed": 0}},
            "source": {
                "_target_": "cloudlstm.data.synthetic.SyntheticAdvectionDiffusion",
                "num_points": 32,
                "num_channels": 2,
                "num_steps": 60,
                "grid_size": 8,
                "spin_up": 0,
                "cache_dir": "${paths.data_dir}/synthetic",
            },
            "input_steps": 3,
            "output_steps": 2,
            "batch_size": 4,
            "outliers": "dbscan",
        },
        lambda data: SyntheticAdvectionDiffusion(
            num_points=5, num_channels=2, num_steps=60, grid_size=8, spin_up=0, seed=0
        ),
    ),
}
SOURCE_CLASSES = {
    "points": LongFormatSource,
    "mobile": SyntheticMobileTraffic,
    "stand_in": SyntheticClusters,
}


@pytest.mark.parametrize("kind", OLD_NODES)
def test_a_freshly_written_old_style_config_builds_the_same_data(kind, tmp_path) -> None:
    node, same_source = OLD_NODES[kind]
    _fleet_csv(tmp_path / "fleet.csv")
    path = tmp_path / "config.yaml"
    OmegaConf.save({"paths": {"data_dir": str(tmp_path)}, "data": node}, path)
    cfg = OmegaConf.load(path)

    before = OmegaConf.to_yaml(cfg)
    cfg = current_config(cfg)
    assert OmegaConf.to_yaml(OmegaConf.load(path)) == before
    dm = instantiate_datamodule(cfg)
    assert type(dm) is PointCloudDataModule and type(dm.source) is SOURCE_CLASSES[kind]
    # the config an evaluation saves has today's form; interpolations are kept
    assert cfg.data._target_ == DATAMODULE and "_recursive_" not in cfg.data
    written = OmegaConf.to_container(cfg.data, resolve=False)
    for key, value in node.items():  # each key kept, in data or in data.source
        if not key.startswith("_") and key != "source":
            assert (written[key] if key in written else written["source"][key]) == value
    assert not {"cluster", "clusters", "path", "city", "cache_dir"} & set(written)
    # the same data as a datamodule built directly around the source the node describes
    args = {k: v for k, v in node.items() if k in written and not k.startswith("_")}
    args.pop("source", None)
    direct = PointCloudDataModule(same_source(tmp_path), **args)
    dm.setup()
    direct.setup()
    assert dm.summary() == direct.summary()
    np.testing.assert_array_equal(dm.stream.values, direct.stream.values)
    np.testing.assert_array_equal(dm.coords.numpy(), direct.coords.numpy())


@pytest.mark.parametrize("old", OLD_DATAMODULES)
def test_every_old_datamodule_node_moves_its_source_keys(old) -> None:
    target, keys = OLD_DATAMODULES[old]
    node = {"_target_": old, **{key: f"${{values.{key}}}" for key in keys}, "batch_size": 3}
    cfg = OmegaConf.create({"data": node})
    move_source_keys(cfg.data)
    assert OmegaConf.to_container(cfg.data) == {
        "_target_": DATAMODULE,
        "batch_size": 3,
        "source": {"_target_": target, **{key: f"${{values.{key}}}" for key in keys}},
    }
    assert hydra.utils.get_object(target)  # the source's target resolves


def test_a_current_data_node_is_left_alone() -> None:
    node: DictConfig = OmegaConf.create(
        {"_target_": DATAMODULE, "source": {"_target_": "x.Y", "root": "/r"}, "batch_size": 2}
    )
    before = OmegaConf.to_container(node)
    move_source_keys(node)
    assert OmegaConf.to_container(node) == before


def _upgraded_in_full(config: dict, monkeypatch: pytest.MonkeyPatch) -> dict:
    """``current_form(config)`` through the DictConfig upgrade, with no shortcut."""
    with monkeypatch.context() as patch:
        patch.setattr(old_configs, "_already_current", lambda config: False)
        return current_form(copy.deepcopy(config))


def test_the_current_form_of_every_committed_run_is_that_of_the_full_upgrade(monkeypatch):
    """compare takes a config already in today's form as it is: for each committed
    setting's first seed (older and newer forms alike) the result is the full upgrade's."""
    configs = sorted((ROOT / "docs" / "results").rglob("seed_0/config.yaml"))
    assert len(configs) > 50
    for path in configs:
        config = yaml.safe_load(path.read_text())
        assert current_form(config) == _upgraded_in_full(config, monkeypatch), path


@pytest.mark.parametrize(
    "config",
    [
        {"model": {"_target_": "cloudlstm.lit.ForecastModule"}},  # a module that moved
        {"data": {"_target_": "cloudlstm.data.beijing.BeijingDataModule", "root": "/r"}},
        {"data": {"_target_": next(iter(OLD_DATAMODULES)), "root": "/r"}},
        {"model": {"_target_": "m.M", "num_channels": 6}, "data_info": {"num_channels": 6}},
        {"trainer": {"callbacks": [{"_target_": "cloudlstm.callbacks.X"}]}},  # in a list
    ],
    ids=["moved-module", "flat-data-layout", "old-datamodule", "copied-sizes", "in-a-list"],
)
def test_an_older_config_is_upgraded(config: dict, monkeypatch) -> None:
    before = copy.deepcopy(config)
    assert current_form(config) == _upgraded_in_full(config, monkeypatch) != before
    assert config == before  # the caller's tree is not changed
