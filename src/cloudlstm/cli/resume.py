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

from cloudlstm.checkpoints import check_checkpoint
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
