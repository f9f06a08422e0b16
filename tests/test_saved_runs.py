"""The committed runs under docs/results/ (configs and metrics, no checkpoints) still build:
their configs, written before the data's description replaced ``data_info``, make the same
models, with the parameter counts their metrics.json recorded."""

from __future__ import annotations

import json
from pathlib import Path

import hydra
import pytest
from omegaconf import OmegaConf

from cloudlstm.cli.assemble import count_parameters
from cloudlstm.cli.build import instantiate_datamodule, rename_old_targets
from cloudlstm.data.spec import DataSpec
from cloudlstm.models.build import build_model
from cloudlstm.training import ForecastModule
from tests.conftest import ROOT

RUNS = sorted((ROOT / "docs" / "results").rglob("seed_0/config.yaml"))


def _spec(summary: dict) -> DataSpec:
    """The description of the data a saved run trained on, from its data summary."""
    return DataSpec.sized(
        summary["num_points"],
        summary["num_channels"],
        summary["input_steps"],
        summary["output_steps"],
        coord_features=summary["num_dims"],
        steps_per_day=summary["steps_per_day"],
    )


@pytest.mark.parametrize("config", RUNS, ids=lambda p: "/".join(p.parts[-4:-2]))
def test_a_saved_run_builds_its_model_again(config: Path, tmp_path) -> None:
    cfg = OmegaConf.load(config)
    metrics = json.loads((config.parent / "metrics.json").read_text())
    model = build_model(cfg.model, _spec(metrics["data"]), compile=False)
    assert count_parameters(model) == metrics["num_params"]
    # the training module as the run configured it (its target renamed where it moved)
    rename_old_targets(cfg.module)
    module = hydra.utils.instantiate(cfg.module, _partial_=True)(model=model, optimizer=None)
    assert isinstance(module, ForecastModule) and not module.anchored
    with pytest.MonkeyPatch.context() as patch:  # the data's class, without its files
        patch.setattr(hydra.utils, "instantiate", lambda node, **_: node)
        data = instantiate_datamodule(OmegaConf.merge(cfg, {"paths": {"data_dir": str(tmp_path)}}))
    hydra.utils.get_class(data._target_)  # an old data target resolves to today's module
    assert data.co_units == "ug/m3"  # the files' units, as those runs read them


def test_runs_are_found() -> None:
    assert len(RUNS) >= 12
