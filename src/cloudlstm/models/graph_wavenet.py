"""Graph WaveNet baseline (Wu, Pan, Long, Jiang, Zhang, *Graph WaveNet for Deep
Spatial-Temporal Graph Modeling*, IJCAI 2019; reference code nnzhan/Graph-WaveNet).

Stacked layers of a gated dilated temporal convolution (WaveNet's gated TCN) followed by a
diffusion graph convolution over the forward and backward transition matrices of the
points' graph and a learned adaptive adjacency ``softmax(ReLU(E1 E2^T))``, with residual
and skip connections; the skips feed an output block that gives all J steps at once.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from cloudlstm.models.base import Channels, ForecastModel, check_counts, check_sizes
from cloudlstm.nn.graph import (
    DiffusionConv,
    StaticPositions,
    TransitionGraph,
    adaptive_adjacency,
    adjacency_weights,
    transition_matrices,
)

# model.graph: which supports the graph convolutions diffuse over (the paper's variants)
GRAPHS = ("both", "distance", "adaptive")
ADAPTIVE_WHY = "its adaptive adjacency learns one embedding per training point"


class GatedTemporalConv(nn.Module):
    """WaveNet's gated dilated causal convolution over time, shared by all points.

    ``tanh(W_f * x) * sigmoid(W_g * x)`` with ``*`` a convolution of ``kernel_size`` taps
    ``dilation`` steps apart. x ``(B, T, N, C_in)`` -> ``(B, T - dilation (kernel_size - 1),
    N, C_out)``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int):
        super().__init__()
        self.kernel_size = kernel_size
        self.dilation = dilation
        # filter and gate convolutions as one linear layer over the taps side by side
        self.conv = nn.Linear(kernel_size * in_channels, 2 * out_channels)

    @property
    def receptive_field(self) -> int:
        """Input steps behind one output step."""
        return self.dilation * (self.kernel_size - 1) + 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        taps = x.unfold(1, self.receptive_field, 1)[..., :: self.dilation]  # (B, T', N, C, k)
        filt, gate = self.conv(taps.transpose(-1, -2).flatten(-2)).chunk(2, dim=-1)
        return torch.tanh(filt) * torch.sigmoid(gate)


