"""The paper's MLP baseline: one network on the whole flattened input window."""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.base import ForecastModel


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

    ``x (B, M, N, C)``, ``coords (B, N, L)`` -> ``(B, J, N, C)``.
    """

    fixed_points = "its layers are sized for the training points, in their order"

    def __init__(
        self,
        num_points: int,
        num_channels: int,
        input_steps: int,
        output_steps: int,
        hidden_size: int = 500,
        num_layers: int = 5,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.output_steps = output_steps
        self.window = (input_steps, num_points, num_channels)
        self.net = mlp_stack(
            input_steps * num_points * num_channels,
            hidden_size,
            num_layers,
            output_steps * num_points * num_channels,
            dropout,
        )

    def output_head(self) -> list[nn.Module]:
        """``[self.net[-1]]``: the linear output layer of :func:`mlp_stack`, whose outputs
        are the forecasts with no activation after it."""
        return [self.net[-1]]

    def check_input(self, x: torch.Tensor, coords: torch.Tensor) -> None:
        super().check_input(x, coords)
        if tuple(x.shape[1:]) != self.window:
            raise ValueError(
                f"this MLP was built for windows of (M, N, C) = {self.window} but got "
                f"{tuple(x.shape[1:])}. Its input layer is sized for exactly M x N x C "
                f"values, so it cannot take another number of steps, points or channels: "
                f"build it with model.input_steps, model.num_points, model.num_channels "
                f"matching the data (by default they come from the data), or use a "
                f"per-point model such as model=knn_mlp."
            )

    def forward(self, x: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
        self.check_input(x, coords)
        b, _, n, c = x.shape
        return self.net(x.reshape(b, -1)).view(b, self.output_steps, n, c)
