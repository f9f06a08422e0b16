"""Which checkpoint a training run resumes from (``resume=auto|never|<path>``).

A killed job (SLURM time limit, preemption, node failure) that is started again with the
same run directory continues where it stopped: ``auto`` picks the newest of
``<run dir>/checkpoints/last.ckpt`` and the ``hpc_ckpt_<n>.ckpt`` files that Lightning's
SLURM auto-requeue writes into the run directory. A checkpoint that cannot be read is a
:class:`~cloudlstm.errors.UserError` naming the file and how to start fresh, not a pickle
traceback.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from cloudlstm.errors import UserError

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
        candidates = [run_dir / "checkpoints" / "last.ckpt", *run_dir.glob("hpc_ckpt_*.ckpt")]
        existing = [p for p in candidates if p.is_file()]
        if not existing:
            return None
        path = max(existing, key=lambda p: p.stat().st_mtime_ns)
        log.info("Resuming from %s (resume=auto; resume=never starts fresh).", path)
    else:
        path = Path(str(resume)).expanduser()
        if not path.is_file():
            raise UserError(
                f"resume={resume}: no such checkpoint file. Give the path of a .ckpt file, "
                f"`resume=auto` (the run directory's last checkpoint) or `resume=never`."
            )
    check_checkpoint(path)
    return str(path)


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
