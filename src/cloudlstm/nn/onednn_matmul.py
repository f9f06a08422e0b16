"""The DConv weighting ``rows @ weight + bias`` on x86 CPUs through oneDNN's matmul.

torch sends a float32 matrix product on CPU to MKL, whose kernels are chosen by CPU
vendor: on an AMD CPU with AVX-512 (the dev machine's EPYC) MKL runs its AVX2 code and
``addmm`` reaches ~180 GFLOP/s on two cores, where oneDNN (also in every torch wheel,
and what torch uses for convolutions and ``nn.LSTM``) reaches ~420. A DConv's weighting
and both products of its backward are ~70 % of a CloudLSTM step, so :func:`addmm` runs
all three through oneDNN (``torch.ops.mkldnn._linear_pointwise``, the op Inductor emits
for CPU linear layers): 1.4-2.0x on a DConv forward + backward
(``benchmarks/bench_dconv.py`` prints both).

It is float32 throughout (torch's fp32 math mode for oneDNN stays as set, IEEE by
default); results differ from MKL's in rounding only (summation order). It applies to
float32 CPU tensors outside autocast (under bf16 autocast ``addmm`` already runs in
oneDNN's bf16 kernels), outside ``torch.compile`` (Inductor packs its own oneDNN
weights) and outside dispatch modes such as ``FlopCounterMode`` (which counts ``addmm``).
``CLOUDLSTM_ONEDNN=0`` in the environment keeps every product on ``torch.addmm``.
"""

from __future__ import annotations

import os
import platform

import torch
from torch.autograd.function import FunctionCtx, once_differentiable
from torch.utils._python_dispatch import _get_current_dispatch_mode


def _linear_op() -> object | None:
    """oneDNN's linear op, where this torch build has it and the CPU is x86-64 (elsewhere
    oneDNN may sit on another backend whose speed was never measured here)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._linear_pointwise.default
    except (AttributeError, RuntimeError):
        return None


_LINEAR = _linear_op()
ENABLED = _LINEAR is not None and os.environ.get("CLOUDLSTM_ONEDNN", "1") != "0"


def use_onednn(rows: torch.Tensor) -> bool:
    """Whether :func:`addmm` runs these rows through oneDNN."""
    return (
        ENABLED
        and rows.device.type == "cpu"
        and rows.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()
        and _mode_knows_the_op()
    )


def _mode_knows_the_op() -> bool:
    """FLOP counting, fake tensors and other dispatch modes know addmm, not this op; a mode
    that does says so with a true ``knows_onednn_linear`` (benchmarks/bench_step.py's
    recorder of a step's products)."""
    mode = _get_current_dispatch_mode()
    return mode is None or getattr(mode, "knows_onednn_linear", False)


def _linear(x: torch.Tensor, weight_t: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ weight_t.T + bias``; ``weight_t`` is ``(out, in)``, any strides."""
    return _LINEAR(x, weight_t, bias, "none", [], "")


class _OneDNNAddmm(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: FunctionCtx, bias: torch.Tensor | None, rows: torch.Tensor, weight: torch.Tensor
    ) -> torch.Tensor:
        ctx.save_for_backward(rows, weight)
        return _linear(rows, weight.t(), bias)

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        rows, weight = ctx.saved_tensors
        grad = grad.contiguous()
        need_bias, need_rows, need_weight = ctx.needs_input_grad
        grad_rows = _linear(grad, weight, None) if need_rows else None
        # (grad^T @ rows)^T: rows^T as the op's (out, in) weight is rows itself, no copy;
        # rows^T as its input would be copied first (2x slower).
        grad_weight = _linear(grad.t(), rows.t(), None).t() if need_weight else None
        grad_bias = grad.sum(0) if need_bias else None
        return grad_bias, grad_rows, grad_weight


def addmm(bias: torch.Tensor | None, rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``rows @ weight (+ bias)``: rows ``(R, I)``, weight ``(I, O)``, bias ``(O,)`` or None
    -> ``(R, O)``, differentiable in all three; oneDNN where :func:`use_onednn` allows,
    else ``torch.addmm`` / ``@``."""
    if use_onednn(rows) and weight.dtype == torch.float32:
        return _OneDNNAddmm.apply(bias, rows, weight)
    return rows @ weight if bias is None else torch.addmm(bias, rows, weight)
