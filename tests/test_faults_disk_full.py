"""A write that finds no room (a full disk, a quota, a file size limit) stops the run with
one line naming the file; what was saved before stays intact, and the same command resumes
once there is room. The limit is ``RLIMIT_FSIZE`` (``ulimit -f``) in the child process, with
SIGXFSZ ignored so that the write fails with EFBIG instead of killing the process."""

from __future__ import annotations

import errno
import json
import re
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cloudlstm.errors import OutOfSpaceError, one_line_errors
from cloudlstm.rundir.checkpoints import check_checkpoint
from tests.conftest import ROOT, TINY, subprocess_env
from tests.test_compare import write_run


def file_size_limit(limit: int) -> Callable[[], None]:
    """``preexec_fn``: files of at most ``limit`` bytes in the child, EFBIG past it."""

    def set_limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))

    return set_limit


def the_error(proc: subprocess.CompletedProcess) -> str:
    """The run's one error line; no traceback."""
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "OSError" not in proc.stderr, proc.stderr[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("Cannot write")]
    return line


@pytest.mark.slow
def test_a_checkpoint_too_large_for_the_limit_is_one_line_and_the_run_resumes(tmp_path):
    run = tmp_path / "run"
    command = [
        sys.executable,
        "train.py",
        *TINY,
        "logger=none",
        "report.figures=false",
        f"hydra.run.dir={run}",
        f"paths.data_dir={tmp_path / 'data'}",
    ]

    def train_py(*extra: str, limit: int | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*command, *extra],
            cwd=ROOT,
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=600,
            preexec_fn=file_size_limit(limit) if limit else None,
        )

    # checkpoints at the validation of step 3, then a kill: a run to resume
    killed = train_py(
        "+callbacks.kill._target_=tests.kill_callback.KillAtStep", "+callbacks.kill.step=4"
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    saved = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert saved == [
        "epoch_000-step_000003.ckpt",
        "epoch_000-step_000003.ckpt.checksum",
        "last.ckpt",
        "last.ckpt.checksum",
    ]

    # resumed with files of at most 64 kB (a checkpoint is ~200 kB): its next save fails
    again = ["allow_changes=[callbacks.kill]"]  # the command without the kill
    full = train_py(*again, limit=64_000)
    line = the_error(full)
    assert line.startswith(f"Cannot write {run / 'checkpoints'}/")
    assert "file size limit of 64.0 kB (`ulimit -f`)" in line
    assert line.endswith(
        "then run the same command again; training resumes from its last checkpoint."
    )
    # what was saved before is there, whole and verified; nothing half-written beside it
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == saved
    assert check_checkpoint(run / "checkpoints" / "last.ckpt")["global_step"] == 3
    check_checkpoint(run / "checkpoints" / "epoch_000-step_000003.ckpt")
    assert not (run / "metrics.json").exists()

    # room again: the same command resumes from step 3 and finishes
    done = train_py(*again)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((run / "metrics.json").read_text())
    assert results["resumed_from"] == "checkpoints/last.ckpt"
    assert results["steps"] == 6


WRITE_METRICS = """
import resource, signal, sys
from pathlib import Path
from cloudlstm.rundir.layout import write_metrics
from cloudlstm.errors import OutOfSpaceError
run = Path(sys.argv[1])
write_metrics(run, {"test": "small"})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (2000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    write_metrics(run, {"test": "x" * 5000})
except OutOfSpaceError as err:
    print(err)
"""


def run_script(script: str, folder: Path) -> subprocess.CompletedProcess:
    """``script`` in a fresh Python process (its file-size limit its own), given ``folder``."""
    return subprocess.run(
        [sys.executable, "-c", script, str(folder)],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def limited_line(script: str, folder: Path) -> str:
    """What ``script`` printed of the write its file-size limit refused (it exits 0)."""
    done = run_script(script, folder)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_metrics_json_too_large_for_the_limit_is_named_and_the_old_one_kept(tmp_path):
    line = limited_line(WRITE_METRICS, tmp_path)
    assert line.startswith(
        f"Cannot write {tmp_path / 'metrics.json'}: it would exceed this process's file size "
        "limit of 2.0 kB"
    ), line
    assert json.loads((tmp_path / "metrics.json").read_text()) == {"test": "small"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]  # no part left


SAVE_OVER = """
import resource, signal, sys, torch
from pathlib import Path
from cloudlstm.errors import OutOfSpaceError
from cloudlstm.rundir.checkpoint_io import ChecksummedCheckpointIO
path = Path(sys.argv[1]) / "last.ckpt"
io = ChecksummedCheckpointIO()
io.save_checkpoint({"state_dict": {"w": torch.zeros(10)}, "global_step": 3}, path)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    io.save_checkpoint({"state_dict": {"w": torch.zeros(100_000)}, "global_step": 6}, path)
except OutOfSpaceError as err:
    print(err)
"""


def test_a_checkpoint_saved_over_keeps_the_old_file_and_its_checksum(tmp_path):
    line = limited_line(SAVE_OVER, tmp_path)
    assert line.startswith(f"Cannot write {tmp_path / 'last.ckpt'}: it would exceed")
    assert "The checkpoints saved before are intact" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "last.ckpt.checksum"]
    assert check_checkpoint(tmp_path / "last.ckpt")["global_step"] == 3  # checksum verified


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A folder on a file system of its own, of 1 MiB (a tmpfs): a disk that fills up, apart
    from the one ``$TMPDIR`` is on. Skipped where this process may not mount one."""
    folder = tmp_path / "small_disk"
    folder.mkdir()
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mount.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


SAVE_OVER_ON_A_FULL_DISK = """
import sys, torch
from pathlib import Path
from cloudlstm.errors import OutOfSpaceError
from cloudlstm.rundir.checkpoint_io import ChecksummedCheckpointIO
path = Path(sys.argv[1]) / "checkpoints" / "last.ckpt"
io = ChecksummedCheckpointIO()
io.save_checkpoint({"state_dict": {"w": torch.zeros(10)}, "global_step": 3}, path)
try:  # 2 MB, on a disk of 1 MiB; $TMPDIR, elsewhere, has room
    io.save_checkpoint({"state_dict": {"w": torch.zeros(500_000)}, "global_step": 6}, path)
except OutOfSpaceError as err:
    print(err)
"""


def test_a_checkpoint_saved_over_on_a_full_disk_keeps_the_old_file(small_disk):
    """Lightning stages a checkpoint in ``$TMPDIR`` and moves it: from another file system,
    a copy, which the full disk cut short, leaving part of a file at ``last.ckpt``."""
    line = limited_line(SAVE_OVER_ON_A_FULL_DISK, small_disk)
    folder = small_disk / "checkpoints"
    assert line.startswith(f"Cannot write {folder / 'last.ckpt'}: the disk is full")
    assert sorted(p.name for p in folder.iterdir()) == ["last.ckpt", "last.ckpt.checksum"]
    assert check_checkpoint(folder / "last.ckpt")["global_step"] == 3  # whole, verified


def test_a_disk_full_before_the_run_begins_is_one_line(small_disk, tmp_path):
    """Hydra writes its .hydra/ configs before the job: their write on a full disk was a
    traceback of 38 lines."""
    (small_disk / "filler").write_bytes(b"\0" * (1024 * 1024 - 4096))  # the disk, filled
    run = small_disk / "run"
    done = subprocess.run(
        [sys.executable, "train.py", *TINY, "logger=none", f"hydra.run.dir={run}",
         f"paths.data_dir={tmp_path / 'data'}"],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    line = the_error(done)
    assert line.startswith(f"Cannot write {run / '.hydra' / 'config.yaml'}: the disk is full")


SAVE_WITHOUT_TMPDIR = """
import sys, tempfile, torch
from pathlib import Path
from cloudlstm.rundir.checkpoint_io import ChecksummedCheckpointIO
tempfile.tempdir = sys.argv[1] + "/no_such_folder"  # $TMPDIR gone, or full
checkpoint = {"state_dict": {"w": torch.zeros(10)}, "global_step": 3}
ChecksummedCheckpointIO().save_checkpoint(checkpoint, Path(sys.argv[1]) / "last.ckpt")
"""


def test_a_checkpoint_is_written_beside_its_file_not_in_tmpdir(tmp_path):
    """A full ``$TMPDIR`` stopped a save as if the run's own disk were full."""
    limited_line(SAVE_WITHOUT_TMPDIR, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "last.ckpt.checksum"]
    assert check_checkpoint(tmp_path / "last.ckpt")["global_step"] == 3


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_anywhere_is_one_line_naming_the_file(tmp_path, code):
    target = tmp_path / "cache" / "values.npy"
    with pytest.raises(OutOfSpaceError) as err, one_line_errors():  # as the programs run
        raise OSError(code, "No room", str(target))
    message = str(err.value)
    assert message.startswith(f"Cannot write {target}: ")
    assert " free in " in message and message.endswith("then run the same command again.")


def test_other_os_errors_keep_their_traceback():
    with pytest.raises(PermissionError), one_line_errors():
        raise PermissionError(errno.EACCES, "Permission denied", "/root/x")


SAVE_PNG = """
import resource, signal, sys
from pathlib import Path
import numpy as np
from cloudlstm.viz._common import new_figure, save_png
from cloudlstm.errors import OutOfSpaceError
path = Path(sys.argv[1]) / "figures" / "map.png"
save_png(new_figure(1, 1), path)  # an earlier figure, small
fig = new_figure(6, 4)
fig.add_subplot().imshow(np.random.default_rng(0).random((200, 200)))  # ~100 kB as PNG
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (8000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    save_png(fig, path)
except OutOfSpaceError as err:
    print(err)
"""


def test_a_figure_without_room_is_one_line_naming_it_and_leaves_the_earlier_one(tmp_path):
    """matplotlib's failed write named no file ('Cannot write a file'), and left a PNG cut
    short in place of the earlier one."""
    line = limited_line(SAVE_PNG, tmp_path)
    figure = tmp_path / "figures" / "map.png"
    assert line.startswith(f"Cannot write {figure}: it would exceed"), line
    assert figure.read_bytes().startswith(b"\x89PNG") and figure.stat().st_size < 8000
    assert [p.name for p in figure.parent.iterdir()] == ["map.png"]  # no part left


@pytest.mark.parametrize("output", ["--html", "--plot"])
def test_a_comparison_without_room_is_one_line_and_leaves_no_part(tmp_path, output):
    """compare's page and figures: one line and status 2 (a figure's was a traceback), the
    earlier page kept whole (it was cut short)."""
    for seed in range(2):
        write_run(tmp_path / "runs" / f"seed_{seed}", 1.0 + seed, seed=seed)
    target = tmp_path / ("page.html" if output == "--html" else "figures")
    if output == "--html":
        target.write_text("<html>earlier</html>")
    done = subprocess.run(
        [sys.executable, "-m", "cloudlstm.cli.compare", str(tmp_path / "runs"), output,
         str(target)],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=120,
        preexec_fn=file_size_limit(4000),
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = [line for line in done.stderr.splitlines() if "Cannot write" in line]
    assert line.startswith(f"compare: Cannot write {target}") and "file size limit" in line
    if output == "--html":
        assert target.read_text() == "<html>earlier</html>"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html", "runs"]
    else:
        assert list(target.iterdir()) == []


@pytest.mark.slow
def test_saved_predictions_without_room_are_one_line_naming_the_file(tmp_path):
    """eval.py module.save_predictions=true: the forecasts' file is named, and nothing of
    the evaluation is left."""
    run = tmp_path / "run"
    common = {"cwd": ROOT, "env": subprocess_env(), "capture_output": True, "text": True}
    trained = subprocess.run(
        [sys.executable, "train.py", *TINY, "logger=none", "report.figures=false",
         f"hydra.run.dir={run}", f"paths.data_dir={tmp_path / 'data'}"],
        timeout=600, **common,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    full = subprocess.run(
        [sys.executable, "eval.py", f"run={run}", "module.save_predictions=true",
         "report.figures=false"],
        timeout=600, preexec_fn=file_size_limit(6000), **common,
    )  # fmt: skip
    line = the_error(full)
    named = re.escape(str(run / "eval"))
    assert re.match(rf"Cannot write {named}/[\d_-]+/predictions\.npz: it would exceed", line)
    # an evaluation that wrote nothing else leaves no folder for compare to list
    assert not (run / "eval").exists()


DOWNLOAD = """
import resource, signal, sys
from pathlib import Path
from cloudlstm.data.sources.download import download_and_extract
from cloudlstm.errors import OutOfSpaceError
folder = Path(sys.argv[1])
(folder / "big.zip").write_bytes(b"x" * 50_000)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    download_and_extract((folder / "big.zip").as_uri(), folder / "out")
except OutOfSpaceError as err:
    print(err)
"""


def test_a_download_without_room_says_so_and_leaves_no_part(tmp_path):
    """Not 'could not download: check the address and your connection'."""
    line = limited_line(DOWNLOAD, tmp_path)
    assert line.startswith(
        f"Cannot write {tmp_path / 'out' / 'big.zip'}: it would exceed this process's file "
        "size limit of"
    ), line
    assert list((tmp_path / "out").iterdir()) == []  # no .part file, no marker


@pytest.mark.slow  # a run of two processes: ~1 min on 2 CPU cores
def test_a_full_disk_under_ddp_is_one_line_per_process(tmp_path):
    """Process 0 writes the checkpoints: its line names the file; process 1, whose
    collective operation then lost its peer, says so in one line instead of gloo's
    traceback."""
    proc = subprocess.run(
        [
            sys.executable,
            "train.py",
            *TINY,
            "trainer=ddp_cpu",
            "trainer.max_epochs=1",
            "logger=none",
            "torch_threads=1",
            f"hydra.run.dir={tmp_path / 'run'}",
            f"paths.data_dir={tmp_path / 'data'}",
        ],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=file_size_limit(64_000),  # a checkpoint is ~200 kB
    )
    assert the_error(proc).startswith(f"Cannot write {tmp_path / 'run' / 'checkpoints'}/")
    (lost,) = [line for line in proc.stderr.splitlines() if line.startswith("DDP process")]
    assert lost.startswith("DDP process 1 of 2 stopped: another process of the run ended")
    assert "Error executing job" not in proc.stderr
