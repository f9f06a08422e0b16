"""Exact K-nearest-neighbour search for batches of small point clouds.

DConv needs, for every channel of every sample, the K nearest neighbours of each point
among that channel's own points. With hidden states carrying their own coordinates, a
CloudLSTM step searches ``B x U`` clouds (2,304 at the paper's size), so this is on the
hot path.

Ranking rule (identical in every implementation below): the point itself comes first;
the others are ranked by squared Euclidean distance, ties by lower point index. Without
ties the result is therefore permutation-equivariant.

Implementations:

* CPU: numba kernels run on slices of the clouds by plain Python threads. Clouds of up to
  ``PAIRS_MAX_POINTS`` points (a dozen stations, a hundred antennas) rank all pairs, which
  costs less than setting up a grid. Per larger cloud, a grid
  over the bounding box of the first two axes (L = 1 gets a zero second axis) with ~K/3
  points per cell; an axis whose bins come out crowded (a tight cluster plus a far
  outlier) is re-cut into equal counts. Points are copied into strips of three grid rows
  ordered by column, so the 3 x 3 cells around any cell are one contiguous run (3N
  copies). Each query ranks that tile's ~3K points with branch-free loops, then visits
  rings of further tiles only while a lower bound on their distance (from per-row/column
  coordinate extremes, exact in float32) does not exceed the current K-th distance. Exact,
  memory ``O(N)`` per cloud, ~3K candidates per query for evenly spread points.
* other devices (CUDA), or ``method="cells"`` anywhere: the cell-list search of
  :mod:`cloudlstm.nn.knn_cells`, in torch ops: equal-count bins, a 3 x 3 cell window
  first, bounded memory, the same keys and so the same result.
* CUDA clouds of up to 2,048 points: :mod:`cloudlstm.nn.knn_triton`, one Triton kernel
  ranking a block of queries against the whole cloud in registers (the paper's size
  searches thousands of 274-point clouds per call, where the cell list's kernel chain and
  synchronisations dominate).
* ``method="brute"``: brute force, chunked over query points so the distance block is
  ``rows x chunk x N``; ``O(N^2)`` work, kept for the GPU benchmark's comparison.
* :func:`knn_reference`: the plain ``cdist`` + ``topk`` of Algorithm 1, kept for tests
  and the benchmark.

Under ``torch.compile`` a search is one operator of the graph (``cloudlstm::knn``, or
``cloudlstm::knn_triton``, which CUDA graphs can capture), not a graph break.

Threads rather than numba's ``parallel=True``: see :mod:`cloudlstm.nn.threads`.
"""

from __future__ import annotations

import numbers
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numba
import numpy as np
import torch

from cloudlstm.errors import UserError
from cloudlstm.nn import knn_triton
from cloudlstm.nn.knn_cells import knn_cells
from cloudlstm.nn.ranking import ranking_keys, squared_distances
from cloudlstm.nn.threads import run_sliced


class NeighbourCountError(UserError):
    """K is not a number of neighbours, or larger than the number of points in the cloud.

    A user's error wherever it is raised: no model of this package shrinks a cloud, so K
    exceeds N only through ``model.k`` and the points of the data (or of a forecast's
    history), and it is reported as one line. Still a ``ValueError``.
    """


class NonFiniteCoordinatesError(ValueError):
    """Neighbours were asked among NaN / inf coordinates (a diverged model's features)."""


