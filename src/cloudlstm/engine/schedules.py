"""Learning-rate schedules over optimiser steps (the training recipe's warm-up + cosine)."""

from __future__ import annotations

import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from cloudlstm.errors import UserError


def warmup_cosine(
    optimizer: Optimizer, total_steps: int, warmup_steps: int = 250, final_ratio: float = 0.01
) -> LambdaLR:
    """Linear warm-up from 0 over ``warmup_steps``, then a cosine from the optimiser's lr
    down to ``final_ratio`` times it at ``total_steps`` (held there after).

    Stepped once per optimiser step. Warm-up keeps the first updates of a freshly
    initialised recurrent model small (Adam's early steps are full-size whatever the
    gradient); the cosine ends the run at a low rate, so the last checkpoints differ little.

    Raises:
        UserError: ``total_steps`` is not a positive step budget (``trainer.max_steps=-1``
            means an epoch budget, which this schedule cannot span), or the other
            arguments are out of range.
    """
    if total_steps is None or total_steps < 1:
        raise UserError(
            f"scheduler=warmup_cosine spans trainer.max_steps, which is {total_steps}: set a "
            "step budget (trainer.max_steps=5000) or use recipe=paper (epochs, plateau)."
        )
    if not 0 <= warmup_steps < total_steps or not 0 <= final_ratio <= 1:
        raise UserError(
            f"scheduler.warmup_steps={warmup_steps} must be in [0, trainer.max_steps="
            f"{total_steps}) and scheduler.final_ratio={final_ratio} in [0, 1]."
        )

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return final_ratio + (1 - final_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)
