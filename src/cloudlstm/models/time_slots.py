"""Time of day and day of week as embedding slots, for the models that embed them (STID,
STAEformer): a time feature's sin/cos channels in ``x`` (:mod:`cloudlstm.data.covariates`)
turned back into the index of its slot."""

from __future__ import annotations

import torch

from cloudlstm.data.covariates import TIME_FEATURES
from cloudlstm.models.base import Channels


def time_slots(
    names: list[str], steps_per_day: int | None, channels: Channels
) -> dict[str, tuple[int, int]]:
    """Time feature name -> (its sin channel in ``x``, slots of its embedding table), for
    the time of day (one slot per step of a day) and the day of the week."""
    first = channels.inp - channels.future  # the time features end x, sin/cos of each
    slots = {"hour": steps_per_day, "weekday": 7}
    return {
        name: (first + 2 * i, slots[name])
        for i, name in enumerate(names)
        if name in TIME_FEATURES and slots.get(name)
    }


def time_slot(sin: torch.Tensor, cos: torch.Tensor, slots: int, nearest: bool) -> torch.Tensor:
    """The slot (0 .. slots - 1, long) of a time whose angle has this sin and cos: the
    nearest one (``nearest``: the step of the day), else the one it is in (the day of the
    week; a small margin keeps midnight in its own day despite rounding)."""
    turn = torch.remainder(torch.atan2(sin, cos) / (2 * torch.pi), 1.0) * slots
    index = torch.round(turn) if nearest else torch.floor(turn + 1e-3)
    return torch.remainder(index.long(), slots)
