"""Exact K-nearest-neighbour search for batches of small point clouds.

DConv needs, for every channel of every sample, the K nearest neighbours of each point
among that channel's own points. With hidden states carrying their own coordinates, a
CloudLSTM step searches ``B x U`` clouds (2,304 at the paper's size), so this is on the
hot path.

Ranking rule (identical in every implementation below): the point itself comes first;
the others are ranked by squared Euclidean distance, ties by lower point index. Without
ties the result is therefore permutation-equivariant.

Implementations:

* CPU: a numba kernel, parallel over clouds. Points are sorted along the first
  coordinate and each query sweeps outwards in that order, stopping once the gap along
  that axis alone exceeds the current K-th distance. Exact, memory ``O(N)`` per cloud,
  and about ``sqrt(N)`` candidates per query instead of ``N`` (see
  ``benchmarks/bench_dconv.py``).
* other devices (CUDA): brute force, chunked over query points so the distance block is
  ``rows x chunk x N`` and memory stays linear in N for a fixed chunk.
* :func:`knn_reference`: the plain ``cdist`` + ``topk`` of Algorithm 1, kept for tests
  and the benchmark.
"""

from __future__ import annotations

import numba
import numpy as np
import torch


class NeighbourCountError(ValueError):
    """K is larger than the number of points in the cloud."""


def check_k(k: int, num_points: int) -> None:
    """Raise a clear error when K neighbours cannot be found among ``num_points`` points."""
    if k < 1:
        raise NeighbourCountError(f"K must be >= 1, got K={k}.")
    if k > num_points:
        raise NeighbourCountError(
            f"K={k} nearest neighbours requested but the point cloud has only "
            f"{num_points} points. Set model.k <= {num_points} (e.g. model.k={num_points})."
        )


_PER_CELL = 2.0  # target points per grid cell (tuned on uniform 2-D clouds)
_NO_KEY = np.iinfo(np.int64).max  # empty slot: above every (distance, index) key


@numba.njit(cache=True)
def _gaps(lo, hi, c, r, q):
    """Lower bound on |coordinate - q| for points more than r cells from cell c, per side.

    lo[c] (hi[c]) is the smallest (largest) coordinate among points in cells >= c (<= c),
    so the bound is exact in float32: every such point's difference rounds to >= it.
    """
    g = lo.shape[0]
    above = lo[c + r + 1] - q if c + r + 1 < g else np.float32(np.inf)
    below = q - hi[c - r - 1] if c - r - 1 >= 0 else np.float32(np.inf)
    return min(above, below)


@numba.njit(cache=True)
def _scan(pts, idx, start, stop, a, best, worst):
    """Offer points start..stop-1 (cell order) to query a's sorted (key) list; -> new worst."""
    k1 = best.shape[0]
    for j in range(start, stop):
        d = np.float32(0.0)  # float32, summed per axis in order, like _pairwise_d2
        for l in range(pts.shape[0]):
            diff = pts[l, j] - pts[l, a]
            d += diff * diff
        # A non-negative float32's bits order like its value: one int64 compare ranks by
        # (distance, index), so ties go to the lower index without a second branch.
        key = (np.int64(np.float32(d).view(np.int32)) << 32) | idx[j]
        if key < worst and j != a:
            pos = k1 - 1
            while pos > 0 and best[pos - 1] > key:
                best[pos] = best[pos - 1]
                pos -= 1
            best[pos] = key
            worst = best[k1 - 1]
    return worst


