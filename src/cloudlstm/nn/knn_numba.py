"""The CPU neighbour searches: numba kernels, run on slices of the clouds by plain Python
threads (:mod:`cloudlstm.nn.threads`, which says why not numba's ``parallel=True``).

Both rank by the keys of :func:`_offer` (squared distance's float32 bits, then point index,
in one int64) and so give the same indices as every other search.

* :func:`search_pairs`, clouds of up to ``knn.PAIRS_MAX_POINTS`` points (a dozen stations,
  a hundred antennas): :func:`_knn_pairs` ranks all pairs, which costs less than setting up
  a grid. Coordinates ``(..., N, L)`` of any strides -> indices ``(..., N, k)``.
* :func:`search_grid`, larger clouds: :func:`_knn_grid`, coordinates ``(R, N, L >= 2)``
  float32 -> indices ``(R, N, k)``. Per cloud, a grid over the bounding box of the first
  two axes with ~K/3 points per cell; an axis whose bins come out crowded (a tight cluster
  plus a far outlier) is re-cut into equal counts. Points are copied into strips of three
  grid rows ordered by column, so the 3 x 3 cells around any cell are one contiguous run
  (3N copies). Each query ranks that tile's ~3K points with branch-free loops, then visits
  rings of further tiles only while a lower bound on their distance (from per-row/column
  coordinate extremes, exact in float32) does not exceed the current K-th distance. Exact,
  memory ``O(N)`` per cloud, ~3K candidates per query for evenly spread points. The grid
  reads NaN as out of range: its caller refuses non-finite coordinates first.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from cloudlstm.nn.knn_finite import NON_FINITE, NonFiniteCoordinatesError
from cloudlstm.nn.threads import run_sliced

_NO_KEY = np.iinfo(np.int64).max  # empty slot: above every (distance, index) key


@numba.njit(cache=True)
def _axis_bins(v, v0, width, g):
    """Bin (column or row) of each value: g equal-width bins over [v0, v0 + width].

    If that leaves one bin crowded (a tight cluster plus a far outlier, say) the bins are
    re-cut to equal counts by rank instead. Either way the bin is monotone in the value,
    which the distance bounds rely on. NaN lands in the last bin.
    """
    n = v.shape[0]
    scale = g / width if width > 0 else 0.0  # float64: a tiny width cannot overflow
    bins = np.empty(n, np.int64)
    count = np.zeros(g, np.int64)
    crowded = 0
    for i in range(n):
        t = (v[i] - v0) * scale
        bins[i] = int(t) if t < g - 1 else g - 1
        count[bins[i]] += 1
        crowded = max(crowded, count[bins[i]])
    if crowded > 3 * n / g + 8:
        # Sort (value, index) keys: float32 bits made monotone for negatives, too.
        keys = np.empty(n, np.int64)
        for i in range(n):
            b = np.int64(np.float32(v[i]).view(np.int32))
            keys[i] = ((b ^ 0x7FFFFFFF if b < 0 else b) << 32) | i
        _shell_sort(keys)
        for r in range(n):
            bins[keys[r] & 0xFFFFFFFF] = r * g // n
    return bins


@numba.njit(cache=True)
def _shell_sort(a):
    """In-place ascending sort; JIT-compiles in a fraction of np.argsort's time."""
    gap = 1
    while gap < a.shape[0] // 3:
        gap = 3 * gap + 1
    while gap > 0:
        for i in range(gap, a.shape[0]):
            x, j = a[i], i
            while j >= gap and a[j - gap] > x:
                a[j] = a[j - gap]
                j -= gap
            a[j] = x
        gap //= 3


@numba.njit(cache=True)
def _half_plane_bounds(v, bins, g):
    """lo[c] = min of v over bins >= c, hi[c] = max over bins <= c (+-inf when empty)."""
    lo = np.empty(g, np.float32)
    hi = np.empty(g, np.float32)
    for c in range(g):
        lo[c], hi[c] = np.inf, -np.inf
    for i in range(v.shape[0]):
        lo[bins[i]] = min(lo[bins[i]], v[i])
        hi[bins[i]] = max(hi[bins[i]], v[i])
    for c in range(g - 2, -1, -1):
        lo[c] = min(lo[c], lo[c + 1])
    for c in range(1, g):
        hi[c] = max(hi[c], hi[c - 1])
    return lo, hi


