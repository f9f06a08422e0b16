"""Which forecasters can forecast points held out of training (``data.holdout_points``).

A held-out point stays in the cloud during training with no readings (0 with masks False)
and no loss, so a model can forecast it only where nothing it learns belongs to one point:

* a model with parameters of each training point (STID's embeddings, AGCRN's, Graph
  WaveNet's adaptive adjacency, STAEformer's adaptive embedding, the flat LSTM and MLP whose
  layers hold every point's weights) would have the held-out points' parameters unfitted:
  it is refused (:attr:`~cloudlstm.models.base.ForecastModel.point_parameters`);
* with ``data.holdout_history=false`` a held-out point has no readings at test either, so a
  model that forecasts a point from its own readings alone (persistence, seasonal naive,
  linear, STID, the kNN models and the point-cloud models with ``model.k=1``) has nothing
  to forecast it from: it is refused too
  (:attr:`~cloudlstm.models.base.ForecastModel.own_history_only`).

Every other model shares its parameters across points and is scored: the CloudLSTM family
and the point-cloud models (their neighbourhoods), the grid models (a held-out point's cell
is a cell of the grid, read by shared convolutions), STGCN, DCRNN and Graph WaveNet with a
distance graph (rebuilt over the whole cloud, held-out points included) or a graph given by
the data (``data.source.graph``, which holds them too).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

__all__ = ["Refusal", "held_out_refusal"]


@dataclass(frozen=True)
class Refusal:
    """Why a model cannot forecast held-out points: ``needs_history`` False when it cannot
    at all (parameters of each training point), True when it cannot without their readings."""

    reason: str
    needs_history: bool


def held_out_refusal(model: nn.Module, history: bool) -> Refusal | None:
    """Why ``model`` cannot forecast points held out of its training, with
    (``history=True``) or without their own readings at test time; None: it can."""
    reason = getattr(model, "point_parameters", None)
    if reason:
        return Refusal(reason, needs_history=False)
    if history:
        return None
    reason = getattr(model, "own_history_only", None)
    if not reason and getattr(model, "k", None) == 1:
        reason = "with model.k=1 each point reads only its own readings"
    return Refusal(reason, needs_history=True) if reason else None
