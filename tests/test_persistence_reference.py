"""Persistence's validation MAE beside the model's: measured at a fit's first validation on
the same windows (``val/persistence_mae``, engine/module.py), shown in the progress line,
recorded in ``metrics.json``, and a warning at the end of a training whose best validation
MAE is no better than it. Tiny runs with a real Trainer and real Hydra configs."""

from __future__ import annotations

import itertools
import logging
import math
import re
from pathlib import Path

import pytest
import torch

from cloudlstm.assembly.assemble import assemble
from cloudlstm.cli.train import train
from cloudlstm.engine.progress_log import persistence_warning
from tests.conftest import TINY, compose_train

WARNING = re.compile(r"The best validation MAE, (\S+), is no better than persistence's, (\S+) ")


def persistence_by_hand(job) -> float:
    """The MAE of each target's last input frame against the validation windows the tiny
    runs validate on (``trainer.limit_val_batches=2``), over the observed entries."""
    errors = []
    for batch in itertools.islice(job.datamodule.val_dataloader(), 2):
        target = job.module.scaler.inverse_transform(batch["y"])
        last = batch["x"][:, -1:, :, : target.shape[-1]].expand_as(target)
        forecast = job.module.scaler.inverse_transform(last)
        errors.append((forecast - target).abs()[batch["y_mask"].bool()])
    return float(torch.cat(errors).double().mean())


def tiny_model(tmp_path: Path, model: str, *extra: str):
    """The tiny job's config with ``model`` (without the CloudLSTM's model.* settings)."""
    base = [o for o in TINY if not o.startswith("model.")]
    return compose_train(tmp_path, [*base, f"model={model}", "logger=none", *extra])


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if WARNING.match(r.getMessage())]


def test_the_reference_is_model_persistences_validation_mae(tiny_cfg, tmp_path):
    results = train(tiny_cfg("logger=none"))
    measured = results["val"]["val/persistence_mae"]
    # model=persistence trains nothing: its validation MAE from a validation of its own
    job = assemble(tiny_model(tmp_path, "persistence"), tmp_path / "persistence")
    job.trainer.validate(job.module, datamodule=job.datamodule, verbose=False)
    assert measured == float(job.trainer.callback_metrics["val/mae"])
    assert measured == pytest.approx(persistence_by_hand(job), rel=1e-6)
    # its own reference is itself (metrics.json's value went through a float32 tensor)
    assert job.module.persistence_mae == pytest.approx(measured, rel=1e-6)


def test_a_run_still_at_persistence_is_warned(tiny_cfg, caplog):
    # anchored (the strong recipe): one optimiser step at a rate of next to nothing
    # leaves the model at the last frame (within rounding)
    caplog.set_level(logging.WARNING)
    still = ("trainer.max_steps=1", "trainer.val_check_interval=1", "optimizer.lr=1e-9")
    results = train(tiny_cfg("logger=none", *still))
    val = results["val"]
    assert val["val/mae_best"] == pytest.approx(val["val/persistence_mae"], rel=1e-5)
    (line,) = warnings_of(caplog)
    best, persistence = (float(v) for v in WARNING.match(line).groups())
    assert best == pytest.approx(val["val/mae_best"], rel=1e-4)
    assert persistence == pytest.approx(val["val/persistence_mae"], rel=1e-4)
    assert "trainer.max_steps=4" in line and "\n" not in line


def test_a_run_that_beats_persistence_is_not_warned(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    results = train(tiny_model(tmp_path, "linear", "optimizer.lr=0.05"))
    assert results["val"]["val/mae_best"] < results["val"]["val/persistence_mae"]
    assert warnings_of(caplog) == []


@pytest.mark.parametrize("monitor", ["val/mae", "val/loss"])
def test_the_progress_line_shows_persistence(tiny_cfg, caplog, monitor):
    caplog.set_level(logging.INFO, logger="cloudlstm.engine.progress_log")
    results = train(tiny_cfg("logger=none", f"monitor={monitor}"))
    lines = [r.getMessage() for r in caplog.records if r.name == "cloudlstm.engine.progress_log"]
    assert len(lines) == 2, lines  # one a validation: each epoch's end
    persistence = f"\\(persistence {results['val']['val/persistence_mae']:.4g}\\)"
    # after another score, the validation MAE it compares with
    mae = "" if monitor == "val/mae" else r", val/mae \S+"
    for line in lines:
        assert re.search(rf": {monitor} \S+, best \S+{mae} {persistence}; ", line), line


@pytest.mark.parametrize(
    ("best", "warned"),
    [(10.5, True), (10.0, True), (9.995, True), (9.98, False), (math.nan, False)],
)
def test_no_better_is_within_a_thousandth_of_persistence(best, warned):
    # the demo's CloudLSTM: 45.898 against 45.902, a rounding away from where it started
    val = {"val/mae_best": best, "val/persistence_mae": 10.0}
    assert (persistence_warning(val, 150) is not None) == warned
    assert persistence_warning({"val/mae_best": best}, 150) is None  # nothing to compare


def test_a_resumed_run_measures_it_again(tiny_cfg):
    first = train(tiny_cfg("logger=none", "trainer.max_epochs=1"))
    run_dir = Path(tiny_cfg().paths.output_dir)
    (run_dir / "metrics.json").unlink()  # as if the process had ended before its test
    # a longer budget: the fit resumes mid-training, its first validation measures it
    longer = train(tiny_cfg("logger=none", "allow_changes=[trainer]", "resume=auto"))
    assert longer["resumed_from"] is not None and longer["epochs"] == 2
    persistence = first["val"]["val/persistence_mae"]
    assert longer["val"]["val/persistence_mae"] == persistence
    # a training that had finished: the restored weights' validation measures it
    (run_dir / "metrics.json").unlink()
    again = train(tiny_cfg("logger=none", "allow_changes=[trainer]"))
    assert again["resumed_from"] is not None and again["val"]["val/persistence_mae"] == persistence