@numba.njit(cache=True)
def _gap(lo, hi, c, qc, q):
    """Lower bound on |v - q| over the points in bin c and every bin beyond it (away from
    the query's bin qc); 0 for c == qc, inf off the grid.

    Exact in float32: each such point's difference to q rounds to >= the bound, because
    bins are monotone in the value (a point in a higher bin is never below q).
    """
    if c < 0 or c >= lo.shape[0]:
        return np.float32(np.inf)
    if c > qc:
        return lo[c] - q
    if c < qc:
        return q - hi[c]
    return np.float32(0.0)


@numba.njit(cache=True)
def _beats(gap2, worst):
    """Can a point at squared distance >= gap2 still enter a list whose last key is worst?

    Not when gap2 is strictly larger: an equal distance can still win on the lower index.
    """
    return np.float32(gap2).view(np.int32) <= worst >> 32


@numba.njit(cache=True)
def _offer(tiles, tiles_idx, s, e, coords, me, best, dist, bits, keys, merge):
    """Rank tile points s..e-1 together with the first ``merge`` keys of ``best`` (point
    me's sorted keys so far) into ``best``; -> its last key.

    Branch-free loops throughout: insertion into a sorted list mispredicts a branch for
    most of the ~3K candidates, which costs more than re-scanning them K-1 times.
    """
    # 1-D contiguous views starting at 0: numba can drop its negative-index checks and
    # LLVM sees unit strides.
    xs, ys, idx = tiles[0, s:e], tiles[1, s:e], tiles_idx[s:e]
    m = e - s
    for j in range(m):
        dx = xs[j] - coords[me, 0]
        dy = ys[j] - coords[me, 1]
        dist[j] = dx * dx + dy * dy  # float32, per axis in order (nn/ranking.py)
    for l in range(2, tiles.shape[0]):
        zs = tiles[l, s:e]
        for j in range(m):
            diff = zs[j] - coords[me, l]
            dist[j] += diff * diff
    # A non-negative float32's bits order like its value, so one int64 key ranks by
    # (distance, index) exactly. The query itself gets the empty key.
    for j in range(m):
        key = (np.int64(bits[j]) << 32) | idx[j]
        keys[j] = key if idx[j] != me else _NO_KEY
    k1 = best.shape[0]
    for t in range(merge):  # keys kept from the tiles seen before
        keys[m + t] = best[t]
    m += merge
    # K-1 passes of "smallest key above the previous one" (all keys are distinct).
    last = np.int64(-1)
    for t in range(min(k1, m)):
        nxt = _NO_KEY
        for j in range(m):
            nxt = min(nxt, keys[j] if keys[j] > last else _NO_KEY)
        best[t] = last = nxt
    return best[k1 - 1]


@numba.njit(cache=True)
def _knn_cloud(coords, k, out):
    """One cloud: coords (N, L >= 2) float32 -> out (N, k) neighbour indices."""
    n = coords.shape[0]
    if k == 1:  # nothing to search: slot 0 is always the point itself
        for i in range(n):
            out[i, 0] = i
        return
    x0, wx, gx, y0, wy, gy = _grid_shape(coords, k)
    bin_x = _axis_bins(coords[:, 0], x0, wx, gx)
    bin_y = _axis_bins(coords[:, 1], y0, wy, gy)
    lo_x, hi_x = _half_plane_bounds(coords[:, 0], bin_x, gx)
    lo_y, hi_y = _half_plane_bounds(coords[:, 1], bin_y, gy)
    strip, tiles, tiles_idx = _strips(coords, bin_x, bin_y, gx, gy)
    _search(coords, k, bin_x, bin_y, lo_x, hi_x, lo_y, hi_y, strip, tiles, tiles_idx, out)


@numba.njit(cache=True)
def _grid_shape(coords, k):
    """The grid over the bounding box of axes 0 and 1 -> (x0, wx, gx, y0, wy, gy): each
    axis' minimum, width and bin count.

    Shaped like the box, with about K / 3 points per cell (K if the box is flat): the
    3 x 3 (or 3 x 1) cells around a query then hold ~3K points, usually including its K
    nearest.
    """
    n = coords.shape[0]
    x0 = x1 = coords[0, 0]
    y0 = y1 = coords[0, 1]
    for i in range(n):
        x0, x1 = min(x0, coords[i, 0]), max(x1, coords[i, 0])
        y0, y1 = min(y0, coords[i, 1]), max(y1, coords[i, 1])
    wx, wy = np.float64(x1) - x0, np.float64(y1) - y0
    cells = max(1.0, n / (k / 3.0 if wx > 0 and wy > 0 else k))
    fx = fy = 1.0
    if wx > 0 and wy > 0:
        fx, fy = np.sqrt(cells * wx / wy), np.sqrt(cells * wy / wx)
    elif wx > 0:
        fx = cells
    elif wy > 0:
        fy = cells
    gx = int(min(max(fx, 1.0), cells)) if fx == fx else 1  # NaN-safe
    gy = int(min(max(fy, 1.0), cells)) if fy == fy else 1
    return x0, wx, gx, y0, wy, gy