def check_k_option(k: Any, dilation: Any = 1) -> int:
    """``k`` as a model or layer is built with it: refuse what no cloud can have.

    Every constructor that takes ``k`` (the CloudLSTM family, CloudCNN, the kNN models,
    PointCNN, PointLSTM, and their DConv / X-Conv layers) checks it here, before a tensor is
    sized by it, so ``model.k=0`` or ``-1`` is one line naming the option rather than a
    division by zero or a negative dimension. ``dilation`` (X-Conv's) likewise. Whether K
    fits the data's points is checked once their number is known
    (:func:`cloudlstm.models.build.build_model`, then :func:`check_k` per cloud).

    Raises:
        NeighbourCountError: ``k`` or ``dilation`` is not a whole number >= 1.
    """
    if not _is_count(k):
        raise NeighbourCountError(
            f"model.k={k!r} is not a number of neighbours: set it to a whole number from 1 "
            "(each point alone) to the number of points (the paper's CloudLSTM uses model.k=9)."
        )
    if not _is_count(dilation):
        raise NeighbourCountError(
            f"model.dilation={dilation!r} is not a dilation: set it to a whole number >= 1 "
            "(1: the K nearest points), with model.k * model.dilation at most the number of "
            "points."
        )
    return int(k)


def _is_count(value: Any) -> bool:
    """A whole number >= 1 (not a bool)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1


def check_k(k: int, num_points: int) -> None:
    """Raise a clear error when K neighbours cannot be found among ``num_points`` points."""
    check_k_option(k)
    if k > num_points:
        raise NeighbourCountError(
            f"K={k} nearest neighbours requested but the point cloud has only "
            f"{num_points} points. Set model.k <= {num_points} (e.g. model.k={num_points})."
        )


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
    cannot stop anything while fewer than K-1 points are known, as at r = 0). One call per
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

    ``nogil``: :func:`knn` runs slices of the clouds on threads (:mod:`.threads`).
    """
    for r in range(coords.shape[0]):
        _knn_cloud(coords[r], k, out[r])


# Up to this many points a CPU cloud is searched by all pairs (:func:`_knn_pairs`): its N^2
# distances cost less than the grid's set-up (bins, bounds, strips: a dozen small arrays
# per cloud). One thread, K = 3: 0.34 against 1.39 us a cloud at N = 12, 3.5 against 5.3
# at 64, 9.3 against 7.5 at 100 (K = 9: 0.9/1.8, 7.6/9.7, 19.6/14.7; 2-vCPU dev machine,
# 2026-11-27, 1,152 random clouds, best of 5).
PAIRS_MAX_POINTS = 64


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


def _knn_small(coords: torch.Tensor, k: int, dtype: torch.dtype) -> torch.Tensor:
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
        raise NonFiniteCoordinatesError(_NON_FINITE)
    return index.view(*lead, n, k)


def _knn_chunked(coords: torch.Tensor, k: int, chunk: int) -> torch.Tensor:
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


METHODS = ("auto", "numba", "cells", "triton", "brute")

_NON_FINITE = "kNN: the point coordinates hold NaN or inf."


class _DeferredBlock:
    """The open :func:`deferred_finite_check`: device tensors, nonzero where a search met
    a non-finite coordinate."""

    def __init__(self) -> None:
        self.bad: list[torch.Tensor] = []
        self._flags: dict[torch.device, torch.Tensor] = {}

    def flag(self, device: torch.device) -> torch.Tensor:
        """The block's int32 flag on ``device``, which Triton searches set in place."""
        if device not in self._flags:
            self._flags[device] = torch.zeros(1, dtype=torch.int32, device=device)
            self.bad.append(self._flags[device])
        return self._flags[device]


_deferred = threading.local()  # .block: the open _DeferredBlock of this thread, or None


def _open_block() -> _DeferredBlock | None:
    return getattr(_deferred, "block", None)


def _check_finite(flat: torch.Tensor, deferrable: bool) -> None:
    """Refuse NaN / inf coordinates, checked in float32 where the searches run: the grid
    kernels would return indices out of range.

    On a GPU the check is a host synchronisation; inside :func:`deferred_finite_check`, a
    search whose result stays in range on NaN (brute force) leaves it to the block's end.
    """
    block = _open_block()
    if deferrable and block is not None:
        block.bad.append(~torch.isfinite(flat).all())
    elif not bool(torch.isfinite(flat).all()):
        raise NonFiniteCoordinatesError(_NON_FINITE)


