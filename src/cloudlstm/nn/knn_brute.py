"""All-pairs neighbour searches in torch ops, on any device.

* :func:`knn_chunked` (``method="brute"``): coordinates ``(R, N, L)`` -> indices
  ``(R, N, k)``, chunked over query points so the key block is ``R x chunk x N``; ``O(N^2)``
  work, kept for the GPU benchmark's comparison.
* :func:`knn_reference`: Algorithm 1 as written, the whole ``(..., N, N)`` block of keys
  and ``topk``; every other search is tested against it, bit for bit.
"""

from __future__ import annotations

import torch

from cloudlstm.nn.knn_checks import check_k
from cloudlstm.nn.ranking import ranking_keys, squared_distances


def knn_chunked(coords: torch.Tensor, k: int, chunk: int) -> torch.Tensor:
    """Brute force over query chunks: coords (R, N, L) -> (R, N, k)."""
    n = coords.shape[1]
    parts = []
    for start in range(0, n, chunk):
        queries = coords[:, start : start + chunk]
        d2 = squared_distances(queries[:, :, None], coords[:, None])  # (R, Q, N)
        own = torch.arange(start, start + queries.shape[1], device=coords.device)
        keys = ranking_keys(d2, torch.arange(n, device=coords.device), own[:, None])
        parts.append(keys.topk(k, dim=-1, largest=False, sorted=True).values & 0xFFFFFFFF)
    return torch.cat(parts, dim=1)


@torch.no_grad()
def knn_reference(coords: torch.Tensor, k: int) -> torch.Tensor:
    """Algorithm 1 as written: all pairwise distances + ``topk``; ``O(N^2)`` memory per cloud."""
    *lead, n, dims = coords.shape
    check_k(k, n)
    flat = coords.detach().reshape(-1, n, dims).float()
    index = torch.arange(n, device=coords.device)
    keys = ranking_keys(squared_distances(flat[:, :, None], flat[:, None]), index, index[:, None])
    index = keys.topk(k, dim=-1, largest=False, sorted=True).values & 0xFFFFFFFF
    return index.reshape(*lead, n, k)
