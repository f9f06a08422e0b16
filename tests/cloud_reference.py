"""The paper's operators written out as loops, for comparisons with the vectorised code.

* :func:`neighbours_by_sorting`: the K nearest neighbours of every point by sorting all
  distances (the point itself first, then by distance, ties by lower index);
* :func:`dconv_loop`: DConv, Eq. (2), as nested loops over samples, channels and points;
* :func:`candidate`: the candidate-state activation of the cells, tanh of the values and
  tanh(sigmoid) of the coordinates.
"""

from __future__ import annotations

import torch

from cloudlstm.nn import DConv


def neighbours_by_sorting(points: torch.Tensor, k: int) -> list[list[int]]:
    """``points (N, L)`` -> for each point the indices of its K nearest, itself first."""
    n = points.shape[0]
    dist = ((points[:, None] - points[None]) ** 2).sum(-1)
    out = []
    for p in range(n):
        d = dist[p].clone()
        d[p] = -1  # self first
        out.append(sorted(range(n), key=lambda q: (d[q].item(), q))[:k])
    return out


def dconv_loop(layer: DConv, cloud: torch.Tensor) -> torch.Tensor:
    """Eq. (2) written as loops: for each sample, output channel j, point n and output
    feature m', sum over input channels i, neighbours k (nearest first, self first) and
    input features m of w[i, k, m, m', j] * feature m of neighbour k in channel i; with
    ``layer.coordinates == "relative"`` a neighbour's coordinates are taken minus point
    p's own in channel i."""
    b, n, u_in, f_in = cloud.shape
    w = layer.weight.to(cloud.dtype)
    out = torch.zeros(b, n, layer.out_channels, w.shape[3], dtype=cloud.dtype)
    for s in range(b):
        for i in range(u_in):
            near = neighbours_by_sorting(cloud[s, :, i, layer.value_features :], layer.k)
            for p in range(n):
                centre = torch.zeros_like(cloud[s, p, i])
                if layer.coordinates == "relative":
                    centre[layer.value_features :] = cloud[s, p, i, layer.value_features :]
                for k, q in enumerate(near[p]):
                    out[s, p] += torch.einsum("m,mao->oa", cloud[s, q, i] - centre, w[i, k])
    if layer.bias is not None:
        out = out + layer.bias.to(cloud.dtype)
    h = layer.out_value_features
    if layer.coord_activation:
        out[..., h:] = torch.sigmoid(out[..., h:])
    return out


def candidate(z: torch.Tensor, value_features: int = 1) -> torch.Tensor:
    """``tanh`` of the value features, ``tanh(sigmoid)`` of the coordinates (a full DConv's
    coordinate sigmoid, then the candidate's tanh)."""
    h = value_features
    return torch.cat([torch.tanh(z[..., :h]), torch.tanh(torch.sigmoid(z[..., h:]))], dim=-1)
