"""eval.py: a trained run tested again, on its data or other data, failing in one line."""

from __future__ import annotations

import json
import logging
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from cloudlstm.assembly.assemble import restore
from cloudlstm.assembly.checkpoint_fit import TrainedCheckpoint, restore_scaling
from cloudlstm.cli.eval_args import with_run_config
from cloudlstm.cli.evaluate import _one_process_without_ddp, evaluate
from cloudlstm.cli.override_text import as_override
from cloudlstm.cli.train import train
from cloudlstm.data.pipeline.coordinates import model_coords
from cloudlstm.data.spec import SPEC_KEY
from cloudlstm.data.transforms import normalize_coords, scale_coords
from cloudlstm.errors import UserError
from cloudlstm.forecast import Forecaster
from cloudlstm.rundir.checkpoints import write_checksum
from cloudlstm.rundir.layout import CONFIG_END, CONFIG_HEADER, find_checkpoint
from cloudlstm.rundir.lock import RunLock
from cloudlstm.rundir.replaced import retire_earlier_training
from cloudlstm.rundir.stops import RunInterrupted
from tests.conftest import (
    ROOT,
    TINY,
    compose_train,
    ctrl_c_as_in_a_terminal,
    held_by_another_process,
    one_line,
    run_python,
    subprocess_env,
)
from tests.kill_callback import SignalAtTest

JOB = [*TINY, "logger=none", "module.save_predictions=true"]


@pytest.fixture(scope="module")
def cloud_run(tmp_path_factory) -> Path:
    """A trained CloudLSTM run directory (12 points, 2 channels, J=3)."""
    tmp = tmp_path_factory.mktemp("cloud")
    cfg = compose_train(tmp, JOB)
    train(cfg)
    return Path(cfg.paths.output_dir)


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory) -> Path:
    """A trained CNN run directory: a grid model, tied to its training points."""
    tmp = tmp_path_factory.mktemp("grid")
    job = [o for o in JOB if not o.startswith("model.k=")]
    cfg = compose_train(tmp, [*job, "model=cnn", "model.num_layers=2"])
    train(cfg)
    return Path(cfg.paths.output_dir)


def compose_eval(run: Path, out: Path, *overrides: str) -> DictConfig:
    """conf/eval.yaml on the run's config.yaml, as `python eval.py run=<run> ...` composes it."""
    GlobalHydra.instance().clear()
    argv = with_run_config(["eval.py", f"run={run}", *overrides])
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("eval", overrides=argv[1:], return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        cfg.paths.output_dir = str(out)
    return cfg


def metrics(path: Path) -> dict:
    return json.loads((path / "metrics.json").read_text())


@pytest.mark.parametrize(("signum", "by", "status"), [(15, "SIGTERM", 143), (2, "Ctrl-C", 130)])
def test_an_evaluation_stopped_by_a_signal_says_so_with_its_status(
    cloud_run, tmp_path, signum, by, status
):
    """Lightning ends a test stopped by SIGTERM (or Ctrl-C) with status 0: an evaluation
    without metrics.json must not pass for a finished one."""
    out = tmp_path / "eval"
    stop = [f"+callbacks.stop._target_={SignalAtTest.__module__}.SignalAtTest"]
    cfg = compose_eval(cloud_run, out, *stop, f"+callbacks.stop.signum={signum}")
    with ctrl_c_as_in_a_terminal(), pytest.raises(RunInterrupted) as err:
        evaluate(cfg)
    assert err.value.exit_code == status
    assert str(err.value) == (
        f"Evaluation interrupted by {by}: {out} has no metrics.json; the same command "
        "evaluates again."
    )
    assert not (out / "metrics.json").exists()


def test_an_evaluation_stopped_in_its_test_names_an_earlier_metrics_json(cloud_run, tmp_path):
    """In an earlier evaluation's folder (``hydra.run.dir=``): its metrics.json stays, and
    the line said that the folder had none."""
    out = tmp_path / "eval"
    out.mkdir()
    (out / "metrics.json").write_text('{"test": "an earlier evaluation"}\n')
    stop = [f"+callbacks.stop._target_={SignalAtTest.__module__}.SignalAtTest"]
    cfg = compose_eval(cloud_run, out, *stop, "+callbacks.stop.signum=15")
    with pytest.raises(RunInterrupted) as err:
        evaluate(cfg)
    assert str(err.value) == (
        f"Evaluation interrupted by SIGTERM: {out / 'metrics.json'} is an earlier "
        "evaluation's, not replaced; the same command evaluates again."
    )
    assert metrics(out) == {"test": "an earlier evaluation"}


def test_a_second_ctrl_c_during_an_evaluation_says_so_and_leaves_ctrl_c_working(
    cloud_run, tmp_path
):
    """Lightning's shutdown at once ends in sys.exit(1), with SIGINT ignored for good: the
    evaluation's line and 130 instead, and Ctrl-C interrupts the process again after it."""
    out = tmp_path / "eval"
    twice = [
        f"+callbacks.{name}._target_={SignalAtTest.__module__}.SignalAtTest"
        for name in ("first", "again")
    ]
    cfg = compose_eval(
        cloud_run, out, *twice, "+callbacks.first.signum=2", "+callbacks.again.signum=2"
    )
    with ctrl_c_as_in_a_terminal():
        with pytest.raises(RunInterrupted) as err:
            evaluate(cfg)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert err.value.exit_code == 130
    assert str(err.value).startswith("Evaluation interrupted by Ctrl-C:")
    assert not (out / "metrics.json").exists()


def test_ctrl_c_during_an_evaluation_says_it_stops_there(cloud_run, tmp_path, caplog):
    """Not "at the end of this training step": no training runs, and nothing is saved."""
    stop = [f"+callbacks.stop._target_={SignalAtTest.__module__}.SignalAtTest"]
    cfg = compose_eval(cloud_run, tmp_path / "eval", *stop, "+callbacks.stop.signum=2")
    with ctrl_c_as_in_a_terminal(), pytest.raises(RunInterrupted), caplog.at_level(logging.WARNING):
        evaluate(cfg)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Ctrl-C")]
    assert said == [
        "Ctrl-C: the run stops after this batch of its evaluation; Ctrl-C again stops it at once."
    ]


def test_eval_retests_the_run_in_its_own_directory(cloud_run, tmp_path):
    out = tmp_path / "eval"
    evaluate(compose_eval(cloud_run, out, "report.figures=true"))
    got, trained = metrics(out), metrics(cloud_run)
    assert got["test"] == trained["test"]  # the same checkpoint on the same data
    assert got["checkpoint"] == trained["checkpoint"]
    assert got["run"] == trained["run"] and got["run_dir"] == str(cloud_run)
    assert got["overrides"] == ["report.figures=true"]
    assert got["test_seen_in_training"] is False  # the run's own split
    for folder in (cloud_run, out):  # each config.yaml ends with the line that marks it whole
        assert (folder / "config.yaml").read_text().splitlines()[-1] == CONFIG_END
    assert sorted(p.name for p in (out / "figures").iterdir()) == [
        "error_vs_horizon.png",
        "forecast_maps.png",
        "worst_points.png",
    ]
    assert (out / "predictions.npz").is_file() and (out / "config.yaml").is_file()


def test_other_windows_are_normalised_with_the_training_scaler(cloud_run, tmp_path, caplog):
    # a longer test part: a scaler refitted on the shorter training part would differ
    out = tmp_path / "eval"
    cfg = compose_eval(cloud_run, out, "data.test_fraction=0.4", "trainer.limit_test_batches=1.0")
    refitted = instantiate(cfg.data)
    refitted.setup()
    stored = torch.load(cloud_run / metrics(cloud_run)["checkpoint"], weights_only=False)
    trained_mean = stored[SPEC_KEY]["scaler"]["mean"]  # the one place it is stored
    assert not np.allclose(refitted.scaler.mean, trained_mean)

    with caplog.at_level(logging.WARNING, logger="cloudlstm.assembly.evaluated_data"):
        evaluate(cfg)
    # a test part reaching into the steps the run trained on is said to flatter the model
    trained, tested = metrics(cloud_run)["data"]["bounds"], metrics(out)["data"]["bounds"]
    assert tested["test"][0] < trained["val"][1] and metrics(out)["test_seen_in_training"]
    assert [r.getMessage() for r in caplog.records if "flatter" in r.getMessage()] == [
        f"The test part of this evaluation, steps {tested['test'][0]}-{tested['test'][1] - 1}, "
        f"overlaps steps 0-{trained['val'][1] - 1}, which the run trained on and chose its "
        "checkpoint on: its scores flatter the model. For a test on unseen steps, leave out "
        "the data.* overrides that move the split."
    ]
    # the windows ending where the run's test part ends are the run's test windows
    first = metrics(out)["data"]["windows"]["test"] - metrics(cloud_run)["data"]["windows"]["test"]
    with np.load(out / "predictions.npz") as new, np.load(cloud_run / "predictions.npz") as old:
        tested = len(old["prediction"])  # the run tested limit_test_batches=3 batches
        np.testing.assert_allclose(
            new["prediction"][first : first + tested], old["prediction"], rtol=1e-5, atol=1e-5
        )
        np.testing.assert_array_equal(new["target"][first : first + tested], old["target"])


def test_more_input_steps_than_the_run_trained_on_are_said_to_measure_another_setting(
    cloud_run, tmp_path, caplog
):
    """A recurrent model takes any number of input steps: it was tested on 6 in silence."""
    out = tmp_path / "eval"
    with caplog.at_level(logging.WARNING, logger="cloudlstm.assembly.evaluated_data"):
        evaluate(compose_eval(cloud_run, out, "data.input_steps=6"))
    assert metrics(out)["data"]["input_steps"] == 6
    assert [r.getMessage() for r in caplog.records if "input steps" in r.getMessage()] == [
        "This evaluation feeds the model 6 input steps, and it was trained on 4: its scores "
        "measure the model with inputs it did not learn from, not the run's setting. Leave "
        "out data.input_steps to test the run as it was trained."
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cloudlstm.assembly.evaluated_data"):
        evaluate(compose_eval(cloud_run, tmp_path / "same"))
    assert not [r for r in caplog.records if "input steps" in r.getMessage()]


def test_a_point_model_is_evaluated_on_other_points(cloud_run, tmp_path):
    out = tmp_path / "eval"
    results = evaluate(compose_eval(cloud_run, out, "data.num_points=7"))
    assert results["data"]["num_points"] == 7 and results["overrides"] == ["data.num_points=7"]
    assert np.isfinite(results["test"]["overall"]["mae"]["mean"])


def test_a_test_part_over_trained_steps_of_some_training_points_is_said_seen(
    cloud_run, tmp_path, caplog
):
    """``data.num_points=6``: 6 of the 12 training points, whose summary is of another
    stream (6 points, another digest); over the steps trained on, their test was seen."""
    out = tmp_path / "eval"
    with caplog.at_level(logging.WARNING, logger="cloudlstm.assembly.evaluated_data"):
        evaluate(compose_eval(cloud_run, out, "data.num_points=6", "data.test_fraction=0.5"))
    assert metrics(out)["test_seen_in_training"] is True
    assert [r for r in caplog.records if "flatter the model" in r.getMessage()]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cloudlstm.assembly.evaluated_data"):
        evaluate(compose_eval(cloud_run, tmp_path / "unseen", "data.num_points=6"))
    assert metrics(tmp_path / "unseen")["test_seen_in_training"] is False
    assert not [r for r in caplog.records if "flatter the model" in r.getMessage()]


def test_other_points_are_placed_as_the_training_points_were(cloud_run, tmp_path, caplog):
    """eval.py refitted the coordinate scale on the evaluated points: 7 points of a smaller
    area were stretched over the model's whole [0, 1] square."""
    cfg = compose_eval(cloud_run, tmp_path / "eval", "data.num_points=7")
    trained = TrainedCheckpoint.read(cloud_run / metrics(cloud_run)["checkpoint"])
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    restore_scaling(datamodule, trained)
    datamodule.setup()
    spec = trained.spec
    placed = scale_coords(
        datamodule.stream.coords,
        np.asarray(spec.coord_lo),
        np.asarray(spec.coord_span),
        np.asarray(spec.coord_degenerate),
    )
    np.testing.assert_allclose(datamodule.coords.numpy(), placed, rtol=1e-6)
    assert not np.allclose(placed, normalize_coords(datamodule.stream.coords))
    assert "outside" not in caplog.text  # inside the training area: no warning
    far = (np.zeros(2), np.full(2, 1e-3), np.zeros(2, dtype=bool))
    with caplog.at_level(logging.WARNING):
        model_coords(datamodule.stream, 10, datamodule.outlier_options, far)
    assert re.search(
        r"7 of 7 point\(s\) lie more than 1x the training area's extent outside "
        r"it, up to [\d.e+]+x \(point \w+\): the model extrapolates there",
        caplog.text,
    )


def test_a_grid_model_refuses_other_points_and_says_why(grid_run, tmp_path):
    evaluate(compose_eval(grid_run, tmp_path / "same"))  # its own points: fine
    with pytest.raises(UserError, match=r"only be evaluated on its 12 training points.*grid model"):
        evaluate(compose_eval(grid_run, tmp_path / "other", "data.num_points=7"))


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "data.source.num_channels=3",
            r"was trained on 2 channels \(pm25_like, no2_like\), but the data has 3",
        ),
        (
            "data.output_steps=2",
            r"holds a model built for output_steps=3, and the data give output_steps=2: "
            r"evaluate it with data.output_steps=3, or train a model for these data.$",
        ),
        (  # not the build's "set model.k <= 2": a trained model cannot take another k
            "data.num_points=2",
            r"was trained with model.k=3 neighbours per point, and the data has 2 point\(s\): "
            r"evaluate it on data of at least 3 points, or train a model for these data.$",
        ),
    ],
)
def test_data_the_checkpoint_does_not_fit_is_named(cloud_run, tmp_path, override, message):
    with pytest.raises(UserError, match=message):
        evaluate(compose_eval(cloud_run, tmp_path / "eval", override))


