"""A checkpoint's stored paths follow a moved or copied run directory, and stay with the
run a training continued from where their files are there alone."""

from __future__ import annotations

from pathlib import Path

from cloudlstm.rundir.moved_run import rerooted


def _state(folder: Path) -> dict:
    best = str(folder / "epoch_000-step_000003.ckpt")
    return {
        "dirpath": str(folder),
        "best_model_path": best,
        "best_k_models": {best: 0.5},
        "last_model_path": str(folder / "last.ckpt"),
    }


def _files(folder: Path) -> None:
    folder.mkdir(parents=True)
    for name in ("epoch_000-step_000003.ckpt", "last.ckpt"):
        (folder / name).write_bytes(b"weights")


def test_a_moved_or_copied_run_keeps_to_its_own_files(tmp_path):
    old, new = tmp_path / "run" / "checkpoints", tmp_path / "copy" / "checkpoints"
    _files(new)  # moved: the original is gone
    assert rerooted(_state(old), str(old), str(new)) == _state(new)
    _files(old)  # copied: both are there, and the copy's own are taken
    assert rerooted(_state(old), str(old), str(new)) == _state(new)


def test_a_training_continuing_another_runs_checkpoint_keeps_that_runs_best(tmp_path):
    """resume=B/checkpoints/last.ckpt in a new directory C: B's best checkpoint was looked
    for in C, and the test after training failed with a FileNotFoundError."""
    old, new = tmp_path / "B" / "checkpoints", tmp_path / "C" / "checkpoints"
    _files(old)
    new.mkdir(parents=True)
    state = rerooted(_state(old), str(old), str(new))
    assert state == {**_state(old), "dirpath": str(new)}
