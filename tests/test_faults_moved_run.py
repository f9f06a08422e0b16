"""A copied or moved run directory finds its files relative to itself: eval.py tests the
copy's checkpoint, an older metrics.json naming an absolute path reads the copy's file, and
a resumed copy keeps to its own checkpoints."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from cloudlstm.cli.evaluate import evaluate
from cloudlstm.cli.train import train
from cloudlstm.errors import UserError
from cloudlstm.rundir.layout import find_checkpoint
from tests.conftest import TINY, compose_train
from tests.test_eval import compose_eval

JOB = [*TINY, "logger=none"]


def metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished tiny run, its best checkpoint at a validation before the last step."""
    cfg = compose_train(tmp_path_factory.mktemp("original"), JOB)
    train(cfg)
    return Path(cfg.paths.output_dir)


def copy_of(run: Path, where: Path) -> Path:
    """``cp -r run <where>/run``."""
    return Path(shutil.copytree(run, where / "run"))


def damage(path: Path) -> None:
    """Change bytes in the middle of a checkpoint: its checksum no longer matches."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 8] = b"\x00" * 8
    path.write_bytes(bytes(data))


def test_metrics_json_names_the_checkpoint_inside_the_run(trained):
    recorded = metrics(trained)["checkpoint"]
    assert recorded.startswith("checkpoints/epoch_") and not Path(recorded).is_absolute()


def test_a_copied_run_is_evaluated_from_its_own_checkpoint(trained, tmp_path):
    copy = copy_of(trained, tmp_path)
    original = trained / metrics(trained)["checkpoint"]
    backup = original.read_bytes()
    damage(original)  # read by mistake, the original's file would stop the evaluation
    try:
        for ckpt in ("best", "last"):
            got = evaluate(compose_eval(copy, tmp_path / f"eval_{ckpt}", f"ckpt={ckpt}"))
            assert got["test"] == metrics(trained)["test"]
            assert got["run_dir"] == str(copy)
            assert (Path(got["run_dir"]) / got["checkpoint"]).is_file()
        assert got["checkpoint"] == "checkpoints/last.ckpt"
        written = json.loads((tmp_path / "eval_best" / "metrics.json").read_text())
        assert written["checkpoint"] == metrics(trained)["checkpoint"]  # the copy's, by its place
    finally:
        original.write_bytes(backup)


def test_an_older_metrics_json_with_an_absolute_path_reads_the_copys_file(trained, tmp_path):
    copy = copy_of(trained, tmp_path)
    results = metrics(copy)
    name = Path(results["checkpoint"]).name
    results["checkpoint"] = str(trained / "checkpoints" / name)  # as older versions wrote it
    (copy / "metrics.json").write_text(json.dumps(results))
    assert find_checkpoint(copy, "best") == copy / "checkpoints" / name


def test_a_checkpoint_is_found_by_the_name_its_folder_lists(trained, tmp_path, monkeypatch):
    """The message of a missing checkpoint lists ``checkpoints/``'s names; ``ckpt=`` one of
    them was refused, read as a path in the run's folder or the working one."""
    copy = copy_of(trained, tmp_path)
    monkeypatch.chdir(tmp_path)  # no file of that name here
    name = Path(metrics(copy)["checkpoint"]).name
    for ckpt in ("last.ckpt", name):
        assert find_checkpoint(copy, ckpt) == copy / "checkpoints" / ckpt
    assert find_checkpoint(copy, "checkpoints/last.ckpt") == copy / "checkpoints" / "last.ckpt"
    (tmp_path / "last.ckpt").write_bytes(b"")  # a path from the working folder comes first
    assert find_checkpoint(copy, "last.ckpt") == Path("last.ckpt")


def test_a_resumed_copy_tests_its_own_best_checkpoint(trained, tmp_path):
    copy = copy_of(trained, tmp_path)
    (copy / "metrics.json").unlink()  # a copy of a run that had not finished its test
    results = train(compose_train(tmp_path, JOB))  # resume=auto: no step left to train
    assert results["resumed_from"] == "checkpoints/last.ckpt"  # named inside the copy
    # the copy's own best file, not the original's
    assert results["checkpoint"] == f"checkpoints/{Path(metrics(trained)['checkpoint']).name}"
    assert results["test"] == metrics(trained)["test"]


def test_a_copy_trained_further_keeps_one_best_checkpoint_of_its_own(trained, tmp_path):
    before = {p.name: p.stat().st_mtime_ns for p in (trained / "checkpoints").iterdir()}
    copy = copy_of(trained, tmp_path)
    (copy / "metrics.json").unlink()
    longer = [*[o for o in JOB if not o.startswith("trainer.max_epochs")], "trainer.max_epochs=3"]
    results = train(compose_train(tmp_path, [*longer, "allow_changes=[trainer.max_epochs]"]))
    assert results["steps"] == 9
    best = sorted((copy / "checkpoints").glob("epoch_*.ckpt"))
    assert [p.relative_to(copy).as_posix() for p in best] == [results["checkpoint"]]
    after = {p.name: p.stat().st_mtime_ns for p in (trained / "checkpoints").iterdir()}
    assert after == before  # the original's files untouched


def test_a_damaged_metrics_json_is_one_line_and_the_training_command_writes_it_anew(
    trained, tmp_path
):
    """A metrics.json cut short (a copy that stopped): eval.py's ``ckpt=best`` and
    train.py's "this run has finished" read it, and said so with a JSONDecodeError's
    traceback. The line's way out works: without the file, the training command tests the
    run again."""
    copy = copy_of(trained, tmp_path)
    whole = (copy / "metrics.json").read_text()
    (copy / "metrics.json").write_text(whole[: len(whole) // 2])
    damaged = f"{copy / 'metrics.json'} is damaged (not valid JSON: "  # where it stops varies
    with pytest.raises(UserError, match=re.escape(damaged)):
        evaluate(compose_eval(copy, tmp_path / "eval_best", "ckpt=best"))
    with pytest.raises(UserError, match="or delete it and run the run's training command again"):
        train(compose_train(tmp_path, JOB))
    (copy / "metrics.json").unlink()
    assert train(compose_train(tmp_path, JOB))["test"] == metrics(trained)["test"]
    assert metrics(copy)["test"] == metrics(trained)["test"]
