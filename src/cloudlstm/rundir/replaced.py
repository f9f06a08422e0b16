"""A run directory trained anew: the earlier training's files are moved aside first.

A training that continues none of the directory's checkpoints (``resume=never``, or
``resume=<another run's checkpoint>``) in a directory that holds an earlier training would
leave that training's files beside its own: its ``metrics.json``, which marks a finished
run, its checkpoints, which ``ckpt=best`` finds, its figures, predictions and evaluations.
Stopped before it ends, or refused while it builds, the new training would leave a
directory whose results describe another model under its own ``config.yaml``, which
``compare`` would report and ``resume=auto`` call finished. So before the new training
writes anything, the earlier one's files move into ``.replaced/<UTC time>/`` in the run
directory: a run directory of their own (``eval.py run=<it>`` tests it again), kept whole,
which ``compare`` and every reader of runs pass over as a hidden folder. A training refused
while it is built puts them back (:func:`put_back`): a refused command changes nothing. The
log files and the loggers' folders stay: ``train.log`` goes on, the CSV logger numbers its
versions, and W&B starts a run of a new id.
"""

from __future__ import annotations

import logging
import os
from contextlib import suppress
from datetime import datetime, timezone
from pathlib import Path

from cloudlstm.errors import out_of_space
from cloudlstm.rundir.checkpoints import checksum_path
from cloudlstm.rundir.layout import (
    CHANGES_FILE,
    CHECKPOINT_DIR,
    CONFIG_FILE,
    DATA_SUMMARY_FILE,
    DIVERGED_FILE,
    EVAL_DIR,
    FIGURES_DIR,
    HPC_CHECKPOINTS,
    METRICS_FILE,
    PREDICTIONS_FILE,
    PROVENANCE_FILE,
    REPLACED_DIR,
    WANDB_ID_FILE,
)

log = logging.getLogger(__name__)

# what a training leaves that belongs to its own model
EARLIER_TRAINING = (
    CONFIG_FILE,
    DATA_SUMMARY_FILE,
    METRICS_FILE,
    PROVENANCE_FILE,
    CHECKPOINT_DIR,
    FIGURES_DIR,
    PREDICTIONS_FILE,
    EVAL_DIR,
    CHANGES_FILE,
    DIVERGED_FILE,
    WANDB_ID_FILE,
)
# what shows that the earlier training made a model: weights, or results of one
MODEL_MADE = (CHECKPOINT_DIR, METRICS_FILE, FIGURES_DIR, PREDICTIONS_FILE, EVAL_DIR)


def retire_earlier_training(run_dir: Path) -> Path | None:
    """Move the earlier training's files of ``run_dir`` (:data:`EARLIER_TRAINING`) into
    ``.replaced/<UTC time>/`` and say so; returns that folder. None, moving nothing, where
    that training made no model (:data:`MODEL_MADE`): a first training, or a start stopped
    before its first checkpoint, whose files the new training writes anew.

    Raises:
        OutOfSpaceError: the folder cannot be made for want of room.
    """
    made = [run_dir / name for name in MODEL_MADE]
    if not any(_holds_something(path) for path in [*made, *_slurm_checkpoints(run_dir)]):
        return None  # an earlier start that made no model: the new training rewrites its files
    earlier = [run_dir / name for name in EARLIER_TRAINING if (run_dir / name).exists()]
    earlier += _slurm_checkpoints(run_dir)
    folder = _new_folder(run_dir / REPLACED_DIR)
    for path in earlier:  # renames within the directory: no copy, no room needed
        os.replace(path, folder / path.name)
    log.warning(
        "Training %s anew, from none of its checkpoints: the earlier training's %s moved to "
        "%s (delete that folder to free its space).",
        run_dir,
        ", ".join(path.name for path in earlier),
        folder,
    )
    return folder


def put_back(folder: Path, run_dir: Path) -> None:
    """Undo :func:`retire_earlier_training` (``folder`` is what it returned): the training
    it made way for was refused before it began. A folder the refused start made in the
    meantime keeps the earlier one's aside, and says so."""
    for path in sorted(folder.iterdir()):
        target = run_dir / path.name
        if target.is_dir():
            log.warning("%s was made again: the earlier %s stays in %s.", target, path.name, folder)
            continue
        os.replace(path, target)  # over the config and data summary the refused start wrote
    if not any(folder.iterdir()):
        folder.rmdir()
        with suppress(OSError):  # .replaced, unless it holds an earlier training
            folder.parent.rmdir()


def _slurm_checkpoints(run_dir: Path) -> list[Path]:
    """SLURM's ``hpc_ckpt_<n>.ckpt`` in ``run_dir`` and their ``.checksum`` files: left
    beside a new training, ``resume=auto`` would continue the earlier one's."""
    found = sorted(run_dir.glob(HPC_CHECKPOINTS))
    return [path for ckpt in found for path in (ckpt, checksum_path(ckpt)) if path.exists()]


def _holds_something(path: Path) -> bool:
    return path.is_file() or (path.is_dir() and any(path.iterdir()))


def _new_folder(parent: Path) -> Path:
    """A new folder in ``parent`` named by the UTC time (one training at a time holds the
    run directory, so no two make one in the same microsecond)."""
    folder = parent / datetime.now(timezone.utc).strftime("%Y-%m-%dT%H-%M-%S.%fZ")
    try:
        folder.mkdir(parents=True)
    except OSError as err:
        full = out_of_space(err, folder)
        if full is None:
            raise
        raise full from err
    return folder
