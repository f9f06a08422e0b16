"""Exact K-nearest neighbours of many small clouds in one Triton kernel (CUDA).

At the paper's size a CloudLSTM step searches ``B x U`` clouds of a few hundred points
(2,304 clouds of 274 at batch 32), dozens of times per training step. In torch ops every
search is a chain of kernels with host synchronisations (the cell list) or a
``clouds x N x N`` key tensor written to memory and ranked by ``topk`` (brute force). Here
one program ranks a block of queries of one cloud against all its points, in registers:

* the ranking rule everywhere else, (squared distance, index) compared lexicographically,
  the point itself first; ``d2`` summed per axis in order with separately rounded
  products (``enable_fp_fusion`` off: a fused multiply-add would round differently from
  :func:`knn_reference`);
* K - 1 passes, each taking the smallest pair above the previous pass's, over tiles of the
  cloud's points: ``O(K N)`` work per query, no memory beyond the ``(R, N, K)`` output;
  block sizes autotuned per (N, K, L) on first use.

Brute force in work, so it is used for clouds up to :data:`MAX_POINTS` points; larger ones
go to the cell-list search (:mod:`cloudlstm.nn.knn_cells`). Without Triton (CPU-only
installs) :func:`available` is false and nothing here runs.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: the torch searches serve every device
    triton = None

MAX_POINTS = 2048  # above this, K passes over the whole cloud cost more than the cell list


def available(coords: torch.Tensor) -> bool:
    """Whether this kernel can search ``coords`` ``(R, N, L)``: CUDA, N small, L = 2 or 3
    (:func:`cloudlstm.nn.knn.knn` pads L = 1 with a zero axis)."""
    return (
        triton is not None
        and coords.is_cuda
        and coords.shape[1] <= MAX_POINTS
        and coords.shape[2] in (2, 3)
    )


if triton is not None:

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
    def _knn_kernel(
        coords_ptr,  # (R, N, L) float32, contiguous, finite
        out_ptr,  # (R, N, K) int64
        n: tl.constexpr,  # a constant: one compiled kernel per cloud size (a data set's N)
        K: tl.constexpr,
        L: tl.constexpr,  # 2 or 3
        BLOCK_Q: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        cloud = tl.program_id(0)
        q = tl.program_id(1) * BLOCK_Q + tl.arange(0, BLOCK_Q)
        q_ok = q < n
        base = coords_ptr + cloud.to(tl.int64) * (n * L)
        out = out_ptr + (cloud.to(tl.int64) * n + q) * K
        tl.store(out, q.to(tl.int64), mask=q_ok)  # the point itself first
        qx = tl.load(base + q * L, mask=q_ok, other=0.0)
        qy = tl.load(base + q * L + 1, mask=q_ok, other=0.0)
        qz = tl.load(base + q * L + (L - 1), mask=q_ok, other=0.0)  # = qy when L == 2
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
            tl.store(out + t, best_p.to(tl.int64), mask=q_ok)


def knn_triton(coords: torch.Tensor, k: int, blocks: tuple[int, int] | None = None) -> torch.Tensor:
    """``(R, N, L)`` float32 CUDA coordinates -> ``(R, N, k)`` int64, equal to
    :func:`cloudlstm.nn.knn.knn_reference` (see the module doc).

    ``blocks``: ``(BLOCK_Q, BLOCK_N)`` instead of the autotuned choice (tests; Triton's
    CPU interpreter cannot autotune).
    """
    r, n, dims = coords.shape
    coords = coords.contiguous()
    out = torch.empty(r, n, k, dtype=torch.int64, device=coords.device)

    def grid(meta: dict) -> tuple[int, int]:
        return (r, triton.cdiv(n, meta["BLOCK_Q"]))

    # no fused multiply-add: it would round d2 differently from knn_reference
    if blocks is None:
        _knn_kernel[grid](coords, out, n=n, K=k, L=dims, enable_fp_fusion=False)
    else:
        _knn_kernel.fn[grid](
            coords, out, n=n, K=k, L=dims, BLOCK_Q=blocks[0], BLOCK_N=blocks[1],
            enable_fp_fusion=False,
        )  # fmt: skip
    return out
