"""Every checkpoint a run writes has its SHA-256 beside it, and nothing loads a checkpoint
whose bytes changed (``cloudlstm.rundir.checkpoint_io``, ``cloudlstm.rundir.checkpoints``)."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest
import torch

from cloudlstm.errors import UserError
from cloudlstm.rundir.checkpoints import (
    check_checkpoint,
    checksum_path,
    file_sha256,
    kept_sha256,
    write_checksum,
)
from tests.conftest import PYTHON, ROOT, TINY, subprocess_env


def flip_a_weight_byte(path: Path) -> str:
    """Flip one bit of one byte in the middle of a model weight tensor's bytes in ``path``;
    returns the weight's name. The file stays a valid checkpoint (torch.load reads it)."""
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    data = bytearray(path.read_bytes())
    for name, tensor in ckpt["state_dict"].items():
        raw = tensor.contiguous().numpy().tobytes()
        where = data.find(raw)
        if tensor.numel() >= 16 and where >= 0 and data.find(raw, where + 1) < 0:
            data[where + len(raw) // 2] ^= 0x10
            path.write_bytes(bytes(data))
            return name
    raise AssertionError("no weight tensor found in the file's bytes")


@pytest.fixture
def trained_run(tiny_cfg) -> Path:
    """A real tiny run of 2 epochs, as one killed before its end (no metrics.json)."""
    from cloudlstm.cli.train import train

    cfg = tiny_cfg("logger=csv", "report.figures=false")
    train(cfg)
    run = Path(cfg.paths.output_dir)
    (run / "metrics.json").unlink()
    return run


def test_every_checkpoint_of_a_run_has_its_checksum_and_no_other_is_left(trained_run):
    ckpts = sorted((trained_run / "checkpoints").glob("*.ckpt"))
    sums = sorted((trained_run / "checkpoints").glob("*.checksum"))
    assert len(ckpts) == 2  # the best (save_top_k=1: older bests removed) and last.ckpt
    assert [checksum_path(p) for p in ckpts] == sums, "a checksum per checkpoint, no orphan"
    for ckpt in ckpts:
        digest, name = checksum_path(ckpt).read_text().split()
        assert (digest, name) == (file_sha256(ckpt), ckpt.name)  # sha256sum -c format


def test_a_changed_weight_is_refused_by_resume_and_eval_in_one_line(trained_run, tmp_path):
    last = trained_run / "checkpoints" / "last.ckpt"
    name = flip_a_weight_byte(last)
    changed = torch.load(last, weights_only=False)["state_dict"][name]
    assert torch.isfinite(changed).all(), "torch.load takes the damaged file without a word"

    cmd = [
        *PYTHON, "train.py", *TINY, "trainer.max_epochs=3", "logger=csv",
        "allow_changes=[trainer.max_epochs]",
        f"hydra.run.dir={trained_run}", f"paths.data_dir={tmp_path / 'data'}",
    ]  # fmt: skip
    resumed = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True)
    assert resumed.returncode != 0
    assert "Traceback" not in resumed.stderr
    lines = [x for x in resumed.stderr.splitlines() if "does not match its SHA-256" in x]
    assert len(lines) == 1, resumed.stderr[-3000:]
    assert f"Checkpoint {last} " in lines[0]
    best = next((trained_run / "checkpoints").glob("epoch_*.ckpt"))
    assert f"resume={best}" in lines[0] and "resume=never" in lines[0]

    cmd = [*PYTHON, "eval.py", f"run={trained_run}", "ckpt=last", "report.figures=false"]
    evaluated = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True)
    assert evaluated.returncode != 0
    assert "Traceback" not in evaluated.stderr
    lines = [x for x in evaluated.stderr.splitlines() if "does not match its SHA-256" in x]
    assert len(lines) == 1 and f"Checkpoint {last} " in lines[0], evaluated.stderr[-3000:]
    assert "ckpt=best" in lines[0]


def test_a_checkpoint_without_a_checksum_loads_as_before(tmp_path, caplog):
    """Runs written before checksums (docs/results/) have none."""
    path = tmp_path / "old.ckpt"
    torch.save({"state_dict": {"w": torch.ones(3)}}, path)
    with caplog.at_level(logging.DEBUG, logger="cloudlstm.rundir.checkpoints"):
        assert check_checkpoint(path)["state_dict"]["w"].sum() == 3
    assert "old.ckpt.checksum: loaded without verifying it" in caplog.text


def test_checksum_is_replaced_atomically_and_checked(tmp_path):
    path = tmp_path / "hpc_ckpt_1.ckpt"
    torch.save({"state_dict": {"w": torch.arange(64.0)}}, path)
    write_checksum(path)
    check_checkpoint(path)
    torch.save({"state_dict": {"w": torch.arange(64.0) + 1}}, path)  # rewritten, same size
    with pytest.raises(UserError, match="hpc_ckpt_1.ckpt does not match its SHA-256"):
        check_checkpoint(path, "Do this instead.")
    write_checksum(path)
    check_checkpoint(path)
    # no temporary file left, and no digits added to an hpc_ckpt_<n> name: Lightning reads
    # the checkpoint number from every such name's digits
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "hpc_ckpt_1.ckpt",
        "hpc_ckpt_1.ckpt.checksum",
    ]


