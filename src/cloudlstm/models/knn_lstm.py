"""Per-point seq2seq LSTM that sees only each point's K nearest neighbours."""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.base import ForecastModel
from cloudlstm.nn import check_k_option, knn


def neighbour_histories(x: torch.Tensor, coords: torch.Tensor, k: int) -> torch.Tensor:
    """Each point's input window together with those of its K nearest neighbours.

    ``x (B, M, N, C)``, ``coords (B, N, L)`` -> ``(B, N, M, K, C)``: entry
    ``[b, n, t, j]`` holds the C values at step t of point n's j-th nearest neighbour
    (j = 0 is point n itself, then by distance, ties by lower index). K > N raises
    :class:`~cloudlstm.nn.NeighbourCountError` naming ``model.k``.
    """
    b = x.shape[0]
    neighbours = knn(coords, k)  # (B, N, K); checks k against N
    batch = torch.arange(b, device=x.device).view(b, 1, 1)
    gathered = x.permute(0, 2, 1, 3)[batch, neighbours]  # (B, N, K, M, C)
    return gathered.transpose(2, 3)


class KNNLSTM(ForecastModel):
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
        self.k = check_k_option(k)
        self.encoder = nn.LSTM(k * num_channels, hidden_size, num_layers, batch_first=True)
        self.decoder = nn.LSTM(k * num_channels, hidden_size, num_layers, batch_first=True)
        self.head = nn.Linear(hidden_size, num_channels)

    def output_head(self) -> list[nn.Module]:
        """``[self.head]``, the linear layer giving each decoded step: with it zero every
        step is zero (the decoder then reads its own zero forecast, which changes its
        states but not the head's output)."""
        return [self.head]

    def forward(self, x: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
        self.check_input(x, coords)
        b, m, n, c = x.shape
        seq = neighbour_histories(x, coords, self.k).reshape(b * n, m, self.k * c)
        _, state = self.encoder(seq)
        context = seq[:, -1:, c:]  # neighbours' last observed values (empty when k=1)
        last = seq[:, -1:, :c]
        outputs = []
        for _ in range(self.output_steps):
            out, state = self.decoder(torch.cat([last, context], dim=-1), state)
            last = self.head(out)
            outputs.append(last)
        return torch.cat(outputs, dim=1).view(b, n, self.output_steps, c).permute(0, 2, 1, 3)
