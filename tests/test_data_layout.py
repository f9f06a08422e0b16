"""The data package's layout: sources / pipeline, the top-level names, older runs' targets."""

from __future__ import annotations

import importlib

import pytest
from omegaconf import OmegaConf

import cloudlstm.data as data
from cloudlstm.assembly.build import instantiate_datamodule
from cloudlstm.rundir.old_configs import current_config, current_target


def test_top_level_names_still_import():
    for name in data.__all__:
        assert getattr(data, name) is not None


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (
            "cloudlstm.data.datamodule.PointCloudDataModule",
            "cloudlstm.data.pipeline.datamodule.PointCloudDataModule",
        ),
        (
            "cloudlstm.data.synthetic.SyntheticAdvectionDiffusion",
            "cloudlstm.data.sources.synthetic.SyntheticAdvectionDiffusion",
        ),
        (
            "cloudlstm.data.stand_in.SyntheticClusters",
            "cloudlstm.data.sources.stand_in.SyntheticClusters",
        ),
        # the engine's and the run directory's modules, once at the package root
        ("cloudlstm.training.ForecastModule", "cloudlstm.engine.module.ForecastModule"),
        ("cloudlstm.lit.ForecastModule", "cloudlstm.engine.module.ForecastModule"),
        ("cloudlstm.callbacks.EpochTimer", "cloudlstm.engine.callbacks.EpochTimer"),
        ("cloudlstm.schedules.warmup_cosine", "cloudlstm.engine.schedules.warmup_cosine"),
        ("cloudlstm.loggers.CSVLogger", "cloudlstm.engine.loggers.CSVLogger"),
        ("cloudlstm.pruning.OptunaPruning", "cloudlstm.engine.pruning.OptunaPruning"),
        (
            "cloudlstm.checkpoint_io.ChecksummedCheckpointIO",
            "cloudlstm.rundir.checkpoint_io.ChecksummedCheckpointIO",
        ),
        (
            "cloudlstm.preemption.CheckpointOnSigterm",
            "cloudlstm.rundir.preemption.CheckpointOnSigterm",
        ),
        # the data's shared contract, once in the pipeline (and before, flat in data)
        (
            "cloudlstm.data.pipeline.stream.PointCloudStream",
            "cloudlstm.data.stream.PointCloudStream",
        ),
        ("cloudlstm.data.stream.PointCloudStream", "cloudlstm.data.stream.PointCloudStream"),
        ("cloudlstm.data.transforms.StandardScaler", "cloudlstm.data.transforms.StandardScaler"),
        # already current, or not a moved module: unchanged
        (
            "cloudlstm.data.sources.beijing.BeijingSource",
            "cloudlstm.data.sources.beijing.BeijingSource",
        ),
        ("cloudlstm.data.PointCloudDataModule", "cloudlstm.data.PointCloudDataModule"),
        ("cloudlstm.models.lstm.SeqLSTM", "cloudlstm.models.lstm.SeqLSTM"),
    ],
)
def test_current_target(old, new):
    assert current_target(old) == new
    module, name = new.rsplit(".", 1)
    assert hasattr(importlib.import_module(module), name)


def test_an_older_runs_data_config_still_instantiates(tmp_path):
    """eval.py rebuilds the data from a run's config.yaml, which may name the old modules."""
    cfg = OmegaConf.create(
        {
            "cache": str(tmp_path),
            "data": {
                "_target_": "cloudlstm.data.datamodule.PointCloudDataModule",
                "source": {
                    "_target_": "cloudlstm.data.synthetic.SyntheticAdvectionDiffusion",
                    "num_points": 4,
                    "num_channels": 1,
                    "num_steps": 60,
                    "grid_size": 8,
                    "spin_up": 0,
                    "cache_dir": "${cache}",
                },
                "input_steps": 3,
                "output_steps": 2,
            },
        }
    )
    before = OmegaConf.to_yaml(cfg)
    current = current_config(cfg)
    dm = instantiate_datamodule(current)
    assert type(dm).__module__ == "cloudlstm.data.pipeline.datamodule"
    assert dm.num_points == 4
    assert current.data._target_ == "cloudlstm.data.pipeline.datamodule.PointCloudDataModule"
    assert OmegaConf.to_container(current.data.source)["cache_dir"] == "${cache}"  # not resolved
    assert OmegaConf.to_yaml(cfg) == before  # the run's own config is read, never changed
