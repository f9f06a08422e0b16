"""AGCRN baseline (Bai, Yao, Li, Wang, Wang, *Adaptive Graph Convolutional Recurrent Network
for Traffic Forecasting*, NeurIPS 2020; reference code LeiBAI/AGCRN).

GRU cells whose products are graph convolutions with node-adaptive parameters: one learned
embedding ``E (N, d)`` per point gives both the graph, the data-adaptive adjacency
``softmax(ReLU(E E^T))``, and each point's weights ``E W_pool`` and biases ``E b_pool``.
Both are learned per training point, by index: the model is transductive.
"""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.base import Channels, ForecastModel, check_sizes
from cloudlstm.nn.graph import StaticPositions, adaptive_adjacency

WHY = "it learns an embedding for each training point, which also makes its graph"


class NodeAdaptiveGraphConv(nn.Module):
    """AGCRN's graph convolution with node-adaptive parameter learning (paper, Eq. 4-6).

    ``y_n = sum_{k<K} (T_k(S) x)_n (E_n W_pool[:, k]) + E_n b_pool``: the Chebyshev terms
    ``T_0 = I``, ``T_1 = S``, ``T_k = 2 S T_{k-1} - T_{k-2}`` of the adaptive adjacency S,
    each with its own weights, and point n's weights ``(C_in, C_out)`` and bias the
    combination of ``d`` pooled ones by its embedding ``E_n``.

    Tensors are point-major, ``(N, B, C)``: each term ``S x`` is then one matrix product
    over the whole batch, and the points' own weights one batched product over the points,
    with no copy between them. The points' weights depend only on E, so a recurrence
    computes them once (:meth:`node_parameters`) and passes them to every step.
    x ``(N, B, C_in)``, S ``(N, N)``, parameters from :meth:`node_parameters` ->
    ``(N, B, C_out)``.
    """

    def __init__(self, in_channels: int, out_channels: int, cheb_k: int, node_dim: int):
        super().__init__()
        self.cheb_k = cheb_k
        self.weights_pool = nn.Parameter(torch.empty(node_dim, cheb_k, in_channels, out_channels))
        self.bias_pool = nn.Parameter(torch.empty(node_dim, out_channels))
        # the reference's training script draws every matrix Xavier-uniform
        nn.init.xavier_uniform_(self.weights_pool)
        nn.init.xavier_uniform_(self.bias_pool)

    def node_parameters(self, embeddings: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each point's weights ``(N, K * C_in, C_out)`` (term k's rows ``k * C_in ...``) and
        bias ``(N, 1, C_out)`` from the embeddings ``E (N, d)``."""
        d, k, c_in, c_out = self.weights_pool.shape
        weights = embeddings @ self.weights_pool.view(d, k * c_in * c_out)
        bias = embeddings @ self.bias_pool
        return weights.view(-1, k * c_in, c_out), bias.unsqueeze(1)

    def forward(
        self,
        x: torch.Tensor,
        adjacency: torch.Tensor,
        parameters: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        n, b, c = x.shape
        terms = [x]
        if self.cheb_k > 1:
            terms.append((adjacency @ x.reshape(n, b * c)).view(n, b, c))
        for _ in range(2, self.cheb_k):
            spread = (adjacency @ terms[-1].reshape(n, b * c)).view(n, b, c)
            terms.append(2 * spread - terms[-2])
        weights, bias = parameters
        return torch.baddbmm(bias, torch.cat(terms, dim=-1), weights)


class AGCRNCell(nn.Module):
    """AGCRN's GRU cell (paper, Eq. 7): ``z, r = sigmoid(G([x, h]))``,
    ``c = tanh(G([x, r h]))``, ``h' = z h + (1 - z) c``, each G a
    :class:`NodeAdaptiveGraphConv`, point-major as it is. x ``(N, B, C_in)``,
    h ``(N, B, C_h)``, ``parameters`` from :meth:`node_parameters` -> h'."""

    def __init__(self, input_channels: int, hidden_channels: int, cheb_k: int, node_dim: int):
        super().__init__()
        self.hidden_channels = hidden_channels
        width = input_channels + hidden_channels
        self.gates = NodeAdaptiveGraphConv(width, 2 * hidden_channels, cheb_k, node_dim)
        self.candidate = NodeAdaptiveGraphConv(width, hidden_channels, cheb_k, node_dim)

    def node_parameters(self, embeddings: torch.Tensor) -> tuple[tuple, tuple]:
        """The points' weights and biases of both convolutions, for every step."""
        return self.gates.node_parameters(embeddings), self.candidate.node_parameters(embeddings)

    def forward(
        self,
        x: torch.Tensor,
        hidden: torch.Tensor,
        adjacency: torch.Tensor,
        parameters: tuple[tuple, tuple],
    ) -> torch.Tensor:
        gates, candidate = parameters
        both = torch.cat([x, hidden], dim=-1)
        update, reset = torch.sigmoid(self.gates(both, adjacency, gates)).chunk(2, dim=-1)
        again = torch.cat([x, reset * hidden], dim=-1)
        candidate = torch.tanh(self.candidate(again, adjacency, candidate))
        return update * hidden + (1 - update) * candidate


