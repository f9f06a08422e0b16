"""PointCNN's X-Conv (Li et al., NeurIPS 2018), the operator of the PointCNN and PointLSTM
baselines.

For every representative point p (P = -1: every point, so N_out = N_in) with K
neighbours (dilation D: every D-th of the K*D nearest, the point itself first):

1. local coordinates ``neighbour - p``, lifted per neighbour by a 2-layer MLP to
   ``C_delta`` features and concatenated with the neighbours' input features;
2. an MLP on the K local coordinates gives a K x K matrix X that weights and permutes
   the K rows of that concatenation;
3. a depthwise-separable convolution over the K (transformed) neighbours gives the C_out
   output features.

Differences from PointCNN, both because it relies on batch normalisation, which we leave
out (it mixes samples and behaves differently in training and evaluation, which a
recurrent forecaster applies dozens of times per window):

* local coordinates are divided by the cloud's RMS neighbour offset, so the MLPs see
  unit-scale inputs whatever the point density (this also makes the operator invariant
  to scaling and shifting the coordinates);
* weights use LeCun-uniform initialisation, and X's last layer is scaled by 1/sqrt(K), so
  that multiplying by X keeps the features' scale.

The output is linear (no activation): models apply their own, and gates need it linear.
Since the geometry (neighbours, X, X times the lifted coordinates) depends on the
coordinates alone, it can be computed once with :meth:`XConv.geometry` and reused for
every time step while the points stay where they are.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from cloudlstm.nn.dconv import gather_neighbourhoods
from cloudlstm.nn.knn import knn
from cloudlstm.nn.knn_checks import NeighbourCountError, check_k, check_k_option


def dilated_neighbours(coords: torch.Tensor, k: int, dilation: int = 1) -> torch.Tensor:
    """Every D-th of each point's K*D nearest points: ranks 0 (itself), D, 2D, ...

    coords ``(B, N, L)`` -> ``(B, N, K)`` int64 indices into N.
    """
    n = coords.shape[1]
    check_k(k, n)
    if dilation < 1:
        raise ValueError(f"model.dilation must be >= 1, got {dilation}.")
    if k * dilation > n:
        raise NeighbourCountError(
            f"K*D = {k}*{dilation} = {k * dilation} nearest neighbours requested but the "
            f"point cloud has only {n} points. Lower model.k or model.dilation so that "
            f"k * dilation <= {n}."
        )
    return knn(coords, k * dilation)[..., ::dilation]


def local_offsets(coords: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Neighbour minus point coordinates, divided by the cloud's RMS offset.

    coords ``(B, N, L)``, index ``(B, N, K)`` -> ``(B*N, K, L)``.
    """
    b, n, dims = coords.shape
    k = index.shape[-1]
    around = gather_neighbourhoods(coords.unsqueeze(2), index.unsqueeze(2)).view(b, n, k, dims)
    offsets = around - coords.unsqueeze(2)
    # One scale per sample (not per point): the offsets keep their relative sizes.
    scale = offsets.square().sum(-1).mean(dim=(1, 2)).sqrt().clamp_min(1e-12)
    return (offsets / scale.view(b, 1, 1, 1)).view(b * n, k, dims)


class XGeometry(NamedTuple):
    """What one X-Conv derives from the coordinates alone."""

    index: torch.Tensor  # (B, N, K) neighbours, the point itself first
    transform: torch.Tensor  # (B*N, K, K) the X matrices
    lifted: torch.Tensor  # (B*N, K, C_delta) X times the lifted local coordinates