def test_a_checkpoint_of_another_model_is_named(cloud_run, grid_run, tmp_path):
    other = grid_run / metrics(grid_run)["checkpoint"]  # named relative to its run
    copy = tmp_path / "copy.ckpt"  # outside any run: its contents alone tell
    shutil.copy(other, copy)
    named = r"is no checkpoint of the run .* \(fixed_points, model: CNN2D, the run's CloudSeq2Seq\)"
    with pytest.raises(UserError, match=named):
        evaluate(compose_eval(cloud_run, tmp_path / "eval", f"ckpt={copy}"))
    # a checkpoint from before checkpoints named their model (the scaler then was the
    # datamodule's Lightning state): its weights do not fit
    old = torch.load(other, weights_only=False)
    old["PointCloudDataModule"] = {"scaler": old.pop(SPEC_KEY)["scaler"]}
    torch.save(old, tmp_path / "old.ckpt")
    with pytest.raises(
        UserError, match=r"does not fit the run's CloudSeq2Seq model \(\S+ missing"
    ) as err:
        evaluate(compose_eval(cloud_run, tmp_path / "eval", f"ckpt={tmp_path / 'old.ckpt'}"))
    # where it trained, as it records it (it named a placeholder)
    assert str(err.value).endswith(
        f"Give a checkpoint of this run, or run={grid_run} (the checkpoint's run)."
    )


def test_another_models_checkpoint_copied_into_the_run_names_where_it_trained(
    cloud_run, grid_run, tmp_path
):
    """A grid run's checkpoint copied into a CloudLSTM run's checkpoints/: the line ended in
    a placeholder for the run to give, where the checkpoint records where it trained."""
    run = tmp_path / "run"
    shutil.copytree(cloud_run, run)
    contents = torch.load(grid_run / metrics(grid_run)["checkpoint"], weights_only=False)
    copy = run / "checkpoints" / "copied.ckpt"
    said = "holds a CNN2D model, but the run's config builds a CloudSeq2Seq. Give a checkpoint "
    for trained_in, named in (
        (str(grid_run), f"run={grid_run} (the checkpoint's run)"),
        (
            str(tmp_path / "moved"),
            "the checkpoint's run as run=<its run directory> (it trained in "
            f"{tmp_path / 'moved'}, no run directory now)",
        ),
        (None, "the checkpoint's run as run=<its run directory>"),
    ):
        contents["hyper_parameters"]["output_dir"] = trained_in
        torch.save(contents, copy)
        with pytest.raises(UserError) as err:
            evaluate(compose_eval(run, tmp_path / "eval", "ckpt=copied.ckpt"))
        assert str(err.value) == f"{copy} {said}of this run, or {named}."


def test_weights_from_outside_the_run_are_warned_of(cloud_run, tmp_path, caplog):
    """A checkpoint of another run tested with this run's config: the log says so, where a
    file of the run's own says nothing."""
    own = cloud_run / metrics(cloud_run)["checkpoint"]
    shutil.copy(own, tmp_path / "elsewhere.ckpt")
    for ckpt, warned in ((own, False), (tmp_path / "elsewhere.ckpt", True)):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="cloudlstm.cli.evaluate"):
            evaluate(compose_eval(cloud_run, tmp_path / f"eval_{warned}", f"ckpt={ckpt}"))
        said = [r.getMessage() for r in caplog.records if "lies outside" in r.getMessage()]
        assert said == (
            [
                f"{ckpt} lies outside {cloud_run}: its weights are tested with that run's "
                "config and data, and the results are kept with that run"
            ]
            if warned
            else []
        )
        # the copy's results say whose training wrote it
        trained_in = metrics(tmp_path / f"eval_{warned}")["checkpoint_trained_in"]
        assert trained_in == (str(cloud_run) if warned else None)


def test_a_checkpoint_of_another_run_is_refused_naming_both_runs(cloud_run, tmp_path):
    """A run of the same model, sizes and data with another seed: its checkpoint loaded, and
    its test results were written into this run's eval/ under this run's name and config,
    which compare --include-evals then showed as this run's. Refused before the data are
    read, naming both runs and the command that tests it; that command tests it."""
    cfg = compose_train(tmp_path, [*JOB, "seed=7"])
    train(cfg)
    other = Path(cfg.paths.output_dir)
    ckpt = other / "checkpoints" / "last.ckpt"
    out = tmp_path / "eval"
    with pytest.raises(UserError) as refused:
        evaluate(compose_eval(cloud_run, out, f"ckpt={ckpt}"))
    assert str(refused.value) == (
        f"{ckpt} is a checkpoint of the run {other}, not of {cloud_run}: its test results "
        f"would be filed under {cloud_run}'s name and config. Give run={other} (the "
        f"checkpoint's run), or a checkpoint of {cloud_run}: ckpt=best, ckpt=last."
    )
    assert not (out / "metrics.json").exists()
    evaluate(compose_eval(other, out, "ckpt=last"))  # the way it names
    assert metrics(out)["run_dir"] == str(other)
    assert metrics(out)["run"]["tags"][-1] == "seed=7"


