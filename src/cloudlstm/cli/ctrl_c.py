"""Ctrl-C is a program's stop, at any moment: one line, and the shell's status for it.

:func:`ctrl_c_is_a_stop` says so for a Ctrl-C outside training's steps (checking the
command, reading the data, building the model; training's own stop is
:mod:`cloudlstm.engine.signals`'s), where Python would print a traceback; a press that
Python lost on the way stops training as it is set up (:mod:`cloudlstm.engine.ctrl_c_noted`).

A Ctrl-C during an import is taken when the import is done. Extension modules initialise
by calling back into Python (torch, SciPy: pybind11): a ``KeyboardInterrupt`` raised in one
of those calls ends the process with SIGABRT (``terminate called after throwing an
instance of 'pybind11::error_already_set'``) or leaves the module half registered, so that
a later import fails (``ImportError: generic_type: type "ObjSense" is already
registered!``); one raised in the middle of torch's logging set-up leaves its loggers
without their levels. The programs import these late, once the command has been checked
(an error in it costs a second, not torch's import), which is when a user who changes
their mind presses Ctrl-C. So every import runs with SIGINT blocked, and a Ctrl-C pressed
meanwhile arrives as the import statement ends. SIGTERM too, which ``train.py`` turns into
an exception of its own before training (:mod:`cloudlstm.cli.sigterm_at_start`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from cloudlstm.cli.invoked import this_process
from cloudlstm.engine import ctrl_c_noted

__all__ = ["ctrl_c_is_a_stop", "hold_ctrl_c_while_importing"]


@contextmanager
def ctrl_c_is_a_stop() -> Iterator[None]:
    """Within the block (a program's whole run), a ``KeyboardInterrupt`` ends the program
    with ``<program>: stopped by Ctrl-C.`` and status 130, a press is noted
    (:func:`cloudlstm.engine.ctrl_c_noted.note_and_interrupt`), and imports hold a Ctrl-C
    until they are done (:func:`hold_ctrl_c_while_importing`). A SIGINT that the program
    was started to ignore (a background job of a shell script) stays ignored."""
    ctrl_c_noted.forget()
    in_main = threading.current_thread() is threading.main_thread()
    if in_main and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, ctrl_c_noted.note_and_interrupt)
    hold_ctrl_c_while_importing()
    try:
        yield
    except KeyboardInterrupt:
        from cloudlstm.rundir.stops import CTRL_C_EXIT_CODE

        sys.stderr.write(f"{this_process()}: stopped by Ctrl-C.\n")
        raise SystemExit(CTRL_C_EXIT_CODE) from None


def hold_ctrl_c_while_importing() -> None:
    """From now on, every import in this process runs with SIGINT and SIGTERM blocked in its
    thread (nothing on a platform without signal masks)."""
    if hasattr(signal, "pthread_sigmask") and not any(
        isinstance(finder, _HoldCtrlC) for finder in sys.meta_path
    ):
        sys.meta_path.insert(0, _HoldCtrlC())


# the signals whose handlers raise an exception: held while a module initialises
_HELD = {signal.SIGINT, signal.SIGTERM}


@contextmanager
def _signals_blocked() -> Iterator[None]:
    """SIGINT and SIGTERM blocked in this thread for the block; one that came meanwhile is
    delivered as the outermost such block ends (Python then raises its handler's exception
    there)."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


class _HoldCtrlC(importlib.abc.MetaPathFinder):
    """Asks the other finders for a module's spec, as the import system would, and gives
    the module a loader that creates and runs it with SIGINT and SIGTERM blocked."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _HeldLoader(spec.loader)
            return spec
        return None


class _HeldLoader(importlib.abc.Loader):
    """Creates (an extension module's initialisation) and executes the module with SIGINT
    and SIGTERM blocked; everything else (its resources, its source) is the wrapped
    loader's, which the module names as its own."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        with _signals_blocked():
            return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._loader
        if module.__spec__ is not None and module.__spec__.loader is self:
            module.__spec__.loader = self._loader
        with _signals_blocked():
            self._loader.exec_module(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