class AGCRN(ForecastModel):
    """Adaptive graph convolutional recurrent network.

    Reference configuration (LeiBAI/AGCRN, ``PEMSD4_AGCRN.conf``): node embeddings of 10,
    2 layers of 64 units, Chebyshev order 2. The stacked AGCRN cells read the M input
    frames from zero states; the top layer's last state goes through AGCRN's predictor (a
    convolution over the hidden units, here a linear layer) to all J x C_out forecasts at
    once (direct, J free).

    Transductive: the embeddings are one learned vector per training point, by index, so the
    model forecasts only its training points (``fixed_points``) and refuses moving points
    (:class:`~cloudlstm.nn.graph.StaticPositions`); coordinates are not read otherwise.
    Covariates and time features are input channels; ``future`` is checked but not read.

    ``x (B, M, N, C_in)``, ``coords (B, N, L)`` (``future (B, J, N, F)`` with time
    features) -> ``(B, J, N, C_out)``.
    """

    fixed_points = WHY
    point_parameters = WHY

    def __init__(
        self,
        num_points: int,
        num_channels: int,
        output_steps: int,
        hidden_channels: int = 64,
        num_layers: int = 2,
        node_dim: int = 10,
        cheb_k: int = 2,
        input_channels: int | None = None,
        future_channels: int = 0,
    ) -> None:
        super().__init__()
        check_sizes(
            num_points=num_points,
            num_channels=num_channels,
            output_steps=output_steps,
            hidden_channels=hidden_channels,
            num_layers=num_layers,
            node_dim=node_dim,
            cheb_k=cheb_k,
        )
        self.num_points = num_points
        self.output_steps = output_steps
        self.channels = Channels.of(num_channels, input_channels, future_channels)
        self.embeddings = nn.Parameter(torch.empty(num_points, node_dim))
        nn.init.xavier_uniform_(self.embeddings)
        widths = [self.channels.inp] + [hidden_channels] * (num_layers - 1)
        self.cells = nn.ModuleList(AGCRNCell(w, hidden_channels, cheb_k, node_dim) for w in widths)
        self.head = nn.Linear(hidden_channels, output_steps * num_channels)
        self.static = StaticPositions("AGCRN", WHY)

    def output_head(self) -> list[nn.Module]:
        """``[self.head]``: the predictor emitting all J x C_out forecasts."""
        return [self.head]

    def check_input(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> None:
        super().check_input(x, coords, future)
        if x.shape[2] != self.num_points:
            raise ValueError(
                f"this AGCRN was trained on {self.num_points} points (one learned embedding "
                f"each) but got {x.shape[2]}: it forecasts only its training points, in their "
                "order. Use a model that takes any points (e.g. model=dcrnn, model=cloudlstm)."
            )
        self.static(coords)

    def adjacency(self) -> torch.Tensor:
        """The data-adaptive adjacency ``softmax(ReLU(E E^T))``, ``(N, N)``."""
        return adaptive_adjacency(self.embeddings, self.embeddings)

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check_input(x, coords, future)
        b, m, n, _ = x.shape
        adjacency = self.adjacency()
        parameters = [cell.node_parameters(self.embeddings) for cell in self.cells]
        frames = x.permute(1, 2, 0, 3)  # (M, N, B, C_in): the cells are point-major
        states = [x.new_zeros(n, b, cell.hidden_channels) for cell in self.cells]
        for t in range(m):
            inp = frames[t]
            for layer, cell in enumerate(self.cells):
                inp = states[layer] = cell(inp, states[layer], adjacency, parameters[layer])
        out = self.head(states[-1])  # (N, B, J * C_out)
        return out.view(n, b, self.output_steps, self.channels.out).permute(1, 2, 0, 3)
