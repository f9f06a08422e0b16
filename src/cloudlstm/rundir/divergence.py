"""A training stopped by divergence, recorded in its run directory: ``diverged.json``.

A diverged run (:class:`~cloudlstm.engine.module.TrainingDivergedError`: a NaN loss,
non-finite weights, a validation MAE beyond ``module.diverge_factor``) leaves its
checkpoints from before the divergence and no ``metrics.json``. The fix is other settings
(a lower ``optimizer.lr``, clipping), and the same directory then holds a resumable run
of the old ones: the command with the new settings is refused as a change of a resumed
run's settings (:mod:`cloudlstm.rundir.config_changes`). The record lets that refusal say
what happened and what to do: start fresh (``resume=never``, or a new directory).

The record holds the global step and the error's message; it is written by rank 0 when
the error stops ``train`` and removed when a training starts again in the directory (its
checkpoints are then no longer those of the diverged training alone).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from cloudlstm.rundir.layout import DIVERGED_FILE


def record_divergence(run_dir: Path, step: int, message: str) -> None:
    """Write ``diverged.json``: the run stopped by diverging at ``step`` (rank 0 only; a
    failure to write is no reason to hide the divergence's own error)."""
    from cloudlstm.rundir.lock import is_rank_zero

    if not is_rank_zero():
        return
    with contextlib.suppress(OSError):
        record = {"step": int(step), "message": message}
        (Path(run_dir) / DIVERGED_FILE).write_text(json.dumps(record, indent=2) + "\n")


def clear_divergence(run_dir: Path) -> None:
    """Remove the record: a training starts again in ``run_dir`` (rank 0 only)."""
    from cloudlstm.rundir.lock import is_rank_zero

    if is_rank_zero():
        (Path(run_dir) / DIVERGED_FILE).unlink(missing_ok=True)


def divergence(run_dir: Path) -> dict[str, Any] | None:
    """The record of ``run_dir`` (``step``, ``message``), or None where its last training
    did not diverge (or the record cannot be read)."""
    try:
        record = json.loads((Path(run_dir) / DIVERGED_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def what_diverged(record: dict[str, Any]) -> str:
    """The record in a few words: ``at global step 3 (val/mae is 1.2e+05, ...)``, the
    error's first sentence after its colon."""
    first = str(record.get("message", "")).split(". ", 1)[0]
    what = first.split(": ", 1)[1] if ": " in first else ""
    step = f"at global step {record.get('step', '?')}"
    return f"{step} ({what})" if what else step
