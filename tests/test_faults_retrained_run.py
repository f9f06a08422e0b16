"""A finished run trained again from scratch in its own directory (``resume=never``) and
killed before it ends: the directory holds the new training's files alone, so that
``resume=auto`` continues it instead of calling it finished, ``ckpt=best`` and ``compare``
find nothing of the earlier model, and the earlier training's files are kept aside in
``.replaced/<UTC time>/``."""

from __future__ import annotations

import errno
import json
import signal
import subprocess
from pathlib import Path

import pytest
import torch

from cloudlstm.compare.runs import find_runs, runs_without_results
from cloudlstm.errors import OutOfSpaceError, UserError
from cloudlstm.rundir import replaced
from cloudlstm.rundir.layout import REPLACED_DIR, find_checkpoint, resume_candidates
from cloudlstm.rundir.replaced import retire_earlier_training
from cloudlstm.rundir.resume import starts_anew
from tests.conftest import PYTHON, ROOT, TINY, subprocess_env

# two epochs of 3 steps, validated and checkpointed at each epoch's end, with figures
JOB = [*(o for o in TINY if not o.startswith("report.figures")), "logger=csv"]
KILL_AT_STEP_4 = [
    "+callbacks.kill._target_=tests.kill_callback.KillAtStep",
    "+callbacks.kill.step=4",
]