def unreadable_checksum(path: Path) -> Path:
    """Make the ``.checksum`` of checkpoint ``path`` a folder: a file that cannot be read,
    even by root (whom ``chmod 000`` does not stop)."""
    sidecar = checksum_path(path)
    sidecar.unlink(missing_ok=True)
    sidecar.mkdir()
    return sidecar


def test_an_unreadable_checksum_is_one_error_never_an_unverified_load(tmp_path):
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": {"w": torch.ones(3)}}, path)
    sidecar = unreadable_checksum(path)
    for read in (check_checkpoint, kept_sha256):
        with pytest.raises(UserError, match=f"Cannot read {sidecar}, the SHA-256 of checkpoint"):
            read(path)
    sidecar.rmdir()
    sidecar.symlink_to(tmp_path / "gone")  # a link to nothing is a checksum lost, not none
    with pytest.raises(UserError, match="it is not a file"):
        check_checkpoint(path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its permissions")
def test_a_checksum_without_read_permission_names_the_file(tmp_path):
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": {"w": torch.ones(3)}}, path)
    write_checksum(path).chmod(0)
    with pytest.raises(UserError, match="last.ckpt.checksum.*Permission denied"):
        check_checkpoint(path)


@pytest.mark.slow
def test_an_unreadable_checksum_is_one_line_from_resume_and_eval(trained_run, tmp_path):
    sidecar = unreadable_checksum(trained_run / "checkpoints" / "last.ckpt")
    resume = [
        *PYTHON, "train.py", *TINY, "trainer.max_epochs=3", "logger=csv",
        "allow_changes=[trainer.max_epochs]",
        f"hydra.run.dir={trained_run}", f"paths.data_dir={tmp_path / 'data'}",
    ]  # fmt: skip
    evaluate = [*PYTHON, "eval.py", f"run={trained_run}", "ckpt=last", "report.figures=false"]
    for cmd in (resume, evaluate):
        done = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True)
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
        lines = [x for x in done.stderr.splitlines() if f"Cannot read {sidecar}," in x]
        assert len(lines) == 1, done.stderr[-3000:]


def test_a_copy_is_told_by_its_bytes_where_its_runs_checksum_cannot_be_read(tmp_path):
    """Naming the run a checkpoint is a copy of (eval.py's refusals) reads other runs'
    checkpoints without loading them: one's unreadable ``.checksum`` is no reason to stop
    that message, and their bytes tell the copy."""
    from cloudlstm.assembly.checkpoint_fit import TrainedCheckpoint

    given = tmp_path / "given.ckpt"
    torch.save({"state_dict": {"w": torch.arange(8.0)}}, given)
    write_checksum(given)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    kept = run / "checkpoints" / "last.ckpt"
    kept.write_bytes(given.read_bytes())
    unreadable_checksum(kept)
    assert TrainedCheckpoint(given, {}, None).holding([run]) == [run]


@pytest.mark.slow
def test_a_checksum_in_the_way_of_a_save_is_one_error_naming_it(trained_run, tiny_cfg):
    """A ``last.ckpt.checksum`` that is a folder, where a training resumed from its best
    checkpoint saves its last.ckpt: the save read and unlinked it, an IsADirectoryError
    traceback in the middle of training."""
    from cloudlstm.cli.train import train

    [best] = (trained_run / "checkpoints").glob("epoch_*.ckpt")
    sidecar = unreadable_checksum(trained_run / "checkpoints" / "last.ckpt")
    cfg = tiny_cfg(
        "logger=csv", "report.figures=false", "trainer.max_epochs=3",
        "allow_changes=[trainer.max_epochs]", f"resume={best}",
    )  # fmt: skip
    assert Path(cfg.paths.output_dir) == trained_run
    with pytest.raises(UserError) as err:
        train(cfg)
    assert str(err.value).startswith(f"Cannot replace {sidecar}, the SHA-256 of checkpoint ")
    assert "(it is a folder)" in str(err.value) and sidecar.is_dir()


def test_a_damaged_last_of_a_run_without_a_best_is_hashed_once(tmp_path, monkeypatch):
    """ckpt=best of a run killed before its first validation, its last.ckpt damaged: the
    message found last.ckpt damaged, then hashed the file again to say so."""
    from cloudlstm.rundir import checkpoints
    from cloudlstm.rundir.layout import find_checkpoint

    last = tmp_path / "checkpoints" / "last.ckpt"
    last.parent.mkdir()
    torch.save({"state_dict": {"w": torch.zeros(4)}}, last)
    write_checksum(last)
    with open(last, "ab") as file:
        file.write(b"\x00")  # its bytes changed after training wrote its checksum
    hashed = []

    def counted(path: Path) -> str:
        hashed.append(path.name)
        return file_sha256(path)

    monkeypatch.setattr(checkpoints, "file_sha256", counted)
    with pytest.raises(UserError) as refused:
        find_checkpoint(tmp_path, "best")
    assert str(refused.value).startswith(f"No best checkpoint in {tmp_path} (")
    assert "is sound (last.ckpt is damaged): train the run again" in str(refused.value)
    assert hashed == ["last.ckpt"]
