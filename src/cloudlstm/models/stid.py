"""STID: a per-point MLP with a learned identity embedding for each point.

Shao et al., "Spatial-Temporal Identity: A Simple yet Effective Baseline for Multivariate
Time Series Forecasting" (CIKM 2022). Its spatial identity is one learned vector per
training point, so the model is tied to those points (transductive). Its temporal
identities (time-of-day and day-of-week embeddings) are looked up from the time features of
the last input step when the data has them (``data.time_features=[hour,weekday]``).
"""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.base import Channels, ForecastModel, check_counts, check_sizes
from cloudlstm.models.time_slots import time_slot, time_slots
from cloudlstm.nn.graph import StaticPositions


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

    Covariates: the window embedding reads all C_in channels. With the ``hour`` time
    feature and a known ``steps_per_day`` the time of day of the last input step picks one
    of ``steps_per_day`` learned vectors (``time_dim``), with ``weekday`` its day one of 7,
    as in the paper; both are concatenated with the others. ``yearday`` is only an input.

    ``x (B, M, N, C_in)``, ``coords (B, N, L)`` -> ``(B, J, N, C_out)``.
    """

    fixed_points = "it learns an embedding for each training point"
    point_parameters = fixed_points
    own_history_only = "points do not mix: each reads its own window"

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
        input_channels: int | None = None,
        future_channels: int = 0,
        time_features: list[str] | None = None,
        steps_per_day: int | None = None,
        time_dim: int = 32,
    ) -> None:
        super().__init__()
        check_sizes(
            num_points=num_points,
            num_channels=num_channels,
            input_steps=input_steps,
            output_steps=output_steps,
            embed_dim=embed_dim,
            node_dim=node_dim,
            time_dim=time_dim,
        )
        check_counts(num_layers=num_layers)  # 0: no MLP block
        self.output_steps = output_steps
        self.channels = Channels.of(num_channels, input_channels, future_channels)
        self.window = (input_steps, num_points, self.channels.inp)
        self.time_slots = time_slots(list(time_features or []), steps_per_day, self.channels)
        self.time_embeddings = nn.ModuleDict(
            {name: nn.Embedding(slots, time_dim) for name, (_, slots) in self.time_slots.items()}
        )
        width = embed_dim + node_dim + time_dim * len(self.time_slots)
        self.series_embedding = nn.Linear(input_steps * self.channels.inp, embed_dim)
        self.point_embedding = nn.Parameter(torch.empty(num_points, node_dim))
        nn.init.xavier_uniform_(self.point_embedding)  # as the reference code initialises it
        self.encoder = nn.Sequential(*(ResidualMLPBlock(width, dropout) for _ in range(num_layers)))
        self.regression = nn.Linear(width, output_steps * num_channels)
        # the identity embedding marks a place, as in the paper (its "spatial identity")
        self.static = StaticPositions("STID", self.fixed_points)
        if self.time_slots:
            for table in self.time_embeddings.values():
                nn.init.xavier_uniform_(table.weight)

    def output_head(self) -> list[nn.Module]:
        return [self.regression]

    def check_input(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> None:
        super().check_input(x, coords, future)
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
        self.static(coords)

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check_input(x, coords, future)
        b, m, n, c = x.shape
        series = x.permute(0, 2, 1, 3).reshape(b, n, m * c)  # each point's whole window
        identity = self.point_embedding.expand(b, n, -1)
        parts = [self.series_embedding(series), identity]
        for name, (channel, slots) in self.time_slots.items():
            sin, cos = x[:, -1, :, channel], x[:, -1, :, channel + 1]
            slot = time_slot(sin, cos, slots, nearest=name == "hour")  # (B, N)
            parts.append(self.time_embeddings[name](slot))
        h = torch.cat(parts, dim=-1)  # (B, N, D)
        out = self.regression(self.encoder(h)).view(b, n, self.output_steps, self.channels.out)
        return out.permute(0, 2, 1, 3)
