"""3D-CNN baseline on the Hungarian grid (appendix: eleven 3x3x3 conv layers, 108 channels)."""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.grid_base import GridForecaster, check_window


class CNN3D(GridForecaster):
    """3-D convolutions over (time, height, width) of the gridded window, all J steps at once.

    The C measured channels are the input channels of a ``(M, H, W)`` volume;
    ``num_layers - 1`` layers of ``hidden_channels`` 3x3x3 convolutions (padding 1) with
    BatchNorm and ReLU keep its size. The last, plain 3-D convolution has an ``M x 3 x 3``
    kernel without time padding: it folds the M time steps into its ``J*C`` output
    channels, which are the J forecast steps. ``num_layers`` counts every conv layer.

    ``forward_grid``: ``(B, M, C, H, W)`` -> ``(B, J, C, H, W)``.
    """

    def __init__(
        self,
        num_channels: int,
        input_steps: int,
        output_steps: int,
        hidden_channels: int = 108,
        num_layers: int = 11,
        grid_cache_dir: str | None = None,
    ) -> None:
        super().__init__(output_steps, grid_cache_dir)
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1 (the output layer), got {num_layers}.")
        self.num_channels = num_channels
        self.input_steps = input_steps
        widths = [num_channels] + [hidden_channels] * (num_layers - 1)
        layers: list[nn.Module] = []
        for a, b in zip(widths[:-1], widths[1:], strict=True):
            # no conv bias: the BatchNorm shift that follows makes it redundant
            layers += [nn.Conv3d(a, b, 3, padding=1, bias=False), nn.BatchNorm3d(b), nn.ReLU()]
        head = nn.Conv3d(
            widths[-1], output_steps * num_channels, (input_steps, 3, 3), padding=(0, 1, 1)
        )
        self.net = nn.Sequential(*layers, head)

    def check_input(self, x: torch.Tensor, coords: torch.Tensor) -> None:
        super().check_input(x, coords)
        check_window(x, self.input_steps, self.num_channels)

    def forward_grid(self, x: torch.Tensor) -> torch.Tensor:
        b, m, c, h, w = x.shape
        out = self.net(x.transpose(1, 2))  # (B, C, M, H, W) -> (B, J*C, 1, H, W)
        return out.view(b, self.output_steps, c, h, w)
