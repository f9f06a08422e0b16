"""SIGTERM before training has begun (``timeout``, ``kill``, a batch system's preemption,
while the command is checked, torch imported, the data read or the model built): one line
and status 143; a Ctrl-C then gets the same line, naming it, and 130. The same for
``eval.py`` and ``predict.py`` at any moment outside Lightning's test: each line says what
the program had written by then (:func:`stops_now_say`).

Left to the default disposition, the signal ended the process at once without a word: the
user could not tell a stop from a crash, nor whether anything was saved. Here
:func:`sigterm_is_a_stop` (around each program's whole run) makes it raise
:class:`Terminated`, which ``train.py`` turns into its line: before the run's directory is
known, this module's; inside the run, one that names the run's newest checkpoint and the
command that continues it (:func:`cloudlstm.cli.scripts._train`); once a job has begun
(:func:`a_job_begins`), a stop outside one says that their run directories keep what they
saved. Imports hold the signal
until they are done (:func:`cloudlstm.cli.ctrl_c.hold_ctrl_c_while_importing`): an
exception raised inside an extension module's initialisation aborts the process.

Once a Trainer runs, the signal is Lightning's (:mod:`cloudlstm.engine.signals`): its
handler stops the run at a step, saving ``last.ckpt``, and calls the handler it found (this
one) after its own; called that way, this one does nothing.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from cloudlstm.cli.invoked import this_process
from cloudlstm.rundir.stops import CTRL_C_EXIT_CODE, EXIT_CODE

__all__ = ["Terminated", "a_job_begins", "line_by_file", "sigterm_is_a_stop", "stops_now_say"]

log = logging.getLogger(__name__)

# a stop's line after "<program>: stopped by <signal> ", or what makes it as the stop comes
# (from the files there then): one text for SIGTERM and, where the program takes it so,
# Ctrl-C (sigterm_is_a_stop)
Line = str | Callable[[], str]

# train.py's line before any job has begun, and once one has: a stop between a sweep's jobs
# or after the last one has not "saved nothing"
BEFORE_TRAINING = (
    "before training began, having saved nothing: run the same command again to start it "
    "(or to continue it, where its run directory holds checkpoints)."
)
JOBS_BEGUN = (
    "outside a training, after its jobs had begun: their run directories keep what each "
    "saved (metrics.json where it finished)."
)

# eval.py's and predict.py's lines before their work has written anything of its results
BEFORE_EVALUATING = "before evaluating, having written no results: run the same command again."
BEFORE_FORECASTING = "before the forecast was written: run the same command again."

# what a SIGTERM that no Trainer takes says now, after "<program>: stopped by SIGTERM "; set
# as the block of sigterm_is_a_stop begins and by each step of the program that writes what
# a rerun needs
_line: Line = BEFORE_TRAINING


class Terminated(BaseException):  # noqa: N818 (a stop, not an error)
    """SIGTERM came while no Trainer handled it. A ``BaseException``, as ``KeyboardInterrupt``
    is: code that catches ``Exception`` (a data source's fallback) must not take it for a
    failure of its own."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    if signal.getsignal(signal.SIGTERM) is not _raise_terminated:
        return  # called by a Trainer's handler, which stops the run at its step
    raise Terminated


def a_job_begins() -> None:
    """Note that a job (a run, a job of a sweep) begins, in this process or, a sweep's
    launcher's, elsewhere: a later SIGTERM outside a training says so, not that nothing was
    saved."""
    stops_now_say(JOBS_BEGUN)


def stops_now_say(line: Line) -> None:
    """From now on, a SIGTERM that no Trainer takes ends the program with ``<program>:
    stopped by SIGTERM <line>`` (Ctrl-C, where the program takes it so): what it has written
    by then (``eval.py``'s metrics.json, ``predict.py``'s forecast) and whether the same
    command is to be run again; a callable makes the line as the stop comes
    (:func:`line_by_file`)."""
    global _line
    _line = line


def line_by_file(path: Path, written: str, not_written: str) -> Callable[[], str]:
    """The line ``written`` where ``path`` is written from now on, else ``not_written``:
    decided as the stop comes, not by the program's steps, as a stop just after the file's
    rename (the programs write it whole, :func:`cloudlstm.errors.replacing`) comes before
    the step after it. A file that an earlier command left there is not this one's: a
    rename over it is another file (inode), and a rewrite changes its time."""
    before = _identity(path)
    return lambda: written if _identity(path) not in (None, before) else not_written


def _identity(path: Path) -> tuple[int, int, int] | None:
    """Which file ``path`` is, and when it was last written (None: there is none)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino, stat.st_mtime_ns


def _into_log_files(text: str) -> None:
    """``text`` as an error record into the log files of the root logger's handlers that
    still exist (Hydra's ``<task_name>.log``, once its job has begun), not onto the console,
    which has the line on stderr."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, text, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).is_file():
            handler.handle(record)


@contextmanager
def sigterm_is_a_stop(
    first: Line = BEFORE_TRAINING, logged: bool = False, ctrl_c: bool = False
) -> Iterator[None]:
    """Within the block (a program's whole run), SIGTERM raises :class:`Terminated`; one that
    leaves the block ends the program with ``<program>: stopped by SIGTERM <line>`` and
    status 143, the line ``first`` until the program says another (:func:`stops_now_say`).
    ``logged``: the line goes into the job's log file too, where one is open (``eval.py``'s
    ``eval.log``: a run's record of its evaluations; ``train.py`` logs its own stops, and its
    line after a sweep's jobs is of the whole sweep, not of the job whose log is open last).
    ``ctrl_c``: a Ctrl-C (``KeyboardInterrupt``) that leaves the block ends the program the
    same way, its line naming Ctrl-C, with status 130 (``train.py``, ``eval.py`` and
    ``predict.py``, whose lines say what was saved or written:
    :func:`cloudlstm.cli.ctrl_c.ctrl_c_is_a_stop`'s says only that the program stopped).
    A SIGTERM that the program was started to ignore, or handles otherwise (a sweep's worker
    notes it), is left as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread handles signals
        return
    stops_now_say(first)
    before = signal.getsignal(signal.SIGTERM)
    if before is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_terminated)
    stops: tuple[type[BaseException], ...] = (
        (Terminated, KeyboardInterrupt) if ctrl_c else (Terminated,)
    )
    try:
        yield
    except stops as stop:
        by_ctrl_c = isinstance(stop, KeyboardInterrupt)
        _say_stop("Ctrl-C" if by_ctrl_c else "SIGTERM", logged)
        raise SystemExit(CTRL_C_EXIT_CODE if by_ctrl_c else EXIT_CODE) from None
    finally:
        if signal.getsignal(signal.SIGTERM) is _raise_terminated:
            signal.signal(signal.SIGTERM, before)


def _say_stop(by: str, logged: bool) -> None:
    """``<program>: stopped by <by> <line>`` on stderr, and into the job's log file where
    ``logged`` (:func:`sigterm_is_a_stop`)."""
    line = f"{this_process()}: stopped by {by} {_line() if callable(_line) else _line}"
    sys.stderr.write(f"{line}\n")
    if logged:
        _into_log_files(line)