@numba.njit(cache=True)
def _strips(coords, bin_x, bin_y, gx, gy):
    """The points copied into strips -> (strip, tiles, tiles_idx).

    Strip Y (-1 <= Y <= gy) holds the points of grid rows Y-1..Y+1 ordered by column, so
    any 3 rows x 3 columns tile of cells is one contiguous run: 3N copies in all.
    ``strip[(Y + 1) * gx + x]`` is where column x of strip Y starts in ``tiles (L, 3N)``
    (axis-major: the distance loops vectorise) and ``tiles_idx (3N,)`` (point indices).
    """
    n, dims = coords.shape
    strip = np.zeros((gy + 2) * gx + 1, np.int64)
    for i in range(n):
        for y in range(bin_y[i], bin_y[i] + 3):  # strips Y = row - 1 .. row + 1, shifted
            strip[y * gx + bin_x[i] + 1] += 1
    for c in range((gy + 2) * gx):
        strip[c + 1] += strip[c]
    fill = np.empty((gy + 2) * gx, np.int64)
    for c in range((gy + 2) * gx):
        fill[c] = strip[c]
    tiles = np.empty((dims, 3 * n), np.float32)
    tiles_idx = np.empty(3 * n, np.int64)
    for i in range(n):
        for y in range(bin_y[i], bin_y[i] + 3):
            p = fill[y * gx + bin_x[i]]
            fill[y * gx + bin_x[i]] += 1
            for l in range(dims):
                tiles[l, p] = coords[i, l]
            tiles_idx[p] = i
    return strip, tiles, tiles_idx


