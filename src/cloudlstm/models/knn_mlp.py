"""Per-point MLP that sees only each point's K nearest neighbours' input windows."""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.base import Channels, ForecastModel
from cloudlstm.models.knn_lstm import neighbour_histories
from cloudlstm.models.mlp import mlp_stack
from cloudlstm.nn import check_k_option


class KNNMLP(ForecastModel):
    """An MLP shared by all points (paper's simple baseline: 5 hidden layers x 500).

    A point's input is the M x C history of its K nearest neighbours (itself first,
    then by distance, from the fixed point coordinates), flattened to ``M*K*C`` values;
    its output is all J x C forecasts of that point at once (direct multi-output).
    ``k=1`` is a purely local model. Because neighbours are ranked by distance, not by
    index, permuting the points permutes the forecasts alike.

    Covariates: the neighbours' histories hold all C_in input channels (``M*K*C_in``
    values) and the output is the J x C_out forecasts. ``future`` is checked but not
    read: on the data's regular clock the input steps' time features (channels of ``x``)
    determine those of the forecast steps.

    ``x (B, M, N, C_in)``, ``coords (B, N, L)`` (``future (B, J, N, F)`` with time
    features) -> ``(B, J, N, C_out)``.
    """

    searches_neighbours = True

    def __init__(
        self,
        num_channels: int,
        input_steps: int,
        output_steps: int,
        k: int = 1,
        hidden_size: int = 500,
        num_layers: int = 5,
        input_channels: int | None = None,
        future_channels: int = 0,
    ) -> None:
        super().__init__()
        self.output_steps = output_steps
        self.channels = Channels.of(num_channels, input_channels, future_channels)
        self.k = check_k_option(k)
        self.window = (input_steps, self.channels.inp)
        self.net = mlp_stack(
            input_steps * k * self.channels.inp,
            hidden_size,
            num_layers,
            output_steps * num_channels,
        )

    def output_head(self) -> list[nn.Module]:
        """``[self.net[-1]]``: the linear output layer of :func:`mlp_stack`, whose outputs
        are the forecasts with no activation after it."""
        return [self.net[-1]]

    def check_input(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> None:
        # first, so that a window of the wrong size names the options that size it
        got = (x.shape[1], x.shape[3]) if x.dim() == 4 else self.window
        if got != self.window:
            raise ValueError(
                f"this kNN MLP was built for (M, C_in) = {self.window} (steps, channels) but "
                f"got {got}: build it with model.input_steps and model.num_channels matching "
                f"the data (by default they come from the data)."
            )
        super().check_input(x, coords, future)

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check_input(x, coords, future)
        b, _, n, _ = x.shape
        rows = neighbour_histories(x, coords, self.k).reshape(b, n, -1)  # (B, N, M*K*C_in)
        out = self.net(rows).view(b, n, self.output_steps, self.channels.out)
        return out.permute(0, 2, 1, 3)
