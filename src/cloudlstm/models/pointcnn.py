"""PointCNN: the paper's stacked X-Conv benchmark (appendix: eight X-Conv layers with
K, D, P, C = [9, 1, -1, 36])."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from cloudlstm.models.base import Channels, ForecastModel, check_output_steps, check_sizes
from cloudlstm.nn.knn_checks import check_k_option
from cloudlstm.nn.xconv import XConv, dilated_neighbours


class PointCNN(ForecastModel):
    """Stacked X-Conv layers over the whole input window, all J steps output at once.

    Each point's M x C history is its input feature vector (time folded into channels,
    as the paper's CNN baselines do); ``num_layers`` X-Conv layers of ``hidden_channels``
    follow, each with an ELU (PointCNN's activation); a final X-Conv maps to J*C
    features per point, the forecast (no recursion over steps, so J is fixed here).
    Every point is a representative (P = -1), so N is preserved. Neighbours come from
    the fixed coordinates and are searched once per forward, shared by all layers.

    Covariates: a point's input features are its M x C_in history of all input channels
    and the head gives its J*C_out forecasts. ``future`` is checked but not read: on the
    data's regular clock the input steps' time features (channels of ``x``) determine
    those of the forecast steps.

    ``x (B, M, N, C_in)``, ``coords (B, N, L)`` (``future (B, J, N, F)`` with time
    features) -> ``(B, J, N, C_out)``.
    """

    searches_neighbours = True

    def __init__(
        self,
        num_channels: int,
        input_steps: int,
        output_steps: int,
        hidden_channels: int = 36,
        num_layers: int = 8,
        k: int = 9,
        dilation: int = 1,
        coord_features: int = 2,
        lifted_channels: int | None = None,
        input_channels: int | None = None,
        future_channels: int = 0,
    ) -> None:
        super().__init__()
        check_sizes(hidden_channels=hidden_channels, num_layers=num_layers)
        check_output_steps(output_steps, num_channels=num_channels, input_steps=input_steps)
        self.output_steps = output_steps
        self.input_steps = input_steps
        self.num_channels = num_channels
        self.channels = Channels.of(num_channels, input_channels, future_channels)
        self.k = check_k_option(k, dilation)
        self.dilation = dilation
        common = dict(k=k, dilation=dilation, coord_dims=coord_features)
        widths = [input_steps * self.channels.inp] + [hidden_channels] * num_layers
        self.layers = nn.ModuleList(
            XConv(a, b, lifted_channels=lifted_channels, **common)
            for a, b in zip(widths[:-1], widths[1:], strict=True)
        )
        self.head = XConv(
            widths[-1], output_steps * num_channels, lifted_channels=lifted_channels, **common
        )

    def output_head(self) -> list[nn.Module]:
        """``[self.head.pointwise]``: the linear layer that ends the last X-Conv, whose
        outputs are the J*C forecasts.

        Only that layer: zeroing all of the X-Conv (its X matrices and lifted coordinates
        too) would also zero the layer's input for good, leaving it only its bias to learn.
        """
        return [self.head.pointwise]

    def check_input(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> None:
        # first, so that a window of the wrong size names the options that size it
        if x.dim() == 4 and (x.shape[1], x.shape[3]) != (self.input_steps, self.channels.inp):
            raise ValueError(
                f"PointCNN was built for M={self.input_steps} input steps and "
                f"C_in={self.channels.inp} channels, got x {tuple(x.shape)} (B, M, N, C_in); "
                f"set model.input_steps and model.num_channels to match the data."
            )
        super().check_input(x, coords, future)

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check_input(x, coords, future)
        b, m, n, c = x.shape
        index = dilated_neighbours(coords, self.k, self.dilation)
        h = x.permute(0, 2, 1, 3).reshape(b, n, m * c)
        for layer in self.layers:
            h = F.elu(layer(h, geometry=layer.geometry(coords, index)))
        out = self.head(h, geometry=self.head.geometry(coords, index))  # (B, N, J*C_out)
        return out.view(b, n, self.output_steps, self.num_channels).permute(0, 2, 1, 3)
