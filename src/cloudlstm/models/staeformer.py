"""STAEformer baseline (Liu, Dong, Jiang, Deng, Deng, Chen, Song, *Spatio-Temporal Adaptive
Embedding Makes Vanilla Transformer SOTA for Traffic Forecasting*, CIKM 2023; reference code
XDZhelheim/STAEformer).

Every (step, point) of the input window becomes a token: a linear input embedding
concatenated with time-of-day and day-of-week embeddings, an optional spatial embedding
and the spatio-temporal adaptive embedding (one learned vector per input step and point).
Vanilla transformer layers attend over time at each point, then over the points at each
step, and a linear output projection maps each point's M tokens to its J forecasts.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from cloudlstm.models.base import Channels, ForecastModel, check_counts, check_sizes
from cloudlstm.models.time_slots import time_slot, time_slots
from cloudlstm.nn.graph import StaticPositions

WHY = "its adaptive embedding is one learned vector per input step and training point"


class SelfAttentionLayer(nn.Module):
    """A post-norm transformer encoder layer attending along one axis of ``(B, T, N, D)``.

    ``h = LN(x + Dropout(MHA(x)))``, ``y = LN(h + Dropout(FFN(h)))`` with FFN
    ``Linear-ReLU-Linear``; ``axis`` 1 attends over time (each point and sample its own
    sequence), 2 over the points (each step its own set). x ``(B, T, N, D)`` -> same shape.
    """

    def __init__(self, model_dim: int, feed_forward_dim: int, num_heads: int, dropout: float):
        super().__init__()
        self.num_heads = num_heads
        self.query = nn.Linear(model_dim, model_dim)
        self.key = nn.Linear(model_dim, model_dim)
        self.value = nn.Linear(model_dim, model_dim)
        self.out = nn.Linear(model_dim, model_dim)
        self.feed_forward = nn.Sequential(
            nn.Linear(model_dim, feed_forward_dim),
            nn.ReLU(),
            nn.Linear(feed_forward_dim, model_dim),
        )
        self.norm_attention = nn.LayerNorm(model_dim)
        self.norm_feed_forward = nn.LayerNorm(model_dim)
        self.dropout = nn.Dropout(dropout)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """Multi-head self-attention over the second-last axis: ``(..., S, D)`` -> same."""

        # (..., S, D) -> (R, H, S, D / H), all leading axes as one: the fused attention
        # kernels (flash on CPU and CUDA) take 4-D inputs only; 5-D falls back to the
        # unfused softmax(q k^T) v, which holds every (S, S) score (a METR-LA-size step's
        # peak memory 24 % higher, docs/performance.md).
        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.flatten(0, -3).unflatten(-1, (self.num_heads, -1)).transpose(1, 2)

        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        out = F.scaled_dot_product_attention(q, k, v)  # softmax(q k^T / sqrt(D / H)) v
        out = out.transpose(1, 2).flatten(-2)  # (R, S, D)
        return self.out(out.unflatten(0, x.shape[:-2]))

    def forward(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        x = x.transpose(axis, -2)  # the attended axis next to the features
        h = self.norm_attention(x + self.dropout(self.attention(x)))
        h = self.norm_feed_forward(h + self.dropout(self.feed_forward(h)))
        return h.transpose(axis, -2)


class STAEformer(ForecastModel):
    """Spatio-temporal adaptive embedding transformer.

    Reference configuration (XDZhelheim/STAEformer, ``STAEformer.yaml`` for METR-LA): input
    embedding 24, time-of-day and day-of-week embeddings 24 each, no spatial embedding
    (``spatial_embedding_dim: 0``), adaptive embedding 80, so tokens of 152 features; 3
    temporal and 3 spatial layers, 4 heads, feed-forward 256, dropout 0.1, and the "mixed"
    output projection (one linear layer from each point's M x 152 token features to its
    J x C_out forecasts).

    Token of step t at point n: ``[x_{t,n} W_in + b_in | tod(t) | dow(t) | E_s[n] |
    E_a[t, n]]``. The input embedding reads all C_in input channels (targets, covariates
    and time features), as the reference's reads the value with its time of day and day of
    week. The time of day and day of week come from the framework's time features: with
    ``data.time_features=[hour,weekday]`` (and a whole number of steps per day) each input
    step's ``hour`` sin/cos picks one of ``steps_per_day`` learned vectors and its
    ``weekday`` one of 7, as STID reads them (:mod:`cloudlstm.models.stid`); without a
    feature its embedding is left out and the tokens are narrower. ``future`` is checked
    but not read.

    Transductive: the adaptive embedding (and the spatial one) is learned per input step
    and training point, by index, so the model forecasts only its training points, with
    the input length it was built for, and refuses moving points.

    ``x (B, M, N, C_in)``, ``coords (B, N, L)`` (``future (B, J, N, F)`` with time
    features) -> ``(B, J, N, C_out)``.
    """

    fixed_points = WHY

    def __init__(
        self,
        num_points: int,
        num_channels: int,
        input_steps: int,
        output_steps: int,
        embed_dim: int = 24,
        time_dim: int = 24,
        node_dim: int = 0,
        adaptive_dim: int = 80,
        feed_forward_dim: int = 256,
        num_heads: int = 4,
        num_layers: int = 3,
        dropout: float = 0.1,
        input_channels: int | None = None,
        future_channels: int = 0,
        time_features: list[str] | None = None,
        steps_per_day: int | None = None,
    ) -> None:
        super().__init__()
        check_sizes(
            num_points=num_points,
            num_channels=num_channels,
            input_steps=input_steps,
            output_steps=output_steps,
            embed_dim=embed_dim,
            feed_forward_dim=feed_forward_dim,
            num_heads=num_heads,
            num_layers=num_layers,
        )
        check_counts(time_dim=time_dim, node_dim=node_dim, adaptive_dim=adaptive_dim)
        self.output_steps = output_steps
        self.channels = Channels.of(num_channels, input_channels, future_channels)
        self.window = (input_steps, num_points, self.channels.inp)
        slots = time_slots(list(time_features or []), steps_per_day, self.channels)
        self.time_slots = slots if time_dim > 0 else {}
        self.time_embeddings = nn.ModuleDict(
            {name: nn.Embedding(count, time_dim) for name, (_, count) in self.time_slots.items()}
        )
        self.input_embedding = nn.Linear(self.channels.inp, embed_dim)
        # the reference initialises both learned embeddings Xavier-uniform
        spatial = torch.empty(num_points, node_dim) if node_dim else None
        adaptive = torch.empty(input_steps, num_points, adaptive_dim) if adaptive_dim else None
        for name, value in (("spatial_embedding", spatial), ("adaptive_embedding", adaptive)):
            self.register_parameter(name, None if value is None else nn.Parameter(value))
            if value is not None:
                nn.init.xavier_uniform_(getattr(self, name))
        self.model_dim = embed_dim + time_dim * len(self.time_slots) + node_dim + adaptive_dim
        if self.model_dim % num_heads:
            raise ValueError(
                f"model.num_heads={num_heads} must divide the token width {self.model_dim} "
                "(embed_dim + time_dim per time feature + node_dim + adaptive_dim)."
            )
        if node_dim == 0 and adaptive_dim == 0:
            self.fixed_points = None  # nothing is learned per point
        self.static = StaticPositions("STAEformer", WHY) if self.fixed_points else None
        self.point_parameters = self.fixed_points

        def layers() -> nn.ModuleList:
            return nn.ModuleList(
                SelfAttentionLayer(self.model_dim, feed_forward_dim, num_heads, dropout)
                for _ in range(num_layers)
            )

        self.temporal = layers()
        self.spatial = layers()
        self.output_projection = nn.Linear(
            input_steps * self.model_dim, output_steps * num_channels
        )

    def output_head(self) -> list[nn.Module]:
        """``[self.output_projection]``: the linear layer emitting all J x C_out forecasts."""
        return [self.output_projection]

    def check_input(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> None:
        super().check_input(x, coords, future)
        m, n, c = self.window
        if (x.shape[1], x.shape[3]) != (m, c) or (self.fixed_points and x.shape[2] != n):
            raise ValueError(
                f"this STAEformer was built for (M, N, C_in) = {(m, n, c)} but got "
                f"{tuple(x.shape[1:])}: it forecasts only its {n} training points, in their "
                "order, from windows of its input length (an embedding per step and point)."
            )
        if self.static is not None:
            self.static(coords)

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        """The embedded input: x ``(B, M, N, C_in)`` -> tokens ``(B, M, N, model_dim)``."""
        b, m, n, _ = x.shape
        parts = [self.input_embedding(x)]
        for name, (channel, slots) in self.time_slots.items():
            slot = time_slot(x[..., channel], x[..., channel + 1], slots, nearest=name == "hour")
            parts.append(self.time_embeddings[name](slot))  # each input step's own
        if self.spatial_embedding is not None:
            parts.append(self.spatial_embedding.expand(b, m, n, -1))
        if self.adaptive_embedding is not None:
            parts.append(self.adaptive_embedding.expand(b, m, n, -1))
        return torch.cat(parts, dim=-1)

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check_input(x, coords, future)
        b, m, n, _ = x.shape
        h = self.tokens(x)
        for layer in self.temporal:
            h = layer(h, axis=1)  # over the M steps of each point
        for layer in self.spatial:
            h = layer(h, axis=2)  # over the N points of each step
        out = self.output_projection(h.transpose(1, 2).flatten(2))  # (B, N, J * C_out)
        return out.view(b, n, self.output_steps, self.channels.out).transpose(1, 2)
