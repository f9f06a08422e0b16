"""Exact K-nearest neighbours of many small clouds in one Triton kernel (CUDA).

At the paper's size a CloudLSTM step searches ``B x U`` clouds of a few hundred points
(2,304 clouds of 274 at batch 32), dozens of times per training step. In torch ops every
search is a chain of kernels with host synchronisations (the cell list) or a
``clouds x N x N`` key tensor written to memory and ranked by ``topk`` (brute force). Here
one program ranks a block of queries of one cloud against all its points, in registers,
with the ranking rule of every other search: (squared distance, index) compared
lexicographically, the point itself first; ``d2`` summed per axis in order with separately
rounded products (``enable_fp_fusion`` off: a fused multiply-add would round differently
from :func:`knn_reference`). Three algorithms, all exact:

* ``sorted`` (the default): one pass over the points; each query keeps its K - 1 best
  points sorted, as K - 1 distance and K - 1 index registers (int32) of one thread, and a
  point it beats is inserted in order, the last dropping out. Points come in index order,
  so comparing distances alone ranks by (distance, index). 53 machine instructions per
  (query, point) pair at K = 9 (sm_90, Triton 3.6; 37 at K = 6), 40 registers.
* ``insert``: one pass; each query keeps its K - 1 best int64 keys (distance bits << 32 |
  index) unordered and replaces the worst when a point beats it, then ranks them. 52 PTX
  instructions per pair at K = 9, but 64-bit compares and selects: 111 machine
  instructions under Triton 3.6 (78 under 3.9; at K = 6 as many, its slots rounded up to
  8), 56 registers.
* ``passes``: K - 1 passes over tiles of the cloud's points, each taking the smallest pair
  above the previous pass's with a min-reduction across the tile's threads (shuffles):
  34-39 PTX instructions per pair and pass over the autotuner's tile shapes, 270-310 per
  pair at K = 9. Measured on an H100: 2.5 ms for the paper's 2,304 clouds of 274 points.

On an H200 ``insert`` took 1.22 ms for those 2,304 clouds against ``passes``' 2.58 ms, and
1.95 against 3.96 ms for 288 clouds of 1,000 points (docs/performance.md). ``sorted``,
the default since, took 0.33 ms for the 1,152 clouds of 274 points a model's call searches,
against ``insert``'s 0.76 and ``passes``' 1.33 (H200, 2026-12-04, d5e8a81).
``benchmarks/bench_gpu.py`` times all three, and ``knn_triton(..., algorithm=...)`` or
:data:`DEFAULT_ALGORITHM` selects another.

A NaN distance (NaN coordinates) ranks as +inf: the indices stay in range, so that a
diverged model's search cannot read out of bounds while :func:`cloudlstm.nn.knn.knn`
defers its finiteness check (no host synchronisation per search on the GPU), or, in a
compiled graph, leaves it to the training loss check.

Block sizes are autotuned per (N, K, L) on first use. Brute force in work, so these kernels
serve clouds up to :data:`MAX_POINTS` points; larger ones go to the cell-list search
(:mod:`cloudlstm.nn.knn_cells`). Without Triton (CPU-only installs) :func:`available` is
false and nothing here runs.
"""

from __future__ import annotations

import torch

from cloudlstm.nn import triton_switch
from cloudlstm.nn.triton_switch import tl, triton

MAX_POINTS = 2048  # above this, K passes over the whole cloud cost more than the cell list


def available(coords: torch.Tensor) -> bool:
    """Whether this kernel can search ``coords`` ``(R, N, L)``: CUDA, N small, L = 2 or 3
    (:func:`cloudlstm.nn.knn.knn` pads L = 1 with a zero axis)."""
    return fits(coords.is_cuda, coords.shape[1], coords.shape[2])


def fits(is_cuda: bool, points: int, dims: int) -> bool:
    """:func:`available` from whether the clouds are on CUDA, their point count and their
    (padded) dimensions."""
    return triton_switch.ENABLED and is_cuda and points <= MAX_POINTS and dims in (2, 3)


