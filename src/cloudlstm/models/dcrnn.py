"""DCRNN baseline (Li, Yu, Shahabi, Liu, *Diffusion Convolutional Recurrent Neural Network:
Data-Driven Traffic Forecasting*, ICLR 2018; reference code liyaguang/DCRNN).

A GRU whose matrix products are diffusion convolutions over the points' graph, in both
random-walk directions and K diffusion steps each (:class:`cloudlstm.nn.graph.DiffusionConv`),
as an encoder-decoder. The graph is DCRNN's thresholded Gaussian kernel of the distances
between the points' positions (:class:`cloudlstm.nn.graph.TransitionGraph`), rebuilt per
sample when the points move, or the graph given with the data (``data.source.graph``, e.g.
DCRNN's ``adj_mx.pkl``), passed as ``adjacency``.
"""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.base import Channels, ForecastModel, check_counts, check_sizes
from cloudlstm.models.teacher import read_back
from cloudlstm.nn.graph import (
    DiffusionConv,
    TransitionGraph,
    adjacency_weights,
    transition_matrices,
)


class DCGRUCell(nn.Module):
    """DCRNN's diffusion convolutional GRU cell (paper, Eq. 3).

    ``r, u = sigmoid(Theta_{r,u} *G [x, h] + b)``, ``c = tanh(Theta_c *G [x, r h] + b_c)``,
    ``h' = u h + (1 - u) c``, each ``*G`` a :class:`DiffusionConv` over the two walks.
    x ``(B, N, C_in)``, h ``(B, N, C_h)``, supports 2 x ``(1 or B, N, N)`` -> h' ``(B, N, C_h)``.
    """

    def __init__(self, input_channels: int, hidden_channels: int, steps: int) -> None:
        super().__init__()
        self.hidden_channels = hidden_channels
        width = input_channels + hidden_channels
        self.gates = DiffusionConv(width, 2 * hidden_channels, supports=2, steps=steps)
        self.candidate = DiffusionConv(width, hidden_channels, supports=2, steps=steps)
        # The reference starts the gates' bias at 1: u near sigmoid(1) keeps most of the
        # state while the weights are still random.
        nn.init.constant_(self.gates.linear.bias, 1.0)

    def forward(
        self, x: torch.Tensor, hidden: torch.Tensor, supports: list[torch.Tensor]
    ) -> torch.Tensor:
        gates = torch.sigmoid(self.gates(torch.cat([x, hidden], dim=-1), supports))
        reset, update = gates.chunk(2, dim=-1)
        candidate = torch.tanh(self.candidate(torch.cat([x, reset * hidden], dim=-1), supports))
        return update * hidden + (1 - update) * candidate


