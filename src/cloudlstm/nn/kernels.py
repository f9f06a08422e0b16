"""Single-threaded numba CPU kernels for the memory-bound parts of a CloudLSTM step.

Two fused operators, each an :class:`torch.autograd.Function` whose backward is one
more numba pass:

* :func:`gather_neighbours`, the neighbourhood gather of
  :func:`cloudlstm.nn.dconv.gather_neighbourhoods`. It reads the ``(B, N, U, K)``
  neighbour indices directly, so the ``(B*N*U*K,)`` int64 flat row index that the
  ``index_select`` path builds (three passes over as many elements as the output has
  rows) is never materialised, and its backward scatters straight into ``(B, N, U, F)``.
* :func:`lstm_pointwise`, everything in a CloudLSTM step after the gate DConv: the
  torch expression runs ~12 elementwise ops forward and ~25 backward over the gates, each
  a full pass over memory; here forward and backward are one pass each.

Why ``@njit`` without ``parallel=True``: numba's OpenMP pool and torch's busy-wait
against each other on small machines and make training randomly 5-20x slower. The loops
are ordered so that the innermost index is the contiguous one instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numba
import numpy as np
import torch
from numba.extending import overload
from torch.autograd.function import FunctionCtx, once_differentiable

from cloudlstm.nn.threads import run_sliced


def use_kernels(tensor: torch.Tensor) -> bool:
    """Whether the numba kernels handle this tensor (CPU, float32 or float64; not in a
    compiled graph, where the torch ops are traced and fused by Inductor instead)."""
    return (
        tensor.device.type == "cpu"
        and tensor.dtype in (torch.float32, torch.float64)
        and not torch.compiler.is_compiling()
    )


def _array(tensor: torch.Tensor) -> np.ndarray:
    """NumPy view sharing memory (any strides: numba compiles a strided variant)."""
    return tensor.detach().numpy()


# ---------------------------------------------------------------------- gather


# Both loops run over (B, U, N, K), the order of knn's output in memory (`neighbours` is a
# permuted view of it); reading it in (B, N, U, K) order costs ~2x. Points go in tiles of
# _TILE, so that the tile's output rows (_TILE * U*K*F values) stay in cache while every
# channel fills its part of them: ~1.5x on the backward over untiled. F = 3 (one value,
# two coordinates) is unrolled by hand: a run-time-length loop over F is ~3x slower.
_TILE = 8


@numba.njit(cache=True, nogil=True)
def _gather_forward(src: np.ndarray, neighbours: np.ndarray, out: np.ndarray, col0: int) -> None:
    """src (B, N, U, F), neighbours (B, U, N, K) -> columns col0.. of out (B*N, W):
    out[b*N + n, col0 + (u*K + k)*F + j] = src[b, neighbours[b, u, n, k], u, j]."""
    n_b, n_pts, n_ch, n_feat = src.shape
    n_k = neighbours.shape[3]
    for b in range(n_b):
        for tile in range(0, n_pts, _TILE):
            for u in range(n_ch):
                for n in range(tile, min(tile + _TILE, n_pts)):
                    row, col = b * n_pts + n, col0 + u * n_k * n_feat
                    for k in range(n_k):
                        m = neighbours[b, u, n, k]
                        if m < 0 or m >= n_pts:  # as index_select: never read out of bounds
                            raise IndexError("neighbour index out of range")
                        if n_feat == 3:
                            out[row, col] = src[b, m, u, 0]
                            out[row, col + 1] = src[b, m, u, 1]
                            out[row, col + 2] = src[b, m, u, 2]
                        else:
                            for j in range(n_feat):
                                out[row, col + j] = src[b, m, u, j]
                        col += n_feat


@numba.njit(cache=True, nogil=True)
def _gather_backward(
    grad_src: np.ndarray, neighbours: np.ndarray, grad_out: np.ndarray, col0: int
) -> None:
    """Adjoint of :func:`_gather_forward` (its arguments in the same places), written to
    ``grad_src`` (any contents):
    grad_src[b, neighbours[b, u, n, k], u, j] = sum of grad_out[b*N + n, col0 + (u*K + k)*F + j].
    """
    n_b, n_pts, n_ch, n_feat = grad_src.shape
    n_k = neighbours.shape[3]
    for b in range(n_b):  # scattered writes stay inside one sample's (N, U, F) slab
        grad_src[b] = 0  # zeroed here, in cache just before the scatter, not in a pass of its own
        for tile in range(0, n_pts, _TILE):
            for u in range(n_ch):
                for n in range(tile, min(tile + _TILE, n_pts)):
                    row, col = b * n_pts + n, col0 + u * n_k * n_feat
                    for k in range(n_k):
                        m = neighbours[b, u, n, k]  # checked in the forward
                        if n_feat == 3:
                            grad_src[b, m, u, 0] += grad_out[row, col]
                            grad_src[b, m, u, 1] += grad_out[row, col + 1]
                            grad_src[b, m, u, 2] += grad_out[row, col + 2]
                        else:
                            for j in range(n_feat):
                                grad_src[b, m, u, j] += grad_out[row, col + j]
                        col += n_feat


# A thread gathers at least this many values: below it the hand-off costs more than the
# copy (a Beijing-size gate gather, 384 x 648 values, took 0.17 ms on one thread and 0.19
# ms on two; 2-vCPU dev machine, 2026-11-27).
_VALUES_PER_THREAD = 300_000


def _run_parts(kernel, arrays: list[tuple[np.ndarray, np.ndarray, int]], rows: np.ndarray) -> None:
    """``kernel(cloud[s:e], neighbours[s:e], rows[s*N:e*N], col)`` for every part, on slices
    of the batch (samples are independent; a sample's scattered writes stay in its own
    slab, so slices never race)."""
    n_b = arrays[0][0].shape[0]
    n = rows.shape[0] // n_b

    def run(s: int, e: int) -> None:
        for cloud, index, col in arrays:
            kernel(cloud[s:e], index[s:e], rows[s * n : e * n], col)

    run_sliced(n_b, run, min_slice=max(1, _VALUES_PER_THREAD // max(1, rows[0].size * n)))


class _GatherNeighbours(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, parts: int, *tensors: torch.Tensor) -> torch.Tensor:
        clouds, neighbours = tensors[:parts], tensors[parts:]
        b, n, _, f = clouds[0].shape
        index = [nb.transpose(1, 2) for nb in neighbours]  # (B, U, N, K): knn's memory order
        k = index[0].shape[3]
        out = clouds[0].new_empty(b * n, sum(c.shape[2] for c in clouds) * k * f)
        _run_parts(_gather_forward, _with_columns(clouds, index, k * f), out.numpy())
        ctx.save_for_backward(*index)
        ctx.shapes = [c.shape for c in clouds]
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        index = ctx.saved_tensors
        grads = [grad_out.new_empty(shape) for shape in ctx.shapes]  # zeroed by the kernel
        k, f = index[0].shape[3], ctx.shapes[0][3]
        _run_parts(_gather_backward, _with_columns(grads, index, k * f), _array(grad_out))
        return (None, *grads, *(None for _ in index))


def _with_columns(
    clouds: list[torch.Tensor] | tuple[torch.Tensor, ...], index: list[torch.Tensor], width: int
) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """``(cloud, neighbours, first column)`` of each part as arrays; a part takes ``U * width``
    columns of the rows."""
    arrays, col = [], 0
    for cloud, idx in zip(clouds, index, strict=True):
        arrays.append((_array(cloud), _array(idx), col))
        col += cloud.shape[2] * width
    return arrays


@torch.compiler.disable  # numba inside: runs eagerly under model.compile
def gather_neighbours(
    cloud: torch.Tensor | Sequence[torch.Tensor], neighbours: torch.Tensor | Sequence[torch.Tensor]
) -> torch.Tensor:
    """Every point's per-channel neighbourhood as one row, differentiable in ``cloud``.

    Args:
        cloud: ``(B, N, U, F)`` CPU float32/float64 (any strides), or a sequence of such
            clouds (same B, N, F), which stands for their channel concatenation without
            building it.
        neighbours: ``(B, N, U, K)`` indices into N of any integer type (any strides), or
            one such tensor per cloud.

    Returns:
        ``(B*N, U*K*F)``, identical to the ``index_select`` path of
        :func:`cloudlstm.nn.dconv.gather_neighbourhoods` on the concatenation.
    """
    clouds = (cloud,) if isinstance(cloud, torch.Tensor) else tuple(cloud)
    index = (neighbours,) if isinstance(neighbours, torch.Tensor) else tuple(neighbours)
    if len(clouds) != len(index):
        raise ValueError(f"{len(clouds)} clouds, but neighbours for {len(index)}.")
    return _GatherNeighbours.apply(len(clouds), *clouds, *index)


# ---------------------------------------------------------------- LSTM pointwise
# The loops below run over the U*F state entries of one point, contiguous in z, c and the
# outputs, so LLVM vectorises them; value-or-coordinate is a per-entry mask, not a
# branch. That needs error_model="numpy" (Python's model checks every division for zero,
# which blocks vectorisation) and an exp without a libm call: `_exp`, below. tanh is
# written through the same exp, tanh(x) = 2 sigmoid(2x) - 1 (absolute error ~1e-7).
# `one` carries the dtype: a Python float literal would promote float32 to float64.

_LOG2E = np.float32(1.4426950408889634)
_LN2_HI, _LN2_LO = np.float32(0.693359375), np.float32(-2.12194440e-4)  # ln 2 = hi + lo
_EXP_LO, _EXP_HI = np.float32(-87.0), np.float32(88.0)  # 2^n stays a normal float
# Cephes expf: exp(r) ~ 1 + r + r^2 P(r) on |r| <= ln(2)/2, relative error < 1e-7.
_EXP_P = tuple(
    np.float32(v)
    for v in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2)
    + (1.6666665459e-1, 5.0000001201e-1)
)


def _exp(x: float) -> float:
    """exp that LLVM can vectorise for float32 (see the overload); libm exp otherwise."""
    return math.exp(x)


@overload(_exp)
def _exp_overload(x):  # numba typing hook
    if x != numba.types.float32:
        return lambda x: math.exp(x)  # float64: full precision (gradcheck needs it)

    def exp32(x):
        # Clamp (comparisons written so that NaN passes through), then
        # exp(x) = 2^n exp(r) with n = round(x / ln 2), r = x - n ln 2.
        x = _EXP_LO if x < _EXP_LO else x
        x = _EXP_HI if x > _EXP_HI else x
        n = np.floor(x * _LOG2E + np.float32(0.5))
        r = x - n * _LN2_HI - n * _LN2_LO
        p0, p1, p2, p3, p4, p5 = _EXP_P
        poly = (((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5) * (r * r) + r
        two_n = np.int32((np.int32(n) + np.int32(127)) << 23).view(np.float32)  # 2^n
        return (poly + np.float32(1)) * two_n

    return exp32


@numba.njit(cache=True, inline="always", error_model="numpy")
def _sigmoid(x, one):  # generic over float32/float64
    return one / (one + _exp(-x))


@numba.njit(cache=True, inline="always", error_model="numpy")
def _tanh(x, one):
    return (one + one) / (one + _exp(-(x + x))) - one


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _lstm_forward(
    z: np.ndarray, c: np.ndarray, coord: np.ndarray, hidden: np.ndarray, memory: np.ndarray
) -> None:
    """z (P, 4, Q), c (P, Q), coord (Q,) bool -> hidden, memory (P, Q); P = B*N, Q = U*F."""
    one = z.dtype.type(1)
    for p in range(z.shape[0]):
        for q in range(z.shape[2]):
            i = _sigmoid(z[p, 0, q], one)
            f = _sigmoid(z[p, 1, q], one)
            o = _sigmoid(z[p, 2, q], one)
            zg = z[p, 3, q]
            sg = _sigmoid(zg, one)
            g = _tanh(sg if coord[q] else zg, one)
            m = f * c[p, q] + i * g
            memory[p, q] = m
            hidden[p, q] = o * _tanh(m, one)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _lstm_backward(
    z: np.ndarray,
    c: np.ndarray,
    coord: np.ndarray,
    grad_hidden: np.ndarray,
    grad_memory: np.ndarray,
    grad_z: np.ndarray,
    grad_c: np.ndarray,
) -> None:
    """Recompute the activations from z and c, then the chain rule entry by entry.

    Shapes as in :func:`_lstm_forward`; grad_z (P, 4, Q), the others (P, Q).
    """
    one = z.dtype.type(1)
    n_q = z.shape[2]
    # LLVM will not vectorise a loop that stores to several rows of one array (it cannot
    # rule out overlap), so three gates go through separate scratch rows first: ~5x.
    d_i, d_f, d_o = np.empty(n_q, z.dtype), np.empty(n_q, z.dtype), np.empty(n_q, z.dtype)
    for p in range(z.shape[0]):
        for q in range(n_q):
            i = _sigmoid(z[p, 0, q], one)
            f = _sigmoid(z[p, 1, q], one)
            o = _sigmoid(z[p, 2, q], one)
            zg = z[p, 3, q]
            sg = _sigmoid(zg, one)
            g = _tanh(sg if coord[q] else zg, one)
            dg = (one - g * g) * (sg * (one - sg) if coord[q] else one)  # d g / d zg
            c_old = c[p, q]
            t = _tanh(f * c_old + i * g, one)
            gh = grad_hidden[p, q]
            gm = grad_memory[p, q] + gh * o * (one - t * t)  # total grad of the new memory
            d_i[q] = gm * g * i * (one - i)
            d_f[q] = gm * c_old * f * (one - f)
            d_o[q] = gh * t * o * (one - o)
            grad_z[p, 3, q] = gm * i * dg
            grad_c[p, q] = gm * f
        grad_z[p, 0] = d_i
        grad_z[p, 1] = d_f
        grad_z[p, 2] = d_o


# A thread updates at least this many gate values: fewer cost more to hand off than to
# compute. Measured (2-vCPU dev machine, 2026-11-27, OMP_WAIT_POLICY=PASSIVE, batch 32, 36
# hidden channels, forward + backward, one thread against two): N = 12 (166k values) 0.50
# against 0.50 ms, N = 35 1.39 against 1.00, N = 100 5.8 against 4.7.
_GATES_PER_THREAD = 100_000


def _by_points(kernel, arrays: tuple[np.ndarray, ...]) -> None:
    """``kernel(*(a[s:e] for a in arrays))`` on slices of the points (the first axis of every
    array) in threads: each point's update is independent of the others'."""
    gates = arrays[0][0].size  # 4 x U*F per point
    run_sliced(
        len(arrays[0]),
        lambda s, e: kernel(*(a[s:e] for a in arrays)),
        min_slice=max(1, _GATES_PER_THREAD // gates),
    )


class _LSTMPointwise(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: FunctionCtx, z: torch.Tensor, memory: torch.Tensor, value_features: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        b, n, u4, f = z.shape
        z, memory = z.contiguous(), memory.contiguous()
        coord = np.arange(u4 // 4 * f) % f >= value_features  # (U*F,): entry is a coordinate
        hidden_new, memory_new = torch.empty_like(memory), torch.empty_like(memory)
        state = (b * n, u4 // 4 * f)
        arrays = (
            _array(z).reshape(b * n, 4, -1),
            _array(memory).reshape(state),
            hidden_new.numpy().reshape(state),
            memory_new.numpy().reshape(state),
        )
        _by_points(lambda z, c, h, m: _lstm_forward(z, c, coord, h, m), arrays)
        ctx.save_for_backward(z, memory)  # only the inputs: backward recomputes the rest
        ctx.coord = coord
        return hidden_new, memory_new

    @staticmethod
    @once_differentiable
    def backward(
        ctx: FunctionCtx, grad_hidden: torch.Tensor, grad_memory: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, None]:
        z, memory = ctx.saved_tensors
        grad_z, grad_c = torch.empty_like(z), torch.empty_like(memory)
        state = (z.shape[0] * z.shape[1], -1)
        arrays = (
            _array(z).reshape(state[0], 4, -1),
            _array(memory).reshape(state),
            # Incoming grads may be views (a cat's backward) or expanded (a sum's).
            _array(grad_hidden.contiguous()).reshape(state),
            _array(grad_memory.contiguous()).reshape(state),
            grad_z.numpy().reshape(state[0], 4, -1),
            grad_c.numpy().reshape(state),
        )
        coord = ctx.coord
        _by_points(lambda z, c, gh, gm, gz, gc: _lstm_backward(z, c, coord, gh, gm, gz, gc), arrays)
        return grad_z, grad_c, None


@torch.compiler.disable
def lstm_pointwise(
    z: torch.Tensor, memory: torch.Tensor, value_features: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The CloudLSTM state update after the gate DConv, fused (CPU float32/float64).

    Args:
        z: ``(B, N, 4U, F)`` pre-activation gates, ``[i, f, o, g]`` chunks along dim 2.
        memory: ``(B, N, U, F)`` previous memory C.
        value_features: H; features ``>= H`` are coordinates, whose candidate is
            ``tanh(sigmoid(z_g))`` instead of ``tanh(z_g)``.

    Returns:
        ``(hidden, memory)``, both ``(B, N, U, F)``:
        ``C' = sigma(f) C + sigma(i) g``, ``H' = sigma(o) tanh(C')``.
    """
    return _LSTMPointwise.apply(z, memory, value_features)
