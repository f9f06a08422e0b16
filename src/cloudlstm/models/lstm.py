"""The paper's LSTM baseline: a seq2seq LSTM over all points' values as one vector."""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.base import ForecastModel


class SeqLSTM(ForecastModel):
    """2-stack seq2seq LSTM on the flattened frame (paper: 500 hidden units).

    Each step's N x C values form one feature vector. An encoder LSTM reads the M input
    frames; a decoder LSTM of its own, started from the encoder's final states, runs
    autoregressively for J steps (J may exceed M): its input is its own previous
    forecast, starting from the last observed frame, with no teacher forcing so that
    training and inference decode alike. Coordinates are not used and N, C are fixed at
    construction.

    ``x (B, M, N, C)``, ``coords (B, N, L)`` -> ``(B, J, N, C)``.
    """

    fixed_points = "its layers are sized for the training points, in their order"

    def __init__(
        self,
        num_points: int,
        num_channels: int,
        output_steps: int,
        hidden_size: int = 500,
        num_layers: int = 2,
    ) -> None:
        super().__init__()
        if num_layers < 1 or hidden_size < 1 or output_steps < 1:
            raise ValueError("model.num_layers, model.hidden_size and output_steps must be >= 1.")
        self.output_steps = output_steps
        self.frame = (num_points, num_channels)
        features = num_points * num_channels
        self.encoder = nn.LSTM(features, hidden_size, num_layers, batch_first=True)
        self.decoder = nn.LSTM(features, hidden_size, num_layers, batch_first=True)
        self.head = nn.Linear(hidden_size, features)

    def check_input(self, x: torch.Tensor, coords: torch.Tensor) -> None:
        super().check_input(x, coords)
        if tuple(x.shape[2:]) != self.frame:
            raise ValueError(
                f"this LSTM was built for frames of (N, C) = {self.frame} but got "
                f"{tuple(x.shape[2:])}. Its input is one vector of N x C values per step, so "
                f"it cannot take another number of points or channels: build it with "
                f"model.num_points and model.num_channels matching the data (by default they "
                f"come from the data), or use a per-point model such as model=knn_lstm."
            )

    def output_head(self) -> list[nn.Module]:
        """``[self.head]``, the linear layer giving each decoded step: with it zero every
        step is zero (the decoder then reads its own zero forecast, which changes its
        states but not the head's output)."""
        return [self.head]

    def forward(self, x: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
        self.check_input(x, coords)
        b, _, n, c = x.shape
        seq = x.reshape(b, x.shape[1], n * c)
        _, state = self.encoder(seq)
        last = seq[:, -1:]
        outputs = []
        for _ in range(self.output_steps):
            out, state = self.decoder(last, state)
            last = self.head(out)
            outputs.append(last)
        return torch.cat(outputs, dim=1).view(b, self.output_steps, n, c)
