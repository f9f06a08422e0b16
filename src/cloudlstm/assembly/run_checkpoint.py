"""Whether a checkpoint given by path to a run is of that run's training.

A forecast takes its data description (points, scaler, step) and its quantile head from
the checkpoint, and its model and name from the run; an evaluation (``eval.py``) files its
results under the run. A checkpoint of another run of the same model and sizes (trained
with quantiles, on other data, or with another seed) loads: its forecasts and test results
would be presented as the run's. :func:`check_run_checkpoint` refuses it, naming what
differs, or the run whose ``checkpoints/`` hold it.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from cloudlstm.assembly.checkpoint_fit import TrainedCheckpoint, setting_levels
from cloudlstm.data.spec import stored_spec
from cloudlstm.errors import UserError
from cloudlstm.rundir.layout import (
    CHECKPOINT_DIR,
    checkpoint_run,
    last_checkpoint,
    newest_best,
)

# the module settings that shape a forecast: its quantile head, and what its output means
OUTPUT_SETTINGS = ("quantiles", "calibrate", "anchor")


def check_run_checkpoint(
    run: Path, cfg: DictConfig, trained: TrainedCheckpoint, results: str = "forecast"
) -> None:
    """Refuse ``trained`` where it is not of the training of ``run`` (its own config
    ``cfg``): its module settings (:data:`OUTPUT_SETTINGS`) differ from the run's config,
    or its data description from the one the run's own checkpoints hold, or it lies in
    another run directory (the same model, sizes and data, another seed: nothing in the
    file tells it apart). A checkpoint in the run's ``checkpoints/`` is its own and not
    compared; one outside any run directory (a copy) is compared by its contents alone,
    and by its settings alone where the run has no readable checkpoint of its own.
    ``results``: what the message says would not be the run's.

    Raises:
        UserError: naming the checkpoint, the run, what differs, and the fix.
    """
    folder = run / CHECKPOINT_DIR
    if trained.path.resolve().parent == folder.resolve():
        return
    differences = _setting_differences(cfg.get("module"), trained)
    differences += _description_differences(folder, trained)
    other = checkpoint_run(trained.path)
    if other is not None and other.resolve() == run.resolve():
        other = None  # the run's own folder, not checkpoints/ (SLURM's hpc_ckpt_<n>.ckpt)
    fix = f"Give {trained.its_run(other, run)}, or a checkpoint of {run}: ckpt=best, ckpt=last."
    if differences:
        raise UserError(
            f"{trained.path} is no checkpoint of the run {run}: it differs from the run's in "
            f"{' and '.join(differences)}, so its {results} would not be the run's. {fix}"
        )
    if other is not None:
        raise UserError(
            f"{trained.path} is a checkpoint of the run {other}, not of {run}: its {results} "
            f"would be filed under {run}'s name and config. {fix}"
        )


def _setting_differences(module: DictConfig | None, trained: TrainedCheckpoint) -> list[str]:
    """``module.<key>`` for each :data:`OUTPUT_SETTINGS` key the run's config and the
    checkpoint's hyperparameters both hold, with other values."""
    if module is None:
        return []
    settings = OmegaConf.to_container(module, resolve=True)
    stored = trained.contents.get("hyper_parameters") or {}
    shared = [k for k in OUTPUT_SETTINGS if k in settings and k in stored]
    return [
        f"module.{k}" for k in shared if setting_levels(settings[k]) != setting_levels(stored[k])
    ]


def _description_differences(folder: Path, trained: TrainedCheckpoint) -> list[str]:
    """``data description (<keys>)`` where the checkpoint's description differs from that
    of the run's own last (else best) checkpoint (another model class named with both
    classes); none where the run has none readable."""
    own = _own_description(folder)
    theirs = stored_spec(trained.contents)
    if own is None or theirs is None:
        return []
    keys = [k for k in sorted(own.keys() | theirs.keys()) if not _same(own.get(k), theirs.get(k))]
    # another model class is said by name: "model" alone reads as a setting of the data
    named = [f"model: {theirs[k]}, the run's {own[k]}" if k == "model" else k for k in keys]
    return [f"data description ({', '.join(named)})"] if keys else []


def _own_description(folder: Path) -> dict[str, Any] | None:
    """The data description of a checkpoint of the run's own, read without its weights
    (memory-mapped); None where it has none that can be read."""
    path = last_checkpoint(folder.parent)
    if not path.is_file():
        path = newest_best(folder.parent)
    if path is None:
        return None
    try:
        contents = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError):
        return None  # a damaged checkpoint of the run's leaves nothing to compare with
    return stored_spec(contents) if isinstance(contents, dict) else None


def _same(a: Any, b: Any) -> bool:
    """Whether two parts of a stored description are equal: dicts and lists item by item,
    arrays and tensors by value, NaN equal to NaN (a missing value written as NaN)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray | torch.Tensor) or isinstance(b, np.ndarray | torch.Tensor):
        return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)
