"""One linear map from the input window to the forecast, per channel (LTSF-Linear).

Zeng et al., "Are Transformers Effective for Time Series Forecasting?" (AAAI 2023) show
that a single linear layer along time, shared by all series, is a strong baseline for
long-horizon forecasting. Here every point is a series and every channel has its own map.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from cloudlstm.models.base import Channels, ForecastModel


class TimeMap(nn.Module):
    """``G`` linear maps from M input steps to J output steps: weight ``(G, J, M)``, bias
    ``(G, J)``. Channel ``c`` uses map ``c`` when ``G`` = C, all channels map 0 when G = 1.

    ``x (B, M, N, C)`` -> ``(B, J, N, C)``.
    """

    def __init__(self, groups: int, input_steps: int, output_steps: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(groups, output_steps, input_steps))
        self.bias = nn.Parameter(torch.empty(groups, output_steps))
        # nn.Linear's default: uniform in +-1/sqrt(fan_in) for weights and bias alike
        bound = 1.0 / math.sqrt(input_steps)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.shape[-1]
        weight = self.weight.expand(c, -1, -1)  # a no-op per channel, a broadcast when shared
        bias = self.bias.expand(c, -1).t()  # (J, C)
        return torch.einsum("bmnc,cjm->bjnc", x, weight) + bias[None, :, None, :]


class TimeLinear(ForecastModel):
    """Direct linear forecaster along time, the same map for every point (LTSF-Linear).

    Each forecast step is a weighted sum of the point's M past values of the same channel
    plus a bias: ``y[b, j, n, c] = sum_m W[c, j, m] x[b, m, n, c] + bias[c, j]``. Points and
    channels do not mix and coordinates are not used, so it takes any points, any number of
    them, in any order. ``share_channels=True`` uses one map for all channels (then any C).

    NLinear subtracts the last input value and adds it back after the map; here
    ``module.anchor=last`` adds it back and a linear map can already subtract it (the last
    value is one of its inputs), so ``model=linear module.anchor=last`` covers NLinear and
    starts from persistence.

    Covariates (C_in > C_out): a second linear map, shared by all points, adds to each
    point's forecast a weighted sum of its M x (C_in - C_out) covariate inputs (measured
    ones and time features); the targets keep their per-channel maps.

    ``x (B, M, N, C_in)``, ``coords (B, N, L)`` -> ``(B, J, N, C_out)``.
    """

    own_history_only = "each point's forecast is a linear map of its own past readings"

    def __init__(
        self,
        num_channels: int,
        input_steps: int,
        output_steps: int,
        share_channels: bool = False,
        input_channels: int | None = None,
        future_channels: int = 0,
    ) -> None:
        super().__init__()
        if min(num_channels, input_steps, output_steps) < 1:
            raise ValueError(
                f"a linear forecaster needs num_channels, input_steps and output_steps >= 1, "
                f"got {num_channels}, {input_steps}, {output_steps}."
            )
        self.output_steps = output_steps
        self.input_steps = input_steps
        self.num_channels = None if share_channels else num_channels
        self.map = TimeMap(1 if share_channels else num_channels, input_steps, output_steps)
        self.covariate_map = None
        if input_channels is not None and input_channels != num_channels:
            self.channels = Channels.of(num_channels, input_channels, future_channels)
            covariates = input_steps * (self.channels.inp - num_channels)
            self.covariate_map = nn.Linear(covariates, output_steps * num_channels)

    def output_head(self) -> list[nn.Module]:
        return [self.map] if self.covariate_map is None else [self.map, self.covariate_map]

    def check_input(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> None:
        super().check_input(x, coords, future)
        if x.shape[1] != self.input_steps:
            raise ValueError(
                f"this linear forecaster maps {self.input_steps} input steps but got "
                f"{x.shape[1]}: build it with model.input_steps matching the data (by "
                f"default it comes from the data)."
            )
        if (
            self.channels is None
            and self.num_channels is not None
            and x.shape[3] != self.num_channels
        ):
            raise ValueError(
                f"this linear forecaster has one map per channel for {self.num_channels} "
                f"channels but got {x.shape[3]}: build it with model.num_channels matching "
                f"the data, or with model.share_channels=true for one map for all channels."
            )

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check_input(x, coords, future)
        if self.covariate_map is None:
            return self.map(x)
        b, m, n, _ = x.shape
        c = self.channels.out
        covariates = x[..., c:].permute(0, 2, 1, 3).reshape(b, n, -1)  # (B, N, M x C_cov)
        extra = self.covariate_map(covariates).view(b, n, self.output_steps, c)
        return self.map(x[..., :c]) + extra.permute(0, 2, 1, 3)