@numba.njit(cache=True)
def _search(coords, k, bin_x, bin_y, lo_x, hi_x, lo_y, hi_y, strip, tiles, tiles_idx, out):
    """Every point's K nearest (itself first) -> out (N, k), from the grid's bins, bounds
    and strips.

    Per query, r = 0: the tile of 3 x 3 cells centred on the query's cell (usually
    enough); then rings of such tiles at Chebyshev radius r (in tiles), until every point
    not yet seen lies, along x or y alone, beyond the current K-th distance (the test
    cannot rule anything out while fewer than K-1 points are known, as at r = 0). One call per
    cloud, not per query: a call passing a dozen arrays (each reference-counted) costs
    more than a query's search at small K.
    """
    n = coords.shape[0]
    gx, gy = lo_x.shape[0], lo_y.shape[0]
    best = np.empty(k - 1, np.int64)  # sorted keys of the K-1 best others so far
    dist = np.empty(n + k, np.float32)
    bits = dist.view(np.int32)
    keys = np.empty(n + k, np.int64)
    for i in range(n):
        qx, qy = bin_x[i], bin_y[i]
        for j in range(k - 1):
            best[j] = _NO_KEY
        worst = _NO_KEY
        for r in range(max(gx, gy) // 3 + 2):
            gap = min(
                _gap(lo_x, hi_x, qx + 3 * r - 1, qx, coords[i, 0]),
                _gap(lo_x, hi_x, qx - 3 * r + 1, qx, coords[i, 0]),
                _gap(lo_y, hi_y, qy + 3 * r - 1, qy, coords[i, 1]),
                _gap(lo_y, hi_y, qy - 3 * r + 1, qy, coords[i, 1]),
            )
            if not _beats(gap * gap, worst):
                break
            for ty in range(-r, r + 1):
                y = qy + 3 * ty  # tile rows y-1..y+1 = strip y
                if y < -1 or y > gy:
                    continue
                near = y - 1 if ty > 0 else (y + 1 if ty < 0 else y)  # its row nearest qy
                gap_y = _gap(lo_y, hi_y, near, qy, coords[i, 1])
                step = 1 if abs(ty) == r else 2 * r  # ring rows: every tile / both ends
                for tx in range(-r, r + 1, step):
                    x = qx + 3 * tx
                    c0, c1 = max(x - 1, 0), min(x + 1, gx - 1)
                    near = x - 1 if tx > 0 else (x + 1 if tx < 0 else x)
                    gap_x = _gap(lo_x, hi_x, near, qx, coords[i, 0])
                    if c0 <= c1 and _beats(gap_x * gap_x + gap_y * gap_y, worst):
                        s, e = strip[(y + 1) * gx + c0], strip[(y + 1) * gx + c1 + 1]
                        merge = k - 1 if r > 0 else 0  # one call site: one JIT overload
                        worst = _offer(
                            tiles, tiles_idx, s, e, coords, i, best, dist, bits, keys, merge
                        )
        out[i, 0] = i  # the point itself always comes first
        for j in range(k - 1):
            out[i, j + 1] = best[j] & 0xFFFFFFFF


@numba.njit(cache=True, nogil=True)
def _knn_grid(coords: np.ndarray, k: int, out: np.ndarray) -> None:
    """coords (R, N, L >= 2) float32 -> neighbour indices written to out (R, N, k) int64.

    ``nogil``: :func:`search_grid` runs slices of the clouds on threads (:mod:`.threads`).
    """
    for r in range(coords.shape[0]):
        _knn_cloud(coords[r], k, out[r])


@numba.njit(cache=True, nogil=True)
def _knn_pairs(coords: np.ndarray, k: int, out: np.ndarray) -> bool:
    """coords (A, B, N, L) float32 of any strides -> out (A, B, N, k) neighbours (any integer
    type), ranking all N - 1 other points of each query by the keys of :func:`_offer`: the
    same result. Returns False, leaving out unfinished, at a non-finite coordinate.

    Any strides, so that a DConv's per-channel coordinates (a strided view of its cloud)
    are read where they are, without a copy.
    """
    n_pts, dims = coords.shape[2], coords.shape[3]
    keys = np.empty(n_pts, np.int64)
    dist = np.empty(n_pts, np.float32)
    bits = dist.view(np.int32)
    for a in range(coords.shape[0]):
        for b in range(coords.shape[1]):
            c = coords[a, b]
            for j in range(n_pts):
                for axis in range(dims):
                    if not np.isfinite(c[j, axis]):
                        return False
            for i in range(n_pts):
                for j in range(n_pts):
                    dist[j] = 0
                for axis in range(dims):  # float32, per axis in order (nn/ranking.py)
                    q = c[i, axis]
                    for j in range(n_pts):
                        diff = c[j, axis] - q
                        dist[j] += diff * diff
                for j in range(n_pts):
                    keys[j] = (np.int64(bits[j]) << 32) | j
                keys[i] = _NO_KEY
                out[a, b, i, 0] = i
                last = np.int64(-1)
                for t in range(1, k):  # K-1 passes of "smallest key above the previous one"
                    nxt = _NO_KEY
                    for j in range(n_pts):
                        nxt = min(nxt, keys[j] if keys[j] > last else _NO_KEY)
                    last = nxt
                    out[a, b, i, t] = nxt & 0xFFFFFFFF
    return True


def search_pairs(coords: torch.Tensor, k: int, dtype: torch.dtype) -> torch.Tensor:
    """:func:`_knn_pairs` of CPU clouds ``(..., N, L)`` (any strides) on slices of the
    clouds in threads: ``(..., N, k)`` of ``dtype``; refuses non-finite coordinates."""
    *lead, n, dims = coords.shape
    points = coords.detach()
    if points.dtype != torch.float32:
        points = points.float()
    points = points.reshape(-1, 1, n, dims) if len(lead) != 2 else points
    array = points.numpy()
    index = torch.empty(*array.shape[:3], k, dtype=dtype)
    out = index.numpy()
    finite = []
    # a thread for every ~20k pairs at least: below that, the hand-off costs more
    per_slice = max(1, 20_000 // (array.shape[1] * n * n))
    run_sliced(
        len(array),
        lambda a, b: finite.append(_knn_pairs(array[a:b], k, out[a:b])),
        per_slice,
    )
    if not all(finite):
        raise NonFiniteCoordinatesError(NON_FINITE)
    return index.view(*lead, n, k)


def search_grid(flat: torch.Tensor, k: int, dtype: torch.dtype) -> torch.Tensor:
    """:func:`_knn_grid` of CPU clouds ``(R, N, L >= 2)`` float32, finite (the caller
    checks), on slices of the clouds in threads: ``(R, N, k)`` of ``dtype``."""
    array = np.ascontiguousarray(flat.numpy())
    index = torch.empty(*array.shape[:2], k, dtype=dtype)
    out = index.numpy()
    run_sliced(len(array), lambda a, b: _knn_grid(array[a:b], k, out[a:b]), min_slice=16)
    return index
