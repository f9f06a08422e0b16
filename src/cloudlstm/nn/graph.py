"""Point graphs (built from distances, or given) and the Chebyshev graph convolution (STGCN).

The graph follows the STGCN paper's preprocessing (Yu et al., IJCAI 2018):
``w_ij = exp(-d_ij^2 / sigma^2)`` when ``i != j`` and that weight is ``>= epsilon``, else 0.
Their ``sigma^2 = 10`` is tied to their road distances (metres / 10^4), so here ``sigma``
defaults to a scale-free quantity of the cloud itself: the mean over points of the distance
to the ``neighbours``-th nearest other point. With ``epsilon = 0.5`` an edge then exists for
``d <= sigma * sqrt(ln 2) ~ 0.83 sigma``: a local graph, a few neighbours per point for
evenly spread points, comparable to CloudLSTM's K.

A graph given with the data (a road network's, ``data.source.graph``) replaces the
distance graph: :func:`given_laplacian` makes its scaled Laplacian the same way.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cloudlstm.nn.knn import knn


def neighbour_scale(coords: torch.Tensor, neighbours: int) -> torch.Tensor:
    """Mean distance from each point to its ``neighbours``-th nearest other point.

    coords ``(B, N, L)`` -> ``(B,)``. Clipped to ``N - 1`` neighbours; a single point gets 1.
    """
    b, n, _ = coords.shape
    k = min(neighbours, n - 1)
    if k < 1:
        return coords.new_ones(b)
    index = knn(coords, k + 1)[..., -1]  # (B, N); the first neighbour is the point itself
    far = torch.gather(coords, 1, index.unsqueeze(-1).expand_as(coords))
    return (far - coords).norm(dim=-1).mean(dim=1)


def distance_weights(
    coords: torch.Tensor, sigma: float | torch.Tensor, epsilon: float
) -> torch.Tensor:
    """Thresholded Gaussian-kernel adjacency. coords ``(B, N, L)`` -> ``W (B, N, N)``.

    ``sigma`` is a float or one value per sample ``(B,)``; zero diagonal, symmetric.
    """
    sigma = torch.as_tensor(sigma, dtype=coords.dtype, device=coords.device)
    # A cloud of coincident points has sigma 0: keep it finite (coincident pairs weigh 1).
    sigma = sigma.clamp_min(torch.finfo(coords.dtype).tiny ** 0.25).reshape(-1, 1, 1)
    weights = torch.exp(-torch.cdist(coords, coords).square() / sigma.square())
    keep = weights >= epsilon
    keep &= ~torch.eye(coords.shape[1], dtype=torch.bool, device=coords.device)
    return weights * keep


def scaled_laplacian(weights: torch.Tensor) -> torch.Tensor:
    """``L~ = 2 L / lambda_max - I`` with ``L = I - D^-1/2 W D^-1/2``.

    weights ``(B, N, N)`` symmetric, non-negative -> ``(B, N, N)`` with eigenvalues in
    [-1, 1]. An isolated point (degree 0) gets ``D^-1/2 = 0`` rather than a division by
    zero: its row of ``L`` is that of the identity. Computed in float64, returned in the
    input's dtype.
    """
    w = weights.double()
    degree = w.sum(dim=-1)
    inv_sqrt = torch.where(degree > 0, degree.clamp_min(1e-300).rsqrt(), 0.0)
    eye = torch.eye(w.shape[-1], dtype=w.dtype, device=w.device)
    lap = eye - inv_sqrt.unsqueeze(-1) * w * inv_sqrt.unsqueeze(-2)
    # lambda_max >= 1 always (the trace of L is N), so the division is safe.
    lambda_max = torch.linalg.eigvalsh(lap)[..., -1]
    return (2.0 * lap / lambda_max.reshape(-1, 1, 1) - eye).to(weights.dtype)


def given_laplacian(adjacency: Any) -> torch.Tensor:
    """The scaled Laplacian of a given weighted graph, as STGCN uses its distance graph.

    adjacency ``(N, N)`` non-negative finite weights (nested lists, an array or a tensor)
    -> ``(1, N, N)`` float32 (it broadcasts over the batch). STGCN's graph is undirected
    and has no self-loops, so a directed graph (DCRNN's road distances) keeps the larger
    weight of each pair, ``w_ij = max(w_ij, w_ji)`` (DCRNN's own undirected form), and the
    diagonal is dropped (the Chebyshev term ``T_0 = I`` already carries each point's own
    value).

    Raises:
        ValueError: the weights are not a square matrix, or not all finite and >= 0.
    """
    weights = torch.as_tensor(adjacency, dtype=torch.float64).detach().cpu()
    if weights.dim() != 2 or weights.shape[0] != weights.shape[1] or weights.shape[0] < 1:
        raise ValueError(
            f"adjacency must be an N x N matrix of weights, got shape {tuple(weights.shape)}."
        )
    if not (torch.isfinite(weights).all() and (weights >= 0).all()):
        raise ValueError("adjacency weights must be finite and >= 0 (0: no edge).")
    weights = torch.maximum(weights, weights.T)
    weights.fill_diagonal_(0.0)
    return scaled_laplacian(weights[None]).float()


class DistanceGraph:
    """The scaled Laplacian of a batch's coordinates, cached on the coordinates' bytes.

    Static points (the usual case) build the graph once; any change of coordinates, shape,
    dtype or device builds a new one. When every sample shares the same coordinates the
    graph is built once and returned as ``(1, N, N)`` (it broadcasts over the batch),
    otherwise as ``(B, N, N)``. A plain object, not a module: the cache is no model state.
    """

    def __init__(self, sigma: float | None = None, epsilon: float = 0.5, neighbours: int = 9):
        if sigma is not None and not sigma > 0:
            raise ValueError(
                f"model.sigma must be > 0 (or null for the automatic scale), got {sigma}."
            )
        if not 0 < epsilon <= 1:
            raise ValueError(f"model.epsilon is a weight threshold in (0, 1], got {epsilon}.")
        if neighbours < 1:
            raise ValueError(
                f"model.neighbours (for the automatic sigma) must be >= 1, got {neighbours}."
            )
        self.sigma = sigma
        self.epsilon = epsilon
        self.neighbours = neighbours
        self._key: tuple | None = None
        self._laplacian: torch.Tensor | None = None

    @torch.compiler.disable  # a host-side cache keyed by the coordinates' bytes
    def __call__(self, coords: torch.Tensor) -> torch.Tensor:
        """coords ``(B, N, L)`` -> scaled Laplacian ``(1 or B, N, N)``."""
        coords = coords.detach()
        key = (
            tuple(coords.shape),
            coords.dtype,
            coords.device,
            coords.contiguous().view(torch.uint8).cpu().numpy().tobytes(),
        )
        if key != self._key:
            self._laplacian = self._build(coords)
            self._key = key
        return self._laplacian

    def _build(self, coords: torch.Tensor) -> torch.Tensor:
        if not torch.isfinite(coords).all():
            raise ValueError(
                "coords contain NaN or inf: the distance graph needs finite point coordinates."
            )
        if bool((coords == coords[:1]).all()):
            coords = coords[:1]  # static points: one graph for the whole batch
        sigma = self.sigma if self.sigma is not None else neighbour_scale(coords, self.neighbours)
        return self._from_weights(distance_weights(coords, sigma, self.epsilon))

    def _from_weights(self, weights: torch.Tensor) -> torch.Tensor:
        """``W (B, N, N)`` -> what the model convolves with: STGCN's scaled Laplacian."""
        return scaled_laplacian(weights)


class ChebGraphConv(nn.Module):
    """Chebyshev graph convolution: ``y = sum_{k<Ks} T_k(L~) x Theta_k + b``.

    ``T_0 = I``, ``T_1 = L~``, ``T_k = 2 L~ T_{k-1} - T_{k-2}``, applied to ``x`` by the
    recursion rather than by forming the matrices. ``ks = 1`` is a plain per-point linear
    layer. x ``(B, ..., N, C_in)``, laplacian ``(1 or B, N, N)`` -> ``(B, ..., N, C_out)``.
    """

    def __init__(self, in_channels: int, out_channels: int, ks: int) -> None:
        super().__init__()
        if ks < 1:
            raise ValueError(f"Chebyshev order ks must be >= 1, got {ks}.")
        self.ks = ks
        # One linear layer over the Ks terms side by side: sum_k T_k(L~) x Theta_k at once.
        self.linear = nn.Linear(ks * in_channels, out_channels)

    def forward(self, x: torch.Tensor, laplacian: torch.Tensor) -> torch.Tensor:
        # Broadcast (B, N, N) over any middle dimensions of x (time).
        lap = laplacian.reshape(laplacian.shape[0], *[1] * (x.dim() - 3), *laplacian.shape[1:])
        terms = [x]
        if self.ks > 1:
            terms.append(lap @ x)
        for _ in range(2, self.ks):
            terms.append(2 * (lap @ terms[-1]) - terms[-2])
        return self.linear(torch.cat(terms, dim=-1))


# ----------------------------------------------------------------- diffusion (DCRNN, Graph WaveNet)
# DCRNN (Li et al., ICLR 2018) builds its graph with the same thresholded Gaussian kernel,
# ``w_ij = exp(-d_ij^2 / sigma^2)`` kept where ``>= epsilon`` (their kappa = 0.1), but keeps
# the diagonal (``d_ii = 0`` weighs 1) and diffuses over random walks instead of a
# Laplacian. Their sigma is the standard deviation of the road distances between nearby
# sensors (only those are in their distance file); the standard deviation of all Euclidean
# distances of a cloud would join nearly every pair (89 neighbours per point on METR-LA's
# sensor positions), so sigma is the same scale-free neighbour distance as STGCN's.


def self_loops(weights: torch.Tensor) -> torch.Tensor:
    """``W + I``: DCRNN's kernel weighs a point with itself ``exp(0) = 1``.

    weights ``(..., N, N)`` with a zero diagonal (:func:`distance_weights`) -> same shape.
    """
    return weights + torch.eye(weights.shape[-1], dtype=weights.dtype, device=weights.device)


def random_walk(weights: torch.Tensor) -> torch.Tensor:
    """The random-walk transition matrix ``D^-1 W``, ``D`` the row sums (out-degrees).

    weights ``(..., N, N)`` non-negative -> ``(..., N, N)`` whose rows sum to 1; a row
    without weight (a point with no edge out) stays zero instead of dividing by zero.
    """
    degree = weights.sum(dim=-1, keepdim=True)
    return weights / torch.where(degree > 0, degree, torch.ones_like(degree))


def transition_matrices(weights: torch.Tensor) -> torch.Tensor:
    """DCRNN's two diffusion directions of a directed graph, stacked.

    weights ``(..., N, N)``, ``W_ij`` the edge from i to j -> ``(..., 2, N, N)``: the
    forward walk ``D_O^-1 W`` and the backward walk ``D_I^-1 W^T`` (``D_O``, ``D_I`` the
    out- and in-degrees). On a symmetric graph the two are equal.
    """
    return torch.stack([random_walk(weights), random_walk(weights.transpose(-1, -2))], dim=-3)


def adjacency_weights(adjacency: object, num_points: int | None = None) -> torch.Tensor:
    """A given graph (``data.source.graph``, e.g. DCRNN's ``adj_mx.pkl``) as float32
    ``(N, N)`` weights, checked.

    adjacency: an ``(N, N)`` array-like of non-negative weights in the data's point order.

    Raises:
        ValueError: not square, not ``num_points`` x ``num_points``, negative or not finite.
    """
    import numpy as np  # reads any array-like: an ndarray from a pickle, lists, a DataFrame

    weights = torch.as_tensor(np.asarray(adjacency, dtype=np.float32))
    n = weights.shape[0] if weights.dim() == 2 else -1
    if weights.dim() != 2 or weights.shape[1] != n:
        raise ValueError(f"the graph must be an (N, N) matrix, got {tuple(weights.shape)}.")
    if num_points is not None and n != num_points:
        raise ValueError(
            f"the graph is {n} x {n} but the data has {num_points} points: give the graph of "
            "the data's points, in their order."
        )
    if not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()):
        raise ValueError("the graph must hold finite, non-negative weights (0: no edge).")
    return weights


class TransitionGraph(DistanceGraph):
    """DCRNN's graph of a batch's coordinates as its two random-walk matrices, cached.

    The thresholded Gaussian kernel of :class:`DistanceGraph` with the diagonal kept
    (:func:`self_loops`), then :func:`transition_matrices`. The defaults (``epsilon``
    0.1, DCRNN's kappa; sigma the mean distance to the 4th nearest point) give about 8
    other points per point on METR-LA's sensor positions, where DCRNN's road graph has 7.3.
    Cached and batched as :class:`DistanceGraph` is: coords ``(B, N, L)`` ->
    ``(1 or B, 2, N, N)``, rebuilt whenever the coordinates change (moving points).
    """

    def __init__(self, sigma: float | None = None, epsilon: float = 0.1, neighbours: int = 4):
        super().__init__(sigma, epsilon, neighbours)

    def _from_weights(self, weights: torch.Tensor) -> torch.Tensor:
        """``W (B, N, N)`` -> DCRNN's forward and backward random walks ``(B, 2, N, N)``."""
        return transition_matrices(self_loops(weights))


def adaptive_adjacency(source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The learned graph of Graph WaveNet and AGCRN: ``softmax(ReLU(E1 E2^T))`` by rows.

    source, target ``(N, d)`` node embeddings (AGCRN passes the same one twice) -> ``(N, N)``
    with rows summing to 1: each point's weights over all points, itself included.
    """
    return torch.softmax(torch.relu(source @ target.transpose(0, 1)), dim=-1)


class DiffusionConv(nn.Module):
    """Diffusion convolution over several transition matrices, K steps each.

    ``y = x Theta_0 + sum_s sum_{k=1..K} P_s^k x Theta_{s,k} + b``: the identity term once,
    then the powers of each support ``P_s`` (DCRNN: the forward and backward random walks;
    Graph WaveNet: those and its adaptive adjacency), applied by repeated products rather
    than by forming the powers. ``steps = 0`` is a per-point linear layer.

    x ``(B, ..., N, C_in)``, supports: each ``(N, N)`` or ``(1 or B, N, N)`` ->
    ``(B, ..., N, C_out)``; ``(P x)_i = sum_j P_ij x_j``.
    """

    def __init__(self, in_channels: int, out_channels: int, supports: int, steps: int) -> None:
        super().__init__()
        if steps < 0 or supports < 0:
            raise ValueError(f"diffusion steps and supports must be >= 0, got {steps}, {supports}.")
        self.supports = supports
        self.steps = steps
        # One linear layer over the terms side by side: every Theta at once.
        self.linear = nn.Linear((1 + supports * steps) * in_channels, out_channels)

    def forward(self, x: torch.Tensor, supports: list[torch.Tensor]) -> torch.Tensor:
        if len(supports) != self.supports:
            raise ValueError(f"expected {self.supports} supports, got {len(supports)}.")
        # The middle dimensions (Graph WaveNet's time) go beside the channels: (B, N, M*C),
        # so that each product is one (N, N) x (N, M*C) per sample. Broadcasting a support
        # over them instead would copy it B*M times and multiply B*M thin matrices.
        points_first = x.movedim(-2, 1)  # (B, N, ..., C)
        folded = points_first.reshape(x.shape[0], x.shape[-2], -1)  # (B, N, M*C)
        terms = [folded]
        for support in supports:
            if support.dim() == 3 and support.shape[0] == 1:
                support = support[0]  # one graph for the whole batch
            power = folded
            for _ in range(self.steps):
                power = support @ power
                terms.append(power)
        stacked = torch.cat([t.view(points_first.shape) for t in terms], dim=-1)
        return self.linear(stacked).movedim(1, -2)


class StaticPositions:
    """Refuses moving points for a model that learns something per point (transductive).

    Such a vector stands for a place, and a point that moves leaves it. The build refuses
    data of moving points (:meth:`refuse_moving`, from ``DataSpec.moving``) before any
    training; called on each batch, the check also refuses a model used directly on
    positions that change. The positions of the first call's first sample are taken as the
    points' positions; every later call's first sample must have them too (to 1e-6). Only
    the first sample is compared: a batch of windows of static points shares one set of
    positions. A plain object, not a module: the positions are no model state.
    """

    def __init__(self, model: str, why: str) -> None:
        self.model = model
        self.why = why
        self._positions: torch.Tensor | None = None

    @torch.compiler.disable  # a host-side check of the data, kept out of compiled graphs
    def __call__(self, coords: torch.Tensor) -> None:
        """coords ``(B, N, L)``.

        Raises:
            UserError: the positions differ from the first call's.
        """
        positions = coords[0].detach()
        if self._positions is None or self._positions.shape != positions.shape:
            self._positions = positions.clone()
            return
        known = self._positions.to(positions.device, positions.dtype)
        if not torch.allclose(positions, known, rtol=0.0, atol=1e-6):
            self.refuse_moving("the points' positions changed")

    def refuse_moving(self, seen: str = "the data's points move") -> None:
        """Raises: UserError: naming the model, what was ``seen`` and the models to use."""
        from cloudlstm.errors import UserError  # only on refusal

        raise UserError(
            f"{self.model} takes only points that stay where they were in training, but "
            f"{seen} (moving points): {self.why}. Use a model that builds its graph from the "
            "positions (model=dcrnn, model=stgcn, model=graph_wavenet model.graph=distance) "
            "or a point model (model=cloudlstm)."
        )