def train_py(run_dir: Path, data_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [*PYTHON, "train.py", *JOB, f"hydra.run.dir={run_dir}", f"paths.data_dir={data_dir}"]
    return subprocess.run(
        [*cmd, *extra], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600
    )


def checkpoint_names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.ckpt"))


def test_a_retraining_killed_before_its_end_leaves_only_its_own_files(tmp_path):
    run_dir, data = tmp_path / "run", tmp_path / "data"
    first = train_py(run_dir, data, "module.save_predictions=true")
    assert first.returncode == 0, first.stderr[-3000:]
    earlier = json.loads((run_dir / "metrics.json").read_text())
    earlier_checkpoints = checkpoint_names(run_dir / "checkpoints")
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 6

    killed = train_py(run_dir, data, "resume=never", *KILL_AT_STEP_4)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    (aside,) = (run_dir / REPLACED_DIR).iterdir()
    said = [line for line in (killed.stdout + killed.stderr).splitlines() if "anew" in line]
    assert len(said) == 1 and str(aside) in said[0], killed.stdout[-3000:]
    for name in ("config.yaml", "metrics.json", "figures", "predictions.npz", "checkpoints"):
        assert name in said[0] and (aside / name).exists()
    for name in ("metrics.json", "figures", "predictions.npz"):  # made by a test, at the end
        assert not (run_dir / name).exists()
    # the earlier training's files, whole, aside
    assert json.loads((aside / "metrics.json").read_text()) == earlier
    assert checkpoint_names(aside / "checkpoints") == earlier_checkpoints
    # the directory: the new training's checkpoints of step 3 alone, no result
    for path in (run_dir / "checkpoints").glob("*.ckpt"):
        assert torch.load(path, weights_only=False)["global_step"] == 3, path
    assert find_checkpoint(run_dir, "best").parent == run_dir / "checkpoints"
    # the earlier training aside is a whole run directory of its own
    assert [run.path for run in find_runs([aside])] == [aside]
    assert find_checkpoint(aside, "best").name == Path(earlier["checkpoint"]).name
    assert find_runs([tmp_path]) == []  # the run aside is no run: its folder is hidden
    assert runs_without_results([tmp_path], []) == [run_dir]

    resumed = train_py(run_dir, data, "allow_changes=[callbacks.kill]")  # resume=auto
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stdout.count("Resuming from") == 1 and "has finished" not in resumed.stdout
    assert "exists and is not empty" not in resumed.stdout + resumed.stderr  # its own
    finished = json.loads((run_dir / "metrics.json").read_text())
    assert finished["resumed_from"] == "checkpoints/last.ckpt"
    assert [run.path for run in find_runs([tmp_path])] == [run_dir]
    assert list((run_dir / REPLACED_DIR).iterdir()) == [aside]  # a resume moves nothing


def test_a_retraining_refused_as_it_is_built_leaves_the_directory_as_it_was(tmp_path):
    run_dir, data = tmp_path / "run", tmp_path / "data"
    first = train_py(run_dir, data)
    assert first.returncode == 0, first.stderr[-3000:]
    before = {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}

    refused = train_py(run_dir, data, "resume=never", "model.k=500")  # 12 points
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    assert refused.stderr.strip().splitlines()[-1].startswith("model.k=500 neighbours")
    after = {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    logs = [Path("train.log")] + [p for p in after if p.parts[0] in (".hydra", "csv")]
    assert {p: b for p, b in after.items() if p not in logs} == {
        p: b for p, b in before.items() if p not in logs
    }
    assert not (run_dir / REPLACED_DIR).exists()
    assert [run.path for run in find_runs([tmp_path])] == [run_dir]


def test_a_retraining_from_a_checkpoint_it_cannot_resume_leaves_the_directory_as_it_was(
    tmp_path,
):
    """resume=<a path mistyped> or <a checkpoint cut short>: the path was read only as the
    fit began, after the finished run's results and checkpoints were moved aside and a
    resume that never happened was recorded; compare and eval.py no longer saw the run."""
    run_dir, data = tmp_path / "run", tmp_path / "data"
    first = train_py(run_dir, data)
    assert first.returncode == 0, first.stderr[-3000:]
    files = lambda: {  # noqa: E731
        p.relative_to(run_dir): p.read_bytes()
        for p in run_dir.rglob("*")
        if p.is_file() and p.parts[len(run_dir.parts)] not in ("train.log", ".hydra", "csv")
    }
    before = files()
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes((run_dir / "checkpoints" / "last.ckpt").read_bytes()[:2000])
    for resume, said in [
        (tmp_path / "lst.ckpt", f"resume={tmp_path / 'lst.ckpt'}: no such checkpoint file."),
        (cut, "Cannot read checkpoint"),
    ]:
        refused = train_py(run_dir, data, f"resume={resume}")
        assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
        assert said in refused.stderr.strip().splitlines()[-1]
        assert files() == before
        assert not (run_dir / REPLACED_DIR).exists()
        assert [run.path for run in find_runs([tmp_path])] == [run_dir]


def test_a_first_training_or_a_start_that_made_no_model_moves_nothing(tmp_path):
    assert retire_earlier_training(tmp_path) is None
    # a start stopped before its first checkpoint: files the new training writes anew
    (tmp_path / "config.yaml").write_text("seed: 1\n")
    (tmp_path / "provenance.jsonl").write_text("{}\n")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "csv").mkdir()  # the CSV logger numbers its versions itself
    assert retire_earlier_training(tmp_path) is None
    assert not (tmp_path / REPLACED_DIR).exists()


def test_two_retrainings_keep_each_earlier_training_apart(tmp_path):
    for step in (1, 2):
        (tmp_path / "checkpoints").mkdir()
        (tmp_path / "checkpoints" / "last.ckpt").write_text(str(step))
        (tmp_path / "metrics.json").write_text(json.dumps({"step": step}))
        retire_earlier_training(tmp_path)
    kept = sorted((tmp_path / REPLACED_DIR).iterdir())
    assert [json.loads((k / "metrics.json").read_text()) for k in kept] == [
        {"step": 1},
        {"step": 2},
    ]
    assert [(k / "checkpoints" / "last.ckpt").read_text() for k in kept] == ["1", "2"]


def test_no_room_for_the_folder_aside_is_one_line_and_moves_nothing(tmp_path, monkeypatch):
    (tmp_path / "metrics.json").write_text("{}")

    def full(self: Path, *args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(replaced.Path, "mkdir", full)
    with pytest.raises(OutOfSpaceError) as caught:
        retire_earlier_training(tmp_path)
    assert isinstance(caught.value, UserError) and REPLACED_DIR in str(caught.value)
    assert (tmp_path / "metrics.json").is_file()


def test_a_training_starts_anew_unless_it_continues_a_checkpoint_of_its_own(tmp_path, monkeypatch):
    run_dir, other = tmp_path / "run", tmp_path / "other"
    for folder in (run_dir, other):
        (folder / "checkpoints").mkdir(parents=True)
    assert starts_anew("never", run_dir) and starts_anew(None, run_dir)
    assert starts_anew("auto", run_dir)  # nothing to continue
    torch.save({"global_step": 3}, run_dir / "checkpoints" / "last.ckpt")
    assert not starts_anew("auto", run_dir) and starts_anew("never", run_dir)
    assert not starts_anew(str(run_dir / "checkpoints" / "epoch_0.ckpt"), run_dir)
    assert starts_anew(str(other / "checkpoints" / "last.ckpt"), run_dir)  # another run's
    monkeypatch.chdir(tmp_path)
    assert not starts_anew("run/checkpoints/last.ckpt", run_dir)
    assert starts_anew("other/checkpoints/last.ckpt", Path("run"))
    # an earlier training moved aside is another run, whose weights go on here
    assert starts_anew(f"run/{REPLACED_DIR}/2026-01-01T00-00-00Z/checkpoints/last.ckpt", run_dir)


def test_slurms_checkpoints_of_the_earlier_training_move_aside_with_it(tmp_path):
    # a requeued training leaves hpc_ckpt_<n>.ckpt in the run's own folder: left there, the
    # new training's resume=auto would continue the earlier model
    for name in ("hpc_ckpt_1.ckpt", "hpc_ckpt_1.ckpt.checksum", "hpc_ckpt_2.ckpt"):
        (tmp_path / name).write_text(name)
    folder = retire_earlier_training(tmp_path)
    assert folder is not None
    assert sorted(p.name for p in folder.iterdir()) == [
        "hpc_ckpt_1.ckpt",
        "hpc_ckpt_1.ckpt.checksum",
        "hpc_ckpt_2.ckpt",
    ]
    assert resume_candidates(tmp_path) == []
