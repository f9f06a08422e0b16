"""The programs' entry points: the installed ``cloudlstm-train``, ``-eval``, ``-predict``,
``-compare`` and ``-models`` (pyproject.toml's console scripts), and the repository's
``train.py``, ``eval.py`` and ``predict.py``.

A module outside the cloudlstm package, so that a Ctrl-C while the package loads is the
program's stop, one line and status 130, as at any later moment (``cloudlstm.cli.ctrl_c``):
importing ``cloudlstm`` takes about half a second (``importlib.metadata``, omegaconf), and a
console script that imported a program's module itself would print that import's traceback.

That stop, and one while the program's own module loads (``cloudlstm.cli.scripts``, under
``ctrl_c_is_a_stop`` alone), is the bare ``<program>: stopped by Ctrl-C.``, where a later one
of ``train.py``, ``eval.py`` or ``predict.py`` says what was saved or written: nothing has
begun by then (no command checked, no run directory made, no file written), so there is
nothing else to say, and those lines are the package's, not yet loaded.
"""

from __future__ import annotations

# small modules of the standard library alone (not typing, not pathlib: 20-30 ms each), as
# every import here is a moment without the guard
import _signal  # signal's C module: signal.py imports enum, 13 ms more without the guard
import os
import sys

# the shell's status after Ctrl-C, cloudlstm.rundir.stops.CTRL_C_EXIT_CODE, which cannot be
# imported before the package
CTRL_C_EXIT_CODE = 130


class _Program:
    """A program that imports ``module`` and runs its ``function``: the package under
    Ctrl-C's guard here, the program's module with Ctrl-C held until its imports are done
    (torch's initialisation must not be interrupted)."""

    def __init__(self, module: str, function: str) -> None:
        self.module, self.function = module, function
        self.__doc__ = f"Runs ``{module}.{function}``."

    def __call__(self) -> object:
        try:
            with _ctrl_c_held():
                import importlib  # not loaded at Python's start: here, under the guard

                from cloudlstm.cli.ctrl_c import ctrl_c_is_a_stop
        except KeyboardInterrupt:
            sys.stderr.write(f"{os.path.basename(sys.argv[0])}: stopped by Ctrl-C.\n")
            raise SystemExit(CTRL_C_EXIT_CODE) from None
        with ctrl_c_is_a_stop():
            main = getattr(importlib.import_module(self.module), self.function)
        return main()


class _ctrl_c_held:  # noqa: N801 (a context manager; contextlib is 10 ms of imports)
    """SIGINT blocked while the package loads, as every later import is
    (``cloudlstm.cli.ctrl_c.hold_ctrl_c_while_importing``): a ``KeyboardInterrupt`` raised
    inside an import can be lost (CPython drops one raised where a C function clears
    errors) and leave a module half made, whose later use fails with a traceback
    (omegaconf's: ``'NoneType' object has no attribute '_invalidate_flags_cache'``). A
    press meanwhile arrives as the block ends, where the program stops on it."""

    def __enter__(self) -> None:
        if hasattr(_signal, "pthread_sigmask"):  # not on Windows: nothing held there
            self.before = _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGINT})

    def __exit__(self, *exc: object) -> None:
        if hasattr(self, "before"):
            _signal.pthread_sigmask(_signal.SIG_SETMASK, self.before)


train = _Program("cloudlstm.cli.scripts", "train")
evaluate = _Program("cloudlstm.cli.scripts", "evaluate")
predict = _Program("cloudlstm.cli.scripts", "predict")
compare = _Program("cloudlstm.cli.compare.command", "program")
models = _Program("cloudlstm.cli.models_table", "program")
