"""Dynamic point-cloud convolution (DConv), Zhang et al. AAAI 2021, Eq. (2) and Alg. 1.

Point-cloud tensors are laid out points-major, ``(B, N, U, F)``: B samples, N points,
U channels, F = H + L features per point and channel (H values, then L coordinates).
Each channel carries its own coordinates, so neighbour sets differ per channel.
Points-major means the gathered neighbourhoods are already the rows of one matrix
product ``(B*N, U_in*K*F_in) @ (U_in*K*F_in, U_out*F_out)`` and the result needs no
transpose: the matmul is the floor of the operator's cost.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from cloudlstm.nn import gather_triton, onednn_matmul
from cloudlstm.nn.kernels import gather_neighbours, use_kernels
from cloudlstm.nn.knn import knn
from cloudlstm.nn.knn_checks import check_k, check_k_option


def channel_neighbours(
    cloud: torch.Tensor, k: int, value_features: int, dtype: torch.dtype = torch.int64
) -> torch.Tensor:
    """K nearest neighbours of every point, separately for every channel.

    Args:
        cloud: ``(B, N, U, H+L)`` point cloud; the last L features are coordinates.
        k: neighbours per point, the point itself first.
        value_features: H.
        dtype: of the indices (see :func:`~cloudlstm.nn.knn.knn`).

    Returns:
        ``(B, N, U, K)`` indices into the N points of the same sample and channel.
    """
    coords = cloud[..., value_features:].transpose(1, 2)  # (B, U, N, L): one cloud per row
    return knn(coords, k, dtype=dtype).permute(0, 2, 1, 3)


def shared_neighbours(coords: torch.Tensor, k: int, channels: int) -> torch.Tensor:
    """Neighbours of clouds whose ``channels`` channels all sit at the same points.

    coords ``(B, N, L)`` -> ``(B, N, channels, K)``, equal to :func:`channel_neighbours` of
    such a cloud, from one search per sample instead of one per channel (and per frame,
    when the caller reuses it, as the CloudLSTM embedding does for its M + J frames).
    """
    return knn(coords, k)[:, :, None, :].expand(-1, -1, channels, -1)


Clouds = torch.Tensor | Sequence[torch.Tensor]

COORDINATES = ("absolute", "relative")
"""What a DConv weights of each neighbour's coordinates: ``absolute``, the coordinates
themselves (the paper's Eq. 2); ``relative``, the neighbour's coordinates minus those of
the point convolved, in the same channel (so translating a cloud changes nothing)."""


def check_coordinates_option(coordinates: str | None) -> str:
    """``coordinates`` if it is one of :data:`COORDINATES`; ``"absolute"`` for None (the
    configs' default, null, so that runs from before the option resume and compare as
    runs of the same setting).

    Raises:
        ValueError: naming ``model.coordinates`` and the values it takes.
    """
    if coordinates is None:
        return "absolute"
    if coordinates not in COORDINATES:
        raise ValueError(
            f"model.coordinates={coordinates!r} is not one of {list(COORDINATES)} or null "
            "(null or absolute: the paper's DConv; relative: centred on the point convolved)."
        )
    return coordinates


_matrices = threading.local()  # .open: {DConv: its weight matrix} while weight_matrices is open


@contextmanager
def weight_matrices() -> Iterator[None]:
    """Within the block, each DConv lays its weight out as the product's matrix once and
    reuses it in every call.

    A recurrent model calls each cell's DConv once per time step; a matrix for each call
    is a copy of the weight per call forward and another per call backward (the gradient
    going back to the weight's layout), which at small clouds cost as much as the
    product. The gradients of the calls now add up in the matrix and go back once. Values
    are the same, and so are the gradients, bit for bit (summed in the same order). Blocks
    nest: the outermost holds the matrices. Not under ``torch.compile``, whose graph
    holds one layout per use anyway.
    """
    if getattr(_matrices, "open", None) is not None:
        yield
        return
    _matrices.open = {}
    try:
        yield
    finally:
        _matrices.open = None


def parts_of(clouds: Clouds) -> tuple[torch.Tensor, ...]:
    """A cloud, or a sequence of clouds standing for their channel concatenation, as a tuple."""
    return (clouds,) if isinstance(clouds, torch.Tensor) else tuple(clouds)


def join_neighbours(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """Neighbours of the channel concatenation of clouds: ``(B, N, U_1 + U_2 + ..., K)``, in
    knn's memory order (a ``(B, U, N, K)`` contiguous tensor seen as ``(B, N, U, K)``), of
    the parts' integer type."""
    if len(parts) == 1:
        return parts[0]
    return torch.cat([p.transpose(1, 2) for p in parts], dim=1).transpose(1, 2)


def gather_neighbourhoods(cloud: Clouds, neighbours: Clouds) -> torch.Tensor:
    """Gather every point's per-channel neighbourhood into one row.

    Args:
        cloud: ``(B, N, U, F)``, or a sequence of clouds (same B, N, F) standing for their
            channel concatenation: on CPU it is never built.
        neighbours: ``(B, N, U, K)`` indices into N (any integer type), or one such tensor
            per cloud.

    Returns:
        ``(B*N, U*K*F)``: row ``b*N + n`` holds, channel by channel and neighbour by
        neighbour (nearest first), the F features of that neighbour in that channel.
    """
    clouds, index = parts_of(cloud), parts_of(neighbours)
    if use_kernels(clouds[0]):  # numba: no flat index tensor, one pass each way
        return gather_neighbours(clouds, index)
    cloud = clouds[0] if len(clouds) == 1 else torch.cat(clouds, dim=2)
    neighbours = join_neighbours(index)
    if gather_triton.available(cloud):  # CUDA: the same, in Triton
        return gather_triton.gather_neighbours_triton(cloud, neighbours)
    b, n, u, f = cloud.shape
    k = neighbours.shape[-1]
    # Flat row of (sample, point, channel) in cloud.reshape(B*N*U, F).
    channel = torch.arange(u, device=cloud.device).view(1, 1, u, 1)
    sample = torch.arange(b, device=cloud.device).view(b, 1, 1, 1) * (n * u)
    rows = (neighbours.long() * u + channel + sample).reshape(-1)  # int16 * u would overflow
    return cloud.reshape(b * n * u, f).index_select(0, rows).view(b * n, u * k * f)


def centre_neighbourhoods(rows: torch.Tensor, cloud: Clouds, value_features: int) -> torch.Tensor:
    """Gathered neighbourhoods with coordinates relative to the point convolved.

    Args:
        rows: ``(B*N, U*K*F)`` from :func:`gather_neighbourhoods` of ``cloud``.
        cloud: the ``(B, N, U, F)`` cloud (or its parts) the rows were gathered from.
        value_features: H; the last F - H features are coordinates.

    Returns:
        ``(B*N, U*K*F)``: in row ``b*N + n``, each neighbour's coordinates in channel u
        minus point n's own coordinates in channel u; value features as they were. The
        point's own coordinates are subtracted, not its first neighbour's, so that given
        neighbours (``model.neighbours=static``) are centred alike.
    """
    clouds = parts_of(cloud)
    centre = torch.cat([p[..., value_features:] for p in clouds], dim=2)  # (B, N, U, L)
    b, n, u, _ = centre.shape
    centre = nn.functional.pad(centre, (value_features, 0))  # (B, N, U, F), values zero
    f = centre.shape[-1]
    centred = rows.reshape(b * n, u, -1, f) - centre.reshape(b * n, u, 1, f)
    return centred.view(b * n, -1)


class DConv(nn.Module):
    """Dynamic point-cloud convolution.

    For every point and input channel, gathers the point's K nearest neighbours in that
    channel's own coordinates (the point itself first, then by distance) and weights
    all their value and coordinate features with a weight tensor of shape
    ``(U_in, K, H_in+L, H_out+L, U_out)`` shared across points, plus a bias per output
    channel and feature. A sigmoid keeps output coordinates in (0, 1); gate computations
    use the "simplified DConv" without it (``coord_activation=False``).

    ``coordinates="relative"`` (not the paper's; default ``"absolute"``) weights each
    neighbour's coordinates minus those of the point convolved, so the output, values and
    coordinates alike, does not change when the cloud is translated. The output
    coordinates are computed as before, from the centred input: they are new positions
    the layer learns, not offsets added back to the point's own.

    Input ``(B, N, U_in, H_in+L)`` -> output ``(B, N, U_out, H_out+L)``; N is preserved.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        k: int,
        value_features: int = 1,
        coord_features: int = 2,
        out_value_features: int | None = None,
        coord_activation: bool = True,
        bias: bool = True,
        coordinates: str | None = "absolute",
    ) -> None:
        super().__init__()
        self.coordinates = check_coordinates_option(coordinates)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.k = check_k_option(k)
        self.value_features = value_features
        self.coord_features = coord_features
        self.out_value_features = out_value_features or value_features
        self.coord_activation = coord_activation
        f_in = value_features + coord_features
        f_out = self.out_value_features + coord_features
        self.weight = nn.Parameter(torch.empty(in_channels, k, f_in, f_out, out_channels))
        self.bias = nn.Parameter(torch.zeros(out_channels, f_out)) if bias else None
        # LeCun uniform (unit variance gain): the default conv init shrinks activations
        # ~3x per DConv, and a CloudLSTM stacks several DConvs per step.
        bound = math.sqrt(3.0 / (in_channels * k * f_in))
        nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, k={self.k}, "
            f"H={self.value_features}->{self.out_value_features}, L={self.coord_features}, "
            f"coord_activation={self.coord_activation}, coordinates={self.coordinates}"
        )

    def matrix(self) -> torch.Tensor:
        """The weight as the product's ``(U_in*K*F_in, U_out*F_out)`` matrix, matching the
        gathered rows; laid out once per :func:`weight_matrices` block."""
        open_block = getattr(_matrices, "open", None)
        if open_block is None or torch.compiler.is_compiling():
            return self._matrix()
        if self not in open_block:
            open_block[self] = self._matrix()
        return open_block[self]

    def _matrix(self) -> torch.Tensor:
        # (U_in, K, F_in, F_out, U_out) -> (U_in*K*F_in, U_out*F_out)
        u, k, f_in, f_out, u_out = self.weight.shape
        return self.weight.transpose(3, 4).reshape(u * k * f_in, u_out * f_out)

    def forward(self, cloud: Clouds, neighbours: Clouds | None = None) -> torch.Tensor:
        """cloud ``(B, N, U_in, F_in)``, optional precomputed ``(B, N, U_in, K)`` neighbours
        -> ``(B, N, U_out, F_out)``.

        A sequence of clouds (and of their neighbours, one tensor each) is read as their
        channel concatenation ``(B, N, U_1 + U_2 + ..., F_in)``, which is never built on
        CPU: a cell's ``[S_t; H_{t-1}]`` is gathered from its two parts.
        """
        clouds = parts_of(cloud)
        b, n, _, f = clouds[0].shape
        u = sum(part.shape[2] for part in clouds)
        if u != self.in_channels or f != self.value_features + self.coord_features:
            shape = (b, n, u, f) if len(clouds) == 1 else [tuple(p.shape) for p in clouds]
            raise ValueError(
                f"DConv expects a point cloud (B, N, U={self.in_channels}, "
                f"F={self.value_features + self.coord_features}), got {shape}."
            )
        if neighbours is None:
            check_k(self.k, n)
            neighbours = [channel_neighbours(p, self.k, self.value_features) for p in clouds]
        rows = gather_neighbourhoods(clouds, neighbours)  # (B*N, U_in*K*F_in)
        if self.coordinates == "relative":  # after the gather: alike on every gather path
            rows = centre_neighbourhoods(rows, clouds, self.value_features)
        weight = self.matrix()
        bias = None if self.bias is None else self.bias.reshape(-1)
        out = onednn_matmul.addmm(bias, rows, weight).view(b, n, self.out_channels, -1)
        if not self.coord_activation:
            return out
        h = self.out_value_features
        return torch.cat([out[..., :h], torch.sigmoid(out[..., h:])], dim=-1)
