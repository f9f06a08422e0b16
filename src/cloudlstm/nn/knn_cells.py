"""Exact K-nearest-neighbour search in torch ops, for any device: a cell-list search.

The CPU path of :func:`cloudlstm.nn.knn.knn` is a numba kernel; on CUDA (or any other torch
device) the search runs here, with the same ranking rule (the point itself first, then by
squared distance, ties by lower index) and bit-identical results: the squared distances
are summed per axis in the same order as :func:`cloudlstm.nn.knn_brute.knn_reference`.

Per cloud (all ``R`` clouds of a call at once, no Python loop over them):

1. Each of the first two axes is cut into ``g`` bins of equal *counts* (a value's bin is
   its rank among the cloud's values, so equal values share a bin). Equal-count bins keep
   a dense city centre and a far outlier from crowding one bin; a bin is monotone in the
   value, which the distance bound below relies on. ``g = sqrt(N / per_cell)``.
2. The points are sorted by cell (row-major), so the cells of one grid row between two
   columns are one contiguous run; ``starts`` holds each cell's first position.
3. Every query ranks the points of the ``(2r + 1) x (2r + 1)`` cells around its own
   (``r = 1`` first) by an int64 key ``float32 bits of d2 << 32 | index``, and keeps the
   K smallest. It is *done* when the K-th distance is strictly below the squared gap to
   any point outside the window (from per-bin coordinate extremes, exact in float32: a
   point beyond the window cannot even tie). Queries not done go again with
   ``r <- 2r + 1``; at ``r >= g - 1`` the window is the whole cloud.

Memory is bounded by ``budget`` candidate slots per block of queries, plus ``O(R N K)``
for the result. Work is ``O(R N K)`` candidates for spread-out points (about
``9 per_cell`` per query, padded to the block's longest row run).
"""

from __future__ import annotations

import math

import torch

from cloudlstm.nn.ranking import NO_KEY, ranking_keys, squared_distances


def equal_count_bins(values: torch.Tensor, bins: int) -> torch.Tensor:
    """(R, N) values -> (R, N) int64 bin in ``[0, bins)``: ``rank * bins // N``, where a value's
    rank is the number of smaller values in its row (so equal values share a bin)."""
    ordered = values.sort(dim=1).values
    rank = torch.searchsorted(ordered, values.contiguous(), right=False)
    return rank * bins // values.shape[1]


