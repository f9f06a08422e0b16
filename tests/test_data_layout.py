"""The data package's layout: sources / pipeline, the top-level names, older runs' targets."""

from __future__ import annotations

import importlib

import pytest
from omegaconf import OmegaConf

import cloudlstm.data as data
from cloudlstm.cli.build import instantiate_datamodule
from cloudlstm.cli.old_configs import current_target


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
    dm = instantiate_datamodule(cfg)
    assert type(dm).__module__ == "cloudlstm.data.pipeline.datamodule"
    assert dm.num_points == 4
    assert cfg.data._target_ == "cloudlstm.data.pipeline.datamodule.PointCloudDataModule"
    assert OmegaConf.to_container(cfg.data.source)["cache_dir"] == "${cache}"  # not resolved
