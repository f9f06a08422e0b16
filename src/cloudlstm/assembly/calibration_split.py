"""The validation split that ``module.calibrate=conformal`` measures its offsets on, checked
before training.

The offsets are measured at every validation, on the windows it runs (those
``trainer.limit_val_batches`` lets through), and the checkpoint keeps those of its own
weights: with no validation window a run trained to the end and then failed, and with a
handful of windows, all of a few hours, the offsets followed those hours and narrowed an
80 % interval until it covered half the test. So an empty split is refused, and one with
fewer windows than the outermost level needs is warned of, before the first step.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from omegaconf import DictConfig

from cloudlstm.assembly.batch_limits import processes, splits_run
from cloudlstm.engine.quantile_levels import check_quantiles
from cloudlstm.errors import UserError

log = logging.getLogger(__name__)


def check_calibration_split(cfg: DictConfig, windows: dict[str, int], batch_size: int) -> bool:
    """Refuse a training with conformal calibration whose validation split has no window
    (``data.val_fraction=0``, ``trainer.limit_val_batches=0``); warn where it validates
    fewer than ``1 / min(level, 1 - level)`` windows over its levels (10 for an 80 %
    interval), counting those ``trainer.limit_val_batches`` lets through in batches of
    ``batch_size`` on each of the training's processes. Returns whether it warned.

    Raises:
        UserError: names the two settings and the ways out.
    """
    module = cfg.get("module") or {}
    levels = _levels(module.get("quantiles"))
    if module.get("calibrate") != "conformal" or not levels or "train" not in splits_run(cfg):
        return False
    trainer = cfg.get("trainer") or {}
    limit = trainer.get("limit_val_batches")
    split_windows = windows.get("val", 0)
    found = _validated(split_windows, limit, batch_size, processes(trainer))
    if found == 0:
        split = (
            "which has no window"
            if split_windows == 0
            else f"of which trainer.limit_val_batches={limit} runs no batch"
        )
        raise UserError(
            f"module.calibrate=conformal measures its offsets on the validation split, {split}: "
            "give the data a validation part (data.val_fraction > 0) and validate it, or "
            "train without calibration: module.calibrate=none."
        )
    tail = min(min(levels), 1 - max(levels))
    needed = math.ceil(1 / tail - 1e-9) if tail > 0 else 0
    if found >= needed:
        return False
    log.warning(
        "module.calibrate=conformal measures its offsets on %d validation window(s), and the "
        "level %g needs at least %d for its offset to follow the test's coverage: the "
        "intervals may come out narrower than their levels. %s",
        found,
        min(levels) if min(levels) <= 1 - max(levels) + 1e-9 else max(levels),
        needed,
        (
            f"Validate more of the split's {split_windows} windows: a larger "
            f"trainer.limit_val_batches than {limit} (1.0: all of them)."
            if found < split_windows
            else "Give a larger data.val_fraction."
        ),
    )
    return True


def _validated(windows: int, limit: Any, batch_size: int, world: int = 1) -> int:
    """The validation windows a run measures its offsets on: all ``windows``, or those of
    the batches ``limit`` lets through, as Lightning counts them on each of ``world``
    processes, which share the windows and pool their residuals (an int: that many
    batches a process; a fraction: that share of a process's batches, rounded down)."""
    if isinstance(limit, bool) or not isinstance(limit, int | float):
        return windows
    size = max(int(batch_size), 1)
    batches = math.ceil(math.ceil(windows / world) / size)  # a process's
    kept = min(batches, limit) if isinstance(limit, int) else int(batches * limit)
    return min(windows, max(int(kept), 0) * size * world)


def _levels(quantiles: Any) -> tuple[float, ...]:
    """``module.quantiles`` as the module reads them (:func:`check_quantiles`); none where
    they are refused, which the module's build does in its own line."""
    try:
        return check_quantiles(quantiles)
    except UserError:
        return ()
