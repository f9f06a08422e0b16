"""The paper's LSTM baseline: a seq2seq LSTM over all points' values as one vector."""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.base import Channels, ForecastModel, check_output_steps, check_sizes
from cloudlstm.models.teacher import read_back


class SeqLSTM(ForecastModel):
    """2-stack seq2seq LSTM on the flattened frame (paper: 500 hidden units).

    Each step's N x C values form one feature vector. An encoder LSTM reads the M input
    frames; a decoder LSTM of its own, started from the encoder's final states, runs
    autoregressively for J steps (J may exceed M): its input is its own previous
    forecast, starting from the last observed frame (training with
    ``module.scheduled_sampling``: the true value at the steps drawn; by default never,
    so that training and inference decode alike). Coordinates are not used and N, C are fixed at
    construction. With covariates the frames hold all C_in channels, and each decoder
    step reads its forecast with the covariates held and the step's time features
    (:meth:`~cloudlstm.models.base.Channels.next_frame`).

    ``x (B, M, N, C_in)``, ``coords (B, N, L)`` (``future (B, J, N, F)`` with time
    features) -> ``(B, J, N, C_out)``.
    """

    fixed_points = "its layers are sized for the training points, in their order"
    point_parameters = "its layers hold weights of each training point, in their order"
    capture_refused = "torch.compile does not trace nn.LSTM (its cuDNN kernels run eagerly)"
    reads_own_forecasts = True

    def __init__(
        self,
        num_points: int,
        num_channels: int,
        output_steps: int,
        hidden_size: int = 500,
        num_layers: int = 2,
        input_channels: int | None = None,
        future_channels: int = 0,
    ) -> None:
        super().__init__()
        check_sizes(num_layers=num_layers, hidden_size=hidden_size)
        check_output_steps(output_steps)
        self.output_steps = output_steps
        self.channels = Channels.of(num_channels, input_channels, future_channels)
        self.frame = (num_points, self.channels.inp)
        features = num_points * self.channels.inp
        self.encoder = nn.LSTM(features, hidden_size, num_layers, batch_first=True)
        self.decoder = nn.LSTM(features, hidden_size, num_layers, batch_first=True)
        self.head = nn.Linear(hidden_size, num_points * num_channels)

    def check_input(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> None:
        super().check_input(x, coords, future)
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

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check_input(x, coords, future)
        b, m, n, c = x.shape
        _, state = self.encoder(x.reshape(b, m, n * c))
        frame = x[:, -1:]  # (B, 1, N, C_in): the frame before the first forecast step
        outputs = []
        for j in range(self.output_steps):
            out, state = self.decoder(frame.reshape(b, 1, n * c), state)
            step = self.head(out).view(b, 1, n, self.channels.out)
            outputs.append(step)
            step_future = None if future is None else future[:, j : j + 1]
            step = read_back(self.teacher, step, j)
            frame = self.channels.next_frame(step, x[:, -1:], step_future)
        return torch.cat(outputs, dim=1)
