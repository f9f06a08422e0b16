"""Run directories and their checkpoints, for everything that uses a trained run.

``eval.py``, ``predict.py``, :class:`cloudlstm.Forecaster` and training's ``resume=`` all
find a run's checkpoint and load it here, so a missing run, a missing or truncated
checkpoint, or a file that is not a Lightning checkpoint is one clear
:class:`~cloudlstm.errors.UserError` wherever it happens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from cloudlstm.errors import UserError


def check_run_dir(run_dir: str | Path) -> Path:
    """``run_dir`` as a path, checked to be a run directory (it has the run's config.yaml).

    Raises:
        UserError: it does not exist, or is not a run directory.
    """
    run = Path(run_dir).expanduser()
    if not run.is_dir():
        raise UserError(f"Run directory {run} does not exist.")
    if not (run / "config.yaml").is_file():
        raise UserError(f"{run} is not a run directory: it has no config.yaml.")
    return run


def find_checkpoint(run: Path, ckpt: str | Path) -> Path:
    """The checkpoint file ``ckpt`` (``"best"``, ``"last"`` or a path) of run directory ``run``.

    ``best`` is the checkpoint the run was tested with (``metrics.json``), else the
    ``epoch_*.ckpt`` of ``checkpoints/`` (the best by validation loss).

    Raises:
        UserError: there is no such checkpoint.
    """
    folder = run / "checkpoints"
    if str(ckpt) == "best":
        newest = max(folder.glob("epoch_*.ckpt"), key=lambda p: p.stat().st_mtime, default=None)
        found = _tested_checkpoint(run) or newest
    elif str(ckpt) == "last":
        found = folder / "last.ckpt"
    else:
        given = Path(ckpt).expanduser()
        found = given if given.is_file() or given.is_absolute() else run / given
    if found is None or not found.is_file():
        have = sorted(p.name for p in folder.glob("*.ckpt"))
        raise UserError(
            f"No checkpoint {ckpt!r} in {run} ({folder} holds {have or 'no .ckpt files'}): "
            "use a run that trained, ckpt=best, ckpt=last or the path of a .ckpt file."
        )
    return found


def _tested_checkpoint(run: Path) -> Path | None:
    """The checkpoint ``metrics.json`` says was tested, found again if the run was moved."""
    metrics = run / "metrics.json"
    if not metrics.is_file():
        return None
    tested = json.loads(metrics.read_text()).get("checkpoint")
    if not tested:
        return None
    for path in (Path(tested), run / "checkpoints" / Path(tested).name):
        if path.is_file():
            return path
    return None


def check_checkpoint(path: Path, remedy: str | None = None) -> dict[str, Any]:
    """Load a Lightning checkpoint on CPU, or raise a UserError that names the file.

    ``remedy`` ends the message (what to do instead); by default it is about ``resume=``.
    Returns the loaded checkpoint dict.
    """
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # truncated zip, bad pickle, not a checkpoint at all
        raise UserError(
            f"Cannot read checkpoint {path} ({type(err).__name__}: {_first_line(err)}). "
            "The file is truncated or corrupted, e.g. by a job killed while saving it. "
            + (remedy or "Delete it, or start fresh with `resume=never`.")
        ) from err
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise UserError(
            f"{path} is not a Lightning checkpoint (no state_dict). "
            + (remedy or "Point resume= at a .ckpt written by training, or use `resume=never`.")
        )
    return ckpt


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else "no message"
