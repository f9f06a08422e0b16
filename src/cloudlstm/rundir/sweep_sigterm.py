"""SIGTERM sent to the parent of a joblib sweep alone (``kill <pid>``, a container or job
manager that signals one process): passed on to its jobs, which stop as a run does.

The joblib launcher runs each job in a worker process of its own. Left to the default
disposition, the parent died at once, without a word; its workers went on, each training
its job to the end (or waiting forever for a parent that no longer reads its result). Here
instead (the default sweeper, :mod:`hydra_plugins.cloudlstm_sweeper`, and the Optuna
sweeper, :mod:`hydra_plugins.cloudlstm_optuna`, with ``hydra/launcher=joblib``:
:func:`joblib_sweep_stop`):

* the parent, on SIGTERM (:class:`PassSigtermOn`), writes :data:`STOP_FILE` into the sweep
  directory, then sends SIGTERM to each job that runs: the processes, its own children,
  that hold a run directory's lock under the sweep directory (:mod:`cloudlstm.rundir.lock`);
* a running job saves ``last.ckpt`` at its step and stops with its line
  (:mod:`cloudlstm.rundir.preemption`), as a run does;
* a job that had not started training (waiting for a worker, or loading its data) stops
  before it trains (:func:`stopped_before_training`): it sees :data:`STOP_FILE`, or the
  signal, which its worker process notes from the worker's own start
  (:func:`workers_note_signals`, :class:`NoteSigtermInJobs`) rather than die of it, which
  would break the worker pool and end the others' jobs at once;
* the parent waits for its jobs, prints a line per unfinished job and the command that
  continues them (the same command: finished jobs return their results at once, stopped
  ones resume from their checkpoints) and exits with 143.

Ctrl-C in the terminal reaches the parent and every job (one process group): the parent
then acts as on SIGTERM (the file, SIGTERM to its running jobs, which save and stop, the
report) and exits with 130; the jobs note it as they note SIGTERM. A second Ctrl-C stops
the parent at once. SIGTERM to the whole group (``timeout``, a batch system's time limit)
goes the same way, with 143. A worker signalled in its first moments, before its
initializer runs, holds the signal until then: it starts with SIGTERM and SIGINT blocked
(:func:`workers_note_signals`), as CPython's resource tracker does. A worker that dies all
the same (SIGKILL) breaks the pool: the sweeper then names each unfinished job
(:func:`~cloudlstm.cli.sweep_jobs.pool_broken_report`).

Why a file beside the signal: a job that takes its lock after the parent looked for the
running jobs was not signalled; it takes its lock first, then looks for the file, which
the parent wrote before looking, so no job is missed. The file is removed when the sweep
ends, and when a sweep starts in the directory.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from cloudlstm.rundir.layout import LOCK_FILE, checkpoint_step, newest_checkpoint
from cloudlstm.rundir.stops import CTRL_C_EXIT_CODE, EXIT_CODE, RunInterrupted, stop_error
from cloudlstm.rundir.worker_signals import NOTED_SIGNALS, note_signals, noted

log = logging.getLogger(__name__)
# where Hydra's basic launcher is defined (:func:`is_basic_launcher`)
BASIC_LAUNCHER_MODULE = "hydra._internal.core_plugins.basic_launcher"

STOP_FILE = "sweep.sigterm"  # in the sweep directory: the sweep got SIGTERM or Ctrl-C


def is_basic_launcher(launcher: Any) -> bool:
    """Whether ``launcher`` is Hydra's basic launcher (or built on it), which runs a sweep's
    jobs in this process. Told by the class's module and name, not ``isinstance``: Hydra's
    plugin scan imports its core plugins' modules again, so the class a launcher was made
    from need not be the one an earlier import bound."""
    return any(
        (cls.__module__, cls.__qualname__) == (BASIC_LAUNCHER_MODULE, "BasicLauncher")
        for cls in type(launcher).__mro__
    )


def is_joblib(launcher: Any) -> bool:
    """Whether a launcher (its config's ``_target_``, or the plugin) is joblib's."""
    target = launcher.get("_target_", "") if isinstance(launcher, DictConfig) else launcher
    name = target if isinstance(target, str) else type(target).__module__
    return "joblib" in str(name)


class PassSigtermOn:
    """For the block (the sweep, in its parent process): SIGTERM or Ctrl-C passed on to the
    running jobs as SIGTERM, and :data:`STOP_FILE` written (module docstring).
    ``received``: one came; ``by``: which ("SIGTERM" or "Ctrl-C")."""

    def __init__(self, sweep_dir: str | Path) -> None:
        self.sweep_dir = Path(sweep_dir)
        self.received = False
        self.by = "SIGTERM"
        self._previous: Any = None
        self._previous_sigint: Any = None

    @property
    def exit_code(self) -> int:
        """The status the sweep leaves with once stopped: the signal's, as a shell reports."""
        return CTRL_C_EXIT_CODE if self.by == "Ctrl-C" else EXIT_CODE

    def __enter__(self) -> PassSigtermOn:
        (self.sweep_dir / STOP_FILE).unlink(missing_ok=True)  # an earlier sweep's
        self._previous = signal.signal(signal.SIGTERM, self._pass_on)
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # else it stays ignored
            self._previous_sigint = signal.signal(signal.SIGINT, self._pass_on)
        return self

    def __exit__(self, *_: object) -> None:
        signal.signal(signal.SIGTERM, self._previous)
        if self._previous_sigint is not None:
            signal.signal(signal.SIGINT, self._previous_sigint)
        (self.sweep_dir / STOP_FILE).unlink(missing_ok=True)

    def _pass_on(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            if self.by == "Ctrl-C":  # the second: at once
                signal.signal(signal.SIGINT, self._previous_sigint)
                raise KeyboardInterrupt
            self.by = "Ctrl-C"
        self.received = True
        with contextlib.suppress(OSError):  # the jobs are signalled all the same
            self.sweep_dir.mkdir(parents=True, exist_ok=True)
            (self.sweep_dir / STOP_FILE).write_text(self.by)  # named in later jobs' lines
        jobs = running_jobs(self.sweep_dir)
        for pid in jobs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        log.warning(
            "%s: passed on to the running jobs (pids %s), which save and stop; the jobs not "
            "started will not train.", self.by, ", ".join(map(str, jobs)) or "none"
        )  # fmt: skip


def running_jobs(sweep_dir: Path) -> list[int]:
    """The pids of this process's children that hold a run directory under ``sweep_dir``."""
    pids = []
    for lock in sweep_dir.rglob(LOCK_FILE):
        try:
            holder = json.loads(lock.read_text() or "{}")
            pid = int(holder.get("pid"))
        except (OSError, ValueError, TypeError):
            continue  # free, being written, or another kind of file
        if holder.get("host") == socket.gethostname() and _parent(pid) == os.getpid():
            pids.append(pid)
    return sorted(set(pids))


def _parent(pid: int) -> int | None:
    """The parent pid of ``pid`` (Linux: ``/proc``; elsewhere the pid is trusted to be a
    job's, which holds a lock: this process's); None where it is gone."""
    if not Path("/proc/self/stat").exists():
        return os.getpid()
    try:
        # "pid (name) state ppid ...": the name may hold spaces, so split after its ")"
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


class NoteSigtermInJobs(Callback):
    """``hydra.callbacks.sweep_sigterm`` of ``train.py``: in a job of a joblib sweep, SIGTERM
    and Ctrl-C are noted (:mod:`~cloudlstm.rundir.worker_signals`; Lightning's own handler,
    installed when training starts, calls that one too), so that a job signalled before it
    trains stops there instead of dying with its worker. The worker notes them from its own
    start (:func:`workers_note_signals`), and this callback from the job's start, for a
    pool started without that initializer. A job's notes end with it: a signal during one job
    is not the next one's (a sweep that got SIGTERM tells its later jobs by
    :data:`STOP_FILE`); one before the worker's first job, or between two, is the next's."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if is_joblib(config.hydra.get("launcher") or {}):
            note_signals()

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if is_joblib(config.hydra.get("launcher") or {}):
            noted.clear()


@contextlib.contextmanager
def workers_note_signals() -> Iterator[None]:
    """For the block (a joblib sweep, in its parent process): the worker processes that
    joblib's ``loky`` backend starts note SIGTERM and Ctrl-C from their start
    (:func:`~cloudlstm.rundir.worker_signals.note_signals` as loky's initializer), not
    only once their job has started: a worker signalled while it imports its job would
    die, and take the pool with it. Hydra's joblib launcher names the backend ``loky``, so
    the name is bound to a loky backend with that initializer, and bound back after.

    Before its initializer runs, a new worker (Python starting, loky unpickling the
    initializer) would still die of the signal; so each starts with the signals blocked,
    held pending until its initializer installs the handler and unblocks them
    (:func:`spawned_holding_signals`)."""
    from joblib import register_parallel_backend
    from joblib.externals.loky.backend import fork_exec
    from joblib.parallel import BACKENDS

    loky, spawn = BACKENDS["loky"], fork_exec.fork_exec
    register_parallel_backend("loky", functools.partial(loky, initializer=note_signals))
    fork_exec.fork_exec = spawned_holding_signals(spawn)  # loky's workers start through it
    try:
        yield
    finally:
        BACKENDS["loky"], fork_exec.fork_exec = loky, spawn


def spawned_holding_signals(spawn: Callable[..., int]) -> Callable[..., int]:
    """``spawn`` (a function that forks and executes a process) with SIGTERM and SIGINT
    blocked in the calling thread while it runs: the new process inherits the blocked mask
    across fork and exec, so a signal sent to it before it can handle one is held pending,
    not fatal. The caller's mask is restored at once; a signal that came meanwhile is then
    delivered to it."""

    @functools.wraps(spawn)
    def holding(*args: Any, **kwargs: Any) -> int:
        before = signal.pthread_sigmask(signal.SIG_BLOCK, NOTED_SIGNALS)
        try:
            return spawn(*args, **kwargs)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)

    return holding


@contextlib.contextmanager
def joblib_sweep_stop(sweep_dir: str | Path, launcher: Any) -> Iterator[PassSigtermOn | None]:
    """For the block (a sweep, in its parent process), where ``launcher`` (the plugin, or its
    config) is joblib's: SIGTERM and Ctrl-C passed on to the running jobs
    (:class:`PassSigtermOn`, which it yields), and noted by the worker processes from their
    start (:func:`workers_note_signals`). Another launcher's jobs run in this process, or are
    the batch system's to signal: nothing is done, and it yields None."""
    if not is_joblib(launcher):
        yield None
        return
    with PassSigtermOn(sweep_dir) as stop, workers_note_signals():
        yield stop


def _stop_signal(stop: Path) -> str:
    """The signal the sweep got, as its :data:`STOP_FILE` names it (SIGTERM by default)."""
    with contextlib.suppress(OSError):
        if stop.read_text().strip() == "Ctrl-C":
            return "Ctrl-C"
    return "SIGTERM"


def stopped_before_training(cfg: DictConfig, run_dir: Path) -> RunInterrupted | None:
    """The error that stops a job of a sweep that got SIGTERM before it trains (its line
    logged), or None: no such sweep, or no signal."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    if not is_joblib(HydraConfig.get().get("launcher") or {}):
        return None
    stop = Path(str(HydraConfig.get().sweep.dir)) / STOP_FILE
    if not (noted or stop.is_file()):
        return None
    return before_training_stop(
        cfg, run_dir, "Ctrl-C" if signal.SIGINT in noted else _stop_signal(stop)
    )


def before_training_stop(cfg: DictConfig, run_dir: Path, by: str) -> RunInterrupted:
    """The error of a run (or a sweep's job) stopped by ``by`` ("SIGTERM" or "Ctrl-C") before
    it trained, its line logged: the run directory's newest checkpoint, if any, and the
    command that starts or continues it."""
    newest = newest_checkpoint(run_dir)
    state, goes_on = "no checkpoint yet", "starts it"
    if newest is not None:
        state = f"its newest checkpoint is {newest}, of step {checkpoint_step(newest)}"
        goes_on = "continues from it"
    error = stop_error(f"stopped by {by} before training ({state}).", run_dir, cfg, goes_on, by)
    log.error(str(error))
    return error