class XConv(nn.Module):
    """X-Conv on fixed points: features ``(B, N, C_in)``, coords ``(B, N, L)`` ->
    ``(B, N, C_out)``.

    Args:
        in_channels, out_channels: C_in, C_out.
        k: neighbours per point (K), the point itself included.
        dilation: D, take every D-th of the K*D nearest points.
        coord_dims: L.
        lifted_channels: C_delta; default ``out_channels // 4`` (PointCNN's choice).
        depth_multiplier: of the depthwise convolution; default
            ``ceil(out_channels / in_channels)`` (PointCNN's choice).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        k: int = 9,
        dilation: int = 1,
        coord_dims: int = 2,
        lifted_channels: int | None = None,
        depth_multiplier: int | None = None,
    ) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.k = check_k_option(k, dilation)
        self.dilation = dilation
        self.coord_dims = coord_dims
        # null picks the default; 0 or less is refused, not read as null
        for name, value in (
            ("lifted_channels", lifted_channels),
            ("depth_multiplier", depth_multiplier),
        ):
            if value is not None and value < 1:
                raise ValueError(f"model.{name} must be >= 1 (null: the default), got {value}.")
        lifted = max(1, out_channels // 4) if lifted_channels is None else lifted_channels
        multiplier = (
            math.ceil(out_channels / in_channels) if depth_multiplier is None else depth_multiplier
        )
        self.lift = nn.Sequential(
            nn.Linear(coord_dims, lifted), nn.ELU(), nn.Linear(lifted, lifted), nn.ELU()
        )
        # X: a dense layer over all K local coordinates, then two depthwise layers (as
        # PointCNN's depthwise convolutions with depth multiplier K).
        self.x_dense = nn.Linear(k * coord_dims, k * k)
        self.x_weight = nn.Parameter(torch.empty(2, k, k, k))
        self.x_bias = nn.Parameter(torch.empty(2, k, k))
        self.depthwise = nn.Parameter(torch.empty(k, lifted + in_channels, multiplier))
        self.pointwise = nn.Linear((lifted + in_channels) * multiplier, out_channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        def lecun_(tensor: torch.Tensor, fan_in: int, gain: float = 1.0) -> None:
            bound = gain * math.sqrt(3.0 / fan_in)
            nn.init.uniform_(tensor, -bound, bound)

        for layer in [*self.lift[::2], self.x_dense, self.pointwise]:
            lecun_(layer.weight, layer.in_features)
            lecun_(layer.bias, layer.in_features)
        lecun_(self.x_weight[0], self.k)
        lecun_(self.x_bias[0], self.k)
        # X's entries get variance ~1/K, so a row of X times the K neighbours keeps scale.
        lecun_(self.x_weight[1], self.k, 1 / math.sqrt(self.k))
        lecun_(self.x_bias[1], self.k, 1 / math.sqrt(self.k))
        lecun_(self.depthwise, self.k)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, k={self.k}, dilation={self.dilation}, "
            f"L={self.coord_dims}"
        )

    def geometry(self, coords: torch.Tensor, index: torch.Tensor | None = None) -> XGeometry:
        """coords ``(B, N, L)``, optional neighbours ``(B, N, K)`` (from
        :func:`dilated_neighbours`; shareable by X-Convs with the same K and D)."""
        if coords.dim() != 3 or coords.shape[-1] != self.coord_dims:
            raise ValueError(
                f"X-Conv expects coords (B, N, L={self.coord_dims}), got "
                f"{tuple(coords.shape)}; set model.coord_features to the data's L."
            )
        if index is None:
            index = dilated_neighbours(coords, self.k, self.dilation)
        k = self.k
        offsets = local_offsets(coords, index)  # (B*N, K, L)
        x = F.elu(self.x_dense(offsets.flatten(1))).view(-1, k, k)
        for layer in range(2):
            # Row c of the new X is column c of the old one times its own K x K weights.
            x = torch.einsum("pwc,wcm->pcm", x, self.x_weight[layer]) + self.x_bias[layer]
            x = F.elu(x) if layer == 0 else x
        return XGeometry(index, x, torch.bmm(x, self.lift(offsets)))

    def forward(
        self,
        features: torch.Tensor,
        coords: torch.Tensor | None = None,
        geometry: XGeometry | None = None,
    ) -> torch.Tensor:
        """features ``(B, N, C_in)`` and either coords ``(B, N, L)`` or a precomputed
        :class:`XGeometry` -> ``(B, N, C_out)``."""
        if geometry is None:
            if coords is None:
                raise ValueError("X-Conv needs coords or a precomputed geometry.")
            geometry = self.geometry(coords)
        if features.dim() != 3 or features.shape != (*geometry.index.shape[:2], self.in_channels):
            raise ValueError(
                f"X-Conv expects features (B, N, C_in={self.in_channels}) on the "
                f"{tuple(geometry.index.shape[:2])} (B, N) points of its coordinates, got "
                f"{tuple(features.shape)}."
            )
        b, n, c = features.shape
        around = gather_neighbourhoods(features.unsqueeze(2), geometry.index.unsqueeze(2))
        transformed = torch.cat(
            [geometry.lifted, torch.bmm(geometry.transform, around.view(b * n, self.k, c))],
            dim=-1,
        )  # (B*N, K, C_delta + C_in)
        # Depthwise over the K rows, then pointwise across channels.
        depthwise = torch.einsum("pkc,kcd->pcd", transformed, self.depthwise)
        return self.pointwise(depthwise.flatten(1)).view(b, n, self.out_channels)
