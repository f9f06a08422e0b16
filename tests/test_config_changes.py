"""A resumed run keeps its settings: a changed one is refused in one line before anything is
written, an execution option or an allowed change is taken and recorded."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import DictConfig, OmegaConf, open_dict

from cloudlstm.assembly.build import save_job_config
from cloudlstm.errors import UserError
from cloudlstm.rundir.config_changes import CHANGES_FILE, check_config_changes, config_changes
from cloudlstm.rundir.layout import CONFIG_END, checkpoint_run
from tests.conftest import PYTHON, ROOT, TINY, compose_train, run_python, subprocess_env
from tests.test_input_checks import the_line

BASE = ["logger=csv", "report.figures=false"]


def snapshot(run_dir: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of the directory: its bytes and modification time."""
    return {
        str(p.relative_to(run_dir)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def stopped_run(tiny_cfg) -> Path:
    """A tiny run with its checkpoints and config.yaml, stopped before its end (no
    metrics.json): what a killed run leaves."""
    from cloudlstm.cli.train import train

    cfg = tiny_cfg(*BASE)
    train(cfg)
    run = Path(cfg.paths.output_dir)
    (run / "metrics.json").unlink()
    return run


def train_py(run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_python(
        "train.py", *TINY, *BASE, f"hydra.run.dir={run_dir}",
        f"paths.data_dir={run_dir.parent / 'data'}", *extra, timeout=600,
    )  # fmt: skip


def test_changed_settings_are_refused_in_one_line_and_nothing_is_written(stopped_run):
    before = snapshot(stopped_run)
    lr = train_py(stopped_run, "optimizer.lr=0.01")
    assert lr.returncode != 0
    assert lr.stderr.strip().splitlines() == [lr.stderr.strip()], "one line"
    assert "Traceback" not in lr.stderr + lr.stdout
    line = lr.stderr.strip()
    assert line.startswith(f"{stopped_run} holds a run trained with other settings")
    assert "optimizer.lr 0.001 -> 0.01" in line
    assert "resume=never" in line and "allow_changes=[optimizer.lr]" in line
    assert snapshot(stopped_run) == before, "not even .hydra/ or the log is written"

    k = train_py(stopped_run, "model.k=2")  # other weights: Lightning's 44-line traceback
    assert k.returncode != 0
    assert k.stderr.strip().splitlines() == [k.stderr.strip()], k.stderr[-3000:]
    assert "model.k 3 -> 2" in k.stderr
    assert snapshot(stopped_run) == before

    cmd = [*PYTHON, "eval.py", f"run={stopped_run}", "report.figures=false"]
    evaluated = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]


def test_execution_options_are_taken_and_recorded(stopped_run, tmp_path):
    from cloudlstm.cli.train import train

    cfg = compose_train(tmp_path, [*TINY, *BASE, "torch_threads=1", "trainer.log_every_n_steps=5"])
    results = train(cfg)
    assert results["resumed_from"] == "checkpoints/last.ckpt"
    (entry,) = yaml.safe_load((stopped_run / CHANGES_FILE).read_text())
    assert entry["resumed_from"] == results["resumed_from"] and entry["date"]
    assert entry["changes"] == {
        "torch_threads": {"old": None, "new": 1, "allowed_by": "execution option"},
        "trainer.log_every_n_steps": {"old": 10, "new": 5, "allowed_by": "execution option"},
    }


def test_allow_changes_resumes_with_the_new_value_and_records_it(stopped_run, tmp_path):
    from cloudlstm.cli.train import train

    with pytest.raises(UserError, match=r"optimizer\.lr 0\.001 -> 0\.01"):
        train(compose_train(tmp_path, [*TINY, *BASE, "optimizer.lr=0.01"]))
    cfg = compose_train(tmp_path, [*TINY, *BASE, "optimizer.lr=0.01", "allow_changes=[optimizer]"])
    results = train(cfg)
    assert results["resumed_from"] == "checkpoints/last.ckpt"
    (entry,) = yaml.safe_load((stopped_run / CHANGES_FILE).read_text())
    assert entry["changes"]["optimizer.lr"] == {
        "old": 0.001, "new": 0.01, "allowed_by": "allow_changes",
    }  # fmt: skip
    assert yaml.safe_load((stopped_run / "config.yaml").read_text())["optimizer"]["lr"] == 0.01
    assert results["settings_changed"] == [
        {"key": "optimizer.lr", "old": 0.001, "new": 0.01, "resumed_from": entry["resumed_from"]}
    ]  # in metrics.json too, where compare reads it
    # the same command again: the run has finished, and nothing differs any more
    assert check_config_changes(cfg, stopped_run) == []
    assert json.loads((stopped_run / "metrics.json").read_text()) == train(cfg)


def test_a_resume_of_another_runs_checkpoint_is_checked_against_that_run(stopped_run, tmp_path):
    checkpoint = stopped_run / "checkpoints" / "last.ckpt"
    before = snapshot(stopped_run)
    new = tmp_path / "new"
    lr = train_py(new, f"resume={checkpoint}", "optimizer.lr=0.01")
    assert lr.returncode != 0
    line = the_line(lr, "holds a run trained with other settings")
    assert line.startswith(f"{stopped_run} holds a run trained with other settings")
    assert "optimizer.lr 0.001 -> 0.01" in line and str(new / CHANGES_FILE) in line
    assert not (new / "config.yaml").exists() and snapshot(stopped_run) == before

    # a directory whose own earlier training has the new settings: still that run's
    (new / "checkpoints").mkdir(parents=True)
    torch.save({"global_step": 1}, new / "checkpoints" / "last.ckpt")
    saved = yaml.safe_load((stopped_run / "config.yaml").read_text())
    saved["optimizer"]["lr"] = 0.01
    (new / "config.yaml").write_text(yaml.safe_dump(saved))
    changed = compose_train(tmp_path, [*TINY, *BASE, "optimizer.lr=0.01", f"resume={checkpoint}"])
    with pytest.raises(UserError, match=rf"^{re.escape(str(stopped_run))} holds .*0\.001 -> 0\.01"):
        check_config_changes(changed, new)
    assert check_config_changes(compose_train(tmp_path, [*TINY, *BASE, "resume=never"]), new) == []


def test_another_runs_checkpoint_resumed_with_allowed_changes_records_them_here(
    stopped_run, tmp_path
):
    from cloudlstm.cli.train import train

    checkpoint = stopped_run / "checkpoints" / "last.ckpt"
    allowed = [
        "optimizer.lr=0.01", "trainer.max_epochs=3", "callbacks.early_stopping.patience=7",
        "allow_changes=[optimizer.lr,trainer,callbacks.early_stopping]",
    ]  # fmt: skip
    cfg = compose_train(tmp_path, [*TINY, *BASE, *allowed, f"resume={checkpoint}"])
    new = tmp_path / "new"
    with open_dict(cfg):
        cfg.paths.output_dir = str(new)
    results = train(cfg)
    assert results["resumed_from"] == str(checkpoint)
    (entry,) = yaml.safe_load((new / CHANGES_FILE).read_text())
    assert entry["resumed_from"] == str(checkpoint)
    assert entry["changes"]["optimizer.lr"] == {
        "old": 0.001, "new": 0.01, "allowed_by": "allow_changes",
    }  # fmt: skip
    assert not (stopped_run / CHANGES_FILE).exists() and not (stopped_run / "metrics.json").exists()
    assert [p["from_step"] for p in results["provenance"]] == [0, 6]  # its first process too
    # and trained with it: the optimizer's restored rate is not the checkpoint's
    last = torch.load(new / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] > torch.load(checkpoint, weights_only=False)["global_step"]
    (group,) = last["optimizer_states"][0]["param_groups"]
    assert group["initial_lr"] == group["configured_lr"] == 0.01
    (stopping,) = (v for k, v in last["callbacks"].items() if k.startswith("EarlyStopping"))
    assert stopping["patience"] == 7


def test_a_resume_cannot_take_another_seed_even_when_allowed(stopped_run, tmp_path):
    reseeded = compose_train(tmp_path, [*TINY, *BASE, "seed=1", "allow_changes=[seed,data]"])
    with pytest.raises(UserError, match=r"^seed 42 -> 1: .* even with allow_changes.*seed=1 anew"):
        check_config_changes(reseeded, stopped_run)
    with pytest.raises(UserError, match=r"^seed 42 -> 1: "):  # not offered allow_changes
        check_config_changes(compose_train(tmp_path, [*TINY, *BASE, "seed=1"]), stopped_run)
    assert (
        check_config_changes(compose_train(tmp_path, [*TINY, *BASE, "seed=42"]), stopped_run) == []
    )


def test_a_resume_cannot_select_by_another_metric_even_when_allowed(stopped_run, tmp_path):
    rmse = ["monitor=val/rmse", "allow_changes=[monitor,module,callbacks]"]
    with pytest.raises(UserError, match=r"^monitor val/mae -> val/rmse: .*by val/mae, whose"):
        check_config_changes(compose_train(tmp_path, [*TINY, *BASE, *rmse]), stopped_run)
    alone = ["callbacks.early_stopping.monitor=val/rmse", "allow_changes=[callbacks]"]
    with pytest.raises(UserError, match=r"^callbacks.early_stopping.monitor val/mae -> val/rmse"):
        check_config_changes(compose_train(tmp_path, [*TINY, *BASE, *alone]), stopped_run)


def test_a_checkpoints_run_is_the_folder_with_its_config(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    assert checkpoint_run(run / "checkpoints" / "last.ckpt") is None  # no config: no run
    (run / "config.yaml").write_text("seed: 0\n")
    assert checkpoint_run(run / "checkpoints" / "last.ckpt") == run
    assert checkpoint_run(run / "hpc_ckpt_3.ckpt") == run  # SLURM's, in the run directory
    assert checkpoint_run(tmp_path / "loose.ckpt") is None


def test_an_allowed_change_that_reshapes_the_weights_is_refused_in_one_line(stopped_run):
    checkpoints = snapshot(stopped_run / "checkpoints")
    k = train_py(stopped_run, "model.k=2", "allow_changes=[model.k]")
    assert k.returncode != 0
    line = the_line(k, "holds weights that the model built by these settings cannot take")
    assert line.startswith(f"{stopped_run / 'checkpoints' / 'last.ckpt'} holds weights")
    assert re.search(r"\(\S+ \(\d+(, \d+)*\) in the checkpoint, \(\d+(, \d+)*\) in the model", line)
    assert "resume=never" in line
    assert snapshot(stopped_run / "checkpoints") == checkpoints, "no step was trained"


def test_a_run_that_never_trained_is_not_a_resume(tmp_path):
    cfg = compose_train(tmp_path, [*TINY, *BASE])
    run = Path(cfg.paths.output_dir)
    run.mkdir()
    nodes = {key: OmegaConf.to_container(cfg[key], resolve=False) for key in ("model", "data")}
    saved = {**nodes, "optimizer": {"lr": 1.0}, "seed": 0}
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    assert check_config_changes(cfg, run) == []  # no checkpoint: nothing to continue
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    with pytest.raises(UserError, match="seed 0 -> 42"):
        check_config_changes(cfg, run)
    assert check_config_changes(compose_train(tmp_path, [*TINY, "resume=never"]), run) == []


def test_a_moved_run_directory_and_keys_new_in_the_code_are_no_change(stopped_run, tmp_path):
    moved = tmp_path / "moved"
    shutil.copytree(stopped_run, moved)
    saved = yaml.safe_load((moved / "config.yaml").read_text())
    del saved["data"]["score_filled"]  # as a run of a version of the code before the key
    (moved / "config.yaml").write_text(yaml.safe_dump(saved))
    cfg = compose_train(tmp_path, [*TINY, *BASE])
    cfg.paths.output_dir = str(moved)
    changes = config_changes(cfg, moved)
    assert sorted((c.key, c.allowed_by) for c in changes) == [
        ("data.score_filled", "new key"),
        ("paths.output_dir", "execution option"),  # callbacks' dirpath etc. moved with it
    ]
    # set on the command line, the same key is a setting of this run's
    cfg = compose_train(tmp_path, [*TINY, *BASE, "data.score_filled=false"])
    cfg.paths.output_dir = str(moved)
    with pytest.raises(UserError, match=r"data.score_filled \(not set\) -> false"):
        check_config_changes(cfg, moved)


def test_a_null_key_new_in_the_code_under_a_repeated_group_choice_is_no_change(
    stopped_run, tmp_path
):
    """A resume repeats its run's group choices (``data=metr_la``, ``model=...``): a key
    the code added since at null is the feature left off, not a setting the command made;
    a new key with a value, or a whole node, under a group choice stays a setting."""
    moved = tmp_path / "moved"
    shutil.copytree(stopped_run, moved)
    saved = yaml.safe_load((moved / "config.yaml").read_text())
    del saved["data"]["time_zone"]  # null: as a run of a version of the code before the key
    del saved["data"]["score_filled"]  # false: a value
    (moved / "config.yaml").write_text(yaml.safe_dump(saved))
    cfg = compose_train(tmp_path, [*TINY, *BASE, "data=synthetic"])
    cfg.paths.output_dir = str(moved)
    changes = {c.key: c.allowed_by for c in config_changes(cfg, moved)}
    assert changes["data.time_zone"] == "new key"
    assert changes["data.score_filled"] is None
    # set on the command line itself, a null key is a setting of this run's
    cfg = compose_train(tmp_path, [*TINY, *BASE, "data=synthetic", "data.time_zone=null"])
    cfg.paths.output_dir = str(moved)
    assert {c.key: c.allowed_by for c in config_changes(cfg, moved)}["data.time_zone"] is None


def test_a_run_from_before_the_coordinates_option_resumes_under_its_model_choice(
    stopped_run, tmp_path
):
    """model.coordinates came at null (the paper's absolute coordinates): a run without it,
    resumed with its own ``model=...``, is the same setting, not a change refused."""
    moved = tmp_path / "moved"
    shutil.copytree(stopped_run, moved)
    saved = yaml.safe_load((moved / "config.yaml").read_text())
    del saved["model"]["coordinates"]
    (moved / "config.yaml").write_text(yaml.safe_dump(saved))
    cfg = compose_train(tmp_path, [*TINY, *BASE, "model=cloudlstm"])
    cfg.paths.output_dir = str(moved)
    assert {c.key: c.allowed_by for c in config_changes(cfg, moved)}["model.coordinates"] == (
        "new key"
    )


def test_a_misspelt_allow_changes_entry_is_one_line_naming_the_key_meant(stopped_run, tmp_path):
    """In this process: the entry point's one line for a UserError is the first test's."""
    from cloudlstm.cli.train import train

    before = snapshot(stopped_run)
    typo = compose_train(tmp_path, [*TINY, *BASE, "optimizer.lr=0.01", "allow_changes=[optimzer]"])
    with pytest.raises(UserError) as err:
        train(typo)
    assert str(err.value) == (
        "allow_changes=[optimzer]: the config has no key optimzer (did you mean optimizer?); "
        "name keys of the run or their prefixes, e.g. allow_changes=[optimizer] or "
        "allow_changes=[optimizer.lr]."
    )
    not_a_list = [*TINY, *BASE, "optimizer.lr=0.01", "allow_changes=optimizer.lr"]
    with pytest.raises(UserError) as err:
        train(compose_train(tmp_path, not_a_list))
    assert str(err.value) == (
        "allow_changes='optimizer.lr': give a list of keys, e.g. allow_changes=[optimizer.lr]."
    )
    assert snapshot(stopped_run) == before


def test_allow_changes_names_keys_of_the_config_or_of_the_saved_run(tmp_path):
    from cloudlstm.rundir.config_changes import check_allowed_keys

    cfg = compose_train(tmp_path, [*TINY, "allow_changes=[optimizer.lr,model,hydra.job.name]"])
    check_allowed_keys(cfg, None)
    gone = compose_train(tmp_path, [*TINY, "allow_changes=[callbacks.old_one.patience]"])
    saved = OmegaConf.create({"callbacks": {"old_one": {"patience": 3}}})  # removed since
    check_allowed_keys(gone, saved)
    with pytest.raises(UserError, match=r"no key callbacks\.old_one\.patience"):
        check_allowed_keys(gone, None)  # a fresh run is checked too


@pytest.mark.parametrize(
    "then, now",
    [("[0.1,0.5,0.9]", "[0.9,0.5,0.1]"), ("[0.5]", "0.5"), ("[]", "null")],
    ids=["another order", "one level unlisted", "none"],
)
def test_quantile_levels_written_another_way_are_no_change(tmp_path, then, now):
    """A [0.5] run resumed with module.quantiles=0.5 was refused as one of other settings."""

    def job(levels: str) -> DictConfig:
        return compose_train(tmp_path, [*TINY, *BASE, f"module.quantiles={levels}"])

    save_job_config(job(then), tmp_path)  # config.yaml, as train.py writes it

    def refused(levels: str) -> list[str]:
        changes = config_changes(job(levels), tmp_path)
        return [change.key for change in changes if change.allowed_by is None]

    assert refused(now) == []
    assert refused("[0.2,0.5,0.8]") == ["module.quantiles"]


def test_the_same_allowing_command_again_after_its_resume_is_taken(stopped_run, tmp_path):
    """A key the resume dropped, allowed by name: the resume rewrote config.yaml without it,
    so the same command, run again (as a full disk's message asks), named a key of neither
    config and was refused."""
    from cloudlstm.cli.train import train

    run = tmp_path / "copy"
    shutil.copytree(stopped_run, run)
    saved = yaml.safe_load((run / "config.yaml").read_text())
    saved["callbacks"]["old_one"] = {"_target_": "lightning.pytorch.callbacks.Timer"}
    (run / "config.yaml").write_text(yaml.safe_dump(saved) + CONFIG_END + "\n")
    cfg = compose_train(tmp_path, [*TINY, *BASE, "allow_changes=[callbacks.old_one]"])
    cfg.paths.output_dir = str(run)
    (metrics_file := run / "metrics.json").unlink(missing_ok=True)
    train(cfg)
    assert "old_one" not in yaml.safe_load((run / "config.yaml").read_text())["callbacks"]
    metrics_file.unlink()  # stopped again before its end
    assert check_config_changes(cfg, run) == []
