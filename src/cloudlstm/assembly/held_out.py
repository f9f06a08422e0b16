"""The held-out-sites protocol at assembly: a model that cannot forecast held-out points is
refused in one line, and an evaluation holds out the points its run held out.

The data side (which points, what the windows hide) is
:mod:`cloudlstm.data.pipeline.held_out`; which models can forecast them,
:mod:`cloudlstm.models.held_out`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from cloudlstm.assembly.checkpoint_fit import TrainedCheckpoint
from cloudlstm.data.pipeline.held_out import HELD_OUT
from cloudlstm.errors import UserError
from cloudlstm.models.held_out import held_out_refusal

__all__ = ["check_model_forecasts_held_out", "check_same_held_out", "held_out_ids"]

SHOWN = 6  # ids named in a message


def check_model_forecasts_held_out(model: nn.Module, datamodule: Any, name: str) -> None:
    """Refuse a model that cannot forecast the data's held-out points (nothing to check
    without ``data.holdout_points``).

    Args:
        model: the forecaster built for the data.
        datamodule: the set-up datamodule (its ``holdout`` and ``held_out``).
        name: how the message names the model (``model=<name>``).

    Raises:
        UserError: it learns parameters of each training point, or (with
            ``data.holdout_history=false``) forecasts a point from its own readings alone.
    """
    holdout = getattr(datamodule, "holdout", None)
    if holdout is None or getattr(datamodule, "held_out", None) is None:
        return
    refusal = held_out_refusal(model, holdout.history)
    if refusal is None:
        return
    if refusal.needs_history:
        raise UserError(
            f"model={name} cannot forecast the held-out points without their readings "
            f"(data.holdout_history=false): {refusal.reason}. Choose a model that reads other "
            "points (cloudlstm, knn_lstm with model.k>1, convlstm, stgcn, ...), or set "
            "data.holdout_history=true."
        )
    raise UserError(
        f"model={name} cannot forecast points held out of training (data.holdout_points): "
        f"{refusal.reason}, and a held-out point's would never be fitted to any reading. "
        "Choose a model whose parameters all points share (cloudlstm, linear, knn_lstm, "
        "convlstm, stgcn, ...), or drop data.holdout_points."
    )


def held_out_ids(point_ids: list[str], groups: dict[str, Any]) -> list[str] | None:
    """The ids of the ``held_out`` group of ``groups`` (name -> indices into ``point_ids``,
    as :attr:`~cloudlstm.data.spec.DataSpec.point_groups` holds them); None without one."""
    if HELD_OUT not in groups:
        return None
    return [str(point_ids[i]) for i in np.asarray(groups[HELD_OUT], dtype=np.int64)]


def check_same_held_out(datamodule: Any, trained: TrainedCheckpoint) -> None:
    """Refuse to score as ``held_out`` other points than those the checkpoint's run held
    out of training (the data's points changed, e.g. ``data.num_points``), or any point of a
    run that held none out; nothing to check when the data hold none out (or the checkpoint
    has no data description).

    Raises:
        UserError: naming both selections and the override that gives the run's.
    """
    held_out = getattr(datamodule, "held_out", None)
    spec = trained.spec
    if held_out is None or spec is None:
        return
    before = held_out_ids(spec.point_ids, spec.point_groups)
    now = [str(p) for p in np.asarray(datamodule.stream.point_ids)[held_out]]
    if before is None:
        raise UserError(
            f"{trained.path} was trained on every point, {_listed(now)} too, so a held_out "
            "group of them would not measure forecasts at sites the model never saw. Train "
            "with data.holdout_points to measure that, or evaluate without it."
        )
    if sorted(before) == sorted(now):
        return
    same_points = [str(p) for p in spec.point_ids] == [str(p) for p in datamodule.stream.point_ids]
    why = (
        "another selection: data.holdout_points or data.holdout_seed is not the run's"
        if same_points
        else "its points changed"
    )
    raise UserError(
        f"{trained.path} was trained with {_listed(before)} held out, but the data now holds "
        f"out {_listed(now)} ({why}). Evaluate on the run's points, give its "
        f"selection (data.holdout_points=[{','.join(before)}]), or score every point alike "
        "(data.holdout_points=null)."
    )


def _listed(ids: list[str]) -> str:
    more = f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else ""
    return ", ".join(ids[:SHOWN]) + more
