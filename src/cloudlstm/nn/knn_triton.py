"""Exact K-nearest neighbours of many small clouds in one Triton kernel (CUDA).

At the paper's size a CloudLSTM step searches ``B x U`` clouds of a few hundred points
(2,304 clouds of 274 at batch 32), dozens of times per training step. In torch ops every
search is a chain of kernels with host synchronisations (the cell list) or a
``clouds x N x N`` key tensor written to memory and ranked by ``topk`` (brute force). Here
one program ranks a block of queries of one cloud against all its points, in registers:

* keys as everywhere else, ``float32 bits of d2 << 32 | index``, the point itself first;
  ``d2`` summed per axis in order with separately rounded products (``enable_fp_fusion``
  off: a fused multiply-add would round differently from :func:`knn_reference`);
* K - 1 passes, each taking the smallest key above the previous pass's, over tiles of the
  cloud's points: ``O(K N)`` work per query, no memory beyond the ``(R, N, K)`` output.

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
    """Whether this kernel can search ``coords`` ``(R, N, L)`` (a CUDA tensor, small N)."""
    return (
        triton is not None
        and coords.is_cuda
        and coords.shape[1] <= MAX_POINTS
        and coords.shape[1] < 2**31
    )


if triton is not None:
    _NO_KEY = tl.constexpr(0x7FFFFFFFFFFFFFFF)  # an empty slot: ranks after every point

    @triton.jit
    def _knn_kernel(
        coords_ptr,  # (R, N, L) float32, contiguous
        out_ptr,  # (R, N, K) int64
        n: tl.constexpr,  # a constant: one compiled kernel per cloud size (a data set's N)
        K: tl.constexpr,
        L: tl.constexpr,
        BLOCK_Q: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        cloud = tl.program_id(0)
        q = tl.program_id(1) * BLOCK_Q + tl.arange(0, BLOCK_Q)
        q_ok = q < n
        base = coords_ptr + cloud.to(tl.int64) * n * L
        out = out_ptr + (cloud.to(tl.int64) * n + q) * K
        tl.store(out, q.to(tl.int64), mask=q_ok)  # the point itself first
        last = tl.full([BLOCK_Q], -1, tl.int64)  # every other key is >= 0
        for t in range(1, K):
            best = tl.full([BLOCK_Q], _NO_KEY, tl.int64)
            for start in range(0, n, BLOCK_N):
                p = start + tl.arange(0, BLOCK_N)
                p_ok = p < n
                d2 = tl.zeros([BLOCK_Q, BLOCK_N], tl.float32)
                for axis in tl.static_range(L):
                    qc = tl.load(base + q * L + axis, mask=q_ok, other=0.0)
                    pc = tl.load(base + p * L + axis, mask=p_ok, other=0.0)
                    diff = qc[:, None] - pc[None, :]
                    d2 = d2 + diff * diff
                bits = d2.to(tl.int32, bitcast=True).to(tl.int64)
                key = (bits << 32) | p[None, :].to(tl.int64)
                usable = p_ok[None, :] & (p[None, :] != q[:, None]) & (key > last[:, None])
                key = tl.where(usable, key, _NO_KEY)
                best = tl.minimum(best, tl.min(key, axis=1))
            last = best
            tl.store(out + t, best & 0xFFFFFFFF, mask=q_ok)


def knn_triton(coords: torch.Tensor, k: int) -> torch.Tensor:
    """``(R, N, L)`` float32 CUDA coordinates -> ``(R, N, k)`` int64, equal to
    :func:`cloudlstm.nn.knn.knn_reference` (see the module doc)."""
    r, n, dims = coords.shape
    coords = coords.contiguous()
    out = torch.empty(r, n, k, dtype=torch.int64, device=coords.device)
    block_q = 32 if n >= 256 else 16
    block_n = min(256, max(16, triton.next_power_of_2(n)))
    grid = (r, triton.cdiv(n, block_q))
    _knn_kernel[grid](
        coords, out, n=n, K=k, L=dims, BLOCK_Q=block_q, BLOCK_N=block_n, enable_fp_fusion=False
    )
    return out
