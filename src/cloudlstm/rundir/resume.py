"""Which checkpoint a training run resumes from (``resume=auto|never|<path>``).

A killed job (SLURM time limit, preemption, node failure) that is started again with the
same run directory continues where it stopped: ``auto`` picks the newest of
``<run dir>/checkpoints/last.ckpt`` and the ``hpc_ckpt_<n>.ckpt`` files that Lightning's
SLURM auto-requeue writes into the run directory. A checkpoint that cannot be read, or
whose bytes no longer match the SHA-256 written with it, is a
:class:`~cloudlstm.errors.UserError` naming the file, the best checkpoint to resume from
instead and how to start fresh, not a pickle traceback.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from cloudlstm.errors import UserError
from cloudlstm.rundir.checkpoints import check_checkpoint
from cloudlstm.rundir.layout import (
    REPLACED_DIR,
    last_checkpoint,
    newest_best,
    newest_checkpoint,
    resume_candidates,
)

log = logging.getLogger(__name__)

RESUME_MODES = ("auto", "never")


def resume_checkpoint(resume: Any, run_dir: Path) -> str | None:
    """The checkpoint to resume training from, or None to start fresh.

    Args:
        resume: ``"auto"`` (newest last/HPC checkpoint of ``run_dir``, if any), ``"never"``
            (or None / False) to start fresh, or the path of a checkpoint.
        run_dir: the run directory.

    Raises:
        UserError: the path does not exist, or the checkpoint cannot be read.
    """
    if resume in (None, False, "never"):
        return None
    if resume == "auto":
        path = newest_checkpoint(run_dir)
        if path is None:
            return None
        checkpoint = check_checkpoint(path, damaged_checkpoint_remedy(run_dir))
        path = _prefer_last(path, checkpoint, run_dir)
        log.info("Resuming from %s (resume=auto; resume=never starts fresh).", path)
        return str(path)
    path = Path(str(resume)).expanduser()
    if not path.is_file():
        raise UserError(
            f"resume={resume}: no such checkpoint file. Give the path of a .ckpt file, "
            f"`resume=auto` (the run directory's last checkpoint) or `resume=never`."
        )
    given = "Point resume= at a .ckpt written by training, or use `resume=auto` or `resume=never`."
    check_checkpoint(path, damaged_checkpoint_remedy(run_dir), given)
    return str(path)


def starts_anew(resume: Any, run_dir: Path) -> bool:
    """Whether a training with this ``resume`` continues none of ``run_dir``'s own
    checkpoints: it starts from scratch, or from another run's checkpoint (one of an earlier
    training moved aside into its ``.replaced/`` too). Read from the names alone, before
    :func:`resume_checkpoint` reads and checks the file."""
    if resume in (None, False, "never"):
        return True
    if resume == "auto":  # which candidate is newest does not matter here
        return not resume_candidates(run_dir)
    given = Path(str(resume)).expanduser().resolve()
    run = Path(run_dir).resolve()
    return run not in given.parents or run / REPLACED_DIR in given.parents


def _prefer_last(path: Path, checkpoint: dict[str, Any], run_dir: Path) -> Path:
    """``last.ckpt`` instead of an HPC checkpoint of the same training step.

    SLURM's signal may come right at an epoch's start, before its first step: the HPC
    checkpoint then holds what ``last.ckpt`` of the epoch before holds, but Lightning 2.6
    restores it as an epoch already run (it skips that epoch's training and validation,
    and early stopping fails for want of a validation metric). ``last.ckpt``, written at
    the validation, resumes from the same state, bit-exactly.
    """
    last = last_checkpoint(run_dir)
    if path == last or not last.is_file():
        return path
    try:
        step = check_checkpoint(last, damaged_checkpoint_remedy(run_dir)).get("global_step")
    except UserError:
        return path  # a damaged last.ckpt: the HPC checkpoint is what there is
    if step is not None and step == checkpoint.get("global_step"):
        log.info("%s is at step %s, as %s: resuming from the latter.", path.name, step, last)
        return last
    return path


def damaged_checkpoint_remedy(run_dir: Path) -> str:
    """What to do about a damaged checkpoint: resume from the best one, or start fresh."""
    best = newest_best(run_dir)
    if best is None:
        return "Delete it, or start fresh with `resume=never`."
    return (
        f"Resume from the best checkpoint with `resume={best}`, or start fresh with `resume=never`."
    )