def test_another_runs_checkpoint_is_one_line_from_eval_py(cloud_run, grid_run):
    """Another model class in another run: one line naming both runs (it was the model's
    line, naming a placeholder for the run to give)."""
    ckpt = grid_run / metrics(grid_run)["checkpoint"]
    line = one_line(run_eval(f"run={cloud_run}", f"ckpt={ckpt}"))
    assert line.startswith(f"{ckpt} is no checkpoint of the run {cloud_run}: it differs from ")
    assert line.endswith(
        f"so its test results would not be the run's. Give run={grid_run} (the checkpoint's "
        f"run), or a checkpoint of {cloud_run}: ckpt=best, ckpt=last."
    )


def test_another_models_checkpoint_on_other_points_is_named_as_another_model(
    cloud_run, grid_run, tmp_path
):
    """A grid run given a CloudLSTM checkpoint and other points: the line names the other
    model, not the grid model's tie to its points as if it were the checkpoint's."""
    cloud_ckpt = tmp_path / "copy.ckpt"  # outside any run: its contents alone tell
    shutil.copy(cloud_run / metrics(cloud_run)["checkpoint"], cloud_ckpt)
    cfg = compose_eval(grid_run, tmp_path / "eval", f"ckpt={cloud_ckpt}", "data.num_points=7")
    with pytest.raises(UserError, match=r"model: CloudSeq2Seq, the run's CNN2D\)"):
        evaluate(cfg)


def test_a_missing_run_or_checkpoint_is_a_user_error(cloud_run, tmp_path):
    with pytest.raises(UserError, match="needs the run directory"):
        with_run_config(["eval.py", "data.num_points=7"])
    with pytest.raises(UserError, match=f"Run directory {tmp_path / 'nope'} does not exist"):
        with_run_config(["eval.py", f"run={tmp_path / 'nope'}"])
    with pytest.raises(UserError, match="is not a run directory: it has no config.yaml.$"):
        with_run_config(["eval.py", f"run={tmp_path}"])
    sweep = tmp_path / "sweep"  # a sweep's folder: the line names the runs in it
    for run in ("lstm/seed_0", "lstm/seed_1", "cloudlstm/seed_0", "a/b/c/too_deep"):
        (sweep / run / "checkpoints").mkdir(parents=True)
        shutil.copy(cloud_run / "config.yaml", sweep / run)
    # a model without parameters writes no checkpoint; an evaluation is no run
    for run in ("persistence/seed_0", "lstm/seed_0/eval/t"):
        (sweep / run).mkdir(parents=True)
        (sweep / run / "metrics.json").write_text("{}")
        shutil.copy(cloud_run / "config.yaml", sweep / run)
    with pytest.raises(UserError) as err:
        with_run_config(["eval.py", f"run={sweep}"])
    assert str(err.value) == (
        f"{sweep} is not a run directory: it has no config.yaml. It holds 4 run(s) "
        f"(cloudlstm/seed_0, lstm/seed_0, lstm/seed_1, ...): give one, e.g. "
        f"run={sweep / 'cloudlstm/seed_0'}."
    )
    config = cloud_run / "config.yaml"
    with pytest.raises(UserError, match=f"^{config} is a file of a run: give its folder, run="):
        with_run_config(["eval.py", f"run={config}"])
    with pytest.raises(UserError) as err:  # a tab completion one folder too far
        with_run_config(["eval.py", f"run={cloud_run / 'checkpoints'}"])
    assert str(err.value) == (
        f"{cloud_run / 'checkpoints'} is a folder of a run: give the run, run={cloud_run}."
    )
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(UserError, match="notes.txt is a file, not a run directory: give a run"):
        with_run_config(["eval.py", f"run={tmp_path / 'notes.txt'}"])
    untrained = tmp_path / "untrained"
    untrained.mkdir()
    shutil.copy(cloud_run / "config.yaml", untrained)
    with pytest.raises(UserError, match=r"No checkpoint 'best' in .*untrained"):
        evaluate(compose_eval(untrained, tmp_path / "eval"))


def refused_without_best(cloud_run: Path, tmp_path: Path, kept: str) -> tuple[Path, str]:
    """A run killed before a validation chose a checkpoint, its last weights kept as
    ``kept`` (a path in it), and eval.py's line refusing it (with the default ckpt=best)."""
    stopped = tmp_path / "stopped"
    (stopped / "checkpoints").mkdir(parents=True)
    shutil.copy(cloud_run / "config.yaml", stopped)
    shutil.copy(cloud_run / "checkpoints" / "last.ckpt", stopped / kept)
    with pytest.raises(UserError) as refused:
        evaluate(compose_eval(stopped, tmp_path / "eval"))
    return stopped, str(refused.value)


def test_a_run_stopped_before_a_validation_chose_a_checkpoint_says_so(cloud_run, tmp_path):
    """Only last.ckpt (killed early): the default ckpt=best was advised back to the user."""
    stopped, refused = refused_without_best(cloud_run, tmp_path, "checkpoints/last.ckpt")
    assert refused == (
        f"No best checkpoint in {stopped} ({stopped / 'checkpoints'} holds ['last.ckpt']): the "
        "run stopped before a validation chose one (killed, or shorter than one validation). "
        "Train it on with its command and resume=auto, or take its last weights with ckpt=last."
    )
    evaluate(compose_eval(stopped, tmp_path / "eval", "ckpt=last"))  # the way it names
    assert metrics(tmp_path / "eval")["checkpoint"].endswith("last.ckpt")


def test_a_run_with_only_a_slurm_checkpoint_says_its_folder_holds_no_ckpt_files(
    cloud_run, tmp_path
):
    """Killed before its first checkpoint, a SLURM requeue's hpc_ckpt_1.ckpt beside it: the
    line said its empty checkpoints folder ``holds []``, where the others say it in words."""
    stopped, refused = refused_without_best(cloud_run, tmp_path, "hpc_ckpt_1.ckpt")
    assert refused == (
        f"No best checkpoint in {stopped} ({stopped / 'checkpoints'} holds no .ckpt files): the "
        "run stopped before a validation chose one (killed, or shorter than one validation). "
        "Train it on with its command and resume=auto."
    )


def test_a_run_without_a_last_checkpoint_is_not_told_to_take_ckpt_last(cloud_run, tmp_path):
    """The line named ckpt=last among the ways on, the checkpoint it had not found."""
    run = tmp_path / "run"
    shutil.copytree(cloud_run, run)
    for name in ("last.ckpt", "last.ckpt.checksum"):
        (run / "checkpoints" / name).unlink()
    with pytest.raises(UserError) as refused:
        evaluate(compose_eval(run, tmp_path / "eval", "ckpt=last"))
    held = sorted(p.name for p in (run / "checkpoints").glob("*.ckpt"))
    assert str(refused.value) == (
        f"No checkpoint 'last' in {run} ({run / 'checkpoints'} holds {held}). Give another: "
        "ckpt=best, a file's name in that folder or the path of a .ckpt file."
    )


def test_a_finished_run_whose_tested_checkpoint_is_gone_says_so_for_ckpt_best(cloud_run, tmp_path):
    """Its tested (best) checkpoint deleted: the line said the run had stopped before a
    validation chose one (killed), or, with another epoch_*.ckpt left, that one was tested
    as the run's best without a word."""
    run = tmp_path / "run"
    shutil.copytree(cloud_run, run)
    tested = run / metrics(run)["checkpoint"]
    tested.with_name(tested.name + ".checksum").unlink()
    for left, other in (
        ("['epoch_000-step_000003.ckpt', 'last.ckpt']", True),
        ("['last.ckpt']", False),
    ):
        if other:
            tested.rename(run / "checkpoints" / "epoch_000-step_000003.ckpt")
        else:
            (run / "checkpoints" / "epoch_000-step_000003.ckpt").unlink()
        with pytest.raises(UserError) as refused:
            evaluate(compose_eval(run, tmp_path / "eval"))
        assert str(refused.value) == (
            f"The best checkpoint of {run}, {metrics(run)['checkpoint']} (the one its training "
            f"tested, as its metrics.json says), is gone: {run / 'checkpoints'} holds {left}. "
            "Give another: ckpt=last, a file's name in that folder or the path of a .ckpt file."
        )


@contextmanager
def files_opened() -> Iterator[list[str]]:
    """The files this process opens within the block, by the interpreter's "open" audit
    event (a hook cannot be removed: it is left listening to nothing)."""
    opened: list[str] = []
    listening = [True]

    def hook(event: str, args: tuple) -> None:
        if listening[0] and event == "open" and isinstance(args[0], str | Path):
            opened.append(str(args[0]))

    sys.addaudithook(hook)
    try:
        yield opened
    finally:
        listening[0] = False


def test_ckpt_best_reads_metrics_json_once(cloud_run, tmp_path):
    """It was read to find the tested checkpoint, again to tell whether one was named, and a
    third time to name it where it was gone."""
    run = tmp_path / "run"
    shutil.copytree(cloud_run, run)
    results = metrics(run)
    tested = run / results["checkpoint"]
    for named, gone in ((None, False), (results["checkpoint"], True)):
        (run / "metrics.json").write_text(json.dumps({**results, "checkpoint": named}))
        if gone:
            tested.unlink()
        with files_opened() as opened, pytest.raises(UserError) if gone else nullcontext():
            find_checkpoint(run, "best")
        assert [p for p in opened if Path(p).name == "metrics.json"] == [str(run / "metrics.json")]


