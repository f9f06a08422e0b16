"""The CloudLSTM state update after the gate DConv as one Triton kernel each way (CUDA).

On a GPU the paper-size model is launch-bound: a training step dispatches thousands of
small kernels, and the torch expression of the LSTM update (``chunk``, three sigmoids, the
candidate's ``cat``, products, sums) is about 12 of them forward and 25 backward per cell
step, 48 cell steps per training step. This is the CUDA counterpart of the numba
:func:`cloudlstm.nn.kernels.lstm_pointwise`: the same function, one kernel forward and one
backward (which recomputes the activations from the saved gates and memory).

Arithmetic is in float32 whatever the input type (bf16 under autocast); the outputs take
the type the torch expression would give (``torch.promote_types`` of the gates and the
memory), so the cell computes the same function with either path. ``tanh`` is written as
``2 sigmoid(2x) - 1`` (Triton has no portable tanh): within ~1e-7 of torch's.
"""

from __future__ import annotations

import torch
from torch.autograd.function import FunctionCtx, once_differentiable

from cloudlstm.nn import triton_switch
from cloudlstm.nn.triton_switch import tl, triton

BLOCK = 1024


def available(z: torch.Tensor) -> bool:
    """Whether these kernels serve the gates ``z``: Triton, a CUDA tensor, and not inside
    ``torch.compile`` (a compiled cell keeps the torch expression, which Inductor fuses)."""
    return triton_switch.ENABLED and z.is_cuda and not torch.compiler.is_compiling()


