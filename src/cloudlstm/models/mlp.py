"""The paper's MLP baseline: one network on the whole flattened input window."""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.base import Channels, ForecastModel


def mlp_stack(
    in_features: int, hidden_size: int, num_layers: int, out_features: int, dropout: float = 0.0
) -> nn.Sequential:
    """``num_layers`` hidden Linear + ReLU (+ dropout) layers of ``hidden_size``, then a
    linear output layer: ``(..., in_features) -> (..., out_features)``."""
    if num_layers < 1 or hidden_size < 1:
        raise ValueError(
            f"an MLP needs model.num_layers >= 1 and model.hidden_size >= 1, got "
            f"num_layers={num_layers}, hidden_size={hidden_size}."
        )
    layers: list[nn.Module] = []
    width = in_features
    for _ in range(num_layers):
        layers += [nn.Linear(width, hidden_size), nn.ReLU()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = hidden_size
    layers.append(nn.Linear(width, out_features))
    return nn.Sequential(*layers)


class MLP(ForecastModel):
    """Direct multi-output MLP over all points at once (paper: 5 hidden layers x 500).

    The whole window, M steps x N points x C channels, is flattened into one vector and
    mapped to all J x N x C forecasts in one pass (no recursion over steps). Coordinates
    are not used: which input feature belongs to which point is fixed by position, so
    N (and M, C) are fixed at construction and the model is not permutation-equivariant.

    Covariates: the window holds all C_in input channels (M x N x C_in values) and the
    output the J x N x C_out forecasts. ``future`` is checked but not read: on the data's
    regular clock the input steps' time features (channels of ``x``) determine those of
    the forecast steps.

    ``x (B, M, N, C_in)``, ``coords (B, N, L)`` (``future (B, J, N, F)`` with time
    features) -> ``(B, J, N, C_out)``.
    """

    fixed_points = "its layers are sized for the training points, in their order"
    point_parameters = "its layers hold weights of each training point, in their order"

    def __init__(
        self,
        num_points: int,
        num_channels: int,
        input_steps: int,
        output_steps: int,
        hidden_size: int = 500,
        num_layers: int = 5,
        dropout: float = 0.0,
        input_channels: int | None = None,
        future_channels: int = 0,
    ) -> None:
        super().__init__()
        self.output_steps = output_steps
        self.channels = Channels.of(num_channels, input_channels, future_channels)
        self.window = (input_steps, num_points, self.channels.inp)
        self.net = mlp_stack(
            input_steps * num_points * self.channels.inp,
            hidden_size,
            num_layers,
            output_steps * num_points * num_channels,
            dropout,
        )

    def output_head(self) -> list[nn.Module]:
        """``[self.net[-1]]``: the linear output layer of :func:`mlp_stack`, whose outputs
        are the forecasts with no activation after it."""
        return [self.net[-1]]

    def check_input(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> None:
        # first, so that a window of the wrong size names the options that size it
        if x.dim() == 4 and tuple(x.shape[1:]) != self.window:
            raise ValueError(
                f"this MLP was built for windows of (M, N, C_in) = {self.window} but got "
                f"{tuple(x.shape[1:])}. Its input layer is sized for exactly M x N x C_in "
                f"values, so it cannot take another number of steps, points or channels: "
                f"build it with model.input_steps, model.num_points, model.num_channels "
                f"matching the data (by default they come from the data), or use a "
                f"per-point model such as model=knn_mlp."
            )
        super().check_input(x, coords, future)

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check_input(x, coords, future)
        b, _, n, _ = x.shape
        return self.net(x.reshape(b, -1)).view(b, self.output_steps, n, self.channels.out)
