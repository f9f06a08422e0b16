"""STID: a per-point MLP with a learned identity embedding for each point.

Shao et al., "Spatial-Temporal Identity: A Simple yet Effective Baseline for Multivariate
Time Series Forecasting" (CIKM 2022). Its spatial identity is one learned vector per
training point, so the model is tied to those points (transductive). The paper's temporal
identities (time-of-day and day-of-week embeddings) are not in yet: forward receives no
timestamps; they come with the time covariates (docs/baselines.md).
"""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.base import ForecastModel


class ResidualMLPBlock(nn.Module):
    """``h + Linear(Dropout(ReLU(Linear(h))))``, width kept: ``(..., D) -> (..., D)``."""

    def __init__(self, width: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(width, width), nn.ReLU(), nn.Dropout(dropout), nn.Linear(width, width)
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.net(h)


class STID(ForecastModel):
    """STID with its spatial identity: one MLP shared by all points, told which point it is.

    Per point, the M x C input window is flattened and embedded by a linear layer into
    ``embed_dim``; the point's learned identity vector (``node_dim``, one per training
    point, by index) is concatenated; ``num_layers`` residual MLP blocks of that width
    (``embed_dim + node_dim``) follow, and a linear regression layer outputs all J x C
    forecasts at once (direct). The original forecasts one target channel from C inputs;
    here every channel is forecast. Points do not mix and coordinates are not used: the
    identity embedding is what lets the shared MLP behave differently at each point, and
    the reason it cannot forecast a point it never saw.

    ``x (B, M, N, C)``, ``coords (B, N, L)`` -> ``(B, J, N, C)``.
    """

    fixed_points = "it learns an embedding for each training point"

    def __init__(
        self,
        num_points: int,
        num_channels: int,
        input_steps: int,
        output_steps: int,
        embed_dim: int = 32,
        node_dim: int = 32,
        num_layers: int = 3,
        dropout: float = 0.15,
    ) -> None:
        super().__init__()
        if min(num_points, num_channels, input_steps, output_steps, embed_dim, node_dim) < 1:
            raise ValueError(
                "STID needs num_points, num_channels, input_steps, output_steps, "
                "model.embed_dim and model.node_dim >= 1."
            )
        self.output_steps = output_steps
        self.window = (input_steps, num_points, num_channels)
        width = embed_dim + node_dim
        self.series_embedding = nn.Linear(input_steps * num_channels, embed_dim)
        self.point_embedding = nn.Parameter(torch.empty(num_points, node_dim))
        nn.init.xavier_uniform_(self.point_embedding)  # as the reference code initialises it
        self.encoder = nn.Sequential(*(ResidualMLPBlock(width, dropout) for _ in range(num_layers)))
        self.regression = nn.Linear(width, output_steps * num_channels)

    def output_head(self) -> list[nn.Module]:
        return [self.regression]

    def check_input(self, x: torch.Tensor, coords: torch.Tensor) -> None:
        super().check_input(x, coords)
        m, n, c = self.window
        if x.shape[2] != n:
            raise ValueError(
                f"this STID was trained on {n} points (one learned embedding each) but got "
                f"{x.shape[2]}: it can forecast only the {n} training points, in their "
                f"order. Build it with model.num_points matching the data (by default it "
                f"comes from the data), or use a model that takes any points (e.g. "
                f"model=cloudlstm, model=knn_mlp)."
            )
        if (x.shape[1], x.shape[3]) != (m, c):
            raise ValueError(
                f"this STID was built for (M, C) = {(m, c)} (steps, channels) but got "
                f"{(x.shape[1], x.shape[3])}: build it with model.input_steps and "
                f"model.num_channels matching the data (by default they come from the data)."
            )

    def forward(self, x: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
        self.check_input(x, coords)
        b, m, n, c = x.shape
        series = x.permute(0, 2, 1, 3).reshape(b, n, m * c)  # each point's whole window
        identity = self.point_embedding.expand(b, n, -1)
        h = torch.cat([self.series_embedding(series), identity], dim=-1)  # (B, N, D)
        out = self.regression(self.encoder(h)).view(b, n, self.output_steps, c)
        return out.permute(0, 2, 1, 3)
