"""One run at a time in a run directory: ``<run dir>/run.lock``.

Two trainings in one directory (the same command started twice, a sweep started again while
it still runs, a requeued SLURM job whose first run is still alive) would write the same
checkpoints, ``metrics.json`` and W&B run, and the survivor's files would mix both. So a
training holds the directory while it works: a second one is refused with one line that
names the holder (host, pid, start time).

How: an ``fcntl.flock`` on ``run.lock`` plus a JSON description of the holder in that file.
The kernel drops the flock when its process dies, however it dies, so on one host a lock
whose flock is free is stale (its run was killed) and is taken over. Another host's flock
cannot be seen from here on every file system, so its lock is trusted, unless it is the
same SLURM job (a requeued job runs again, its first run is gone) or its heartbeat (the
file's mtime, touched every :data:`HEARTBEAT_S` by the holder) is older than
:data:`FOREIGN_STALE_S`, or the user passes ``run_lock=takeover``.

Only rank 0 of a DDP job holds it: the ranks share the directory.

``train.py`` takes the lock before Hydra writes anything into the run directory
(:class:`HoldBeforeTheRun`, a Hydra callback): Hydra writes ``.hydra/`` (config,
overrides) and opens ``train.log`` before the job starts, so a second command refused
only then would already have replaced the holder's ``.hydra/`` files with its own. The
lock is held from there to the run's end, rather than checked there and taken again in
the job, so that no command can slip in between; the job's own :func:`run_dir_lock` then
finds it held by its process and passes through. A sweep started again in a directory
whose jobs still run is refused likewise, before it writes anything (its jobs' locks are
looked at, not taken: each job takes its own as it starts). Only its own jobs' directories
count: two sweeps over different parts of one fixed sweep directory (``model=a,b`` and
``model=c``, each job in ``<model>/seed_<seed>``) run side by side. The project's sweeper
knows its jobs' directories (:mod:`hydra_plugins.cloudlstm_sweeper`); under another
sweeper, any directory in use under the sweep directory refuses the sweep.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from cloudlstm.errors import UserError, file_in_the_way, out_of_space
from cloudlstm.rundir.holder import (
    DAMAGED,
    FOREIGN_STALE_S,
    alive,
    describe,
    heartbeat_time,
    live_holder,
    read_holder,
    this_process,
    with_locking_pid,
)
from cloudlstm.rundir.layout import LOCK_FILE

log = logging.getLogger(__name__)

MODES = ("auto", "takeover")
HEARTBEAT_S = 60.0
# the sweeper of conf/hydra/sweeper/reporting.yaml, which checks its jobs' directories itself
OWN_SWEEPER = "hydra_plugins.cloudlstm_sweeper.ReportingSweeper"
# where the launcher says which process is which rank (torchrun, Lightning, SLURM)
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID")


def is_rank_zero() -> bool:
    """Whether this process is rank 0, the one that owns the run directory."""
    from lightning.pytorch.utilities import rank_zero_only

    if getattr(rank_zero_only, "rank", 0) != 0:
        return False
    # Lightning's own DDP launch starts the other ranks with LOCAL_RANK set; under SLURM
    # every task has SLURM_PROCID: any non-zero value is another rank
    return all(os.environ.get(name, "0") in ("", "0") for name in RANK_VARIABLES)


def slurm_job() -> str | None:
    """This process's SLURM job (``<array job>_<task>`` or ``<job>``), None outside SLURM."""
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array:
        return f"{array}_{os.environ.get('SLURM_ARRAY_TASK_ID', '')}"
    return os.environ.get("SLURM_JOB_ID")


# the settings that name a run's and a sweep's directory, in the lines that refuse one
RUN_KEY, SWEEP_KEY = "hydra.run.dir", "hydra.sweep.dir"


# a description of a live process of this host on a file it holds no flock on
_ALIVE_WITHOUT_FLOCK = (
    "its process holds no flock on it (the directory was copied while that process trained "
    "in the original, or its pid was taken again)"
)


