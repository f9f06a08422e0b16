"""The validation split that ``module.calibrate=conformal`` measures its offsets on, checked
before training.

The offsets are measured once training is over, at the test: with no validation window a
run trained to the end and then failed, and with a handful of windows, all of a few hours,
the offsets followed those hours and narrowed an 80 % interval until it covered half the
test. So an empty split is refused, and one with fewer windows than the outermost level
needs is warned of, before the first step.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from omegaconf import DictConfig

from cloudlstm.assembly.batch_limits import splits_run
from cloudlstm.engine.quantile_levels import check_quantiles
from cloudlstm.errors import UserError

log = logging.getLogger(__name__)


def check_calibration_split(cfg: DictConfig, windows: dict[str, int]) -> bool:
    """Refuse a training with conformal calibration whose validation split has no window
    (``data.val_fraction=0``, ``trainer.limit_val_batches=0``); warn where it has fewer
    than ``1 / min(level, 1 - level)`` windows over its levels (10 for an 80 % interval).
    Returns whether it warned.

    Raises:
        UserError: names the two settings and the ways out.
    """
    module = cfg.get("module") or {}
    levels = _levels(module.get("quantiles"))
    if module.get("calibrate") != "conformal" or not levels or "train" not in splits_run(cfg):
        return False
    limit = (cfg.get("trainer") or {}).get("limit_val_batches")
    found = windows.get("val", 0)
    if found == 0 or (limit == 0 and not isinstance(limit, bool)):
        split = (
            "which has no window"
            if found == 0
            else "of which trainer.limit_val_batches=0 runs no batch"
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
        "intervals may come out narrower than their levels. Give a larger data.val_fraction.",
        found,
        min(levels) if min(levels) <= 1 - max(levels) + 1e-9 else max(levels),
        needed,
    )
    return True


def _levels(quantiles: Any) -> tuple[float, ...]:
    """``module.quantiles`` as the module reads them (:func:`check_quantiles`); none where
    they are refused, which the module's build does in its own line."""
    try:
        return check_quantiles(quantiles)
    except UserError:
        return ()
