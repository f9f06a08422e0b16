"""STGCN baseline (Yu, Yin, Zhu, *Spatio-Temporal Graph Convolutional Networks*, IJCAI 2018).

The points become the nodes of a graph (:mod:`cloudlstm.nn.graph`): their distance graph,
or the graph given with the data (``data.source.graph``, e.g. METR-LA's road network);
time is handled by gated 1-D convolutions, space by Chebyshev graph convolutions.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from cloudlstm.models.base import Channels, ForecastModel, check_sizes
from cloudlstm.nn.graph import ChebGraphConv, DistanceGraph, given_laplacian


class GatedTemporalConv(nn.Module):
    """Gated linear unit over ``kt`` consecutive steps, shared by all points.

    ``[P, Q] = conv(x)``, output ``(P + x_res) * sigmoid(Q)``, with ``x_res`` the input at
    each window's last step (projected by a 1 x 1 layer when the channel counts differ).
    x ``(B, T, N, C_in)`` -> ``(B, T - kt + 1, N, C_out)``.
    """

    def __init__(self, in_channels: int, out_channels: int, kt: int) -> None:
        super().__init__()
        self.kt = kt
        # A (kt, 1) convolution written as a linear layer over unfolded windows, so the
        # (B, T, N, C) layout is kept without permutes.
        self.conv = nn.Linear(kt * in_channels, 2 * out_channels)
        self.residual = (
            nn.Identity() if in_channels == out_channels else nn.Linear(in_channels, out_channels)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        windows = x.unfold(1, self.kt, 1)  # (B, T', N, C_in, kt)
        windows = windows.transpose(-1, -2).flatten(-2)  # (B, T', N, kt * C_in), step-major
        p, q = self.conv(windows).chunk(2, dim=-1)
        return (p + self.residual(x[:, self.kt - 1 :])) * torch.sigmoid(q)


class PointsLayerNorm(nn.Module):
    """Layer norm over all points and channels of each sample and step, as STGCN does.

    The affine scale and shift are per channel and shared by the points (STGCN's are per
    point and channel), so the model accepts any N and stays equivariant to the order of
    the points. x ``(B, T, N, C)`` -> same shape.
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-2:]) * self.weight + self.bias


class STConvBlock(nn.Module):
    """Gated temporal conv -> Chebyshev graph conv + ReLU -> gated temporal conv -> norm.

    x ``(B, T, N, C_in)``, laplacian ``(1 or B, N, N)`` -> ``(B, T - 2 (kt - 1), N, C_out)``.
    """

    def __init__(
        self,
        in_channels: int,
        spatial_channels: int,
        out_channels: int,
        kt: int,
        ks: int,
        dropout: float,
    ) -> None:
        super().__init__()
        self.temporal_in = GatedTemporalConv(in_channels, out_channels, kt)
        self.spatial = ChebGraphConv(out_channels, spatial_channels, ks)
        self.temporal_out = GatedTemporalConv(spatial_channels, out_channels, kt)
        self.norm = PointsLayerNorm(out_channels)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, laplacian: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.spatial(self.temporal_in(x), laplacian))
        return self.dropout(self.norm(self.temporal_out(h)))


