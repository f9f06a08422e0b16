"""The ranking rule of every exact neighbour search, in torch ops.

The point itself comes first; the others rank by squared Euclidean distance, summed per
axis in order from separately rounded float32 products, ties by lower index. The brute
force and reference of :mod:`cloudlstm.nn.knn_brute` and the cell list of
:mod:`cloudlstm.nn.knn_cells` rank through these two functions; the numba and Triton
kernels follow the same rule in their own code. Equal rounding everywhere is what makes
their results equal index for index, ties included.
"""

from __future__ import annotations

import torch

NO_KEY = torch.iinfo(torch.int64).max  # an empty candidate slot: ranks after every point
_SELF = 1 << 62  # subtracted from the point's own key: ranks before every other point


def squared_distances(queries: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Broadcastable ``(..., L)`` queries and points -> ``(...)`` float32 squared distances.

    ``torch.cdist`` would round through a square root (or a matmul expansion), so ties and
    near-ties could rank differently from the kernels.
    """
    shape = torch.broadcast_shapes(queries.shape[:-1], points.shape[:-1])
    d2 = torch.zeros(shape, device=points.device)
    for axis in range(points.shape[-1]):
        diff = queries[..., axis] - points[..., axis]
        d2 += diff * diff
    return d2


def ranking_keys(d2: torch.Tensor, index: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """One int64 key per candidate: ``float32 bits of d2 << 32 | index``, the query's own
    point forced first (its low 32 bits still hold its index).

    ``d2``: non-negative squared distances; ``index``: each candidate's point index;
    ``own``: each query's own index; broadcastable. A non-negative float32's bits order as
    its value, so the keys order by distance, then by index, exactly.
    """
    bits = d2.clamp_min(0).contiguous().view(torch.int32).to(torch.int64)
    keys = (bits << 32) | index
    return torch.where(index == own, index - _SELF, keys)
