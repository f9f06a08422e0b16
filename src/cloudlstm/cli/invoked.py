"""The programs' commands as the user runs them, for the commands a message writes out:
``python eval.py`` from the repository, ``cloudlstm-eval`` where the installed programs run."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from cloudlstm.errors import MULTIRUN_FLAGS

# each program's command: the repository's form, the installed one
COMMANDS = {
    "train": ("python train.py", "cloudlstm-train"),
    "eval": ("python eval.py", "cloudlstm-eval"),
    "predict": ("python predict.py", "cloudlstm-predict"),
    "compare": ("python -m cloudlstm.cli.compare", "cloudlstm-compare"),
}


def command(program: str) -> str:
    """The command of ``program`` (a key of :data:`COMMANDS`) in the form this process was
    started in: ``cloudlstm-eval`` when an installed program runs, ``python eval.py``
    otherwise (the repository's scripts, or the Python API)."""
    repository, installed = COMMANDS[program]
    return installed if Path(sys.argv[0]).name.startswith("cloudlstm-") else repository


def multirun_flagged(argv: Sequence[str]) -> bool:
    """Whether the command line ``argv`` carries the sweep flag ``-m`` (``--multirun``)."""
    return any(arg in MULTIRUN_FLAGS for arg in argv[1:])


def this_program(argv: Sequence[str]) -> str:
    """The command of the command line ``argv``: ``python train.py`` or ``cloudlstm-train``."""
    name = Path(argv[0]).name
    return f"python {name}" if name.endswith(".py") else name


def this_process() -> str:
    """How this process's program was started, as its last line names it: ``train.py``,
    ``cloudlstm-compare``, or ``python -m cloudlstm.cli.compare`` (whose ``sys.argv[0]`` is a
    ``__main__.py``, a name the user never typed)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None:  # started by python -m
        return f"python -m {spec.name.removesuffix('.__main__')}"
    return Path(sys.argv[0]).name