def _search_triton(flat: torch.Tensor, k: int, dtype: torch.dtype) -> torch.Tensor:
    """The Triton search, which flags non-finite coordinates in the same pass: into the open
    block's flag, or into its own, checked at once (one sync, as :func:`_check_finite`)."""
    block = _open_block()
    if block is None:
        flag = torch.zeros(1, dtype=torch.int32, device=flat.device)
    else:
        flag = block.flag(flat.device)
    index = knn_triton.knn_triton(flat, k, dtype=dtype, nonfinite=flag)
    if block is None and bool(flag):
        raise NonFiniteCoordinatesError(_NON_FINITE)
    return index


@contextmanager
def deferred_finite_check() -> Iterator[None]:
    """One finiteness check for all the searches in the block, at its end.

    A CloudLSTM forward searches dozens of clouds; on a GPU, checking each one's
    coordinates on the host would stall the launch queue dozens of times per step (and
    makes the step impossible to capture in a CUDA graph). Inside this block the Triton
    and brute-force searches, which return in-range indices on NaN coordinates, record a
    device flag instead (the Triton kernel sets one flag per block as it reads the
    coordinates, no extra launch); the block's end raises
    :class:`NonFiniteCoordinatesError` if any is set, with one synchronisation per flag.
    Nothing is checked while a CUDA graph is being captured (a synchronisation is not
    allowed there). Blocks nest: the outermost checks.
    """
    if _open_block() is not None:  # nested: the outer block checks
        yield
        return
    _deferred.block = block = _DeferredBlock()
    try:
        yield
    finally:
        _deferred.block = None
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return
    if any(bool(bad.any()) for bad in block.bad):
        raise NonFiniteCoordinatesError(_NON_FINITE)


def knn(
    coords: torch.Tensor,
    k: int,
    method: str = "auto",
    chunk: int = 1024,
    dtype: torch.dtype = torch.int64,
) -> torch.Tensor:
    """Indices of the K nearest neighbours of every point, the point itself first.

    Args:
        coords: ``(..., N, L)`` point coordinates; leading dims index independent clouds.
        k: number of neighbours, ``1 <= k <= N``.
        method: ``auto`` (numba on CPU; on CUDA the Triton kernel for clouds of up to
            ``knn_triton.MAX_POINTS`` points, else the cell list), ``numba`` (CPU only),
            ``triton`` (CUDA only), ``cells`` or ``brute`` (any device). All give the same
            indices.
        chunk: query points per block for ``brute``.
        dtype: of the indices; narrower types (int16 up to 32,768 points) save memory, and
            the Triton kernel writes them directly (no conversion launch).

    Returns:
        ``(..., N, k)`` indices into the N points of the same cloud.

    Under ``torch.compile`` the search is one opaque operator of the graph
    (:func:`_knn_op`) instead of a graph break.
    """
    check_k(k, coords.shape[-2])
    if method not in METHODS:
        raise ValueError(f"knn: method={method!r} is not one of {METHODS}.")
    if torch.compiler.is_compiling():
        *_, n, dims = coords.shape
        triton = method == "auto" and knn_triton.fits(coords.is_cuda, n, max(dims, 2))
        op = _knn_triton_op if triton else _knn_op
        return op(coords.detach(), k, method, chunk, dtype)
    return _knn(coords, k, method, chunk, dtype, in_graph=False)


def _as_searched(coords: torch.Tensor) -> torch.Tensor:
    """coords ``(..., N, L)`` as the searches take them: ``(R, N, max(L, 2))`` float32 (a
    zero second axis adds exactly 0 to every distance), whatever the autocast."""
    *lead, n, dims = coords.shape
    flat = coords.detach().reshape(-1, n, dims).float()
    return torch.cat([flat, torch.zeros_like(flat)], dim=-1) if dims == 1 else flat