class STGCN(ForecastModel):
    """Spatio-temporal graph convolutional network over the points' distance graph.

    ``num_blocks`` ST-Conv blocks (paper appendix: 2, with 36 channels), then STGCN's output
    layer: a gated temporal conv spanning all remaining steps, layer norm, a 1 x 1 layer with
    sigmoid, and a linear head emitting all J x C forecasts at once. Multi-output, not
    autoregressive: one forward pass gives every step, and J is free (J > M works).

    The graph is built from ``coords`` on every call (cached while they do not change):
    weights ``exp(-d^2 / sigma^2)`` kept where ``>= epsilon``; ``sigma=None`` means the mean
    distance to the ``neighbours``-th nearest point (see :mod:`cloudlstm.nn.graph`).
    ``adjacency`` (``(N, N)`` weights in the data's point order, ``data.source.graph``)
    replaces it by that fixed graph, made undirected and without self-loops
    (:func:`~cloudlstm.nn.graph.given_laplacian`; ``sigma``, ``epsilon`` and ``neighbours``
    are then unused): the model is then tied to its N training points, in their order
    (:attr:`fixed_points`), and ``coords`` are not read.

    Each block consumes ``2 (kt - 1)`` steps. An input shorter than
    ``2 (kt - 1) num_blocks + 1`` steps is left-padded with zeros (the normalised mean) to
    that length: causal padding, none at the paper's M=12, kt=3.

    Covariates: the first block reads all C_in input channels and the head emits the
    J x C_out forecasts. ``future`` is checked but not read: on the data's regular clock
    the input steps' time features (channels of ``x``) determine those of the forecast
    steps.

    ``x (B, M, N, C_in)``, ``coords (B, N, L)`` (``future (B, J, N, F)`` with time
    features) -> ``(B, J, N, C_out)``.
    """

    # a given graph is made undirected, w_ij = max(w_ij, w_ji) (given_laplacian)
    reads_graph_direction = False

    def __init__(
        self,
        num_channels: int,
        input_steps: int,
        output_steps: int,
        hidden_channels: int = 36,
        spatial_channels: int | None = None,
        num_blocks: int = 2,
        kt: int = 3,
        ks: int = 3,
        sigma: float | None = None,
        epsilon: float = 0.5,
        neighbours: int = 9,
        dropout: float = 0.0,
        input_channels: int | None = None,
        future_channels: int = 0,
        adjacency: Sequence[Sequence[float]] | None = None,
    ) -> None:
        super().__init__()
        check_sizes(
            num_channels=num_channels,
            input_steps=input_steps,
            output_steps=output_steps,
            hidden_channels=hidden_channels,
            num_blocks=num_blocks,
            kt=kt,
            ks=ks,
            # null: as many as hidden_channels; 0 would have meant that too, silently
            **({} if spatial_channels is None else {"spatial_channels": spatial_channels}),
        )
        self.num_channels = num_channels
        self.channels = Channels.of(num_channels, input_channels, future_channels)
        self.input_steps = input_steps
        self.output_steps = output_steps
        self.graph = DistanceGraph(sigma, epsilon, neighbours)
        # A buffer, so it follows the model's device and dtype; not persistent: the data's
        # description in every checkpoint carries the graph, and checkpoints of the model
        # without one stay loadable.
        self.register_buffer(
            "given_laplacian",
            None if adjacency is None else given_laplacian(adjacency),
            persistent=False,
        )
        if adjacency is not None:
            self.fixed_points = (
                "it convolves over the given graph of its training points (data.source.graph)"
            )
        consumed = 2 * (kt - 1) * num_blocks
        self.pad = max(0, consumed + 1 - input_steps)
        spatial_channels = hidden_channels if spatial_channels is None else spatial_channels
        self.blocks = nn.ModuleList(
            STConvBlock(
                self.channels.inp if i == 0 else hidden_channels,
                spatial_channels,
                hidden_channels,
                kt,
                ks,
                dropout,
            )
            for i in range(num_blocks)
        )
        remaining = input_steps + self.pad - consumed
        self.out_temporal = GatedTemporalConv(hidden_channels, hidden_channels, remaining)
        self.out_norm = PointsLayerNorm(hidden_channels)
        self.out_hidden = nn.Linear(hidden_channels, hidden_channels)
        self.head = nn.Linear(hidden_channels, output_steps * num_channels)

    def output_head(self) -> list[nn.Module]:
        """``[self.head]``: the linear layer emitting all J x C forecasts, with nothing
        after it."""
        return [self.head]

    def check_input(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> None:
        # first, so that a window of the wrong size names the options that size it
        if x.dim() == 4 and (x.shape[1], x.shape[3]) != (self.input_steps, self.channels.inp):
            raise ValueError(
                f"STGCN was built for M={self.input_steps} input steps and "
                f"C_in={self.channels.inp} channels but x has M={x.shape[1]}, "
                f"C_in={x.shape[3]}: set model.input_steps / model.num_channels to match the "
                "data."
            )
        super().check_input(x, coords, future)
        lap = self.given_laplacian
        if lap is not None and x.shape[2] != lap.shape[-1]:
            raise ValueError(
                f"STGCN was built on a graph of {lap.shape[-1]} points (data.source.graph), "
                f"but x has {x.shape[2]} points: give it the points of its graph."
            )

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check_input(x, coords, future)
        b, _, n, _ = x.shape
        laplacian = self.graph(coords) if self.given_laplacian is None else self.given_laplacian
        h = F.pad(x, (0, 0, 0, 0, self.pad, 0))  # causal zero padding in time, if any
        for block in self.blocks:
            h = block(h, laplacian)
        h = self.out_norm(self.out_temporal(h))  # (B, 1, N, hidden)
        out = self.head(torch.sigmoid(self.out_hidden(h)))  # (B, 1, N, J * C_out)
        return out.view(b, n, self.output_steps, self.num_channels).transpose(1, 2)
