"""CNN baseline on the Hungarian grid (paper appendix: eleven 3x3 conv layers, 108 channels)."""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.base import Channels, check_sizes
from cloudlstm.models.grid_base import GridForecaster, check_window


class CNN2D(GridForecaster):
    """A stack of 2-D convolutions over the gridded input window, all J steps at once.

    The M input steps of the C_in channels are stacked into ``M*C_in`` image channels;
    ``num_layers - 1`` layers of ``hidden_channels`` 3x3 convolutions with BatchNorm and
    ReLU follow, and a last plain 3x3 convolution (no BN/ReLU) outputs the ``J*C_out``
    channels that are the J forecast steps. No recurrence: one pass gives the whole
    horizon. ``num_layers`` counts every conv layer, the output one included.

    Covariates (``input_channels``, ``future_channels``): the input planes hold all C_in
    channels of x, measured covariates and time features included. The time features of
    the forecast steps (``future``) are checked but not read: on the data's regular clock
    those of the input steps, in x, determine them.

    ``forward_grid``: ``(B, M, C_in, H, W)`` -> ``(B, J, C_out, H, W)``.
    """

    def __init__(
        self,
        num_channels: int,
        input_steps: int,
        output_steps: int,
        hidden_channels: int = 108,
        num_layers: int = 11,
        grid_cache_dir: str | None = None,
        input_channels: int | None = None,
        future_channels: int = 0,
    ) -> None:
        super().__init__(output_steps, grid_cache_dir)
        if num_layers < 1:
            raise ValueError(f"model.num_layers must be >= 1 (the output layer), got {num_layers}.")
        check_sizes(hidden_channels=hidden_channels)
        self.channels = Channels.of(num_channels, input_channels, future_channels)
        self.num_channels = num_channels
        self.input_steps = input_steps
        widths = [self.input_width()] + [hidden_channels] * (num_layers - 1)
        layers: list[nn.Module] = []
        for a, b in zip(widths[:-1], widths[1:], strict=True):
            # no conv bias: the BatchNorm shift that follows makes it redundant
            layers += [self.conv(a, b, bias=False), self.norm(b), nn.ReLU()]
        layers.append(self.head(widths[-1], output_steps * num_channels))
        self.net = nn.Sequential(*layers)

    # The hooks below are what CNN3D and DefCNN change.
    def input_width(self) -> int:
        """Channels of the first layer's input: the M*C_in stacked steps and channels."""
        return self.input_steps * self.channels.inp

    def conv(self, in_channels: int, out_channels: int, bias: bool) -> nn.Module:
        """One 3x3, size-preserving convolution (DefCNN swaps in a deformable one)."""
        return nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=bias)

    def norm(self, channels: int) -> nn.Module:
        return nn.BatchNorm2d(channels)

    def head(self, in_channels: int, out_channels: int) -> nn.Module:
        """The last, plain layer producing the J*C_out output channels."""
        return self.conv(in_channels, out_channels, bias=True)

    def output_head(self) -> list[nn.Module]:
        """``[self.net[-1]]``: the last, plain layer (:meth:`head`), whose J*C_out channels are
        the forecast with no norm or activation after it. In CNN3D it is the convolution
        that folds time; in DefCNN a deformable one, whose offset convolution starts at
        zero anyway."""
        return [self.net[-1]]

    def check_input(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> None:
        super().check_input(x, coords, future)
        check_window(x, self.input_steps, self.channels.inp)

    def forward_grid(self, x: torch.Tensor) -> torch.Tensor:
        b, m, c, h, w = x.shape
        out = self.net(x.reshape(b, m * c, h, w))  # (B, J*C_out, H, W)
        return out.view(b, self.output_steps, self.channels.out, h, w)