def _knn_numba(flat: torch.Tensor, k: int, dtype: torch.dtype) -> torch.Tensor:
    """The grid search of ``(R, N, L)`` CPU clouds, written in ``dtype``, on slices of the
    clouds in threads."""
    array = np.ascontiguousarray(flat.numpy())
    index = torch.empty(*array.shape[:2], k, dtype=dtype)
    out = index.numpy()
    run_sliced(len(array), lambda a, b: _knn_grid(array[a:b], k, out[a:b]), min_slice=16)
    return index


@torch.compiler.disable  # numba, and a data-dependent loop: not for a compiled graph
@torch.no_grad()
def _knn(
    coords: torch.Tensor, k: int, method: str, chunk: int, dtype: torch.dtype, in_graph: bool
) -> torch.Tensor:
    """:func:`knn`. ``in_graph``: run as an operator of a compiled graph, where no
    :func:`deferred_finite_check` is open and the Triton search does not synchronise."""
    n = coords.shape[-2]
    if method in ("auto", "numba") and coords.device.type == "cpu" and n <= PAIRS_MAX_POINTS:
        return _knn_small(coords, k, dtype)
    flat = _as_searched(coords)
    if method == "auto":
        if flat.device.type == "cpu":
            method = "numba"
        else:
            method = "triton" if knn_triton.available(flat) else "cells"
    if method != "triton":  # the Triton kernel checks as it reads
        _check_finite(flat, deferrable=method == "brute" and not in_graph)
    if method == "numba":
        if flat.device.type != "cpu":
            raise ValueError("knn: method='numba' runs on CPU tensors only.")
        index = _knn_numba(flat, k, dtype)
    elif method == "triton":
        if not knn_triton.available(flat):
            raise ValueError(
                f"knn: method='triton' needs Triton, a CUDA tensor and N <= "
                f"{knn_triton.MAX_POINTS}; got N={n} on {flat.device}."
            )
        if in_graph:  # unchecked (NaN ranks last, indices stay in range): no sync to capture
            index = knn_triton.knn_triton(flat, k, dtype=dtype)
        else:
            index = _search_triton(flat, k, dtype)
    elif method == "cells":
        index = knn_cells(flat.contiguous(), k)
    else:
        index = _knn_chunked(flat, k, chunk)
    return index.to(dtype).reshape(*coords.shape[:-1], k)


# Compiled graphs take a search as one opaque operator. Most searches check the coordinates
# with a host synchronisation, which a CUDA graph cannot hold (tagged so, where this torch
# has the tag); the Triton search has no synchronisation and can be captured.
_UNSAFE_IN_CUDA_GRAPHS = tuple(
    tag for tag in [getattr(torch.Tag, "cudagraph_unsafe", None)] if tag is not None
)


@torch.library.custom_op("cloudlstm::knn", mutates_args=(), tags=_UNSAFE_IN_CUDA_GRAPHS)
def _knn_op(
    coords: torch.Tensor, k: int, method: str, chunk: int, dtype: torch.dtype
) -> torch.Tensor:
    """:func:`knn` as an operator of a compiled graph (contiguous, as its shape function
    says: the compiled code indexes it by those strides)."""
    return _knn(coords, k, method, chunk, dtype, in_graph=True).contiguous()


@torch.library.custom_op("cloudlstm::knn_triton", mutates_args=())
def _knn_triton_op(
    coords: torch.Tensor, k: int, method: str, chunk: int, dtype: torch.dtype
) -> torch.Tensor:
    """:func:`knn`'s Triton search as an operator of a compiled graph, capturable in a
    CUDA graph: NaN / inf coordinates are not refused here (they rank last); a diverged
    model shows in its loss instead."""
    return _knn(coords, k, "triton", chunk, dtype, in_graph=True).contiguous()


@_knn_op.register_fake
@_knn_triton_op.register_fake
def _knn_shape(
    coords: torch.Tensor, k: int, method: str, chunk: int, dtype: torch.dtype
) -> torch.Tensor:
    return coords.new_empty((*coords.shape[:-1], k), dtype=dtype)


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
