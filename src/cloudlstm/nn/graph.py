"""Distance graphs over point clouds and the Chebyshev graph convolution (for STGCN).

The graph follows the STGCN paper's preprocessing (Yu et al., IJCAI 2018):
``w_ij = exp(-d_ij^2 / sigma^2)`` when ``i != j`` and that weight is ``>= epsilon``, else 0.
Their ``sigma^2 = 10`` is tied to their road distances (metres / 10^4), so here ``sigma``
defaults to a scale-free quantity of the cloud itself: the mean over points of the distance
to the ``neighbours``-th nearest other point. With ``epsilon = 0.5`` an edge then exists for
``d <= sigma * sqrt(ln 2) ~ 0.83 sigma``: a local graph, a few neighbours per point for
evenly spread points, comparable to CloudLSTM's K.
"""

from __future__ import annotations

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
        return scaled_laplacian(distance_weights(coords, sigma, self.epsilon))


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
