"""Per-point seq2seq LSTM that sees only each point's K nearest neighbours."""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.base import Channels, ForecastModel, check_sizes
from cloudlstm.models.teacher import read_back
from cloudlstm.nn import check_k_option, knn


def neighbour_histories(x: torch.Tensor, coords: torch.Tensor, k: int) -> torch.Tensor:
    """Each point's input window together with those of its K nearest neighbours.

    ``x (B, M, N, C)``, ``coords (B, N, L)`` -> ``(B, N, M, K, C)``: entry
    ``[b, n, t, j]`` holds the C values at step t of point n's j-th nearest neighbour
    (j = 0 is point n itself, then by distance, ties by lower index). All channels of
    ``x`` are gathered: with covariates C is C_in. K > N raises
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
    point's own previous forecast together with its neighbours' last observed values
    (training with ``module.scheduled_sampling``: its true value at the steps drawn).

    Covariates: the neighbours' values are all C_in input channels. The decoder's own
    frame is its forecast targets with the point's measured covariates held at their last
    values and the step's time features
    (:meth:`~cloudlstm.models.base.Channels.next_frame`); the neighbours' part stays
    their last observed C_in values.

    ``x (B, M, N, C_in)``, ``coords (B, N, L)`` (``future (B, J, N, F)`` with time
    features) -> ``(B, J, N, C_out)``.
    """

    searches_neighbours = True
    reads_own_forecasts = True

    def __init__(
        self,
        num_channels: int,
        output_steps: int,
        k: int = 1,
        hidden_size: int = 64,
        num_layers: int = 2,
        input_channels: int | None = None,
        future_channels: int = 0,
    ) -> None:
        super().__init__()
        check_sizes(hidden_size=hidden_size, num_layers=num_layers)
        self.output_steps = output_steps
        self.channels = Channels.of(num_channels, input_channels, future_channels)
        self.k = check_k_option(k)
        features = k * self.channels.inp
        self.encoder = nn.LSTM(features, hidden_size, num_layers, batch_first=True)
        self.decoder = nn.LSTM(features, hidden_size, num_layers, batch_first=True)
        self.head = nn.Linear(hidden_size, num_channels)

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
        j = self.output_steps
        seq = neighbour_histories(x, coords, self.k).reshape(b * n, m, self.k * c)
        _, state = self.encoder(seq)
        context = seq[:, -1:, c:]  # neighbours' last observed values (empty when k=1)
        observed = seq[:, -1:, :c]  # (B*N, 1, C_in): the point's last observed frame
        if future is not None:
            future = future.permute(0, 2, 1, 3).reshape(b * n, j, -1)  # (B*N, J, F)
        teacher = None
        if self.teacher is not None:  # (B*N, J, C_out), as the decoder's steps
            teacher = self.teacher.mapped(lambda v: v.transpose(1, 2).reshape(b * n, j, -1))
        last = observed
        outputs = []
        for step in range(j):
            out, state = self.decoder(torch.cat([last, context], dim=-1), state)
            forecast = self.head(out)  # (B*N, 1, C_out)
            outputs.append(forecast)
            step_future = None if future is None else future[:, step : step + 1]
            forecast = read_back(teacher, forecast, step)
            last = self.channels.next_frame(forecast, observed, step_future)
        out = torch.cat(outputs, dim=1).view(b, n, j, self.channels.out)
        return out.permute(0, 2, 1, 3)
