"""DefCNN baseline: the grid CNN with deformable convolutions (Dai et al., ICCV 2017)."""

from __future__ import annotations

from torch import nn

from cloudlstm.models.cnn import CNN2D
from cloudlstm.nn.deform_conv import DeformConv2d


class DefCNN(CNN2D):
    """:class:`CNN2D` whose every 3x3 convolution is a :class:`DeformConv2d`.

    Each layer's sampling offsets are predicted from its input by a separate plain 3x3
    convolution (zero-initialised, so the untrained model equals a CNN2D with the same
    weights). Paper appendix: eleven layers, 108 channels, BatchNorm + ReLU.

    Covariates as in CNN2D: the input planes hold all C_in channels of x; ``future`` is
    not read.

    ``forward_grid``: ``(B, M, C_in, H, W)`` -> ``(B, J, C_out, H, W)``, all J steps at
    once.
    """

    def conv(self, in_channels: int, out_channels: int, bias: bool) -> nn.Module:
        return DeformConv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=bias)