if triton is not None:

    @triton.jit
    def _query_block(
        coords_ptr, out_ptr, nonfinite_ptr, n: tl.constexpr, K: tl.constexpr,
        L: tl.constexpr, BLOCK_Q: tl.constexpr,
    ):  # fmt: skip
        """This program's queries: cloud ``program_id(0)``, block ``program_id(1)``. Writes
        each query's first neighbour (itself), and 1 to ``nonfinite_ptr`` if a query's
        coordinate is NaN or inf (every point is a query of one program, so this checks
        the whole input) -> (q, mask, the cloud's coordinates, the queries' output rows,
        their x, y and z; z = y when L == 2)."""
        cloud = tl.program_id(0)
        q = tl.program_id(1) * BLOCK_Q + tl.arange(0, BLOCK_Q)
        q_ok = q < n
        base = coords_ptr + cloud.to(tl.int64) * (n * L)
        out = out_ptr + (cloud.to(tl.int64) * n + q) * K
        tl.store(out, q.to(out_ptr.dtype.element_ty), mask=q_ok)  # the point itself first
        qx = tl.load(base + q * L, mask=q_ok, other=0.0)
        qy = tl.load(base + q * L + 1, mask=q_ok, other=0.0)
        qz = tl.load(base + q * L + (L - 1), mask=q_ok, other=0.0)
        # x - x is 0 for every finite x, NaN for NaN and +-inf
        bad = ((qx - qx) != 0) | ((qy - qy) != 0) | ((qz - qz) != 0)
        tl.store(nonfinite_ptr, 1, mask=tl.max(bad.to(tl.int32), axis=0) > 0)
        return q, q_ok, base, out, qx, qy, qz

    @triton.jit
    def _distance(base, p, qx, qy, qz, L: tl.constexpr):
        """Squared distance of the queries to point ``p``, summed per axis in order with
        each product rounded, as :func:`knn_reference` sums it; NaN ranks as +inf."""
        dx = qx - tl.load(base + p * L)
        dy = qy - tl.load(base + p * L + 1)
        d2 = dx * dx + dy * dy
        if L == 3:
            dz = qz - tl.load(base + p * L + 2)
            d2 = d2 + dz * dz
        return tl.where(d2 == d2, d2, float("inf"))

    # insert's and sorted's block shapes: each thread keeps its queries' slots in registers
    _QUERY_PER_THREAD = [
        triton.Config({"BLOCK_Q": bq}, num_warps=w)
        for bq in (32, 64, 128, 256)
        for w in (1, 2, 4, 8)
        if 32 * w <= bq  # at least one query per thread
    ]

    @triton.autotune(  # per cloud size and K, once per process; the output is write-only
        configs=[
            triton.Config({"BLOCK_Q": bq, "BLOCK_N": bn}, num_warps=w)
            for bq in (16, 32, 64)
            for bn in (32, 64, 128)
            for w in (4, 8)
            if bq * bn <= 4096
        ],
        key=["n", "K", "L"],
    )
    @triton.jit
    def _knn_passes_kernel(
        coords_ptr,  # (R, N, L) float32, contiguous
        out_ptr,  # (R, N, K) int16, int32 or int64
        nonfinite_ptr,  # int32 flag, set to 1 if a coordinate is NaN or inf
        n: tl.constexpr,  # a constant: one compiled kernel per cloud size (a data set's N)
        K: tl.constexpr,
        L: tl.constexpr,  # 2 or 3
        BLOCK_Q: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        q, q_ok, base, out, qx, qy, qz = _query_block(
            coords_ptr, out_ptr, nonfinite_ptr, n, K, L, BLOCK_Q
        )
        # The (distance, index) of the previous pass: each pass takes the smallest pair
        # above it. Pairs of 32-bit values compared lexicographically rank exactly like
        # the int64 keys of knn_reference (bits of a non-negative float32 order as its
        # value), at half the width.
        last_d = tl.full([BLOCK_Q], -1.0, tl.float32)
        last_p = tl.full([BLOCK_Q], -1, tl.int32)
        for t in range(1, K):
            best_d = tl.full([BLOCK_Q], float("inf"), tl.float32)
            best_p = tl.full([BLOCK_Q], n, tl.int32)  # n: none found yet
            for start in range(0, n, BLOCK_N):
                p = start + tl.arange(0, BLOCK_N)
                p_ok = p < n
                dx = qx[:, None] - tl.load(base + p * L, mask=p_ok, other=0.0)[None, :]
                dy = qy[:, None] - tl.load(base + p * L + 1, mask=p_ok, other=0.0)[None, :]
                d2 = dx * dx + dy * dy  # per axis in order, each product rounded
                if L == 3:
                    dz = qz[:, None] - tl.load(base + p * L + 2, mask=p_ok, other=0.0)[None, :]
                    d2 = d2 + dz * dz
                d2 = tl.where(d2 == d2, d2, float("inf"))  # NaN ranks as +inf
                pp = p[None, :]
                ld, lp = last_d[:, None], last_p[:, None]
                after = (d2 > ld) | ((d2 == ld) & (pp > lp))
                usable = p_ok[None, :] & (pp != q[:, None]) & after
                d2 = tl.where(usable, d2, float("inf"))
                tile_d = tl.min(d2, axis=1)
                tile_p = tl.min(tl.where(usable & (d2 == tile_d[:, None]), pp, n), axis=1)
                better = (tile_d < best_d) | ((tile_d == best_d) & (tile_p < best_p))
                best_d = tl.where(better, tile_d, best_d)
                best_p = tl.where(better, tile_p, best_p)
            last_d, last_p = best_d, best_p
            tl.store(out + t, best_p.to(out_ptr.dtype.element_ty), mask=q_ok)

    @triton.autotune(configs=_QUERY_PER_THREAD, key=["n", "K", "L"])
    @triton.jit
    def _knn_insert_kernel(
        coords_ptr,  # (R, N, L) float32, contiguous
        out_ptr,  # (R, N, K) int16, int32 or int64
        nonfinite_ptr,  # int32 flag, set to 1 if a coordinate is NaN or inf
        n: tl.constexpr,
        K: tl.constexpr,
        L: tl.constexpr,  # 2 or 3
        KP: tl.constexpr,  # slots per query: K - 1 rounded up to a power of two (>= 1)
        BLOCK_Q: tl.constexpr,
    ):
        q, q_ok, base, out, qx, qy, qz = _query_block(
            coords_ptr, out_ptr, nonfinite_ptr, n, K, L, BLOCK_Q
        )
        if K > 1:
            # Each query's KP best keys so far, unordered: (distance bits << 32) | index,
            # ranked like knn_reference's keys. They start as distinct keys above any
            # point's (so exactly one slot is "the worst"); KP may exceed K - 1, which only
            # keeps a few more candidates than needed. Shaped (KP, BLOCK_Q), not
            # (BLOCK_Q, KP): Triton then lays a query's slots out in one thread (lanes run
            # along the last axis), so the max and the replacement need no shuffles and
            # no shared memory.
            empty = 0x7FFFFFFFFFFFFFFF - tl.arange(0, KP).to(tl.int64)
            slots = tl.zeros([KP, BLOCK_Q], tl.int64) + empty[:, None]
            worst = tl.max(slots, axis=0)
            for p in range(0, n):  # in index order: an equal distance never displaces
                d2 = _distance(base, p, qx, qy, qz, L)
                key = (d2.to(tl.int32, bitcast=True).to(tl.int64) << 32) | p
                take = (key < worst) & (q != p)
                slots = tl.where(take[None, :] & (slots == worst[None, :]), key[None, :], slots)
                worst = tl.max(slots, axis=0)
            for t in range(1, K):  # the K - 1 smallest keys, in order
                smallest = tl.min(slots, axis=0)
                index = smallest.to(tl.int32)  # the key's low half
                tl.store(out + t, index.to(out_ptr.dtype.element_ty), mask=q_ok)
                slots = tl.where(slots == smallest[None, :], 0x7FFFFFFFFFFFFFFF, slots)

    @triton.autotune(configs=_QUERY_PER_THREAD, key=["n", "K", "L"])
    @triton.jit
    def _knn_sorted_kernel(
        coords_ptr,  # (R, N, L) float32, contiguous
        out_ptr,  # (R, N, K) int16, int32 or int64
        nonfinite_ptr,  # int32 flag, set to 1 if a coordinate is NaN or inf
        n: tl.constexpr,
        K: tl.constexpr,
        L: tl.constexpr,  # 2 or 3
        BLOCK_Q: tl.constexpr,
    ):
        q, q_ok, base, out, qx, qy, qz = _query_block(
            coords_ptr, out_ptr, nonfinite_ptr, n, K, L, BLOCK_Q
        )
        if K > 1:
            # Each query's K - 1 best points so far, sorted by (distance, index), as K - 1
            # distance registers (the float's bits: a distance >= 0 orders as its int32
            # bits) and K - 1 index registers of one thread. Points come in index order,
            # so a point goes after every kept one of equal distance: comparing distances
            # alone ranks by (distance, index). FAR, above every distance's bits (+inf's
            # are 0x7F800000), marks a free slot and the query itself.
            FAR: tl.constexpr = 0x7FFFFFFF
            dist = (tl.full([BLOCK_Q], FAR, tl.int32),) * (K - 1)
            index = (tl.zeros([BLOCK_Q], tl.int32),) * (K - 1)
            for p in range(0, n):
                d2 = _distance(base, p, qx, qy, qz, L)
                bits = tl.where(q != p, d2.to(tl.int32, bitcast=True), FAR)
                # insert: every slot the point beats takes the one before it (the first,
                # the point), 5 32-bit instructions a slot
                carry_dist, carry_index = bits, tl.zeros([BLOCK_Q], tl.int32) + p
                kept_dist, kept_index = (), ()
                for t in tl.static_range(K - 1):
                    beaten = bits < dist[t]
                    kept_dist = kept_dist + (tl.minimum(carry_dist, dist[t]),)
                    kept_index = kept_index + (tl.where(beaten, carry_index, index[t]),)
                    carry_dist = tl.maximum(carry_dist, dist[t])
                    carry_index = tl.where(beaten, index[t], carry_index)
                dist, index = kept_dist, kept_index
            for t in tl.static_range(1, K):
                tl.store(out + t, index[t - 1].to(out_ptr.dtype.element_ty), mask=q_ok)


ALGORITHMS = ("passes", "insert", "sorted")
DEFAULT_ALGORITHM = "sorted"  # 2.3x faster than insert on an H200 (module doc)


def knn_triton(
    coords: torch.Tensor,
    k: int,
    blocks: dict[str, int] | None = None,
    algorithm: str | None = None,
    dtype: torch.dtype = torch.int64,
    nonfinite: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(R, N, L)`` float32 CUDA coordinates -> ``(R, N, k)`` indices of type ``dtype``
    (written as such: no conversion afterwards), equal to
    :func:`cloudlstm.nn.knn_brute.knn_reference` (see the module doc).

    ``nonfinite``: a one-element int32 tensor on the device, set to 1 if a coordinate is NaN
    or inf (never reset: one flag can serve many searches), checked in the same pass
    instead of by ``torch.isfinite(...).all()``, a chain of extra kernels.

    ``blocks``: the block sizes instead of the autotuned choice (tests; Triton's CPU
    interpreter cannot autotune): ``BLOCK_Q`` and ``BLOCK_N`` for ``passes``, ``BLOCK_Q``
    for ``insert`` and ``sorted``. ``algorithm``: one of :data:`ALGORITHMS`, default
    :data:`DEFAULT_ALGORITHM`.
    """
    algorithm = algorithm or DEFAULT_ALGORITHM
    if algorithm not in ALGORITHMS:
        raise ValueError(f"knn_triton: algorithm={algorithm!r} is not one of {ALGORITHMS}.")
    r, n, dims = coords.shape
    coords = coords.contiguous()
    out = torch.empty(r, n, k, dtype=dtype, device=coords.device)
    if nonfinite is None:
        nonfinite = torch.zeros(1, dtype=torch.int32, device=coords.device)

    def grid(meta: dict) -> tuple[int, int]:
        return (r, triton.cdiv(n, meta["BLOCK_Q"]))

    kernel, sizes = _knn_passes_kernel, {"n": n, "K": k, "L": dims}
    if algorithm == "insert":
        kernel = _knn_insert_kernel
        sizes["KP"] = triton.next_power_of_2(max(k - 1, 1))
    elif algorithm == "sorted":
        kernel = _knn_sorted_kernel
    if blocks is not None:
        kernel, sizes = kernel.fn, {**sizes, **blocks}
    # no fused multiply-add: it would round d2 differently from knn_reference
    kernel[grid](coords, out, nonfinite, **sizes, enable_fp_fusion=False)
    return out