def test_a_damaged_last_checkpoint_is_not_told_to_take_ckpt_last(cloud_run, tmp_path):
    """last.ckpt cut short: eval.py and a forecast said to take another checkpoint,
    ckpt=best or ckpt=last, the one given among them."""
    run = tmp_path / "run"
    shutil.copytree(cloud_run, run)
    last = run / "checkpoints" / "last.ckpt"
    with open(last, "r+b") as file:
        file.truncate(last.stat().st_size // 2)
    with pytest.raises(UserError) as evaluated:
        evaluate(compose_eval(run, tmp_path / "eval", "ckpt=last"))
    assert str(evaluated.value).startswith(f"Checkpoint {last} does not match its SHA-256")
    assert str(evaluated.value).endswith(
        "Evaluate another checkpoint: ckpt=best or a .ckpt written by training."
    )
    with pytest.raises(UserError) as forecast:
        Forecaster.load(run, ckpt="last", device="cpu")
    assert str(forecast.value).endswith(
        "Forecast with another checkpoint of the run: ckpt=best or the path of a .ckpt that "
        "training wrote."
    )


def test_a_damaged_checkpoint_offers_no_other_that_is_damaged_too(cloud_run, tmp_path):
    """Both checkpoints damaged (best not matching its checksum, last cut short): eval.py
    and a forecast offered the other one, which failed the same way."""
    run = tmp_path / "run"
    shutil.copytree(cloud_run, run)
    best = run / metrics(run)["checkpoint"]
    last = run / "checkpoints" / "last.ckpt"
    with open(best, "r+b") as file:
        file.seek(-1, 2)
        file.write(b"\x00" if file.read(1) != b"\x00" else b"\x01")
    with open(last, "r+b") as file:
        file.truncate(last.stat().st_size // 2)
    none_left = (
        f"No other checkpoint of {run} is sound ({{}} is damaged too): train the run again "
        "(its training command with resume=never), or give the path of a .ckpt written by "
        "training."
    )
    for ckpt, other in (("best", last.name), ("last", best.name)):
        with pytest.raises(UserError) as evaluated:
            evaluate(compose_eval(run, tmp_path / f"eval_{ckpt}", f"ckpt={ckpt}"))
        assert str(evaluated.value).endswith(none_left.format(other)), evaluated.value
        with pytest.raises(UserError) as forecast:
            Forecaster.load(run, ckpt=ckpt, device="cpu")
        assert str(forecast.value).endswith(none_left.format(other)), forecast.value


def damage(checkpoint: Path) -> None:
    """Change the last byte of ``checkpoint``: it no longer matches its checksum."""
    with open(checkpoint, "r+b") as file:
        file.seek(-1, 2)
        file.write(b"\x00" if file.read(1) != b"\x00" else b"\x01")


def refused_by_eval_and_forecast(run: Path, out: Path, ckpt: str) -> tuple[str, str]:
    """The lines of eval.py and of a forecast refusing checkpoint ``ckpt`` of ``run``."""
    with pytest.raises(UserError) as evaluated:
        evaluate(compose_eval(run, out, f"ckpt={ckpt}"))
    with pytest.raises(UserError) as forecast:
        Forecaster.load(run, ckpt=ckpt, device="cpu")
    return str(evaluated.value), str(forecast.value)


def test_a_missing_checkpoint_offers_no_other_that_is_damaged(cloud_run, tmp_path):
    """One checkpoint missing, the other damaged: eval.py and a forecast offered the damaged
    one (ckpt=best for a missing last, ckpt=last for a best that is gone or never chosen)."""
    run = tmp_path / "run"
    shutil.copytree(cloud_run, run)
    best = run / metrics(run)["checkpoint"]
    last = run / "checkpoints" / "last.ckpt"
    damage(best)
    last.unlink()
    none_left = (
        f"No other checkpoint of {run} is sound ({{}} is damaged): train the run again (its "
        "training command with resume=never), or give the path of a .ckpt written by training."
    )
    for line in refused_by_eval_and_forecast(run, tmp_path / "eval_last", "last"):
        assert line.startswith(f"No checkpoint 'last' in {run} ("), line
        assert line.endswith(none_left.format(best.name)), line
    shutil.copy(cloud_run / "checkpoints" / "last.ckpt", last)
    damage(last)
    best.unlink()  # the tested one gone
    for line in refused_by_eval_and_forecast(run, tmp_path / "eval_gone", "best"):
        assert line.startswith(f"The best checkpoint of {run}, "), line
        assert line.endswith(none_left.format(last.name)), line
    (run / "metrics.json").unlink()  # killed before a validation chose one
    for line in refused_by_eval_and_forecast(run, tmp_path / "eval_best", "best"):
        assert line.startswith(f"No best checkpoint in {run} ("), line
        assert line.endswith(none_left.format(last.name)), line
    # a SLURM requeue's checkpoint is sound: resume=auto trains on from it, not from scratch
    shutil.copy(cloud_run / "checkpoints" / "last.ckpt", run / "hpc_ckpt_1.ckpt")
    for line in refused_by_eval_and_forecast(run, tmp_path / "eval_hpc", "best"):
        assert line.endswith("Train it on with its command and resume=auto."), line


def test_a_damaged_metrics_json_is_named_not_taken_for_no_best_checkpoint(cloud_run, tmp_path):
    """last.ckpt damaged and metrics.json cut short: the line said the run had no best
    checkpoint, of a run whose best is there and only the file naming it is damaged."""
    run = tmp_path / "run"
    shutil.copytree(cloud_run, run)
    damage(run / "checkpoints" / "last.ckpt")
    text = (run / "metrics.json").read_text()
    (run / "metrics.json").write_text(text[: len(text) // 2])
    for line in refused_by_eval_and_forecast(run, tmp_path / "eval", "last"):
        assert line.endswith(
            f"No other checkpoint of {run} is sound ({run / 'metrics.json'} is damaged, so its "
            "best checkpoint is unknown until that file is restored from a copy): train the run "
            "again (its training command with resume=never), or give the path of a .ckpt "
            "written by training."
        ), line


def test_a_run_still_training_is_evaluated_with_a_warning_and_recorded_so(
    cloud_run, tmp_path, caplog
):
    """A run whose training holds its run.lock: its best checkpoint so far was tested and
    its results written as a re-test of the run, without a word that it was not done."""
    run = tmp_path / "run"
    shutil.copytree(cloud_run, run)
    lock = RunLock(run)
    lock.acquire()  # as train.py holds it, from this live process
    try:
        with caplog.at_level(logging.WARNING, logger="cloudlstm.cli.evaluate"):
            evaluate(compose_eval(run, tmp_path / "during"))
    finally:
        lock.release()
    [said] = [r.getMessage() for r in caplog.records if "still training" in r.getMessage()]
    assert said.startswith(f"{run} is still training (host {socket.gethostname()}, pid ")
    assert said.endswith(
        "ckpt=best is tested as it is now, the weights so far, not the run's final result; "
        "evaluate it again once its training ends."
    )
    assert metrics(tmp_path / "during")["run_still_training"] is True
    caplog.clear()
    evaluate(compose_eval(run, tmp_path / "after"))  # the lock let go: the training ended
    assert metrics(tmp_path / "after")["run_still_training"] is False
    assert not [r for r in caplog.records if "still training" in r.getMessage()]


def test_a_run_starting_is_named_so_by_eval_py_and_predict_py(tmp_path):
    """A training holds its run.lock from its start, and writes its config.yaml only once
    its data are read: its folder was "not a run directory" meanwhile."""
    run = tmp_path / "run"
    with held_by_another_process(run) as trainer:
        line = one_line(run_eval(f"run={run}"))
        with pytest.raises(UserError) as err:
            with_run_config(["predict.py", f"run={run}", "data.path=recent.csv"])
    assert str(err.value) == line
    assert line.startswith(
        f"{run} is a run starting: its training (host {socket.gethostname()}, pid "
        f"{trainer.pid}, started "
    )
    assert line.endswith(
        "has not written its config.yaml yet. Wait until it has written a checkpoint (at its "
        "first validation), or give another run."
    )
    with pytest.raises(UserError, match="is not a run directory: it has no config.yaml.$"):
        with_run_config(["eval.py", f"run={run}"])  # its training gone


def test_a_run_training_without_a_checkpoint_yet_says_so(cloud_run, tmp_path):
    """Its config.yaml written, its first validation not come: the line said to use a run
    that trained or ckpt=last, missing too; and with a step checkpoint alone, that the run
    had stopped, and to train it on (which its lock refuses)."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(cloud_run / "config.yaml", run)
    with held_by_another_process(run) as trainer:
        holder = f"its training (host {socket.gethostname()}, pid {trainer.pid}, started "
        for ckpt in ("best", "last"):
            with pytest.raises(UserError) as none:
                evaluate(compose_eval(run, tmp_path / "eval", f"ckpt={ckpt}"))
            assert str(none.value).startswith(f"No checkpoint in {run} yet: {holder}")
            assert str(none.value).endswith(
                "is still running and writes its first at its first validation. Wait for "
                "that, or give another run."
            )
        shutil.copy(cloud_run / "checkpoints" / "last.ckpt", run / "checkpoints")
        with pytest.raises(UserError) as no_best:
            restore(run)  # as predict.py finds it
    assert str(no_best.value).startswith(f"No best checkpoint in {run} yet: {holder}")
    assert str(no_best.value).endswith(
        "has not validated yet, which chooses one. Wait for its first validation, or take "
        "its weights so far with ckpt=last."
    )


def test_the_last_checkpoint_not_written_yet_by_a_training_offers_those_it_has(cloud_run, tmp_path):
    """A run training, its best checkpoint written and not yet its last.ckpt (which the
    same validation writes next), or a training that writes its own step checkpoints: the
    line said to use a run that trained, of a run that is training."""
    run = tmp_path / "run"
    shutil.copytree(cloud_run, run)
    (run / "metrics.json").unlink()
    (run / "checkpoints" / "last.ckpt").unlink()
    [best] = [p.name for p in (run / "checkpoints").glob("epoch_*.ckpt")]
    with held_by_another_process(run) as trainer:
        holder = f"its training (host {socket.gethostname()}, pid {trainer.pid}, started "
        with pytest.raises(UserError) as err:
            evaluate(compose_eval(run, tmp_path / "eval", "ckpt=last"))
        assert str(err.value).startswith(f"No last checkpoint in {run} yet: {holder}")
        assert str(err.value).endswith(
            f"is still running and has written {best} so far. Take ckpt=best or one of those "
            f"by name (ckpt={best}), or wait for its last.ckpt."
        )
        (run / "checkpoints" / best).rename(run / "checkpoints" / "step_000300.ckpt")
        with pytest.raises(UserError) as err:
            restore(run, "last")  # as predict.py finds it
    assert str(err.value).endswith(
        "has written step_000300.ckpt so far. Take one of those by name "
        "(ckpt=step_000300.ckpt), or wait for its last.ckpt."
    )


def test_a_training_requeued_by_slurm_offers_its_hpc_checkpoints_too(cloud_run, tmp_path):
    """SLURM's requeue signal has Lightning save hpc_ckpt_<n>.ckpt in the run's own folder:
    the line for a training still running named only the files of checkpoints/, and with
    hpc_ckpt_<n>.ckpt alone said that it had written no checkpoint yet."""
    run = tmp_path / "run"
    shutil.copytree(cloud_run, run)
    (run / "metrics.json").unlink()
    last = run / "checkpoints" / "last.ckpt"
    for n in (2, 10):  # by number: 10 after 2
        shutil.copy(last, run / f"hpc_ckpt_{n}.ckpt")
    last.unlink()
    [best] = [p.name for p in (run / "checkpoints").glob("epoch_*.ckpt")]
    hpc = "hpc_ckpt_2.ckpt, hpc_ckpt_10.ckpt"
    with held_by_another_process(run):
        with pytest.raises(UserError) as err:
            evaluate(compose_eval(run, tmp_path / "eval", "ckpt=last"))
        assert str(err.value).endswith(
            f"is still running and has written {best}, {hpc} so far. Take ckpt=best or one of "
            "those by name (ckpt=hpc_ckpt_10.ckpt), or wait for its last.ckpt."
        )
        (run / "checkpoints" / best).unlink()
        with pytest.raises(UserError) as no_last:
            restore(run, "last")  # as predict.py finds it
        with pytest.raises(UserError) as no_best:
            restore(run)
    assert str(no_last.value).endswith(
        f"has written {hpc} so far. Take one of those by name (ckpt=hpc_ckpt_10.ckpt), or "
        "wait for its last.ckpt."
    )
    assert str(no_best.value).endswith(
        "has not validated yet, which chooses one. Wait for its first validation, or take "
        "its weights so far by name (ckpt=hpc_ckpt_10.ckpt)."
    )
    assert find_checkpoint(run, "hpc_ckpt_10.ckpt") == run / "hpc_ckpt_10.ckpt"


@pytest.mark.parametrize("damage", [b"\0" * 64, b'{"host": "node-3", "pi'], ids=["nul", "cut"])
def test_a_damaged_run_lock_is_no_training_to_eval_py_and_predict_py(cloud_run, tmp_path, damage):
    """A run.lock garbled (a node that crashed as it was written, a copy cut short), which
    no process holds: the run read as still training ("host ?, pid ?"), and a folder
    without its config.yaml as a run starting; bytes that are no text were a traceback."""
    run, starting = tmp_path / "run", tmp_path / "starting"
    shutil.copytree(cloud_run, run)
    for folder in (run, starting):
        folder.mkdir(exist_ok=True)
        (folder / "run.lock").write_bytes(damage)
    evaluate(compose_eval(run, tmp_path / "eval", "ckpt=last"))
    assert metrics(tmp_path / "eval")["run_still_training"] is False
    for script in ("eval.py", "predict.py"):
        with pytest.raises(UserError, match="is not a run directory: it has no config.yaml.$"):
            with_run_config([script, f"run={starting}"])
    (run / "run.lock").write_bytes(b"\xff\xfe\x80lock")  # no text
    proc = run_eval(f"run={run}", "ckpt=last")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "still training" not in proc.stdout + proc.stderr


def test_a_damaged_metrics_json_refuses_ckpt_best_alone(cloud_run, tmp_path, caplog):
    """ckpt=last needs nothing of the run's metrics.json (the run's name alone): a damaged
    one refused the evaluation once its test had run, its results not written."""
    run = tmp_path / "run"
    shutil.copytree(cloud_run, run)
    (run / "metrics.json").write_text('{"run": {"name": "cut sh')
    damaged = f"{run / 'metrics.json'} is damaged (not valid JSON: "
    offered = " Or test another checkpoint, which needs nothing of it: ckpt=last or the path "
    for refuse in (
        lambda: evaluate(compose_eval(run, tmp_path / "best")),  # the tested one: unknown
        lambda: restore(run),  # as predict.py finds its checkpoint
    ):
        with pytest.raises(UserError, match=re.escape(damaged)) as err:
            refuse()
        assert offered in str(err.value)
    assert not (tmp_path / "best").exists()
    with caplog.at_level(logging.WARNING, logger="cloudlstm.cli.evaluate"):
        evaluate(compose_eval(run, tmp_path / "last", "ckpt=last"))
    [said] = [r.getMessage() for r in caplog.records if damaged in r.getMessage()]
    assert said.endswith(
        "ckpt=last is tested without it, and its results name the run by its config."
    )
    assert metrics(tmp_path / "last")["run"] is None
    assert metrics(tmp_path / "last")["checkpoint"] == "checkpoints/last.ckpt"


@pytest.mark.parametrize(
    ("entry", "value", "said"),
    [("checkpoint", 3, "its checkpoint is 3, not a path"), ("run", "mlp", "its run is 'mlp'")],
)
def test_a_metrics_json_entry_of_another_shape_is_named(cloud_run, tmp_path, entry, value, said):
    """A hand-edited metrics.json: ckpt=best was a TypeError (its checkpoint), or the run's
    name an AttributeError once the test had run (its run)."""
    run = tmp_path / "run"
    shutil.copytree(cloud_run, run)
    results = metrics(run)
    (run / "metrics.json").write_text(json.dumps({**results, entry: value}))
    damaged = re.escape(f"{run / 'metrics.json'} is damaged ({said}")
    with pytest.raises(UserError, match=damaged):
        evaluate(compose_eval(run, tmp_path / "eval"))
    with pytest.raises(UserError, match=damaged):
        restore(run)  # as predict.py finds it


def test_a_best_checkpoint_whose_file_is_gone_is_passed_over(cloud_run, tmp_path):
    """A link in checkpoints/ to a file deleted since (a scratch area purged): ckpt=best,
    and predict.py's default, were a FileNotFoundError, even where metrics.json names the
    tested checkpoint, which is there."""
    run = tmp_path / "run"
    shutil.copytree(cloud_run, run)
    (run / "checkpoints" / "epoch_009-step_000099.ckpt").symlink_to(tmp_path / "purged.ckpt")
    tested = metrics(run)["checkpoint"]
    assert restore(run)[1] == run / tested  # as predict.py finds it
    (run / "metrics.json").unlink()  # a run killed before its test: the newest file
    evaluate(compose_eval(run, tmp_path / "eval"))
    assert metrics(tmp_path / "eval")["checkpoint"] == tested


def saved_as_trained_in(run: Path, source: Path, target: Path, best: float) -> None:
    """Checkpoint ``source`` saved as ``target`` (its SHA-256 beside it) as if trained in
    ``run``, its best validation MAE ``best``: the bytes of one training alone."""
    contents = torch.load(source, weights_only=False)
    contents["hyper_parameters"]["output_dir"] = str(run)
    contents["val_mae_best"] = best
    torch.save(contents, target)
    write_checksum(target)


def trained_and_kept_aside(cloud_run: Path, run: Path, copies: Path, times: int) -> list[Path]:
    """``run`` trained ``times`` times with CloudLSTM, each training in turn moved aside
    (oldest first, returned), each saving a ``last.ckpt`` of its own bytes, a copy of which
    is kept as ``copies/<n>.ckpt`` (n from 1)."""
    last, asides = run / "checkpoints" / "last.ckpt", []
    for n in range(1, times + 1):
        shutil.copytree(cloud_run, run, dirs_exist_ok=True)
        saved_as_trained_in(run, cloud_run / "checkpoints" / "last.ckpt", last, float(n))
        shutil.copy(last, copies / f"{n}.ckpt")
        asides.append(retire_earlier_training(run))
    return asides


def refusals(run: Path, out: Path, ckpt: Path) -> list[str]:
    """What eval.py and predict.py say, in turn, to ``run=<run> ckpt=<ckpt>``."""
    said = []
    for program in (
        lambda: evaluate(compose_eval(run, out, f"ckpt={ckpt}")),
        lambda: restore(run, ckpt),
    ):
        with pytest.raises(UserError) as err:
            program()
        said.append(str(err.value))
    return said


def test_a_checkpoint_of_the_model_a_folder_held_before_it_was_trained_anew(
    cloud_run, grid_run, tmp_path
):
    """A folder that held a CloudLSTM training, trained anew with a CNN: a checkpoint of
    its first training, kept elsewhere, was named a checkpoint of the folder itself ("Give
    run=<the folder>"), and in its checkpoints/ got a placeholder for the run to give."""
    run = tmp_path / "run"
    (aside,) = trained_and_kept_aside(cloud_run, run, tmp_path, 1)  # then anew, with a CNN
    shutil.copytree(grid_run, run, dirs_exist_ok=True)
    named = f"run={aside} (the checkpoint's run, kept aside when its folder was trained anew)"
    with pytest.raises(UserError) as err:
        evaluate(compose_eval(run, tmp_path / "eval", f"ckpt={tmp_path / '1.ckpt'}"))
    assert str(err.value).endswith(f"Give {named}, or a checkpoint of {run}: ckpt=best, ckpt=last.")
    shutil.copy(tmp_path / "1.ckpt", run / "checkpoints" / "first.ckpt")
    with pytest.raises(UserError) as err:
        evaluate(compose_eval(run, tmp_path / "eval", "ckpt=first.ckpt"))
    assert str(err.value).endswith(f"Give a checkpoint of this run, or {named}.")
    shutil.rmtree(aside)  # the earlier training deleted: where it trained, trained anew
    with pytest.raises(UserError) as err:
        evaluate(compose_eval(run, tmp_path / "eval", "ckpt=first.ckpt"))
    assert str(err.value).endswith(
        "Give a checkpoint of this run, or the checkpoint's run as run=<its run directory> "
        f"(it trained in {run}, which was trained anew since)."
    )


def test_a_checkpoint_of_the_older_of_two_trainings_kept_aside_names_its_own(
    cloud_run, grid_run, tmp_path
):
    """A folder trained twice with CloudLSTM, then anew with a CNN: a copy of a checkpoint
    of its first training was named one of its second (the newest kept aside that builds
    the model), whose weights it does not hold."""
    run = tmp_path / "run"
    asides = trained_and_kept_aside(cloud_run, run, tmp_path, 2)
    shutil.copytree(grid_run, run, dirs_exist_ok=True)
    with pytest.raises(UserError) as err:
        evaluate(compose_eval(run, tmp_path / "eval", f"ckpt={tmp_path / '1.ckpt'}"))
    named = f"run={asides[0]} (the checkpoint's run, kept aside when its folder was trained anew)"
    assert str(err.value).endswith(f"Give {named}, or a checkpoint of {run}: ckpt=best, ckpt=last.")
    # of neither's bytes: either may have written it, or neither
    saved_as_trained_in(run, cloud_run / "checkpoints" / "last.ckpt", tmp_path / "other.ckpt", 3.0)
    with pytest.raises(UserError) as err:
        evaluate(compose_eval(run, tmp_path / "eval", f"ckpt={tmp_path / 'other.ckpt'}"))
    assert str(err.value).endswith(
        f"Give the checkpoint's run as run=<its run directory> (it trained in {run}, which was "
        f"trained anew since; none of its 2 trainings that build its model ({asides[1]} and "
        f"{asides[0]}) holds a file of its bytes, so nothing tells which, if any, wrote it), "
        f"or a checkpoint of {run}: ckpt=best, ckpt=last."
    )


def test_a_copy_of_an_earlier_training_is_not_named_the_folders_later_one(
    cloud_run, grid_run, tmp_path
):
    """A folder trained with CloudLSTM, then anew with CloudLSTM: a copy of the first
    training's checkpoint, refused for another run, was named a checkpoint of the folder,
    whose weights are the second training's, not of the first kept aside."""
    run = tmp_path / "run"
    (first,) = trained_and_kept_aside(cloud_run, run, tmp_path, 1)
    shutil.copytree(cloud_run, run, dirs_exist_ok=True)  # the second, in the folder
    saved_as_trained_in(
        run, cloud_run / "checkpoints" / "last.ckpt", run / "checkpoints" / "last.ckpt", 2.0
    )
    named = f"run={first} (the checkpoint's run, kept aside when its folder was trained anew)"
    for said in refusals(grid_run, tmp_path / "eval", tmp_path / "1.ckpt"):
        assert f"Give {named}, or a checkpoint of {grid_run}" in said


def test_a_copy_that_no_training_kept_holds_is_not_named_one_of_theirs(
    cloud_run, grid_run, tmp_path
):
    """A copy of a checkpoint of a training deleted since from .replaced/ (or a file saved
    again): the one earlier training left that builds its model was named its run, though
    it holds none of its bytes."""
    run = tmp_path / "run"
    first, second = trained_and_kept_aside(cloud_run, run, tmp_path, 2)
    shutil.copytree(grid_run, run, dirs_exist_ok=True)
    shutil.rmtree(first)
    for said in refusals(run, tmp_path / "eval", tmp_path / "1.ckpt"):
        assert "the checkpoint's run," not in said
        assert said.endswith(
            f"Give the checkpoint's run as run=<its run directory> (it trained in {run}, which "
            f"was trained anew since; {second}, its one training that builds its model, holds "
            "no file of its bytes: give it where the file is a copy of its checkpoint made "
            "before a later save wrote over it, not of a training no longer kept), or a "
            f"checkpoint of {run}: ckpt=best, ckpt=last."
        )


def test_a_copy_that_two_trainings_kept_hold_names_both(cloud_run, grid_run, tmp_path):
    """Identical bytes in two earlier trainings (a rerun of the same settings and seed):
    the line said one of all the earlier trainings of the model wrote it, not which two."""
    run = tmp_path / "run"
    first, second, third = trained_and_kept_aside(cloud_run, run, tmp_path, 3)
    shutil.copytree(grid_run, run, dirs_exist_ok=True)
    shutil.rmtree(first / "checkpoints")
    shutil.copytree(third / "checkpoints", first / "checkpoints")
    for said in refusals(run, tmp_path / "eval", tmp_path / "3.ckpt"):
        assert said.endswith(
            f"Give the checkpoint's run as run=<its run directory> (it trained in {run}, which "
            f"was trained anew since; {third} and {first} both hold a file of its bytes (a "
            "rerun of the same settings and seed, or a copy), and nothing in the file tells "
            f"which trained it: give either), or a checkpoint of {run}: ckpt=best, ckpt=last."
        )


def test_a_copy_of_a_run_in_training_is_evaluated_as_no_training(cloud_run, tmp_path):
    """A run directory copied while it trains carries its run.lock, whose description names
    the training's live process: the copy was tested as "still training" and its results
    said so, though no training writes into it."""
    run, copy = tmp_path / "run", tmp_path / "copy"
    shutil.copytree(cloud_run, run)
    with held_by_another_process(run):
        shutil.copytree(run, copy)
        evaluate(compose_eval(copy, tmp_path / "eval", "ckpt=last"))
    assert metrics(tmp_path / "eval")["run_still_training"] is False


def test_an_evaluations_folder_given_as_the_run_names_the_run(cloud_run, tmp_path):
    """eval.py's output has a config.yaml too, so it read as a run without a checkpoint."""
    run = tmp_path / "run"
    shutil.copytree(cloud_run, run)
    evaluation = run / "eval" / "2026-01-01_00-00-00-000000"
    evaluate(compose_eval(run, evaluation))
    for script in ("eval.py", "predict.py"):
        with pytest.raises(UserError) as err:
            with_run_config([script, f"run={evaluation}"])
        assert str(err.value) == (
            f"{evaluation} is an evaluation of a run (eval.py's output), not a run: give the "
            f"run it evaluated, run={run}."
        )


DAMAGED_CONFIGS = {
    "cut-short": ("model:\n  _target_: [cloudlstm.models", "it is not valid YAML: "),
    # what is left reads as YAML, with its model and data: the last line tells
    "cut-short-valid": (
        f"{CONFIG_HEADER}\nmodel:\n  k: 3\ndata:\n  batch_size: 8\n",
        f"it is cut short: its last line is not {CONFIG_END!r}",
    ),
    "empty": ("", "it has no model or data node"),
    "no-data": ("model:\n  k: 3\n", "it has no data node"),
    "a-list": ("- model\n- data\n", "it is not a mapping"),
}


@pytest.mark.parametrize("damage", DAMAGED_CONFIGS)
def test_a_damaged_run_config_is_one_user_error_for_eval_restore_and_resume(
    cloud_run, tmp_path, damage
):
    """A run whose config.yaml is cut short or emptied (a full disk, a bad copy) is named,
    by every entry point that reads it: eval.py, restoring (predict.py, Forecaster) and
    resuming its training."""
    text, problem = DAMAGED_CONFIGS[damage]
    run = tmp_path / "run"
    shutil.copytree(cloud_run, run)
    (run / "config.yaml").write_text(text)
    message = re.escape(f"{run / 'config.yaml'} is not the config of a run ({problem}")
    with pytest.raises(UserError, match=message):
        with_run_config(["eval.py", f"run={run}"])
    with pytest.raises(UserError, match=message):
        restore(run)
    with pytest.raises(UserError, match=message):
        train(compose_train(tmp_path, [*JOB, "resume=auto"]))


def test_a_run_of_a_model_without_parameters_is_evaluated_without_a_checkpoint(tmp_path):
    """Persistence trains nothing and saves no checkpoint: eval.py rebuilds it from the config
    and tests it, on the same data with the same numbers, on other data with its own."""
    job = [o for o in JOB if not o.startswith("model.")]
    cfg = compose_train(tmp_path / "train", [*job, "model=persistence"])
    train(cfg)
    run = Path(cfg.paths.output_dir)
    assert not list(run.glob("checkpoints/*.ckpt"))
    again = evaluate(compose_eval(run, tmp_path / "same"))
    assert again["checkpoint"] is None
    assert again["test"]["overall"] == metrics(run)["test"]["overall"]
    other = evaluate(compose_eval(run, tmp_path / "other", "data.source.num_points=9"))
    assert other["data"]["num_points"] == 9
    assert other["test"]["overall"] != again["test"]["overall"]
    with pytest.raises(UserError, match=r"No checkpoint 'nope.ckpt' in"):
        evaluate(compose_eval(run, tmp_path / "path", "ckpt=nope.ckpt"))
    # a forecast needs the data's description that a checkpoint holds: said, with the way on
    with pytest.raises(UserError) as refused:
        Forecaster.load(run, device="cpu")
    assert str(refused.value) == (
        f"{run} is a run of persistence, a model without parameters: it trains nothing, so it "
        "wrote no checkpoint, and a forecast reads the training data's description (points, "
        "step, scaler) from one. Its test results are in its metrics.json, and eval.py "
        f"run={run} tests it again."
    )


def run_eval(*args: str) -> subprocess.CompletedProcess:
    return run_python("eval.py", *args)


def test_eval_py_writes_under_the_run_directory(cloud_run):
    proc = run_eval(f"run={cloud_run}", "data.num_points=7", "report.figures=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [out] = [p for p in (cloud_run / "eval").iterdir() if (p / "metrics.json").is_file()]
    assert metrics(out)["data"]["num_points"] == 7
    assert (out / "eval.log").is_file()


def test_eval_py_piped_to_a_reader_that_leaves_ends_quietly(cloud_run):
    """`eval.py ... | head -1`: its log lines go to stdout, and each printed the broken
    pipe's traceback ("--- Logging error ---") while the evaluation went on."""
    proc = subprocess.Popen(
        # a Python of its own: the tests' warm one relays stdout, whose reader never leaves
        [sys.executable, "eval.py", f"run={cloud_run}", "report.figures=false"],
        cwd=ROOT,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does once it has its line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 1, err  # as `yes | head` ends
    for unwanted in ("Traceback", "Logging error", "Error executing job"):
        assert unwanted not in err, err


def test_an_override_that_reshapes_the_model_is_named_as_the_cause(cloud_run, tmp_path):
    """The run's own checkpoint and model.hidden_channels=5: the line named the checkpoint
    as not of this run (give another), where the override is what does not fit."""
    cfg = compose_eval(cloud_run, tmp_path / "eval", "model.hidden_channels=5")
    assert cfg.model.hidden_channels == 5
    with pytest.raises(UserError) as err:
        evaluate(cfg)
    assert re.fullmatch(
        r".*\.ckpt does not fit the model these settings build \(.* in the model.*\): "
        r"model\.hidden_channels=5 reshapes the model, and a trained model keeps the sizes it "
        r"was trained with\. Drop it, or train a run with it\.",
        str(err.value),
    ), str(err.value)


@pytest.mark.parametrize("levels", ["[0.1,0.9]", "[0.9,0.5,0.1]"])
def test_levels_for_a_point_run_are_refused_for_that_in_one_step(cloud_run, tmp_path, levels):
    """A point-forecast run given levels without 0.5 was first told to add 0.5, and only then
    that it forecasts no quantiles: two round trips for one mistake."""
    cfg = compose_eval(cloud_run, tmp_path / "eval", f"module.quantiles={levels}")
    with pytest.raises(UserError) as err:
        evaluate(cfg)
    shown = "[" + ",".join(str(t) for t in sorted(float(t) for t in levels[1:-1].split(","))) + "]"
    assert str(err.value).endswith(
        f"was trained with module.quantiles=null; its weights do not forecast for "
        f"module.quantiles={shown}. Drop that override, or train a run with it."
    ), str(err.value)


def test_eval_py_refuses_a_setting_of_training_alone_in_one_line(cloud_run):
    """optimizer.lr=5 was taken without a word, changed nothing, and compare then showed the
    evaluation as a row of optimizer.lr=5."""
    evaluations = cloud_run / "eval"
    before = sorted(evaluations.iterdir()) if evaluations.exists() else []
    proc = run_eval(f"run={cloud_run}", "optimizer.lr=5")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "eval.py optimizer.lr=5: optimizer.lr takes part in training alone, and eval.py tests "
        "the run's checkpoint without training: leave it out, or train a run with it."
    ]
    assert (sorted(evaluations.iterdir()) if evaluations.exists() else []) == before


@pytest.mark.parametrize(
    ("override", "refused"),
    [
        ("trainer.max_steps=77", True),
        ("+scheduler.factor=0.1", True),
        ("callbacks.model_checkpoint.save_top_k=3", True),
        ("trainer.limit_val_batches=2", True),
        ("trainer.limit_test_batches=2", False),
        ("trainer.precision=bf16-mixed", False),
        ("+callbacks.stop._target_=my.Callback", False),
        ("callbacks.progress_bar.refresh_rate=5", False),
        ("module.save_predictions=true", False),
        ("data.num_points=7", False),
        ("seed=3", False),  # interpolated: data.holdout_seed=${seed}
        ("tests=1", False),  # not the key test
    ],
)
def test_the_settings_of_training_alone_are_told_apart(override, refused):
    from cloudlstm.cli.eval_args import refuse_training_settings

    if refused:
        with pytest.raises(UserError, match=f"^eval.py {re.escape(override)}: "):
            refuse_training_settings(["eval.py", "run=x", override])
    else:
        refuse_training_settings(["eval.py", "run=x", override])


def test_a_refused_evaluation_leaves_no_folder_in_the_runs_eval(cloud_run):
    """Hydra makes the evaluation's folder before the checkpoint is looked for: a refused
    one is removed, so that the run's eval/ holds only evaluations that ran."""
    folders = lambda: set((cloud_run / "eval").glob("*"))  # noqa: E731
    before = folders()
    proc = run_eval(f"run={cloud_run}", "ckpt=nosuch")
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"No checkpoint 'nosuch' in {cloud_run} ("), proc.stderr
    assert folders() == before


def test_an_evaluation_folder_below_a_file_is_one_line(cloud_run, tmp_path):
    (notes := tmp_path / "notes.txt").write_text("")
    proc = run_eval(f"run={cloud_run}", f"hydra.run.dir={notes}/eval")
    assert one_line(proc) == (
        f"Cannot make the directory {notes}/eval: {notes} is a file, not a folder. Name a "
        "folder you can write with hydra.run.dir=<dir>."
    )


@pytest.mark.parametrize(
    ("choice", "fix"),
    [
        (
            "model=convlstm",
            "change single keys instead (model.<key>=...), or train a run with model=convlstm.",
        ),
        (
            "+data=beijing",
            "change single keys instead (data.<key>=...), or train a run with +data=beijing.",
        ),
        ("logger=csv", "logger=<option> is train.py's."),
    ],
)
def test_another_option_of_a_train_py_group_is_one_line(cloud_run, choice, fix):
    """Hydra said "No match in the defaults list" and proposed ``+model=convlstm``, which
    merged the two models' keys into a config that failed elsewhere."""
    assert one_line(run_eval(f"run={cloud_run}", choice)) == (
        f"eval.py {choice}: eval.py tests the checkpoint as the run's config.yaml set it up "
        f"and, of the config groups, takes trainer=<option> alone; {fix}"
    )


def test_a_truncated_checkpoint_stops_eval_py_with_one_line(cloud_run, tmp_path):
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes((cloud_run / "checkpoints" / "last.ckpt").read_bytes()[:5000])
    proc = run_eval(f"run={cloud_run}", f"ckpt={cut}")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if "Cannot read checkpoint" in x]
    assert line.startswith(f"Cannot read checkpoint {cut} (")
    assert line.endswith("ckpt=best, ckpt=last or a .ckpt written by training.")


@pytest.mark.slow
def test_a_compiled_run_forecasts_as_its_checkpoint_does_uncompiled(tmp_path):
    """``model.compile=true`` through Lightning's fit, validate and test (one graph per
    forward, another for no-grad evaluation): its test forecasts equal those of its best
    checkpoint evaluated eagerly (static neighbours: rounding cannot reorder a neighbour
    set, see tests/test_compile.py)."""
    cfg = compose_train(tmp_path, [*JOB, "model.compile=true", "model.neighbours=static"])
    train(cfg)
    run, out = Path(cfg.paths.output_dir), tmp_path / "eval"
    evaluate(compose_eval(run, out, "model.compile=false"))
    with np.load(out / "predictions.npz") as eager, np.load(run / "predictions.npz") as compiled:
        np.testing.assert_allclose(
            compiled["prediction"], eager["prediction"], rtol=1e-4, atol=1e-4
        )


# ---------------------------------------------------------------- the config and the checkpoint
def test_evaluating_changes_nothing_in_the_config_it_is_given(cloud_run, tmp_path):
    """The run's config is read as given: read-only, any write during the evaluation (an
    old class path renamed in place, a data node upgraded in place) would raise."""
    cfg = compose_eval(cloud_run, tmp_path / "out")
    before = OmegaConf.to_yaml(cfg)
    OmegaConf.set_readonly(cfg, True)
    evaluate(cfg)
    assert OmegaConf.to_yaml(cfg) == before


def test_an_older_runs_class_paths_are_renamed_in_a_copy(cloud_run, tmp_path):
    """A config naming the package-root modules of older versions evaluates, and the
    evaluation's config.yaml names today's modules."""
    run = tmp_path / "old_run"
    shutil.copytree(cloud_run, run)
    saved = OmegaConf.load(run / "config.yaml")
    saved.module._target_ = "cloudlstm.training.ForecastModule"
    saved.trainer.plugins[0]._target_ = "cloudlstm.checkpoint_io.ChecksummedCheckpointIO"
    OmegaConf.save(saved, run / "config.yaml")
    cfg = compose_eval(run, tmp_path / "out")
    evaluate(cfg)
    written = OmegaConf.load(tmp_path / "out" / "config.yaml")
    assert written.module._target_ == "cloudlstm.engine.module.ForecastModule"
    assert written.trainer.plugins[0]._target_.startswith("cloudlstm.rundir.checkpoint_io.")
    assert cfg.module._target_ == "cloudlstm.training.ForecastModule"  # the given one as it was


@pytest.fixture
def checkpoint_reads(monkeypatch) -> dict[str, int]:
    """How often checkpoints are loaded from disk and their data description parsed."""
    import cloudlstm.assembly.checkpoint_fit as checkpoint_fit
    import cloudlstm.engine.module as engine_module
    import cloudlstm.rundir.checkpoints as checkpoints

    counts = {"load": 0, "spec": 0}

    def counted(name, function):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return function(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(checkpoints.torch, "load", counted("load", torch.load))
    for module in (checkpoint_fit, engine_module):
        monkeypatch.setattr(module, "stored_spec", counted("spec", module.stored_spec))
    return counts


def test_evaluation_reads_and_parses_its_checkpoint_once(cloud_run, tmp_path, checkpoint_reads):
    evaluate(compose_eval(cloud_run, tmp_path / "out"))
    assert checkpoint_reads == {"load": 1, "spec": 1}


def test_restoring_a_run_reads_and_parses_its_checkpoint_once(cloud_run, checkpoint_reads):
    from cloudlstm.assembly.assemble import restore

    restore(cloud_run, device="cpu")
    assert checkpoint_reads == {"load": 1, "spec": 1}


def test_a_checkpoint_that_stored_no_level_in_a_list_restores_as_point_forecasts(
    cloud_run, tmp_path
):
    """Runs trained before module.quantiles=[] was refused stored [] for point forecasts:
    the refusal of that setting is no refusal of their checkpoints."""
    run = tmp_path / "run"
    shutil.copytree(cloud_run, run)
    last = run / "checkpoints" / "last.ckpt"
    contents = torch.load(last, weights_only=False)
    contents["hyper_parameters"]["quantiles"] = []
    torch.save(contents, last)
    write_checksum(last)
    module, path = restore(run, "last", device="cpu")
    assert path == last and module.quantile_levels == ()


def test_training_changes_nothing_in_the_config_it_is_given(tmp_path):
    cfg = compose_train(tmp_path, JOB)
    before = OmegaConf.to_yaml(cfg)
    OmegaConf.set_readonly(cfg, True)
    train(cfg)
    assert OmegaConf.to_yaml(cfg) == before


def test_a_run_folder_named_by_a_number_is_found(cloud_run, tmp_path, monkeypatch):
    """Hydra reads ``run=0``, a sweep's job folder, as the number 0: eval.py gives it to
    Hydra quoted, as the folder's name. A value that is no path's text (``ckpt=true``, read
    as True) is one line."""
    shutil.copytree(cloud_run, tmp_path / "0", ignore=shutil.ignore_patterns("eval"))
    monkeypatch.chdir(tmp_path)
    cfg = compose_eval(Path("0"), tmp_path / "out")
    assert cfg.run == "0"
    evaluate(cfg)
    assert (tmp_path / "out" / "metrics.json").is_file()
    with pytest.raises(UserError) as err:
        evaluate(compose_eval(Path("0"), tmp_path / "out2", "ckpt=true"))
    assert str(err.value) == "ckpt=True was read as a bool, not a path: quote it, ckpt='<path>'."
    with pytest.raises(UserError, match=r"^No checkpoint '3' in 0 \("):
        evaluate(compose_eval(Path("0"), tmp_path / "out3", "ckpt=3"))


@pytest.mark.parametrize("typed", ["as it is", "quoted for Hydra"])
def test_a_run_folder_hydras_grammar_reads_only_quoted_is_found(cloud_run, tmp_path, typed):
    """``run=/data/my run ü`` is one argument of the shell, which Hydra's grammar cannot read
    unquoted: eval.py takes it as typed, and as ``run='...'``, as training's hint prints it."""
    run = tmp_path / "my run ü (1)"
    shutil.copytree(cloud_run, run, ignore=shutil.ignore_patterns("eval"))
    arg = f"run={run}" if typed == "as it is" else as_override("run", str(run))
    proc = run_eval(arg, "report.figures=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(list(run.glob("eval/*/metrics.json"))) == 1


def test_a_ddp_run_evaluated_on_one_device_sets_up_no_process_group(cloud_run, tmp_path):
    """A run trained with trainer=ddp_cpu (its config.yaml: strategy ddp, 2 devices) tested
    with trainer=cpu: one process, which set up a gloo process group of its own and said so
    in five lines; it now tests alone, with the results of the one-process run's
    evaluation."""
    run = tmp_path / "ddp_run"
    shutil.copytree(cloud_run, run, ignore=shutil.ignore_patterns("eval"))
    alone = run_eval(f"run={run}", "trainer=cpu", "report.figures=false")
    assert alone.returncode == 0, alone.stderr[-3000:]
    config = OmegaConf.load(run / "config.yaml")
    config.trainer.strategy, config.trainer.devices = "ddp", 2
    OmegaConf.save(config, run / "config.yaml")
    proc = run_eval(f"run={run}", "trainer=cpu", "report.figures=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert "distributed" not in out.lower(), out[-3000:]
    assert "trainer.strategy=ddp (the run's training) with trainer.devices=1" in out
    first, second = sorted((run / "eval").iterdir())
    assert metrics(second)["test"] == metrics(first)["test"]


def test_devices_the_cpu_refuses_of_a_ddp_run_are_refused_before_the_one_process_rule(
    cloud_run, tmp_path
):
    """The rule that tests a DDP run in one process read ``trainer.devices=-1`` on the CPU
    as one device and said it tested alone, then the Trainer check refused -1: two lines.
    The refusal comes first, alone."""
    run = tmp_path / "ddp_run"
    shutil.copytree(cloud_run, run, ignore=shutil.ignore_patterns("eval"))
    config = OmegaConf.load(run / "config.yaml")
    config.trainer.strategy, config.trainer.devices = "ddp", 2
    OmegaConf.save(config, run / "config.yaml")
    proc = run_eval(f"run={run}", "trainer=cpu", "trainer.devices=-1")
    assert one_line(proc) == (
        "trainer.devices=-1: every GPU, which Lightning takes on GPUs alone, but the Trainer "
        "runs on the CPU (trainer.accelerator=cpu): give a number of CPU processes, e.g. "
        "trainer.devices=1."
    )
    assert "this process alone" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("devices", ["[0]", "'0,'"])
def test_device_indices_on_the_cpu_are_one_line(cloud_run, devices):
    """Lightning refuses device indices on the CPU in a TypeError, which Hydra printed in
    its lines ("Error executing job", "full_key: trainer")."""
    proc = run_eval(f"run={cloud_run}", "trainer=cpu", f"trainer.devices={devices}")
    named = devices.strip("'")
    assert one_line(proc) == (
        f"trainer.devices={named}: device indices, which Lightning takes on GPUs alone, but the "
        "Trainer runs on the CPU (trainer.accelerator=cpu): give a number of CPU processes, "
        "e.g. trainer.devices=1."
    )


@pytest.mark.parametrize(
    ("trainer", "alone"),
    [
        ({"devices": 1}, True),
        ({"devices": [0]}, True),  # a list of one GPU's index
        ({"devices": "0,"}, True),  # Lightning's text of one index
        ({"devices": [3]}, True),
        ({"devices": "1"}, True),
        ({"devices": "auto", "accelerator": "cpu"}, True),  # Lightning's one CPU device
        ({"devices": 2}, False),
        ({"devices": [0, 1]}, False),
        ({"devices": "0,1"}, False),
        ({"devices": 1, "num_nodes": 2}, False),
        ({"devices": 1, "strategy": "auto"}, True),  # no DDP to leave
    ],
)
def test_one_device_however_written_is_tested_in_one_process(trainer, alone):
    """The rule took ``trainer.devices`` for one device only where it read "1": a list of
    one GPU's index (``[0]``) or Lightning's ``"0,"`` kept the run's DDP, a process group
    of one. (Lightning takes device indices on GPUs alone; the rule reads no GPU.)"""
    cfg = OmegaConf.create(
        {"trainer": {"strategy": "ddp", "accelerator": "gpu", "num_nodes": 1, **trainer}}
    )
    _one_process_without_ddp(cfg)
    assert (cfg.trainer.strategy == "auto") == alone


def test_the_one_process_rule_refuses_a_number_of_nodes_lightning_refuses():
    cfg = OmegaConf.create({"trainer": {"strategy": "ddp", "devices": 1, "num_nodes": 0}})
    with pytest.raises(UserError, match=r"^trainer.num_nodes=0: no node to run on: give "):
        _one_process_without_ddp(cfg)
