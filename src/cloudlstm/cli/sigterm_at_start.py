"""SIGTERM before training has begun (``timeout``, ``kill``, a batch system's preemption,
while the command is checked, torch imported, the data read or the model built): one line
and status 143, as a Ctrl-C then gets one (:mod:`cloudlstm.cli.ctrl_c`).

Left to the default disposition, the signal ended the process at once without a word: the
user could not tell a stop from a crash, nor whether anything was saved. Here
:func:`sigterm_is_a_stop` (around ``train.py``'s whole run) makes it raise
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

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from cloudlstm.cli.invoked import this_process
from cloudlstm.rundir.stops import EXIT_CODE

__all__ = ["Terminated", "a_job_begins", "sigterm_is_a_stop"]

# whether a run's or a sweep's job has begun in the block of sigterm_is_a_stop: after one,
# a stop between jobs or after the last one has not "saved nothing"
_jobs_begun = False


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
    global _jobs_begun
    _jobs_begun = True


@contextmanager
def sigterm_is_a_stop() -> Iterator[None]:
    """Within the block (a program's whole run), SIGTERM raises :class:`Terminated`; one that
    leaves the block ends the program with ``<program>: stopped by SIGTERM before training
    began; ...`` and status 143. A SIGTERM that the program was started to ignore, or
    handles otherwise (a sweep's worker notes it), is left as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread handles signals
        return
    global _jobs_begun
    _jobs_begun = False
    before = signal.getsignal(signal.SIGTERM)
    if before is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    except Terminated:
        sys.stderr.write(f"{this_process()}: {_stopped_line()}\n")
        raise SystemExit(EXIT_CODE) from None
    finally:
        if signal.getsignal(signal.SIGTERM) is _raise_terminated:
            signal.signal(signal.SIGTERM, before)


def _stopped_line() -> str:
    """The line of a SIGTERM that no job's own handling took (:func:`sigterm_is_a_stop`)."""
    if _jobs_begun:  # between a sweep's jobs, after the last, or after the run's training
        return (
            "stopped by SIGTERM outside a training, after its jobs had begun: their run "
            "directories keep what each saved (metrics.json where it finished)."
        )
    return (
        "stopped by SIGTERM before training began, having saved nothing: run the same "
        "command again to start it (or to continue it, where its run directory holds "
        "checkpoints)."
    )
