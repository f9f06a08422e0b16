"""A spatial order of the points: neighbours in space become neighbours in memory.

The neighbourhood gather reads, for every point, the rows of its K nearest neighbours.
When the points are in no spatial order (a data set's station or antenna ids), those rows
lie anywhere in a ``(N, U, F)`` slab, and at city size (thousands of points) the reads
miss the caches. Ordering the points along a Morton (Z-order) curve of their positions
keeps most neighbours a few rows apart. A point-cloud model is permutation-equivariant,
so this changes where the work reads from, not what it computes.
"""

from __future__ import annotations

import torch

# Bit-spreading masks: put the bits of a 16-bit (2-D) or 10-bit (3-D) integer 2 or 3 apart.
_SPREAD = {
    2: (16, ((8, 0x00FF00FF), (4, 0x0F0F0F0F), (2, 0x33333333), (1, 0x55555555))),
    3: (10, ((16, 0x030000FF), (8, 0x0300F00F), (4, 0x030C30C3), (2, 0x09249249))),
}


def _spread(q: torch.Tensor, dims: int) -> torch.Tensor:
    for shift, mask in _SPREAD[dims][1]:
        q = (q | (q << shift)) & mask
    return q


@torch.no_grad()
def morton_order(coords: torch.Tensor) -> torch.Tensor:
    """Permutation putting each sample's points in Z-order of their first (up to 3) axes.

    Args:
        coords: ``(B, N, L)`` positions (any range: each sample is scaled to its bounding
            box first, so outliers only coarsen the order).

    Returns:
        ``(B, N)`` int64 indices: ``coords.gather(1, order[..., None].expand_as(coords))``
        is sorted along the curve; equal codes keep their original order.
    """
    axes = coords[..., :3].float()
    dims = axes.shape[-1]
    if dims == 1:
        return axes[..., 0].argsort(dim=1, stable=True)
    bits = _SPREAD[dims][0]
    low = axes.amin(dim=1, keepdim=True)
    width = (axes.amax(dim=1, keepdim=True) - low).clamp_min(torch.finfo(torch.float32).tiny)
    q = ((axes - low) / width * (2**bits - 1)).round().long().clamp(0, 2**bits - 1)
    code = torch.zeros_like(q[..., 0])
    for axis in range(dims):
        code |= _spread(q[..., axis], dims) << axis
    return code.argsort(dim=1, stable=True)