class RunDirHeld(UserError):
    """A run directory that a live run holds: the same command passes once that run ends."""

    rerun_may_pass = True


class RunLock:
    """The lock of one run directory, held from :meth:`acquire` to :meth:`release`."""

    def __init__(self, run_dir: str | Path, elsewhere: str = RUN_KEY) -> None:
        self.run_dir = Path(run_dir)
        self.elsewhere = elsewhere  # the key that names another directory, for a refusal
        self.path = self.run_dir / LOCK_FILE
        self._fd: int | None = None
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def _open(self) -> int:
        """The lock file's descriptor, the run directory made first (:func:`make_dir`)."""
        make_dir(self.run_dir, self.elsewhere)
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except IsADirectoryError:
            raise UserError(
                f"{self.path} is a folder, where the run keeps its lock file: remove it "
                f"(nothing of the run's is kept there), or name another folder with "
                f"{self.elsewhere}=<dir>."
            ) from None
        except OSError as err:
            raise _cannot_make(self.run_dir, self.elsewhere, err) from None

    def acquire(self, mode: str = "auto") -> None:
        """Hold the directory, or raise a UserError naming the run that holds it.

        Args:
            mode: ``auto`` (take over stale locks only) or ``takeover`` (also another host's
                lock that is not stale: the user says its run is gone).
        """
        if mode not in MODES:
            raise UserError(f"run_lock={mode} is not one of {', '.join(MODES)}.")
        fd = self._open()
        try:
            holder = self._lock(fd)
            if holder:
                self._take_over(holder, mode)
            self._write(fd)
        except BaseException:
            os.close(fd)  # closing drops the flock too
            raise
        self._fd = fd
        self._stop.clear()
        self._heartbeat = threading.Thread(target=self._beat, name="run-lock", daemon=True)
        self._heartbeat.start()

    def release(self) -> None:
        """Let the directory go: the description is emptied, then the flock dropped.

        The file stays (removing it would let a process that opened it just before lock a
        file no one else sees); an empty file is a free lock.
        """
        if self._fd is None:
            return
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        # unlocked, not only closed: a process forked during the run (by torch, a logger)
        # shares the open file, and its flock, until it ends; closing ours left the
        # directory held, with no description, after the run had finished
        with contextlib.suppress(OSError):
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def _lock(self, fd: int) -> dict[str, Any]:
        """flock the file; returns the description left in it (empty if it was free)."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirHeld(self._refusal(self._holder_of_flock())) from None
        except OSError as err:  # a file system without flock: judge by the description
            log.warning("Cannot flock %s (%s): judging its holder by pid and time.", self.path, err)
            holder = self._read()
            if holder and holder.get("host") == socket.gethostname() and alive(holder):
                raise RunDirHeld(self._refusal(holder)) from None
            return holder
        return self._read()

    def check(self, mode: str = "auto") -> None:
        """Raise the UserError :meth:`acquire` would raise, without taking the lock (the
        file is neither created nor written)."""
        if mode not in MODES:
            raise UserError(f"run_lock={mode} is not one of {', '.join(MODES)}.")
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return  # never held
        try:
            holder = self._lock(fd)
            if holder:
                self._stale_because(holder, mode)
        finally:
            os.close(fd)  # drops the flock taken to look

    def _take_over(self, holder: dict[str, Any], mode: str) -> None:
        """Decide about a lock left by a run whose flock is free (or cannot be seen)."""
        why = self._stale_because(holder, mode)
        if DAMAGED in holder:
            log.warning("Taking over %s: %s.", self.path, why)
        else:
            log.warning("Taking over the lock of %s: %s.", describe(holder), why)

    def _stale_because(self, holder: dict[str, Any], mode: str) -> str:
        """Why a lock whose flock is free (or cannot be seen) is stale; a UserError where
        its run may still be alive. A damaged description (:func:`read_holder`) names no
        run that could be: its holder wrote it whole, and a crash or a copy garbled it."""
        here = socket.gethostname()
        age = time.time() - heartbeat_time(self.path)
        if DAMAGED in holder:
            why = f"its description is damaged ({holder[DAMAGED]}) and no process held it"
        elif holder.get("host") == here:  # the kernel dropped its flock, or never held it
            why = "its process is gone" if not alive(holder) else _ALIVE_WITHOUT_FLOCK
        elif slurm_job() is not None and holder.get("slurm_job") == slurm_job():
            why = f"it is this SLURM job ({slurm_job()}), requeued"
        elif age > FOREIGN_STALE_S:
            why = f"its heartbeat is {age / 60:.0f} min old"
        elif mode == "takeover":
            why = "run_lock=takeover"
        else:
            hint = (
                f" Its heartbeat is {age:.0f} s old: it may still run on {holder.get('host')}."
                " If it does not, start again with run_lock=takeover"
                f" (or wait {FOREIGN_STALE_S / 60:.0f} min)."
            )
            raise RunDirHeld(self._refusal(holder) + hint)
        return why

    def _holder_of_flock(self) -> dict[str, Any]:
        """The description of a live holder, which writes it just after taking the flock."""
        for _ in range(20):
            holder = self._read()
            if holder:
                return with_locking_pid(self.path, holder)  # a damaged one: its flock's pid
            time.sleep(0.05)
        return {}

    def _refusal(self, holder: dict[str, Any]) -> str:
        return (
            f"Run directory {self.run_dir} is in use by {describe(holder)}: one run at a "
            f"time in a directory. Wait for it to end, or use another {self.elsewhere}."
        )

    def _read(self) -> dict[str, Any]:
        return read_holder(self.path)

    def _write(self, fd: int) -> None:
        holder = {**this_process(), "slurm_job": slurm_job()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
        os.fsync(fd)

    def _beat(self) -> None:
        """Touch the file now and then, so other hosts can tell the run is alive."""
        while not self._stop.wait(HEARTBEAT_S):
            with contextlib.suppress(OSError):
                os.utime(self.path)


def training_holder(run_dir: Path) -> str | None:
    """The run that holds ``run_dir`` now (host, pid, start), as its ``run.lock`` describes
    it; None where none does (:func:`~cloudlstm.rundir.holder.live_holder`: read alone,
    neither locked nor written, as an evaluation may read a run it cannot write, and a
    flock taken to look would refuse a training starting that moment)."""
    return live_holder(Path(run_dir) / LOCK_FILE)


# the directories this process holds beyond a block (hold(): train.py's, from before Hydra
# writes into them), by real path
_HELD: dict[Path, RunLock] = {}


def _key(run_dir: str | Path) -> Path:
    return Path(os.path.realpath(run_dir))


def hold(run_dir: str | Path, mode: str = "auto") -> None:
    """Hold ``run_dir`` until :func:`let_go` or the process's end (rank 0 only); a
    :func:`run_dir_lock` of it in this process meanwhile passes through."""
    if not is_rank_zero() or _key(run_dir) in _HELD:
        return
    lock = RunLock(run_dir)
    lock.acquire(mode)
    atexit.unregister(let_go)  # once: an exit before the run's end (sys.exit) releases too
    atexit.register(let_go)
    _HELD[_key(run_dir)] = lock


def let_go() -> None:
    """Release the directories :func:`hold` holds."""
    while _HELD:
        _HELD.popitem()[1].release()


@contextlib.contextmanager
def run_dir_lock(run_dir: str | Path, mode: str = "auto") -> Iterator[None]:
    """Hold ``run_dir`` for the block (rank 0 only; other ranks pass through, and so
    does a directory this process already holds: :func:`hold`)."""
    if not is_rank_zero() or _key(run_dir) in _HELD:
        yield
        return
    with held(run_dir, mode):
        yield


@contextlib.contextmanager
def held(run_dir: str | Path, mode: str = "auto", setting: str = RUN_KEY) -> Iterator[None]:
    """Hold ``run_dir`` for the block, whatever this process's rank: an Optuna search its
    sweep directory (no rank check, whose Lightning import a search refused before its first
    trial does without); a refusal names ``setting`` as the way to another directory."""
    lock = RunLock(run_dir, setting)
    lock.acquire(mode)
    try:
        yield
    finally:
        lock.release()


def owns_run_dir(train: Any) -> Any:
    """Decorate ``train(cfg)``: it runs holding ``cfg.paths.output_dir`` (``run_lock=`` mode)."""

    @functools.wraps(train)
    def wrapper(cfg: Any, *args: Any, **kwargs: Any) -> Any:
        with run_dir_lock(cfg.paths.output_dir, str(cfg.get("run_lock") or "auto")):
            return train(cfg, *args, **kwargs)

    return wrapper


class HoldBeforeTheRun(Callback):
    """``hydra.callbacks.run_lock`` of ``train.py``: the run directory's lock, taken before
    Hydra writes ``.hydra/`` and ``train.log`` into it, and held to the run's end; a sweep
    whose jobs' directories are in use is refused before it writes anything (module
    docstring)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        run_dir = os.path.abspath(str(config.hydra.run.dir))
        # Hydra turns a callback's exception into a warning and runs the job: a refusal
        # ends the program here, as one line
        _or_exit(lambda: hold(run_dir, _mode(config)))

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        let_go()

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if str(config.hydra.sweeper.get("_target_")) == OWN_SWEEPER:
            return  # it refuses its own jobs' directories in use, knowing which they are
        sweep_dir = os.path.abspath(str(config.hydra.sweep.dir))
        for refusal in held_run_dirs(sweep_dir, _mode(config)).values():
            sys.exit(refusal)


