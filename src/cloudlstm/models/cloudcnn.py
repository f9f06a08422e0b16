"""CloudCNN: the paper's stacked-DConv benchmark (appendix: eight DConv layers, 36 ch, K=9)."""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.base import (
    Channels,
    ForecastModel,
    check_counts,
    check_sizes,
    values_to_cloud,
)
from cloudlstm.nn import DConv, check_k, check_k_option
from cloudlstm.nn.dconv import check_coordinates_option


class CloudCNN(ForecastModel):
    """Stacked DConv layers over the whole input window, all J steps output at once.

    Each (input step, measured channel) pair is one input point-cloud channel (M*C
    channels); ``num_layers`` hidden DConv layers of ``hidden_channels`` follow, with a
    ReLU on the value features between layers (coordinates already pass through the
    DConv sigmoid); a final DConv maps to J*C channels whose values are the forecast.

    Covariates: the (input step, channel) pairs cover all C_in input channels (M*C_in
    channels) and the head gives the J*C_out forecasts. ``future`` is checked but not
    read: on the data's regular clock the input steps' time features (channels of ``x``)
    determine those of the forecast steps.

    ``coordinates="relative"`` (not the paper's): every DConv weights its neighbours'
    coordinates minus those of the point convolved (:class:`~cloudlstm.nn.DConv`).

    ``x (B, M, N, C_in)``, ``coords (B, N, L)`` (``future (B, J, N, F)`` with time
    features) -> ``(B, J, N, C_out)``.
    """

    searches_neighbours = True

    def __init__(
        self,
        num_channels: int,
        input_steps: int,
        output_steps: int,
        k: int = 9,
        hidden_channels: int = 36,
        num_layers: int = 8,
        coord_features: int = 2,
        coordinates: str | None = None,
        input_channels: int | None = None,
        future_channels: int = 0,
    ) -> None:
        super().__init__()
        check_coordinates_option(coordinates)
        check_sizes(hidden_channels=hidden_channels)
        check_counts(num_layers=num_layers)  # 0: no hidden layer
        self.output_steps = output_steps
        self.num_channels = num_channels
        self.channels = Channels.of(num_channels, input_channels, future_channels)
        self.k = check_k_option(k)
        widths = [input_steps * self.channels.inp] + [hidden_channels] * num_layers
        common = dict(coord_features=coord_features, coordinates=coordinates)
        self.layers = nn.ModuleList(
            DConv(a, b, k, **common) for a, b in zip(widths[:-1], widths[1:], strict=True)
        )
        self.head = DConv(widths[-1], output_steps * num_channels, k, **common)

    def output_head(self) -> list[nn.Module]:
        """``[self.head]``: the last DConv, whose value features are the J*C forecasts, so
        with it zero they are zero whatever the hidden layers give it."""
        return [self.head]

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check_input(x, coords, future)
        check_k(self.k, x.shape[2])
        b, m, n, c = x.shape
        cloud = values_to_cloud(x.permute(0, 2, 1, 3).reshape(b, n, m * c), coords)
        for layer in self.layers:
            cloud = layer(cloud)
            cloud = torch.cat([torch.relu(cloud[..., :1]), cloud[..., 1:]], dim=-1)
        out = self.head(cloud)[..., 0]  # (B, N, J*C)
        return out.view(b, n, self.output_steps, self.num_channels).permute(0, 2, 1, 3)
