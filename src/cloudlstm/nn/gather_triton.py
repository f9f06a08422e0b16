"""DConv's neighbourhood gather as one Triton kernel each way (CUDA).

The torch path of :func:`cloudlstm.nn.dconv.gather_neighbourhoods` builds a flat row index
from the neighbour indices (two ``arange``, two products, two sums, a copy to make it
contiguous) before its ``index_select``, and its backward zero-fills and ``index_add``\\ s:
about ten launches per DConv call, 73 calls per paper-size training step. This is the CUDA
counterpart of the numba :func:`cloudlstm.nn.kernels.gather_neighbours`: it reads the
neighbour indices where they are, in any integer type and strides, and writes the rows in
one pass; the backward adds each row entry back into its source with a relaxed
``atomic_add`` (a reduction: no barrier, no value returned).

Float addition in another order: like ``index_add_`` on CUDA, the backward's sums are not
bit-reproducible between runs. Under ``torch.use_deterministic_algorithms(True)``
(``trainer.deterministic=true``) :func:`available` is false and the torch path, which then
runs deterministically, is used.
"""

from __future__ import annotations

import torch
from torch.autograd.function import FunctionCtx, once_differentiable

from cloudlstm.nn import triton_switch
from cloudlstm.nn.triton_switch import tl, triton

BLOCK = 512  # neighbour entries per program


def available(cloud: torch.Tensor) -> bool:
    """Whether these kernels gather ``cloud``: Triton, CUDA, and no deterministic mode."""
    return (
        triton_switch.ENABLED
        and cloud.is_cuda
        and not torch.are_deterministic_algorithms_enabled()
        and not torch.compiler.is_compiling()  # a compiled DConv keeps the torch ops
    )


if triton is not None:

    @triton.jit
    def _entries(
        nb_ptr, s_b, s_n, s_u, s_k, total,
        N: tl.constexpr, U: tl.constexpr, K: tl.constexpr, BLOCK: tl.constexpr,
        WIDE: tl.constexpr,
    ):  # fmt: skip
        """Entries (b, n, u, k) of this program in output order -> (entry, row of the
        source point in (B*N*U, F), mask). In int32 unless ``WIDE``, and N, U, K known at
        compile time: a 64-bit division, or one by a number known only at run time,
        takes dozens of machine instructions: 154-162 an entry in all before, 72-78 now
        (sm_90, nvdisasm)."""
        program = tl.program_id(0)
        if WIDE:
            program = program.to(tl.int64)
        e = program * BLOCK + tl.arange(0, BLOCK)
        mask = e < total
        k, u = e % K, (e // K) % U
        n, b = (e // (K * U)) % N, e // (K * U * N)
        nb = tl.load(nb_ptr + b * s_b + n * s_n + u * s_u + k * s_k, mask=mask, other=0)
        return e, (b * N + nb.to(e.dtype)) * U + u, mask

    @triton.jit
    def _gather_kernel(
        src_ptr, nb_ptr, out_ptr, s_b, s_n, s_u, s_k, total,
        N: tl.constexpr, U: tl.constexpr, K: tl.constexpr, F: tl.constexpr, BLOCK: tl.constexpr,
        WIDE: tl.constexpr,
    ):  # fmt: skip
        e, row, mask = _entries(nb_ptr, s_b, s_n, s_u, s_k, total, N, U, K, BLOCK, WIDE)
        for j in tl.static_range(F):
            value = tl.load(src_ptr + row * F + j, mask=mask)
            tl.store(out_ptr + e * F + j, value, mask=mask)

    @triton.jit
    def _scatter_kernel(
        grad_out_ptr, nb_ptr, grad_src_ptr, s_b, s_n, s_u, s_k, total,
        N: tl.constexpr, U: tl.constexpr, K: tl.constexpr, F: tl.constexpr, BLOCK: tl.constexpr,
        WIDE: tl.constexpr,
    ):  # fmt: skip
        e, row, mask = _entries(nb_ptr, s_b, s_n, s_u, s_k, total, N, U, K, BLOCK, WIDE)
        for j in tl.static_range(F):
            grad = tl.load(grad_out_ptr + e * F + j, mask=mask).to(tl.float32)
            # relaxed: the sums need atomicity, not ordering (the kernel's end publishes
            # them). The default, acq_rel, compiles each add to a GPU-wide barrier, an
            # atomic that returns its old value and an invalidation of the L1 cache (sm_90)
            tl.atomic_add(grad_src_ptr + row * F + j, grad, mask=mask, sem="relaxed")


def _launch(kernel, first: torch.Tensor, neighbours: torch.Tensor, second: torch.Tensor, f: int):
    """``kernel`` over every neighbour entry: gather reads ``first`` and writes ``second``;
    scatter reads the gradient ``first`` and adds into ``second``."""
    _, n, u, k = neighbours.shape
    total = neighbours.numel()
    wide = triton_switch.wide_offsets(total, BLOCK, f)
    kernel[(triton.cdiv(total, BLOCK),)](
        first, neighbours, second, *neighbours.stride(), total, n, u, k, f, BLOCK, wide
    )


class _GatherNeighbours(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, cloud: torch.Tensor, neighbours: torch.Tensor) -> torch.Tensor:
        b, n, u, f = cloud.shape
        cloud = cloud.contiguous()
        out = torch.empty(
            b * n, u * neighbours.shape[3] * f, dtype=cloud.dtype, device=cloud.device
        )
        _launch(_gather_kernel, cloud, neighbours, out, f)
        ctx.save_for_backward(neighbours)
        ctx.cloud = (cloud.shape, cloud.dtype)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_out: torch.Tensor) -> tuple[torch.Tensor, None]:
        (neighbours,) = ctx.saved_tensors
        shape, dtype = ctx.cloud
        grad = torch.zeros(shape, dtype=torch.float32, device=grad_out.device)  # atomics
        _launch(_scatter_kernel, grad_out.contiguous(), neighbours, grad, shape[3])
        return grad.to(dtype), None


def gather_neighbours_triton(cloud: torch.Tensor, neighbours: torch.Tensor) -> torch.Tensor:
    """:func:`cloudlstm.nn.kernels.gather_neighbours` on CUDA: ``cloud (B, N, U, F)``,
    ``neighbours (B, N, U, K)`` indices into N (any integer type and strides) ->
    ``(B*N, U*K*F)``, differentiable in ``cloud``."""
    return _GatherNeighbours.apply(cloud, neighbours)
