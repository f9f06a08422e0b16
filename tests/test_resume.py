"""A killed job started again in its run directory resumes exactly, into the same W&B run."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
import torch

from cloudlstm.engine.callbacks import EpochTimer
from cloudlstm.errors import UserError
from cloudlstm.rundir.resume import resume_checkpoint
from tests.conftest import PYTHON, ROOT, TINY, subprocess_env

# Four full epochs, deterministic kernels, the W&B logger (offline) on; validation and
# checkpoints at epoch ends (the paper recipe's), from which a resume is bit-exact.
RESUMABLE = [
    *[a for a in TINY if not a.startswith(("trainer.max_epochs", "trainer.val_check"))],
    "recipe=paper",
    "trainer.max_epochs=4",
    "trainer.deterministic=true",
    "logger=wandb",
    "report.figures=false",
]


def run_train(run_dir: Path, data_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    env = subprocess_env()
    cmd = [
        *PYTHON,
        "train.py",
        *RESUMABLE,
        f"hydra.run.dir={run_dir}",
        f"paths.data_dir={data_dir}",
        *extra,
    ]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def offline_run_ids(run_dir: Path) -> list[str]:
    return [p.name.rsplit("-", 1)[-1] for p in sorted((run_dir / "wandb").glob("offline-run-*"))]


# five trainings with W&B: about 80 s; the fast bit-exact resume is the deterministic case
# of tests/test_resume_mid_epoch.py
@pytest.mark.slow
def test_killed_run_resumes_bit_exactly_into_the_same_wandb_run(tmp_path):
    data = tmp_path / "data"
    whole = run_train(tmp_path / "whole", data)
    assert whole.returncode == 0, whole.stderr[-3000:]

    killed_dir = tmp_path / "killed"
    killed = run_train(
        killed_dir,
        data,
        "+callbacks.kill._target_=tests.kill_callback.KillAtEpochStart",
        "+callbacks.kill.epoch=2",
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not (killed_dir / "metrics.json").exists()
    last = torch.load(killed_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["epoch"] == 1  # the kill came right after epoch 2's checkpoint
    before_kill = last["callbacks"]["EpochTimer"]["fit_time_s"]
    assert before_kill > 0

    # the same command without the kill (a setting of the run: allowed), the same directory
    resumed = run_train(killed_dir, data, "allow_changes=[callbacks.kill]")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    expected = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    got = json.loads((killed_dir / "metrics.json").read_text())
    assert got["resumed_from"] == "checkpoints/last.ckpt"
    assert got["epochs"] == expected["epochs"] == 4
    assert got["test"] == expected["test"]  # bit-identical: every metric, step and channel
    assert got["val"] == expected["val"]
    assert Path(got["checkpoint"]).name == Path(expected["checkpoint"]).name
    # the whole run's time: the killed process's, up to its checkpoint, and the resumed one's
    assert got["train_time_s"] > before_kill
    resumed_ckpt = torch.load(killed_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert resumed_ckpt["callbacks"]["EpochTimer"]["fit_time_s"] > before_kill

    ids = offline_run_ids(killed_dir)
    assert len(ids) == 2 and len(set(ids)) == 1, "the restart continues the W&B run"
    assert ids[0] == (killed_dir / "wandb_run_id.txt").read_text().strip()

    again = run_train(killed_dir, data)  # a finished run is not redone
    assert again.returncode == 0, again.stderr[-3000:]
    assert "this run has finished" in again.stderr + again.stdout
    assert json.loads((killed_dir / "metrics.json").read_text()) == got
    assert len(offline_run_ids(killed_dir)) == 2
    # a change let through on a finished run changes nothing: said, where it was silent
    longer = run_train(killed_dir, data, "trainer.max_epochs=6", "allow_changes=[trainer]")
    assert longer.returncode == 0, longer.stderr[-3000:]
    assert re.search(
        r"allow_changes lets trainer.max_epochs 4 -> 6 through, but changes nothing: a "
        r"finished run is not trained again\.",
        longer.stderr + longer.stdout,
    )
    assert json.loads((killed_dir / "metrics.json").read_text()) == got

    fresh = run_train(killed_dir, data, "resume=never", "trainer.max_epochs=1")
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert json.loads((killed_dir / "metrics.json").read_text())["resumed_from"] is None
    new_id = (killed_dir / "wandb_run_id.txt").read_text().strip()
    assert new_id != ids[0] and new_id in offline_run_ids(killed_dir)


@pytest.mark.slow  # three trainings: about 40 s
def test_run_killed_between_training_and_test_resumes_with_its_validation_metrics(tmp_path):
    """Nothing is left to train: the validation metrics (a sweeper's objective) come from
    the checkpoint, the uninterrupted run's (tests/test_resumed_validation.py)."""
    data = tmp_path / "data"
    no_wandb = ["logger=csv", "trainer.max_epochs=2"]
    whole = run_train(tmp_path / "whole", data, *no_wandb)
    assert whole.returncode == 0, whole.stderr[-3000:]
    killed_dir = tmp_path / "killed"
    kill = "+callbacks.kill._target_=tests.kill_callback.KillAtTestStart"
    killed = run_train(killed_dir, data, *no_wandb, kill)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not (killed_dir / "metrics.json").exists()

    resumed = run_train(killed_dir, data, *no_wandb, "allow_changes=[callbacks.kill]")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    expected = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    got = json.loads((killed_dir / "metrics.json").read_text())
    assert got["resumed_from"] == "checkpoints/last.ckpt"
    assert expected["val"] and got["val"] == expected["val"]
    assert got["test"] == expected["test"]
    assert (got["epochs"], got["steps"]) == (expected["epochs"], expected["steps"])


def test_a_run_ended_by_its_step_budget_and_killed_before_its_test_counts_its_epochs(tmp_path):
    """Resumed at its last step, Lightning's epoch counter stayed one short of the
    uninterrupted run's (metrics.json's and compare's epochs: 1 where 2 were trained)."""
    data = tmp_path / "data"
    budget = ["logger=csv", "trainer.max_epochs=-1", "trainer.max_steps=6"]
    whole = run_train(tmp_path / "whole", data, *budget)
    assert whole.returncode == 0, whole.stderr[-3000:]
    killed_dir = tmp_path / "killed"
    kill = "+callbacks.kill._target_=tests.kill_callback.KillAtTestStart"
    assert run_train(killed_dir, data, *budget, kill).returncode == -signal.SIGKILL
    resumed = run_train(killed_dir, data, *budget, "allow_changes=[callbacks.kill]")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    expected = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    got = json.loads((killed_dir / "metrics.json").read_text())
    assert (got["epochs"], got["steps"]) == (expected["epochs"], expected["steps"]) == (2, 6)
    assert got["test"] == expected["test"]


def test_last_checkpoint_is_the_latest_epoch_when_validation_gets_worse(tiny_cfg):
    """Lightning 2.6's save_last follows new bests only; our last.ckpt follows every epoch."""
    from cloudlstm.cli.train import train

    # lr=3 diverges (val/mae ~70 times the mean forecast's): the divergence check is off so
    # that the run goes on through its worse validations
    cfg = tiny_cfg(
        "recipe=paper",
        "optimizer.lr=3.0",
        "trainer.max_epochs=3",
        "logger=none",
        "scheduler=null",
        "module.diverge_factor=null",
    )
    results = train(cfg)
    run = Path(cfg.paths.output_dir)
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert (last["epoch"], last["global_step"]) == (2, 9)
    best = torch.load(run / results["checkpoint"], weights_only=False)  # relative to the run
    assert best["epoch"] < 2, "the run must diverge for this test to mean anything"


@pytest.mark.slow  # -m slurm requeues a real job; this is the same path without SLURM
def test_hpc_checkpoint_of_an_epoch_start_resumes_from_last_bit_exactly(tmp_path):
    """SLURM's signal right as an epoch starts: Lightning's HPC checkpoint then holds what
    last.ckpt holds, but Lightning restores it as an epoch already run and fails. resume=auto
    takes last.ckpt instead, and the run ends as one never stopped."""
    from lightning.pytorch.trainer.connectors.checkpoint_connector import _CheckpointConnector

    data = tmp_path / "data"
    whole = run_train(tmp_path / "whole", data)
    assert whole.returncode == 0, whole.stderr[-3000:]
    run_dir = tmp_path / "requeued"
    killed = run_train(
        run_dir,
        data,
        "+callbacks.hpc._target_=tests.kill_callback.SaveHpcCheckpointAndKill",
        "+callbacks.hpc.epoch=2",
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert (run_dir / "hpc_ckpt_1.ckpt.checksum").is_file()
    # the checksum beside it does not change Lightning's numbering of HPC checkpoints
    assert _CheckpointConnector.hpc_save_path(run_dir) == str(run_dir / "hpc_ckpt_2.ckpt")

    resumed = run_train(run_dir, data, "allow_changes=[callbacks.hpc]")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    expected = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    got = json.loads((run_dir / "metrics.json").read_text())
    assert got["resumed_from"] == "checkpoints/last.ckpt"
    assert got["test"] == expected["test"] and got["val"] == expected["val"]


def test_a_run_killed_in_the_validation_after_a_step_checkpoint_ends_as_if_it_had_not(tmp_path):
    """A step checkpoint saved at the step a validation follows was resumed as one whose
    validation had run: a kill during that validation came back past it, and at the last
    step the run tested an earlier checkpoint than the uninterrupted run."""
    data = tmp_path / "data"
    every_epoch = [
        "logger=csv",
        "trainer.max_epochs=2",
        "callbacks.step_checkpoint.every_n_train_steps=3",
    ]
    whole = run_train(tmp_path / "whole", data, *every_epoch)
    assert whole.returncode == 0, whole.stderr[-3000:]
    killed_dir = tmp_path / "killed"
    kill = [
        "+callbacks.kill._target_=tests.kill_callback.KillAtValidation",
        "+callbacks.kill.step=6",
    ]
    killed = run_train(killed_dir, data, *every_epoch, *kill)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    last = torch.load(killed_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] == 3  # step 3's, after its validation; none of step 6 before

    resumed = run_train(killed_dir, data, *every_epoch, "allow_changes=[callbacks.kill]")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    expected = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    got = json.loads((killed_dir / "metrics.json").read_text())
    assert got["checkpoint"] == expected["checkpoint"] and got["selection"] == expected["selection"]
    assert got["val"] == expected["val"] and got["test"] == expected["test"]


def test_long_epochs_save_last_checkpoint_every_n_steps(tmp_path):
    """A job killed mid-epoch loses at most `every_n_train_steps` steps."""
    run_dir = tmp_path / "run"
    killed = run_train(
        run_dir,
        tmp_path / "data",
        "trainer.limit_train_batches=7",
        "callbacks.step_checkpoint.every_n_train_steps=2",
        "+callbacks.kill._target_=tests.kill_callback.KillAtStep",
        "+callbacks.kill.step=5",
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["epoch"] == 0 and last["global_step"] == 4  # saved after steps 2 and 4


def test_resume_never_starts_fresh_and_auto_ignores_an_empty_run_dir(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    assert resume_checkpoint("auto", tmp_path) is None
    torch.save({"state_dict": {}, "epoch": 0}, tmp_path / "checkpoints" / "last.ckpt")
    assert resume_checkpoint("never", tmp_path) is None
    assert resume_checkpoint("auto", tmp_path) == str(tmp_path / "checkpoints" / "last.ckpt")


def test_auto_takes_the_newest_of_last_and_hpc_checkpoints(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    last, hpc = tmp_path / "checkpoints" / "last.ckpt", tmp_path / "hpc_ckpt_1.ckpt"
    for path, mtime in ((last, 1_000), (hpc, 2_000)):
        torch.save({"state_dict": {}}, path)
        os.utime(path, (mtime, mtime))
    assert resume_checkpoint("auto", tmp_path) == str(hpc)
    os.utime(last, (3_000, 3_000))
    assert resume_checkpoint("auto", tmp_path) == str(last)


def test_auto_takes_the_latest_step_whatever_the_files_times(tmp_path):
    """A run directory copied without its files' times (``cp -r``) may give an older HPC
    checkpoint the newer time: the training step decides, and at a tie ``last.ckpt``."""
    (tmp_path / "checkpoints").mkdir()
    last, hpc = tmp_path / "checkpoints" / "last.ckpt", tmp_path / "hpc_ckpt_1.ckpt"

    def save(path: Path, step: int, mtime: int) -> None:
        torch.save({"state_dict": {}, "global_step": step}, path)
        os.utime(path, (mtime, mtime))

    save(last, 20, 1_000)
    save(hpc, 10, 2_000)
    assert resume_checkpoint("auto", tmp_path) == str(last)
    save(hpc, 20, 2_000)
    assert resume_checkpoint("auto", tmp_path) == str(last)
    save(hpc, 30, 500)
    assert resume_checkpoint("auto", tmp_path) == str(hpc)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "Cannot read checkpoint"),
        (b"PK\x03\x04 truncated zip", "Cannot read checkpoint"),
        (None, "not a Lightning checkpoint"),
    ],
)
def test_unreadable_checkpoint_is_a_user_error_naming_the_file(tmp_path, content, message):
    path = tmp_path / "checkpoints" / "last.ckpt"
    path.parent.mkdir()
    if content is None:
        torch.save({"weights": 1}, path)
    else:
        path.write_bytes(content)
    with pytest.raises(UserError, match=message) as err:
        resume_checkpoint("auto", tmp_path)
    assert str(path) in str(err.value)
    if content is not None:
        assert "resume=never" in str(err.value)


@pytest.mark.parametrize("kind", ["checksum", "yaml", "no state_dict"])
def test_a_resume_path_that_is_no_checkpoint_is_not_to_be_deleted(tmp_path, kind):
    """A tab-completed last.ckpt.checksum was called truncated, with "Delete it": deleting
    it switches the check of last.ckpt off (and config.yaml would lose the run)."""
    given = (
        tmp_path
        / "checkpoints"
        / {"checksum": "last.ckpt.checksum", "yaml": "config.yaml"}.get(kind, "other.ckpt")
    )
    given.parent.mkdir()
    if kind == "no state_dict":
        torch.save({"weights": 1}, given)
    else:
        given.write_text("3f2a9c sha256\n" if kind == "checksum" else "seed: 0\n")
    with pytest.raises(UserError) as err:
        resume_checkpoint(str(given), tmp_path)
    said = str(err.value)
    assert said.startswith(str(given)) and "Delete" not in said
    assert said.endswith(
        "Point resume= at a .ckpt written by training, or use `resume=auto` or `resume=never`."
    )


def test_missing_resume_path_names_the_choices(tmp_path):
    with pytest.raises(UserError, match="resume=auto.*resume=never"):
        resume_checkpoint(str(tmp_path / "nope.ckpt"), tmp_path)


def test_truncated_last_checkpoint_stops_train_py_with_one_message(tmp_path):
    """The entry point prints the message alone, no traceback, and exits non-zero."""
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"PK\x03\x04\x14\x00 cut short")
    proc = run_train(run_dir, tmp_path / "data")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert f"Cannot read checkpoint {run_dir / 'checkpoints' / 'last.ckpt'}" in proc.stderr
    assert "resume=never" in proc.stderr


def test_the_timer_adds_the_checkpointed_time_of_earlier_processes():
    earlier = {"epoch_times": [5.0], "train_time_s": 4.0, "train_steps": 10, "fit_time_s": 100.0}
    timer = EpochTimer()
    timer.load_state_dict(earlier)  # a resume restores callbacks before fitting starts
    timer.on_fit_start(None, None)
    timer.on_fit_end(None, None)
    assert 100.0 < timer.fit_time_s < 101.0
    assert timer.state_dict()["fit_time_s"] == timer.fit_time_s
    # testing a checkpoint of this very run after training keeps the figures measured here
    timer.load_state_dict({**earlier, "fit_time_s": 50.0})
    assert timer.fit_time_s > 100.0 and timer.train_steps == 10
    # a fresh timer (eval.py) takes the checkpoint's
    fresh = EpochTimer()
    fresh.load_state_dict(earlier)
    assert fresh.fit_time_s == 100.0 and fresh.train_time_s == 4.0


class LoggedValues:
    """What a callback logs through ``pl_module.log``."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def log(self, name: str, value: float) -> None:
        self.values[name] = value


def test_an_epoch_a_resumed_run_ends_without_starting_it_has_no_time():
    """Lightning ends the epoch of a checkpoint written at its last batch without starting
    it in the resumed process: its time was counted from 0, the machine's uptime (6,745 s
    in metrics.json for a 0.13 s epoch), and its throughput read 0."""
    timer = EpochTimer()
    timer.load_state_dict({"epoch_times": [0.5], "train_time_s": 0.4, "train_steps": 3})
    logged = LoggedValues()
    timer.on_train_epoch_end(None, logged)
    assert logged.values == {} and timer.epoch_times == [0.5]
    timer.on_train_epoch_start(None, logged)  # the next epoch is timed
    timer.on_train_epoch_end(None, logged)
    assert len(timer.epoch_times) == 2 and 0 <= timer.epoch_times[1] < 1.0
    assert 0 <= logged.values["perf/epoch_time_s"] < 1.0