if triton is not None:

    @triton.jit
    def _tanh(x):
        return 2.0 * tl.sigmoid(2.0 * x) - 1.0

    @triton.jit
    def _entries(total, Q: tl.constexpr, BLOCK: tl.constexpr, WIDE: tl.constexpr):
        """This program's entries of (P, Q) -> (entry, row, column, mask), in int32 unless
        ``WIDE`` (the division by Q in int64 took most of the kernels' instructions)."""
        program = tl.program_id(0)
        if WIDE:
            program = program.to(tl.int64)
        e = program * BLOCK + tl.arange(0, BLOCK)
        return e, e // Q, e % Q, e < total

    @triton.jit
    def _gates(z_ptr, row, col, Q: tl.constexpr, H: tl.constexpr, F: tl.constexpr, mask):
        """Activated gates of entries (row, col): sigmoid(i, f, o), the candidate g, and
        sigmoid(z_g) (the coordinates' candidate is tanh(sigmoid(z_g)))."""
        base = z_ptr + row * (4 * Q) + col
        i = tl.sigmoid(tl.load(base, mask=mask, other=0.0).to(tl.float32))
        f = tl.sigmoid(tl.load(base + Q, mask=mask, other=0.0).to(tl.float32))
        o = tl.sigmoid(tl.load(base + 2 * Q, mask=mask, other=0.0).to(tl.float32))
        zg = tl.load(base + 3 * Q, mask=mask, other=0.0).to(tl.float32)
        sg = tl.sigmoid(zg)
        coord = (col % F) >= H
        g = _tanh(tl.where(coord, sg, zg))
        return i, f, o, g, sg, coord

    @triton.jit
    def _forward_kernel(
        z_ptr, c_ptr, hidden_ptr, memory_ptr, total,
        Q: tl.constexpr, H: tl.constexpr, F: tl.constexpr, BLOCK: tl.constexpr,
        WIDE: tl.constexpr,
    ):  # fmt: skip
        """z (P, 4, Q), c (P, Q) -> hidden, memory (P, Q); ``total`` = P * Q."""
        e, row, col, mask = _entries(total, Q, BLOCK, WIDE)
        i, f, o, g, _, _ = _gates(z_ptr, row, col, Q, H, F, mask)
        m = f * tl.load(c_ptr + e, mask=mask, other=0.0).to(tl.float32) + i * g
        tl.store(memory_ptr + e, m.to(memory_ptr.dtype.element_ty), mask=mask)
        hidden = o * _tanh(m)
        tl.store(hidden_ptr + e, hidden.to(hidden_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _backward_kernel(
        z_ptr, c_ptr, grad_hidden_ptr, grad_memory_ptr, grad_z_ptr, grad_c_ptr, total,
        Q: tl.constexpr, H: tl.constexpr, F: tl.constexpr, BLOCK: tl.constexpr,
        WIDE: tl.constexpr,
    ):  # fmt: skip
        """The chain rule entry by entry, activations recomputed from z and c."""
        e, row, col, mask = _entries(total, Q, BLOCK, WIDE)
        i, f, o, g, sg, coord = _gates(z_ptr, row, col, Q, H, F, mask)
        c_old = tl.load(c_ptr + e, mask=mask, other=0.0).to(tl.float32)
        t = _tanh(f * c_old + i * g)
        gh = tl.load(grad_hidden_ptr + e, mask=mask, other=0.0).to(tl.float32)
        gm = tl.load(grad_memory_ptr + e, mask=mask, other=0.0).to(tl.float32)
        gm = gm + gh * o * (1.0 - t * t)  # total grad of the new memory
        dg = (1.0 - g * g) * tl.where(coord, sg * (1.0 - sg), 1.0)  # d g / d z_g
        out = grad_z_ptr + row * (4 * Q) + col
        ty = grad_z_ptr.dtype.element_ty
        tl.store(out, (gm * g * i * (1.0 - i)).to(ty), mask=mask)
        tl.store(out + Q, (gm * c_old * f * (1.0 - f)).to(ty), mask=mask)
        tl.store(out + 2 * Q, (gh * t * o * (1.0 - o)).to(ty), mask=mask)
        tl.store(out + 3 * Q, (gm * i * dg).to(ty), mask=mask)
        tl.store(grad_c_ptr + e, (gm * f).to(grad_c_ptr.dtype.element_ty), mask=mask)


class _LSTMPointwise(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: FunctionCtx, z: torch.Tensor, memory: torch.Tensor, value_features: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        z, memory = z.contiguous(), memory.contiguous()
        features = z.shape[3]
        q = z.shape[2] // 4 * features
        dtype = torch.promote_types(z.dtype, memory.dtype)
        hidden = torch.empty(memory.shape, dtype=dtype, device=z.device)
        memory_new = torch.empty_like(hidden)
        total = hidden.numel()
        wide = triton_switch.wide_offsets(total, BLOCK, 4)  # z holds 4 gates an entry
        _forward_kernel[(triton.cdiv(total, BLOCK),)](
            z, memory, hidden, memory_new, total, q, value_features, features, BLOCK, wide
        )
        ctx.save_for_backward(z, memory)  # only the inputs: backward recomputes the rest
        ctx.sizes = (q, value_features, features)
        return hidden, memory_new

    @staticmethod
    @once_differentiable
    def backward(
        ctx: FunctionCtx, grad_hidden: torch.Tensor, grad_memory: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, None]:
        z, memory = ctx.saved_tensors
        grad_z, grad_c = torch.empty_like(z), torch.empty_like(memory)
        total = memory.numel()
        wide = triton_switch.wide_offsets(total, BLOCK, 4)
        _backward_kernel[(triton.cdiv(total, BLOCK),)](
            z, memory, grad_hidden.contiguous(), grad_memory.contiguous(), grad_z, grad_c,
            total, *ctx.sizes, BLOCK, wide,
        )  # fmt: skip
        return grad_z, grad_c, None


def lstm_pointwise_triton(
    z: torch.Tensor, memory: torch.Tensor, value_features: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`cloudlstm.nn.kernels.lstm_pointwise` on CUDA: ``z (B, N, 4U, F)`` gates
    ``[i, f, o, g]``, ``memory (B, N, U, F)`` -> ``(hidden, memory)``, both ``(B, N, U, F)``."""
    return _LSTMPointwise.apply(z, memory, value_features)
