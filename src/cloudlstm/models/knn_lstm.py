"""Per-point seq2seq LSTM that sees only each point's K nearest neighbours."""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.base import Forecaster
from cloudlstm.nn import check_k, knn


class KNNLSTM(Forecaster):
    """A seq2seq LSTM shared by all points, each point run as its own sequence.

    At every step a point's input is the C values of its K nearest neighbours (itself
    first, from the fixed point coordinates), so ``k=1`` is a purely local model that
    sees no neighbours. The decoder is autoregressive over J steps; its input is the
    point's own previous forecast together with its neighbours' last observed values.

    ``x (B, M, N, C)``, ``coords (B, N, L)`` -> ``(B, J, N, C)``.
    """

    def __init__(
        self,
        num_channels: int,
        output_steps: int,
        k: int = 1,
        hidden_size: int = 64,
        num_layers: int = 2,
    ) -> None:
        super().__init__()
        self.output_steps = output_steps
        self.k = k
        self.encoder = nn.LSTM(k * num_channels, hidden_size, num_layers, batch_first=True)
        self.decoder = nn.LSTM(k * num_channels, hidden_size, num_layers, batch_first=True)
        self.head = nn.Linear(hidden_size, num_channels)

    def forward(self, x: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
        self.check_input(x, coords)
        b, m, n, c = x.shape
        check_k(self.k, n)
        neighbours = knn(coords, self.k)  # (B, N, K)
        per_point = x.permute(0, 2, 1, 3)  # (B, N, M, C)
        gathered = per_point[torch.arange(b)[:, None, None], neighbours]  # (B, N, K, M, C)
        seq = gathered.permute(0, 1, 3, 2, 4).reshape(b * n, m, self.k * c)
        _, state = self.encoder(seq)
        context = seq[:, -1:, c:]  # neighbours' last observed values (empty when k=1)
        last = seq[:, -1:, :c]
        outputs = []
        for _ in range(self.output_steps):
            out, state = self.decoder(torch.cat([last, context], dim=-1), state)
            last = self.head(out)
            outputs.append(last)
        return torch.cat(outputs, dim=1).view(b, n, self.output_steps, c).permute(0, 2, 1, 3)
