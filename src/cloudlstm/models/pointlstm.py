"""Seq2seq PointLSTM: a ConvLSTM whose convolutions are PointCNN's X-Conv (paper appendix:
2-stack seq2seq with K, D, P, C = [9, 1, -1, 36])."""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.base import Channels, ForecastModel, check_output_steps, check_sizes
from cloudlstm.models.teacher import read_back
from cloudlstm.nn.knn_checks import check_k_option
from cloudlstm.nn.xconv import XConv, XGeometry, dilated_neighbours

State = tuple[torch.Tensor, torch.Tensor]


class PointLSTMCell(nn.Module):
    """ConvLSTM cell with one X-Conv over ``[x_t; h_{t-1}]`` for all four gates.

    ``x (B, N, C_in)``, state ``(h, c)`` each ``(B, N, C_h)``, the gate X-Conv's geometry
    -> new ``h`` and state. One X-Conv over the concatenation stands for ConvLSTM's
    ``W_x * x + W_h * h``. Unlike DConv's, this is not exactly a sum of two X-Convs:
    input and hidden features share one X and one set of lifted coordinates, which
    halves the geometry work and keeps one X-Conv per gate computation.
    """

    def __init__(
        self,
        input_channels: int,
        hidden_channels: int,
        k: int = 9,
        dilation: int = 1,
        coord_dims: int = 2,
        lifted_channels: int | None = None,
    ) -> None:
        super().__init__()
        self.hidden_channels = hidden_channels
        self.gates = XConv(
            input_channels + hidden_channels,
            4 * hidden_channels,
            k,
            dilation,
            coord_dims,
            lifted_channels,
        )

    def initial_state(self, coords: torch.Tensor) -> State:
        """Zero hidden and memory states ``(B, N, C_h)`` for points ``(B, N, L)``."""
        zeros = coords.new_zeros(*coords.shape[:2], self.hidden_channels)
        return zeros, zeros

    def forward(
        self, x: torch.Tensor, state: State, geometry: XGeometry
    ) -> tuple[torch.Tensor, State]:
        hidden, memory = state
        z = self.gates(torch.cat([x, hidden], dim=-1), geometry=geometry)
        i, f, o, g = z.chunk(4, dim=-1)
        memory = torch.sigmoid(f) * memory + torch.sigmoid(i) * torch.tanh(g)
        hidden = torch.sigmoid(o) * torch.tanh(memory)
        return hidden, (hidden, memory)


class PointLSTM(ForecastModel):
    """X-Conv embedding -> stacked PointLSTM encoder -> decoder -> X-Conv head.

    Mirrors :class:`cloudlstm.models.CloudSeq2Seq` with X-Conv in place of DConv:

    * the input layer is an X-Conv from the C_in input channels to ``hidden_channels``;
    * encoder and decoder are separate stacks of ``num_layers`` cells; decoder layer l
      starts from encoder layer l's final state;
    * decoding is autoregressive for J steps (J may exceed M): the decoder input at
      step i is the embedding of its own forecast for step i-1, starting from the last
      observed frame (training with ``module.scheduled_sampling``: the true value at
      the steps drawn). With covariates that frame is the forecast
      targets with the measured covariates held at their last values and step i-1's time
      features (:meth:`~cloudlstm.models.base.Channels.next_frame`);
    * the output layer is an X-Conv from ``hidden_channels`` to the C_out targets.

    The points do not move, so neighbours are searched once per forward and each
    X-Conv's geometry (X matrices, lifted coordinates) is computed once and reused at
    every time step.

    ``x (B, M, N, C_in)``, ``coords (B, N, L)`` (``future (B, J, N, F)`` with time
    features) -> ``(B, J, N, C_out)``.
    """

    searches_neighbours = True
    reads_own_forecasts = True

    def __init__(
        self,
        num_channels: int,
        output_steps: int,
        hidden_channels: int = 36,
        num_layers: int = 2,
        k: int = 9,
        dilation: int = 1,
        coord_features: int = 2,
        lifted_channels: int | None = None,
        input_channels: int | None = None,
        future_channels: int = 0,
    ) -> None:
        super().__init__()
        check_sizes(hidden_channels=hidden_channels, num_layers=num_layers)
        check_output_steps(output_steps, num_channels=num_channels)
        self.output_steps = output_steps
        self.num_channels = num_channels
        self.channels = Channels.of(num_channels, input_channels, future_channels)
        self.k = check_k_option(k, dilation)
        self.dilation = dilation
        common = dict(
            k=k, dilation=dilation, coord_dims=coord_features, lifted_channels=lifted_channels
        )
        self.embed = XConv(self.channels.inp, hidden_channels, **common)
        self.encoder = nn.ModuleList(
            PointLSTMCell(hidden_channels, hidden_channels, **common) for _ in range(num_layers)
        )
        self.decoder = nn.ModuleList(
            PointLSTMCell(hidden_channels, hidden_channels, **common) for _ in range(num_layers)
        )
        self.head = XConv(hidden_channels, num_channels, **common)

    def output_head(self) -> list[nn.Module]:
        """``[self.head.pointwise]``: the linear layer that ends the output X-Conv, giving
        each decoded step; with it zero every step is zero (the decoder then embeds its own
        zero forecast, which changes its states but not the head's output).

        Only that layer: zeroing all of the X-Conv (its X matrices and lifted coordinates
        too) would also zero the layer's input for good, leaving it only its bias to learn.
        """
        return [self.head.pointwise]

    def check_input(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> None:
        # first, so that a frame of the wrong size names the option that sizes it
        if x.dim() == 4 and x.shape[3] != self.channels.inp:
            raise ValueError(
                f"PointLSTM was built for C_in={self.channels.inp} channels, got x "
                f"{tuple(x.shape)} (B, M, N, C_in); set model.num_channels to match the data."
            )
        super().check_input(x, coords, future)

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check_input(x, coords, future)
        index = dilated_neighbours(coords, self.k, self.dilation)
        embed_geo = self.embed.geometry(coords, index)
        head_geo = self.head.geometry(coords, index)
        encoder_geo = [cell.gates.geometry(coords, index) for cell in self.encoder]
        decoder_geo = [cell.gates.geometry(coords, index) for cell in self.decoder]

        states = [cell.initial_state(coords) for cell in self.encoder]
        for t in range(x.shape[1]):
            inp = self.embed(x[:, t], geometry=embed_geo)
            for layer, cell in enumerate(self.encoder):
                inp, states[layer] = cell(inp, states[layer], encoder_geo[layer])

        frame = x[:, -1]  # (B, N, C_in): the frame before the first forecast step
        outputs = []
        for j in range(self.output_steps):
            inp = self.embed(frame, geometry=embed_geo)
            for layer, cell in enumerate(self.decoder):
                inp, states[layer] = cell(inp, states[layer], decoder_geo[layer])
            step = self.head(inp, geometry=head_geo)  # (B, N, C_out)
            outputs.append(step)
            step_future = None if future is None else future[:, j]
            step = read_back(self.teacher, step, j)
            frame = self.channels.next_frame(step, x[:, -1], step_future)
        return torch.stack(outputs, dim=1)