class GraphWaveNet(ForecastModel):
    """Graph WaveNet over the points' graph.

    Reference configuration (nnzhan/Graph-WaveNet, ``train.py`` defaults): 4 blocks of 2
    layers (dilations 1, 2 in each block, kernel 2: a receptive field of 13 steps), 32
    residual and dilation channels, 256 skip and 512 end channels, diffusion order 2,
    adaptive node embeddings of 10, dropout 0.3 after each graph convolution, batch norm
    after each layer. Each layer: ``h = GatedTCN(x)``; ``skip += W_s h``; ``x = GCN(h) +
    x`` (the residual cropped to the layer's output steps), batch norm. Output:
    ``ReLU(skip)`` -> 1 x 1 (512) -> ReLU -> 1 x 1 (J x C_out), at the last step. An input
    shorter than the receptive field is left-padded with zeros (the normalised mean), as
    the reference does; a longer one is read by its last steps.

    The graph convolution diffuses ``diffusion_steps`` steps over each support:
    ``graph='both'`` (the paper's model) the forward and backward random walks of the
    points' graph and the adaptive adjacency; ``'distance'`` the walks only; ``'adaptive'``
    the adaptive adjacency only. The points' graph is DCRNN's kernel of the coordinates,
    per sample (:class:`~cloudlstm.nn.graph.TransitionGraph`), or the data's graph
    (``data.source.graph``, passed as ``adjacency``: (N, N) non-negative weights in the
    data's point order). The adaptive adjacency learns
    an embedding per training point, by index: with it (or with ``adjacency``) the model
    forecasts only its training points, and it refuses moving points. ``num_points`` sizes
    the embeddings; with ``graph='distance'`` it is unused, but a trained run is still built
    for it.

    Time features (``data.time_features``) and covariates are input channels, as the
    reference feeds the time of day; ``future`` is checked but not read.

    ``x (B, M, N, C_in)``, ``coords (B, N, L)`` (``future (B, J, N, F)`` with time
    features) -> ``(B, J, N, C_out)``.
    """

    def __init__(
        self,
        num_points: int,
        num_channels: int,
        output_steps: int,
        hidden_channels: int = 32,
        skip_channels: int = 256,
        end_channels: int = 512,
        kernel_size: int = 2,
        blocks: int = 4,
        layers: int = 2,
        diffusion_steps: int = 2,
        node_dim: int = 10,
        graph: str = "both",
        sigma: float | None = None,
        epsilon: float = 0.1,
        neighbours: int = 4,
        dropout: float = 0.3,
        adjacency: object | None = None,
        input_channels: int | None = None,
        future_channels: int = 0,
    ) -> None:
        super().__init__()
        check_sizes(
            num_points=num_points,
            num_channels=num_channels,
            output_steps=output_steps,
            hidden_channels=hidden_channels,
            skip_channels=skip_channels,
            end_channels=end_channels,
            kernel_size=kernel_size,
            blocks=blocks,
            layers=layers,
            node_dim=node_dim,
        )
        check_counts(diffusion_steps=diffusion_steps)
        if graph not in GRAPHS:
            raise ValueError(f"model.graph={graph!r} is not one of {list(GRAPHS)}.")
        self.output_steps = output_steps
        self.channels = Channels.of(num_channels, input_channels, future_channels)
        self.num_points = num_points
        self.graph = graph
        self.distance = TransitionGraph(sigma, epsilon, neighbours)
        walks = None
        if adjacency is not None:
            if graph == "adaptive":
                raise ValueError(
                    "model.graph=adaptive reads no given graph: drop data.source.graph."
                )
            walks = transition_matrices(adjacency_weights(adjacency, num_points))
            self.fixed_points = "its graph is given for the training points (data.source.graph)"
        # not persistent: the graph comes from the config, not from the checkpoint
        self.register_buffer("walks", walks, persistent=False)
        adaptive = graph != "distance"
        # E1, E2 of softmax(ReLU(E1 E2^T)), drawn from N(0, 1) as the reference draws them
        for name in ("source", "target"):
            embedding = nn.Parameter(torch.randn(num_points, node_dim)) if adaptive else None
            self.register_parameter(name, embedding)
        self.static = None
        if adaptive:
            self.fixed_points = ADAPTIVE_WHY
            self.point_parameters = ADAPTIVE_WHY
            self.static = StaticPositions("Graph WaveNet with an adaptive adjacency", ADAPTIVE_WHY)
        supports = {"both": 3, "distance": 2, "adaptive": 1}[graph]

        self.start = nn.Linear(self.channels.inp, hidden_channels)
        dilations = [2**i for _ in range(blocks) for i in range(layers)]
        self.tcn = nn.ModuleList(
            GatedTemporalConv(hidden_channels, hidden_channels, kernel_size, d) for d in dilations
        )
        self.skip = nn.ModuleList(nn.Linear(hidden_channels, skip_channels) for _ in dilations)
        self.gcn = nn.ModuleList(
            DiffusionConv(hidden_channels, hidden_channels, supports, diffusion_steps)
            for _ in dilations
        )
        self.norm = nn.ModuleList(nn.BatchNorm1d(hidden_channels) for _ in dilations)
        self.dropout = nn.Dropout(dropout)
        self.receptive_field = 1 + sum(layer.receptive_field - 1 for layer in self.tcn)
        self.end_hidden = nn.Linear(skip_channels, end_channels)
        self.head = nn.Linear(end_channels, output_steps * num_channels)

    def output_head(self) -> list[nn.Module]:
        """``[self.head]``: the last 1 x 1 layer, emitting all J x C_out forecasts."""
        return [self.head]

    def check_input(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> None:
        super().check_input(x, coords, future)
        if self.fixed_points is not None and x.shape[2] != self.num_points:
            raise ValueError(
                f"this Graph WaveNet was trained on {self.num_points} points (an adaptive "
                f"adjacency or a given graph over them) but got {x.shape[2]}: it forecasts "
                "only its training points, in their order; model.graph=distance takes any."
            )
        if self.static is not None:
            self.static(coords)

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check_input(x, coords, future)
        b, m, n, _ = x.shape
        # The supports: the walks (1 or B, N, N) each, then the adaptive adjacency (N, N).
        # Built here, not in a helper, so that under torch.compile the graph's host-side
        # cache is the only thing outside the graph.
        supports = []
        if self.graph != "adaptive":
            walks = self.walks[None] if self.walks is not None else self.distance(coords)
            supports += [walks[:, 0], walks[:, 1]]
        if self.source is not None:
            supports.append(adaptive_adjacency(self.source, self.target))
        x = F.pad(x, (0, 0, 0, 0, max(0, self.receptive_field - m), 0))  # causal, in time
        h = self.start(x)  # (B, T, N, hidden)
        skip = None
        for tcn, to_skip, gcn, norm in zip(self.tcn, self.skip, self.gcn, self.norm, strict=True):
            residual = h
            h = tcn(h)  # (B, T', N, hidden)
            out = to_skip(h)
            skip = out if skip is None else out + skip[:, -out.shape[1] :]
            h = self.dropout(gcn(h, supports)) + residual[:, -h.shape[1] :]
            h = norm(h.flatten(0, -2)).view_as(h)  # over batch, time and points, per channel
        out = self.end_hidden(torch.relu(skip[:, -1]))  # (B, N, end)
        out = self.head(torch.relu(out))  # (B, N, J * C_out)
        return out.view(b, n, self.output_steps, self.channels.out).transpose(1, 2)