@numba.njit(cache=True)
def _knn_cloud(coords, k, out):
    """One cloud: coords (N, L >= 2) float32 -> out (N, k) neighbour indices."""
    n, dims = coords.shape
    # Grid over the bounding box of axes 0 and 1, shaped like the box, ~_PER_CELL points
    # per cell. float64 so a degenerate (tiny) extent cannot overflow the scale.
    x0, x1 = np.float64(coords[0, 0]), np.float64(coords[0, 0])
    y0, y1 = np.float64(coords[0, 1]), np.float64(coords[0, 1])
    for i in range(n):
        x0, x1 = min(x0, coords[i, 0]), max(x1, coords[i, 0])
        y0, y1 = min(y0, coords[i, 1]), max(y1, coords[i, 1])
    wx, wy = x1 - x0, y1 - y0
    cells = max(1.0, n / _PER_CELL)
    fx = fy = 1.0
    if wx > 0 and wy > 0:
        fx, fy = np.sqrt(cells * wx / wy), np.sqrt(cells * wy / wx)
    elif wx > 0:
        fx = cells
    elif wy > 0:
        fy = cells
    gx = int(min(max(fx, 1.0), cells)) if fx == fx else 1  # NaN-safe
    gy = int(min(max(fy, 1.0), cells)) if fy == fy else 1
    sx = gx / wx if wx > 0 else 0.0
    sy = gy / wy if wy > 0 else 0.0

    # Counting sort of the points into row-major cells: a row of cells is then one
    # contiguous run of points, and nearby queries touch the same memory.
    cx = np.empty(n, np.int64)
    cy = np.empty(n, np.int64)
    start = np.zeros(gx * gy + 1, np.int64)
    for i in range(n):
        # Monotone in the coordinate (needed for the exact bounds); NaN lands in the last cell.
        tx, ty = (coords[i, 0] - x0) * sx, (coords[i, 1] - y0) * sy
        cx[i] = int(tx) if tx < gx - 1 else gx - 1
        cy[i] = int(ty) if ty < gy - 1 else gy - 1
        start[cy[i] * gx + cx[i] + 1] += 1
    for c in range(gx * gy):
        start[c + 1] += start[c]
    fill = start[:-1].copy()
    pts = np.empty((dims, n), np.float32)  # axis-major: the scan reads each axis as a row
    idx = np.empty(n, np.int64)
    cell_x = np.empty(n, np.int64)
    cell_y = np.empty(n, np.int64)
    for i in range(n):
        p = fill[cy[i] * gx + cx[i]]
        fill[cy[i] * gx + cx[i]] += 1
        for l in range(dims):
            pts[l, p] = coords[i, l]
        idx[p] = i
        cell_x[p], cell_y[p] = cx[i], cy[i]

    # Per column / row: min coordinate over cells >= it, max over cells <= it.
    lo_x = np.full(gx, np.float32(np.inf))
    hi_x = np.full(gx, np.float32(-np.inf))
    lo_y = np.full(gy, np.float32(np.inf))
    hi_y = np.full(gy, np.float32(-np.inf))
    for p in range(n):
        lo_x[cell_x[p]] = min(lo_x[cell_x[p]], pts[0, p])
        hi_x[cell_x[p]] = max(hi_x[cell_x[p]], pts[0, p])
        lo_y[cell_y[p]] = min(lo_y[cell_y[p]], pts[1, p])
        hi_y[cell_y[p]] = max(hi_y[cell_y[p]], pts[1, p])
    for c in range(gx - 2, -1, -1):
        lo_x[c] = min(lo_x[c], lo_x[c + 1])
    for c in range(1, gx):
        hi_x[c] = max(hi_x[c], hi_x[c - 1])
    for c in range(gy - 2, -1, -1):
        lo_y[c] = min(lo_y[c], lo_y[c + 1])
    for c in range(1, gy):
        hi_y[c] = max(hi_y[c], hi_y[c - 1])

    if k == 1:  # nothing to search: slot 0 is always the point itself
        out[:, 0] = np.arange(n)
        return
    best = np.empty(k - 1, np.int64)
    for a in range(n):  # queries in cell order, for locality
        qx, qy = cell_x[a], cell_y[a]
        best[:] = _NO_KEY
        worst = _NO_KEY
        for r in range(max(gx, gy)):
            # Ring r: cells at Chebyshev distance r from the query's cell. Top and bottom
            # rows are one contiguous run each; the rows between add their two end cells.
            for y in range(max(qy - r, 0), min(qy + r, gy - 1) + 1):
                row = y * gx
                if y == qy - r or y == qy + r:
                    lo, hi = max(qx - r, 0), min(qx + r, gx - 1)
                    worst = _scan(pts, idx, start[row + lo], start[row + hi + 1], a, best, worst)
                else:
                    if qx - r >= 0:
                        c = row + qx - r
                        worst = _scan(pts, idx, start[c], start[c + 1], a, best, worst)
                    if qx + r < gx:
                        c = row + qx + r
                        worst = _scan(pts, idx, start[c], start[c + 1], a, best, worst)
            # Every unvisited point lies beyond ring r along x or y; stop once even that
            # gap exceeds the K-th distance (strictly: an equal one may win on index).
            gap = min(_gaps(lo_x, hi_x, qx, r, pts[0, a]), _gaps(lo_y, hi_y, qy, r, pts[1, a]))
            if np.float32(gap * gap).view(np.int32) > worst >> 32:
                break
        out[idx[a], 0] = idx[a]
        for j in range(k - 1):
            out[idx[a], j + 1] = best[j] & 0xFFFFFFFF


