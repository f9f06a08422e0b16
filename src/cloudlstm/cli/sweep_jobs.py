"""How a sweep names its jobs that did not finish: one line per job, then what to do (also
where joblib's pool of workers broke); how a sweep whose job a signal stopped in this
process (the basic launcher's) ends: the comparison, then its lines; and the joblib
launcher's settings, checked before a job runs.

Shared by the default sweeper (``hydra_plugins.cloudlstm_sweeper``: jobs run here or by
joblib), the Optuna sweeper and the SLURM launcher (``hydra_plugins.cloudlstm_launchers``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.utils import filter_overrides

from cloudlstm.errors import UserError
from cloudlstm.rundir.stops import CTRL_C_EXIT_CODE, EXIT_CODE
from cloudlstm.rundir.sweep_sigterm import is_basic_launcher

if TYPE_CHECKING:
    from cloudlstm.rundir.sweep_sigterm import PassSigtermOn

log = logging.getLogger(__name__)

# joblib's hints for choosing a backend (joblib.Parallel's prefer and require)
JOBLIB_HINTS = {"prefer": ("processes", "threads"), "require": ("sharedmem",)}
# Hydra's format of a job's log file (hydra/job_logging/default.yaml, "simple")
_LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


class UnfinishedJobsError(UserError):
    """A launcher's report of the jobs of its batch that did not finish (a line each), raised
    once every job of the batch has ended: the others have written their results, which the
    sweep still compares (``hydra/launcher=slurm``, read by the default sweeper). It keeps
    the report's parts, for a sweep that says otherwise how to go on (the Optuna search):
    the ``lines`` of the jobs, how many the batch had (``total``), and each one's error
    (None where its own code raised none)."""

    def __init__(
        self,
        report: str,
        lines: Sequence[str] = (),
        total: int = 0,
        errors: Sequence[BaseException | None] = (),
    ) -> None:
        super().__init__(report)
        self.lines, self.total, self.errors = list(lines), total, list(errors)


def check_joblib_launcher(launcher: Mapping[str, Any]) -> None:
    """Refuse a setting of ``hydra/launcher=joblib`` that joblib would refuse with a
    traceback once the sweep has started: ``n_jobs=0``, a backend it does not have, or a
    ``prefer`` or ``require`` it does not know.

    Raises:
        UserError: names the setting and what to give.
    """
    from joblib.parallel import BACKENDS

    if launcher.get("n_jobs") == 0:
        raise UserError(
            "hydra.launcher.n_jobs=0: give how many jobs run at once, >= 1 (-1: one per "
            "CPU, -2: all but one), e.g. hydra.launcher.n_jobs=2."
        )
    backend = launcher.get("backend")
    if backend is not None and backend not in BACKENDS:
        raise UserError(
            f"hydra.launcher.backend={backend}: joblib's backends are "
            f"{', '.join(sorted(BACKENDS))} (null: joblib chooses)."
        )
    for key, known in JOBLIB_HINTS.items():
        value = launcher.get(key)
        if value is not None and value not in known:
            raise UserError(f"hydra.launcher.{key}={value}: use {' or '.join(known)}, or null.")


def own_overrides(overrides: Sequence[str], shared: set[str]) -> str:
    """A job's overrides less those every job of the sweep has: what tells it apart."""
    own = [o for o in filter_overrides(overrides) if o not in shared]
    return " ".join(own) or "the sweep's overrides"


def shared_overrides(job_overrides: Sequence[Sequence[str]]) -> set[str]:
    """The overrides every job of the sweep has."""
    return set.intersection(*(set(o) for o in job_overrides)) if job_overrides else set()


def first_line(err: BaseException) -> str:
    """An error's first line: its message's, or its type where it has none."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def refused_as_given(errors: Sequence[BaseException | None]) -> bool:
    """Whether each of ``errors`` is a refusal of its job's settings that the same command
    would meet again (:attr:`~cloudlstm.errors.UserError.rerun_may_pass`)."""
    return bool(errors) and all(
        isinstance(err, UserError) and not err.rerun_may_pass for err in errors
    )


def unfinished_report(
    lines: Sequence[str],
    total: int,
    sweep_dir: str,
    what: str,
    errors: Sequence[BaseException | None] = (),
    again: str | None = None,
) -> str:
    """``<n> of <total> jobs of the sweep <what>:``, a line per job, and how to go on:
    ``again``, or by default how to run them again: the same command, unless each job's
    ``errors`` is a refusal that a rerun would meet again (:func:`refused_as_given`): of its
    settings, or of a file of its run (a damaged metrics.json), so "refused", not "its
    settings"."""
    if again is None:
        again = (
            "Each job was refused as given: mend what its line names (the same command "
            "would be refused again)."
            if refused_as_given(errors)
            else f"Start the same command with hydra.sweep.dir={sweep_dir} to run them again "
            "(finished jobs return their results at once)."
        )
    jobs = "\n  ".join(lines)
    return f"{len(lines)} of {total} jobs of the sweep {what}:\n  {jobs}\n{again}"


def stopped_in_this_process(err: BaseException, launcher: Any) -> str | None:
    """The signal ("SIGTERM", "Ctrl-C") that stopped a job the basic launcher ran in this
    process, ``err`` the exit that the job raised with the signal's status after its line
    (:func:`cloudlstm.cli.scripts._train`); None for any other error, or another launcher
    (whose jobs run in processes of their own)."""
    here = is_basic_launcher(launcher) and isinstance(err, SystemExit)
    if not (here and isinstance(err.code, int)):
        return None
    return {CTRL_C_EXIT_CODE: "Ctrl-C", EXIT_CODE: "SIGTERM"}.get(err.code)


