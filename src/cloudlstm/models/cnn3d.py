"""3D-CNN baseline on the Hungarian grid (appendix: eleven 3x3x3 conv layers, 108 channels)."""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.cnn import CNN2D


class CNN3D(CNN2D):
    """3-D convolutions over (time, height, width) of the gridded window, all J steps at once.

    The C_in channels (targets, covariates, time features) are the input channels of a
    ``(M, H, W)`` volume; ``num_layers - 1`` layers of ``hidden_channels`` 3x3x3
    convolutions (padding 1) with BatchNorm and ReLU keep its size. The last, plain 3-D
    convolution has an ``M x 3 x 3`` kernel without time padding: it folds the M time
    steps into its ``J*C_out`` output channels, which are the J forecast steps.
    ``num_layers`` counts every conv layer. Like CNN2D it does not read ``future``: the
    time features of the input steps determine it.

    ``forward_grid``: ``(B, M, C_in, H, W)`` -> ``(B, J, C_out, H, W)``. Arguments as
    :class:`~cloudlstm.models.cnn.CNN2D`.
    """

    def input_width(self) -> int:
        return self.channels.inp  # time stays an axis of the 3-D convolution

    def conv(self, in_channels: int, out_channels: int, bias: bool) -> nn.Module:
        return nn.Conv3d(in_channels, out_channels, 3, padding=1, bias=bias)

    def norm(self, channels: int) -> nn.Module:
        return nn.BatchNorm3d(channels)

    def head(self, in_channels: int, out_channels: int) -> nn.Module:
        # An M x 3 x 3 kernel without time padding folds the M steps into the J*C_out outputs.
        return nn.Conv3d(in_channels, out_channels, (self.input_steps, 3, 3), padding=(0, 1, 1))

    def forward_grid(self, x: torch.Tensor) -> torch.Tensor:
        b, m, c, h, w = x.shape
        out = self.net(x.transpose(1, 2))  # (B, C_in, M, H, W) -> (B, J*C_out, 1, H, W)
        return out.view(b, self.output_steps, self.channels.out, h, w)
