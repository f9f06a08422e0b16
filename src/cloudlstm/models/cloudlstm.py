"""Seq2seq CloudLSTM / CloudGRU / CloudRNN with optional attention (paper Fig. 2, right)."""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.base import Forecaster, values_to_cloud
from cloudlstm.nn import CELLS, CloudAttention, DConv, check_k, shared_neighbours


class CloudSeq2Seq(Forecaster):
    """CloudCNN embedding -> stacked Cloud{LSTM,GRU,RNN} encoder -> decoder -> CloudCNN head.

    * The input layer is a DConv (the paper's CloudCNN "embedding") from the C measured
      channels (1 value + L coordinates each) to ``hidden_channels``.
    * Encoder and decoder are separate stacks of ``num_layers`` cells; decoder layer l
      starts from encoder layer l's final state.
    * Decoding is autoregressive for J steps (J may exceed M): the decoder input at step
      i is the embedding of its own forecast for step i-1, starting from the last
      observed frame. No teacher forcing, so training and inference decode alike.
    * With ``attention``, the top decoder state is concatenated with its context over
      the top encoder states before the output DConv.
    * Output: the value features of the output DConv. Points are fixed here, so the
      predicted coordinates are dropped, as in the paper's experiments.

    Input ``x (B, M, N, C)``, ``coords (B, N, L)`` in [0, 1] -> ``(B, J, N, C)``.
    """

    def __init__(
        self,
        num_channels: int,
        output_steps: int,
        k: int = 9,
        cell: str = "lstm",
        hidden_channels: int = 36,
        num_layers: int = 2,
        attention: bool = False,
        coord_features: int = 2,
    ) -> None:
        super().__init__()
        if cell not in CELLS:
            raise ValueError(f"model.cell={cell!r} is not one of {sorted(CELLS)}.")
        if num_layers < 1 or hidden_channels < 1 or output_steps < 1:
            raise ValueError("num_layers, hidden_channels and output_steps must be >= 1.")
        self.output_steps = output_steps
        self.k = k
        cell_cls = CELLS[cell]
        common = dict(k=k, value_features=1, coord_features=coord_features)
        self.embed = DConv(num_channels, hidden_channels, **common)
        self.encoder = nn.ModuleList(
            cell_cls(hidden_channels, hidden_channels, **common) for _ in range(num_layers)
        )
        self.decoder = nn.ModuleList(
            cell_cls(hidden_channels, hidden_channels, **common) for _ in range(num_layers)
        )
        self.attention = CloudAttention(hidden_channels, **common) if attention else None
        head_in = hidden_channels * (2 if attention else 1)
        self.head = DConv(head_in, num_channels, **common)

    def forward(self, x: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
        self.check_input(x, coords)
        check_k(self.k, x.shape[2])
        b, m, n, c = x.shape
        # The C input channels of every frame sit at the points' coordinates, so the
        # embedding's neighbour sets are one search per sample, for all M + J frames.
        neighbours = shared_neighbours(coords, self.k, c)  # (B, N, C, K)
        # Embed all M input frames in one batched DConv call.
        frames = self.embed(
            values_to_cloud(x, coords).flatten(0, 1), neighbours.repeat_interleave(m, dim=0)
        )
        frames = frames.view(b, m, *frames.shape[1:])

        states = [cell.initial_state(coords) for cell in self.encoder]
        top_states = []
        for t in range(m):
            inp = frames[:, t]
            for layer, cell in enumerate(self.encoder):
                inp, states[layer] = cell(inp, states[layer])
            top_states.append(inp)

        if self.attention is not None:
            encoder_states = torch.stack(top_states, dim=1)
            keys = self.attention.project_encoder(encoder_states)

        last = x[:, -1]
        outputs = []
        for _ in range(self.output_steps):
            inp = self.embed(values_to_cloud(last, coords), neighbours)
            for layer, cell in enumerate(self.decoder):
                inp, states[layer] = cell(inp, states[layer])
            if self.attention is not None:
                context, _ = self.attention(inp, encoder_states, keys)
                inp = torch.cat([inp, context], dim=2)
            last = self.head(inp)[..., 0]  # (B, N, C) values
            outputs.append(last)
        return torch.stack(outputs, dim=1)