def _bounds(values: torch.Tensor, bins: torch.Tensor, g: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(R, N) values and their bins -> ``(lo, hi)``, each (R, g + 2), padded one bin each side:
    ``lo[c + 1]`` = min of the values in bins ``>= c``, ``hi[c + 1]`` = max in bins ``<= c``;
    +inf / -inf where there are none (so a bin off the grid gives an infinite gap)."""
    r = values.shape[0]
    inf = torch.full((r, g), math.inf, device=values.device)
    lo = inf.scatter_reduce(1, bins, values, "amin")
    hi = (-inf).scatter_reduce(1, bins, values, "amax")
    lo = lo.flip(1).cummin(1).values.flip(1)
    hi = hi.cummax(1).values
    pad = torch.full((r, 1), math.inf, device=values.device)
    return torch.cat([pad, lo, pad], 1), torch.cat([-pad, hi, -pad], 1)


def _gap(
    query: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    rows: torch.Tensor,
    bin_: torch.Tensor,
    r: int,
) -> torch.Tensor:
    """Distance along one axis from each query to the nearest point outside bins
    ``bin - r .. bin + r`` (inf when there is none). query, bin_, rows: (Q,)."""
    below = (bin_ - r - 1).clamp(-1, lo.shape[1] - 2) + 1  # padded index of bin - r - 1
    above = (bin_ + r + 1).clamp(-1, lo.shape[1] - 2) + 1
    return torch.minimum(query - hi[rows, below], lo[rows, above] - query)


class _Grid:
    """The sorted points, cell starts and bin bounds of R clouds (see the module doc)."""

    def __init__(self, coords: torch.Tensor, per_cell: float) -> None:
        self.r, self.n, self.dims = coords.shape
        self.g = g = max(1, int(math.sqrt(self.n / per_cell)))
        self.bins = [equal_count_bins(coords[..., a], g) for a in (0, 1)]  # x, y
        cell = self.bins[1] * g + self.bins[0]
        self.order = cell.argsort(dim=1, stable=True)  # sorted position -> point index
        self.coords = coords.gather(1, self.order[..., None].expand(-1, -1, self.dims))
        counts = torch.zeros(self.r, g * g + 1, dtype=torch.int64, device=coords.device)
        counts.scatter_add_(1, cell + 1, torch.ones_like(cell))
        self.starts = counts.cumsum(1)  # (R, g*g + 1): cell c = positions starts[c]..[c+1]
        self.bounds = [_bounds(coords[..., a], b, g) for a, b in enumerate(self.bins)]
        # the bins of every sorted position (queries are taken in sorted order)
        self.sorted_bins = [b.gather(1, self.order) for b in self.bins]


def _window(grid: _Grid, cloud: torch.Tensor, bx: torch.Tensor, by: torch.Tensor, r: int):
    """Contiguous position runs of the query windows: (Q, 2r+1) starts and lengths."""
    g = grid.g
    rows = by[:, None] + torch.arange(-r, r + 1, device=by.device)  # (Q, 2r+1) grid rows
    inside = (rows >= 0) & (rows < g)
    rows = rows.clamp(0, g - 1)
    first = rows * g + (bx - r).clamp(min=0)[:, None]
    last = rows * g + (bx + r).clamp(max=g - 1)[:, None] + 1
    start = grid.starts[cloud[:, None], first]
    length = torch.where(inside, grid.starts[cloud[:, None], last] - start, 0)
    return start, length


def _rank_block(
    grid: _Grid, query: torch.Tensor, start: torch.Tensor, length: torch.Tensor, k: int
) -> torch.Tensor:
    """The K smallest keys among each query's window: query (Q,) flat sorted positions,
    start/length (Q, W) runs -> (Q, K) int64 keys (NO_KEY where fewer than K)."""
    n = grid.n
    width = int(length.max())
    slot = torch.arange(width, device=query.device)
    cand = start[..., None] + slot  # (Q, W, width) positions in the query's cloud
    valid = (slot < length[..., None]).flatten(1)
    cloud = query // n
    flat = cloud[:, None] * n + cand.flatten(1).clamp(max=n - 1)  # (Q, S) flat positions
    points = grid.coords.reshape(-1, grid.dims)
    d2 = squared_distances(points[query][:, None], points[flat])  # (Q, S)
    order = grid.order.reshape(-1)
    keys = ranking_keys(d2, order[flat], order[query][:, None])
    keys = torch.where(valid, keys, NO_KEY)
    if keys.shape[1] < k:
        keys = torch.cat([keys, keys.new_full((len(keys), k - keys.shape[1]), NO_KEY)], 1)
    return keys.topk(k, dim=1, largest=False, sorted=True).values


@torch.no_grad()
def knn_cells(
    coords: torch.Tensor, k: int, per_cell: float | None = None, budget: int = 1 << 23
) -> torch.Tensor:
    """K nearest neighbours by a cell-list search, on the coordinates' device.

    Args:
        coords: ``(R, N, L)`` float32, finite, ``L >= 2`` (pad a 1-D cloud with zeros).
        k: ``1 <= k <= N``.
        per_cell: average points per grid cell (default ``K / 2``: the 3 x 3 window then
            holds ~4.5 K points, enough for most queries to finish in one round).
        budget: candidate slots per block of queries (memory: ~20 bytes each).

    Returns:
        ``(R, N, k)`` int64 indices, equal to :func:`cloudlstm.nn.knn_brute.knn_reference`.
    """
    r_clouds, n, _ = coords.shape
    device = coords.device
    if k == 1:
        return torch.arange(n, device=device).expand(r_clouds, n)[..., None].clone()
    grid = _Grid(coords, per_cell or max(k / 2, 1.0))
    out = torch.empty(r_clouds * n, k, dtype=torch.int64, device=device)
    pending = torch.arange(r_clouds * n, device=device)  # flat sorted positions
    radius = 1
    while len(pending):
        cloud = pending // n
        bx, by = (b.reshape(-1)[pending] for b in grid.sorted_bins)
        start, length = _window(grid, cloud, bx, by, radius)
        # longest runs first, so each block is padded to about its own width
        widest = length.max(1).values
        order = widest.argsort(descending=True)
        pending, cloud, bx, by, start, length, widest = (
            t[order] for t in (pending, cloud, bx, by, start, length, widest)
        )
        here = grid.coords.reshape(-1, grid.dims)[pending]
        gap = torch.stack(
            [_gap(here[:, a], *grid.bounds[a], cloud, b, radius) for a, b in enumerate((bx, by))]
        ).amin(0)
        gap2 = gap * gap
        undone = []
        first, total = 0, len(pending)
        widths = widest.tolist()
        while first < total:
            size = max(1, budget // max(1, widths[first] * length.shape[1]))
            block = slice(first, min(first + size, total))
            keys = _rank_block(grid, pending[block], start[block], length[block], k)
            kth = keys[:, -1]
            kth_d2 = (kth >> 32).to(torch.int32).view(torch.float32)
            done = (kth != NO_KEY) & (gap2[block] > kth_d2)
            out[pending[block][done]] = keys[done] & 0xFFFFFFFF
            undone.append(pending[block][~done])
            first = block.stop
        pending = torch.cat(undone)
        radius = min(2 * radius + 1, max(grid.g - 1, 1))  # g - 1: the whole cloud
    # rows are in sorted order: put them back in point order
    result = torch.empty_like(out).view(r_clouds, n, k)
    result.scatter_(1, grid.order[..., None].expand(-1, -1, k), out.view(r_clouds, n, k))
    return result
