"""Exact K-nearest-neighbour search for batches of small point clouds: :func:`knn`, which
chooses the search for the device, size and ``method``.

DConv needs, for every channel of every sample, the K nearest neighbours of each point
among that channel's own points. With hidden states carrying their own coordinates, a
CloudLSTM step searches ``B x U`` clouds (2,304 at the paper's size), so this is on the
hot path. Coordinates are ``(..., N, L)``, leading dims indexing independent clouds; the
result is ``(..., N, k)`` indices into the N points of the same cloud.

Ranking rule (identical in every implementation below): the point itself comes first;
the others are ranked by squared Euclidean distance, ties by lower point index. Without
ties the result is therefore permutation-equivariant.

Implementations:

* CPU: the numba kernels of :mod:`cloudlstm.nn.knn_numba`, on slices of the clouds in
  threads. Clouds of up to ``PAIRS_MAX_POINTS`` points rank all pairs, read where the
  coordinates lie (any strides); larger ones a grid of strips over the first two axes
  (L = 1 gets a zero second axis), ~3K candidates per query.
* other devices (CUDA), or ``method="cells"`` anywhere: the cell-list search of
  :mod:`cloudlstm.nn.knn_cells`, in torch ops: equal-count bins, a 3 x 3 cell window
  first, bounded memory, the same keys and so the same result.
* CUDA clouds of up to 2,048 points: :mod:`cloudlstm.nn.knn_triton`, one Triton kernel
  ranking a block of queries against the whole cloud in registers (the paper's size
  searches thousands of 274-point clouds per call, where the cell list's kernel chain and
  synchronisations dominate).
* ``method="brute"``: brute force (:mod:`cloudlstm.nn.knn_brute`), chunked over query
  points; ``O(N^2)`` work, kept for the GPU benchmark's comparison.
* :func:`knn_reference`: the plain ``cdist`` + ``topk`` of Algorithm 1, kept for tests
  and the benchmark.

K is checked by :mod:`cloudlstm.nn.knn_checks`, the coordinates' finiteness by
:mod:`cloudlstm.nn.knn_finite` (at once, or per :func:`deferred_finite_check` block).
Their public names are re-exported here, where they were first defined.

Under ``torch.compile`` a search is one operator of the graph (``cloudlstm::knn``, or
``cloudlstm::knn_triton``, which CUDA graphs can capture), not a graph break.
"""

from __future__ import annotations

import torch

from cloudlstm.nn import knn_triton
from cloudlstm.nn.knn_brute import knn_chunked, knn_reference
from cloudlstm.nn.knn_cells import knn_cells
from cloudlstm.nn.knn_checks import NeighbourCountError, check_k, check_k_option
from cloudlstm.nn.knn_finite import (
    NON_FINITE,
    NonFiniteCoordinatesError,
    check_finite,
    deferred_finite_check,
    open_block,
)
from cloudlstm.nn.knn_numba import search_grid, search_pairs

__all__ = [
    "METHODS",
    "PAIRS_MAX_POINTS",
    "NeighbourCountError",
    "NonFiniteCoordinatesError",
    "check_k",
    "check_k_option",
    "deferred_finite_check",
    "knn",
    "knn_reference",
]


# Up to this many points a CPU cloud is searched by all pairs (:mod:`.knn_numba`): its N^2
# distances cost less than the grid's set-up (bins, bounds, strips: a dozen small arrays
# per cloud). One thread, K = 3: 0.34 against 1.39 us a cloud at N = 12, 3.5 against 5.3
# at 64, 9.3 against 7.5 at 100 (K = 9: 0.9/1.8, 7.6/9.7, 19.6/14.7; 2-vCPU dev machine,
# 2026-11-27, 1,152 random clouds, best of 5).
PAIRS_MAX_POINTS = 64

METHODS = ("auto", "numba", "cells", "triton", "brute")


def _search_triton(flat: torch.Tensor, k: int, dtype: torch.dtype) -> torch.Tensor:
    """The Triton search, which flags non-finite coordinates in the same pass: into the open
    block's flag, or into its own, checked at once (one sync, as :func:`check_finite`)."""
    block = open_block()
    if block is None:
        flag = torch.zeros(1, dtype=torch.int32, device=flat.device)
    else:
        flag = block.flag(flat.device)
    index = knn_triton.knn_triton(flat, k, dtype=dtype, nonfinite=flag)
    if block is None and bool(flag):
        raise NonFiniteCoordinatesError(NON_FINITE)
    return index


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


@torch.compiler.disable  # numba, and a data-dependent loop: not for a compiled graph
@torch.no_grad()
def _knn(
    coords: torch.Tensor, k: int, method: str, chunk: int, dtype: torch.dtype, in_graph: bool
) -> torch.Tensor:
    """:func:`knn`. ``in_graph``: run as an operator of a compiled graph, where no
    :func:`deferred_finite_check` is open and the Triton search does not synchronise."""
    n = coords.shape[-2]
    if method in ("auto", "numba") and coords.device.type == "cpu" and n <= PAIRS_MAX_POINTS:
        return search_pairs(coords, k, dtype)
    flat = _as_searched(coords)
    if method == "auto":
        if flat.device.type == "cpu":
            method = "numba"
        else:
            method = "triton" if knn_triton.available(flat) else "cells"
    if method != "triton":  # the Triton kernel checks as it reads
        check_finite(flat, deferrable=method == "brute" and not in_graph)
    if method == "numba":
        if flat.device.type != "cpu":
            raise ValueError("knn: method='numba' runs on CPU tensors only.")
        index = search_grid(flat, k, dtype)
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
        index = knn_chunked(flat, k, chunk)
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