class DCRNN(ForecastModel):
    """Diffusion convolutional recurrent network: a DCGRU encoder-decoder over the points.

    Reference configuration (liyaguang/DCRNN, ``dcrnn_la.yaml``): 2 layers of 64 units,
    ``max_diffusion_step`` 2, ``filter_type: dual_random_walk``. The encoder reads the M
    input frames from zero states; the decoder starts from the encoder's final states and
    from DCRNN's GO symbol (zero targets), and reads its own previous forecast at each of the
    J steps (J may exceed M). A linear projection of the top layer gives each step's C_out
    forecasts. With covariates the decoder's frames are the forecast targets with the
    measured covariates held at their last values and the step's time features
    (:meth:`~cloudlstm.models.base.Channels.next_frame`), the GO frame the last input
    step's.

    Scheduled sampling (DCRNN's curriculum learning: the decoder reads the true value of
    the previous step with a probability that decays over training) is the training
    module's ``module.scheduled_sampling``, offered to every model that reads its own
    forecasts (:mod:`cloudlstm.models.teacher`); off by default, as for every model.

    The graph: without ``adjacency``, DCRNN's kernel of the coordinates (``sigma``,
    ``epsilon``, ``neighbours``: :class:`~cloudlstm.nn.graph.TransitionGraph`), built per
    sample, so the model takes any points, moving ones too. With ``adjacency`` (the data's
    graph, ``data.source.graph``: an (N, N) array-like of non-negative weights in the data's
    point order, ``W_ij`` the edge from i to j) the forward walk is ``D_O^-1 W`` and the
    backward ``D_I^-1 W^T``, and the model forecasts only those points.

    ``x (B, M, N, C_in)``, ``coords (B, N, L)`` (``future (B, J, N, F)`` with time
    features) -> ``(B, J, N, C_out)``.
    """

    reads_own_forecasts = True

    def __init__(
        self,
        num_channels: int,
        output_steps: int,
        hidden_channels: int = 64,
        num_layers: int = 2,
        diffusion_steps: int = 2,
        sigma: float | None = None,
        epsilon: float = 0.1,
        neighbours: int = 4,
        adjacency: object | None = None,
        input_channels: int | None = None,
        future_channels: int = 0,
    ) -> None:
        super().__init__()
        check_sizes(
            num_channels=num_channels,
            output_steps=output_steps,
            hidden_channels=hidden_channels,
            num_layers=num_layers,
        )
        check_counts(diffusion_steps=diffusion_steps)
        self.output_steps = output_steps
        self.channels = Channels.of(num_channels, input_channels, future_channels)
        self.graph = TransitionGraph(sigma, epsilon, neighbours)
        walks = None
        if adjacency is not None:
            walks = transition_matrices(adjacency_weights(adjacency))
            self.fixed_points = "its graph is given for the training points (data.source.graph)"
        # not persistent: the graph comes from the config, not from the checkpoint
        self.register_buffer("walks", walks, persistent=False)
        widths = [self.channels.inp] + [hidden_channels] * (num_layers - 1)
        self.encoder = nn.ModuleList(DCGRUCell(w, hidden_channels, diffusion_steps) for w in widths)
        self.decoder = nn.ModuleList(DCGRUCell(w, hidden_channels, diffusion_steps) for w in widths)
        self.projection = nn.Linear(hidden_channels, num_channels)

    def output_head(self) -> list[nn.Module]:
        """``[self.projection]``: each decoded step's forecast; with it zero every step is
        zero (the decoder then reads its own zero forecasts, which changes its states but
        not the projection's output)."""
        return [self.projection]

    def check_input(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> None:
        super().check_input(x, coords, future)
        if self.walks is not None and x.shape[2] != self.walks.shape[-1]:
            raise ValueError(
                f"this DCRNN's graph (data.source.graph) has {self.walks.shape[-1]} points but x "
                f"has {x.shape[2]}: it forecasts only the points of its graph, in their order."
            )

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check_input(x, coords, future)
        b, m, n, _ = x.shape
        # the walks (1 or B, 2, N, N); built here, not in a helper, so that under
        # torch.compile the graph's host-side cache is the only thing outside the graph
        walks = self.walks[None] if self.walks is not None else self.graph(coords)
        supports = [walks[:, 0], walks[:, 1]]  # forward, backward: (1 or B, N, N) each
        states = [x.new_zeros(b, n, cell.hidden_channels) for cell in self.encoder]
        for t in range(m):
            inp = x[:, t]
            for layer, cell in enumerate(self.encoder):
                inp = states[layer] = cell(inp, states[layer], supports)

        last = x[:, -1]  # (B, N, C_in)
        go = x.new_zeros(b, n, self.channels.out)  # DCRNN's GO symbol
        # the GO frame stands for the last input step: its time features, if any
        clock = None if future is None else last[..., self.channels.inp - self.channels.future :]
        frame = self.channels.next_frame(go, last, clock)
        outputs = []
        for j in range(self.output_steps):
            inp = frame
            for layer, cell in enumerate(self.decoder):
                inp = states[layer] = cell(inp, states[layer], supports)
            step = self.projection(inp)  # (B, N, C_out)
            outputs.append(step)
            step_future = None if future is None else future[:, j]
            frame = self.channels.next_frame(read_back(self.teacher, step, j), last, step_future)
        return torch.stack(outputs, dim=1)