@numba.njit(cache=True, parallel=True)
def _knn_grid(coords: np.ndarray, k: int) -> np.ndarray:
    """coords (R, N, L >= 2) float32 -> neighbour indices (R, N, k) int64."""
    out = np.empty((coords.shape[0], coords.shape[1], k), dtype=np.int64)
    for r in numba.prange(coords.shape[0]):
        _knn_cloud(coords[r], k, out[r])
    return out


def _pairwise_d2(queries: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """(R, Q, L), (R, N, L) -> (R, Q, N) squared distances, summed per dimension in order.

    ``torch.cdist`` would round through a square root (or a matmul expansion), so ties and
    near-ties could rank differently from the numba kernel.
    """
    d2 = torch.zeros(queries.shape[0], queries.shape[1], points.shape[1], device=points.device)
    for l in range(points.shape[-1]):
        diff = queries[:, :, None, l] - points[:, None, :, l]
        d2 += diff * diff
    return d2


def _rank_keys(d2: torch.Tensor, query_index: torch.Tensor) -> torch.Tensor:
    """Encode (distance, index) as one int64 key per candidate, self forced first.

    d2: (..., Q, N) non-negative float32 squared distances; query_index: (Q,) the index of
    each query point. The float32 bit pattern of a non-negative number is monotonic in
    its value, so ``bits << 32 | index`` orders by distance, then by index, exactly.
    """
    index = torch.arange(d2.shape[-1], device=d2.device)
    bits = d2.clamp_min(0).contiguous().view(torch.int32).to(torch.int64)
    keys = (bits << 32) | index
    # Self gets a key below every other; its low 32 bits still hold its index.
    is_self = query_index[:, None] == index
    return torch.where(is_self, index - (1 << 62), keys)


def _knn_chunked(coords: torch.Tensor, k: int, chunk: int) -> torch.Tensor:
    """Brute force over query chunks: coords (R, N, L) -> (R, N, k)."""
    n = coords.shape[1]
    parts = []
    for start in range(0, n, chunk):
        queries = coords[:, start : start + chunk]
        d2 = _pairwise_d2(queries, coords)
        index = torch.arange(start, start + queries.shape[1], device=coords.device)
        keys = _rank_keys(d2, index)
        parts.append(keys.topk(k, dim=-1, largest=False, sorted=True).values & 0xFFFFFFFF)
    return torch.cat(parts, dim=1)


@torch.no_grad()
def knn(coords: torch.Tensor, k: int, chunk: int = 1024) -> torch.Tensor:
    """Indices of the K nearest neighbours of every point, the point itself first.

    Args:
        coords: ``(..., N, L)`` point coordinates; leading dims index independent clouds.
        k: number of neighbours, ``1 <= k <= N``.
        chunk: query points per block for the brute-force (non-CPU) path.

    Returns:
        ``(..., N, k)`` int64 indices into the N points of the same cloud.
    """
    *lead, n, dims = coords.shape
    check_k(k, n)
    flat = coords.detach().reshape(-1, n, dims)
    if flat.device.type == "cpu":
        array = flat.to(torch.float32)
        if dims == 1:  # a zero second axis adds exactly 0 to every distance
            array = torch.cat([array, torch.zeros_like(array)], dim=-1)
        index = torch.from_numpy(_knn_grid(np.ascontiguousarray(array.numpy()), k))
    else:
        index = _knn_chunked(flat.float(), k, chunk)
    return index.reshape(*lead, n, k)


@torch.no_grad()
def knn_reference(coords: torch.Tensor, k: int) -> torch.Tensor:
    """Algorithm 1 as written: all pairwise distances + ``topk``; ``O(N^2)`` memory per cloud."""
    *lead, n, dims = coords.shape
    check_k(k, n)
    flat = coords.detach().reshape(-1, n, dims).float()
    d2 = _pairwise_d2(flat, flat)
    keys = _rank_keys(d2, torch.arange(n, device=coords.device))
    index = keys.topk(k, dim=-1, largest=False, sorted=True).values & 0xFFFFFFFF
    return index.reshape(*lead, n, k)