def stop_report(stopped: str, sweep_dir: str, go_on: str) -> str:
    """The last lines of a sweep (or search) that a signal stopped: what ``stopped``, then
    that the same command in its sweep directory will ``go_on``."""
    return f"{stopped}\nStart the same command with hydra.sweep.dir={sweep_dir} to {go_on}."


def compared_then_stopped(compare: Callable[[], None], report: str, by: str) -> SystemExit:
    """What ends a sweep that ``by`` ("SIGTERM", "Ctrl-C") stopped while its jobs ran in
    this process: ``compare`` (the comparison of the jobs that finished), then ``report``
    logged, and the signal's exit status. A second Ctrl-C or SIGTERM during the comparison
    ends the program at once, with its line of a stop after the jobs had begun
    (:func:`cloudlstm.cli.sigterm_at_start.sigterm_is_a_stop`): it is not caught."""
    compare()
    log.error(report)
    return SystemExit(CTRL_C_EXIT_CODE if by == "Ctrl-C" else EXIT_CODE)


def failed_jobs_ending(report: str, errors: Sequence[BaseException]) -> BaseException:
    """What a sweep whose jobs failed with ``errors`` raises, once the finished jobs are
    compared: a UserError that is ``report`` (a line per failed job); or, where an error is
    no UserError (a bug), that error itself, for its traceback, after ``report`` is logged."""
    bugs = [error for error in errors if not isinstance(error, UserError)]
    if bugs:
        log.error(report)
        return bugs[0]
    return UserError(report)


def job_log(path: Path) -> str:
    """Where a sweep's report sends the reader for a job's error: its log ``path``
    (``<run dir>/<task name>.log``), or its run directory where the job wrote no log (it
    failed before its logging began)."""
    return f"log {path}" if path.is_file() else f"run dir {path.parent} (no log)"


def error_into_log(path: Path, error: BaseException, logger: str) -> None:
    """Append the error a job failed with to its log ``path``, which the sweep's report
    names, as a record of ``logger``: Hydra keeps a job's exception and logs nothing of it,
    so the log lacked the one line the report points to it for (empty, for a job refused
    before it logged). A bug's record holds its traceback."""
    if not path.is_file():
        return
    record = logging.makeLogRecord(
        {"name": logger, "levelno": logging.ERROR, "levelname": "ERROR", "msg": str(error)}
    )
    if not isinstance(error, UserError):
        record.exc_info = (type(error), error, error.__traceback__)
    text = logging.Formatter(_LOG_FORMAT).format(record)
    try:
        with path.open("a", encoding="utf-8") as file:
            file.write(f"{text}\n")
    except OSError:  # a full disk: the report still names the error
        pass


def pool_break_cause(error: BaseException, stopped_by: str | None) -> str | None:
    """Why joblib's pool of workers broke (``error``), in words, where a report can say it:
    the signal the sweep got (``stopped_by``), which reached a worker as it started, before
    it could note it (:mod:`cloudlstm.rundir.worker_signals`); or a worker that died, of
    SIGKILL (the machine's out-of-memory killer, for one) or a crash, as joblib says.
    None: neither (a task that failed to unpickle in its worker, say): a bug."""
    from joblib.externals.loky.process_executor import TerminatedWorkerError

    if stopped_by is not None:
        return f"the sweep got {stopped_by}; a worker process it reached as it started died of it"
    if not isinstance(error, TerminatedWorkerError):
        return None
    codes = re.search(r"exit codes of the workers are \{(.*)\}", str(error))
    how = codes.group(1) if codes else "how, joblib does not say"
    killed = ": killed, by the machine's out-of-memory killer for one" if "SIGKILL" in how else ""
    return f"a worker process died ({how}){killed}"


def pool_broken_report(
    cause: str, jobs: Sequence[tuple[int, Sequence[str], Path]], sweep_dir: str
) -> str:
    """The report of a joblib sweep whose pool broke (``cause``): joblib ends every job at
    once, so each launched job (its number, overrides and run directory) that has no
    ``metrics.json`` is named, with its newest checkpoint, the one the same command
    continues from."""
    from cloudlstm.rundir.layout import METRICS_FILE, newest_checkpoint

    shared = shared_overrides([overrides for _, overrides, _ in jobs])
    lines = []
    for num, overrides, run_dir in jobs:
        if (run_dir / METRICS_FILE).is_file():
            continue
        newest = newest_checkpoint(run_dir)
        saved = f"its newest checkpoint is {newest}" if newest else "no checkpoint"
        lines.append(f"job {num} ({own_overrides(overrides, shared)}): ended by joblib, {saved}")
    what = f"did not finish ({cause}, and joblib ended the other jobs at once)"
    return unfinished_report(lines, len(jobs), sweep_dir, what)


def broken_pool_ending(
    error: BrokenProcessPool,
    stop: PassSigtermOn | None,
    jobs: Sequence[tuple[int, Sequence[str], Path]],
    sweep_dir: str,
) -> BaseException:
    """What a joblib sweep whose pool broke (``error``) ends with, given its signal handling
    (``stop``) and the jobs it launched (as :func:`pool_broken_report` takes them): after a
    signal, the exit status of that signal, the report logged; after a worker's death, a
    UserError that is the report; otherwise ``error`` itself, a bug."""
    stopped = stop if stop is not None and stop.received else None
    cause = pool_break_cause(error, stopped.by if stopped else None)
    if cause is None:
        return error
    report = pool_broken_report(cause, jobs, sweep_dir)
    if stopped is None:
        return UserError(report)
    log.error(report)
    return SystemExit(stopped.exit_code)