def make_dir(path: Path, setting: str) -> None:
    """Make the folder ``path`` (and its parents), or raise one line naming it and
    ``setting``: a file in its place, no permission, a read-only or a full disk."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _cannot_make(path, setting, err) from None


def _cannot_make(path: Path, setting: str, err: OSError) -> UserError:
    full = out_of_space(err)
    if full is not None:
        return full
    blocker = file_in_the_way(path)
    why = (
        f"{blocker} is a file, not a folder"
        if blocker is not None
        else f"{err.strerror or err} ({err.filename or path})"
    )
    # a folder that is there failed for a file in it (run.lock): a read-only run, say
    verb = "write in" if path.is_dir() else "make"
    return UserError(
        f"Cannot {verb} the directory {path}: {why}. Name a folder you can write with "
        f"{setting}=<dir>."
    )


class MakeTheRunDirectory(Callback):
    """``hydra.callbacks.run_dir`` of every program (conf/hydra/default.yaml, predict.yaml):
    the run or sweep directory made before Hydra makes it, so that one that cannot be made (a
    file in its place, a read-only place, no room) is one line naming it and its setting
    instead of Hydra's traceback."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _or_exit(lambda: make_dir(Path(os.path.abspath(str(config.hydra.run.dir))), RUN_KEY))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(os.path.abspath(str(config.hydra.sweep.dir)))
        if not sweep_dir.exists():
            SWEEP_DIRS_MADE.append(sweep_dir)
        _or_exit(lambda: make_dir(sweep_dir, SWEEP_KEY))


# The sweep directories this process made: one whose jobs never began (an override that
# names no setting) is removed with the sweep's refusal (cloudlstm.cli.scripts).
SWEEP_DIRS_MADE: list[Path] = []


def held_run_dirs(sweep_dir: str | Path, mode: str) -> dict[str, str]:
    """The run directories under ``sweep_dir`` that a live run holds (absolute path -> the
    line refusing them, :meth:`RunLock.check`'s), found without taking or writing a lock."""
    root = Path(os.path.abspath(sweep_dir))
    held: dict[str, str] = {}
    for path in sorted(root.rglob(LOCK_FILE)) if root.is_dir() else []:
        try:
            RunLock(path.parent, SWEEP_KEY).check(mode)
        except UserError as err:
            held[str(path.parent)] = str(err)
    return held


def _mode(config: DictConfig) -> str:
    return str(config.get("run_lock") or "auto")


def _or_exit(check: Any) -> None:
    try:
        check()
    except UserError as err:
        sys.exit(str(err))
