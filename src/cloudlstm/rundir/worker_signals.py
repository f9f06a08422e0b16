"""SIGTERM and Ctrl-C in a joblib sweep's worker process, noted rather than fatal, from the
worker's start (:func:`note_signals` is loky's worker initializer) to its end.

A worker that died of the signal would break joblib's pool: the sweep's other jobs would be
ended at once, unsaved, and the sweep would fail with a traceback. Noted, the signal stops
the worker's job before it trains, or at its step if it trains
(:mod:`cloudlstm.rundir.sweep_sigterm`). This module imports nothing but :mod:`signal`, so
that a new worker unpickles its initializer in the time the :mod:`cloudlstm` package takes
to import; a signal before that is held blocked until then
(:func:`cloudlstm.rundir.sweep_sigterm.workers_note_signals`).
"""

from __future__ import annotations

import signal
from types import FrameType

NOTED_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # Ctrl-C in a terminal reaches workers too
noted: list[int] = []  # the signals that came during the worker's current job, or before it


def note(signum: int, frame: FrameType | None) -> None:
    noted.append(signum)


def note_signals() -> None:
    """Note :data:`NOTED_SIGNALS` from now on, except one the process ignores (a sweep started
    with Ctrl-C ignored keeps it ignored in its jobs); then unblock them, for a worker that
    started with them blocked: one that came before is noted now."""
    for signum in NOTED_SIGNALS:
        if signal.getsignal(signum) not in (note, signal.SIG_IGN):
            signal.signal(signum, note)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, NOTED_SIGNALS)
