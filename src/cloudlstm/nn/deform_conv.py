"""Deformable 2-D convolution (Dai et al., ICCV 2017) in plain torch, for the DefCNN baseline.

Each kernel tap ``k`` at output location ``p`` reads the input at ``p + p_k + Δp_k`` where
``p_k`` is the tap's regular grid position and ``Δp_k = (Δy, Δx)`` a learned, per-location
real offset. The input is sampled there bilinearly (taps that fall outside the image read
0, like zero padding), then the taps are weighted as in an ordinary convolution.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def bilinear_taps(x: torch.Tensor, pos_y: torch.Tensor, pos_x: torch.Tensor) -> torch.Tensor:
    """Sample ``x (B, C, H, W)`` bilinearly at real positions ``pos_y, pos_x (B, P)``.

    Positions are in pixel units (row, column). Each of the four neighbouring pixels
    contributes only if it lies inside the image, so out-of-image samples fade to 0.
    Returns ``(B, C, P)``.
    """
    b, c, h, w = x.shape
    flat = x.flatten(2)  # (B, C, H*W)
    y0, x0 = pos_y.floor(), pos_x.floor()
    fy, fx = pos_y - y0, pos_x - x0  # gradients reach the offsets through these fractions
    y0, x0 = y0.long(), x0.long()
    out = x.new_zeros(b, c, pos_y.shape[1])
    for dy, wy in ((0, 1 - fy), (1, fy)):
        for dx, wx in ((0, 1 - fx), (1, fx)):
            yy, xx = y0 + dy, x0 + dx
            inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            index = (yy.clamp(0, h - 1) * w + xx.clamp(0, w - 1))[:, None, :]
            sampled = flat.gather(2, index.expand(b, c, index.shape[2]))
            out = out + sampled * (wy * wx * inside)[:, None, :]
    return out


class DeformConv2d(nn.Module):
    """Deformable ``kernel_size x kernel_size`` convolution, stride 1.

    The ``2 * kernel_size**2`` offsets per output location (``(Δy, Δx)`` per tap, taps in
    row-major order) come from a separate plain convolution of the same input, initialised
    to zero so that the layer starts out as an ordinary convolution.

    ``x (B, C_in, H, W)`` -> ``(B, C_out, H + 2*padding - kernel_size + 1, ...)``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 3,
        padding: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.padding = padding
        taps = kernel_size * kernel_size
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.offset = nn.Conv2d(in_channels, 2 * taps, kernel_size, padding=padding)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # the same initialisation as nn.Conv2d, so swapping one for the other is neutral
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.weight[0].numel())
            nn.init.uniform_(self.bias, -bound, bound)
        nn.init.zeros_(self.offset.weight)
        nn.init.zeros_(self.offset.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        k, pad = self.kernel_size, self.padding
        ho, wo = h + 2 * pad - k + 1, w + 2 * pad - k + 1
        if ho < 1 or wo < 1:
            raise ValueError(
                f"input {h}x{w} is too small for a {k}x{k} kernel with padding {pad}: "
                "use a larger grid or more padding."
            )
        offsets = self.offset(x).view(b, k * k, 2, ho, wo)  # (dy, dx) per tap and location
        tap_y, tap_x = torch.meshgrid(torch.arange(k), torch.arange(k), indexing="ij")
        out_y, out_x = torch.meshgrid(torch.arange(ho), torch.arange(wo), indexing="ij")
        # regular sampling grid (K*K, Ho, Wo), shifted by the learned offsets
        base_y = (out_y[None] - pad + tap_y.reshape(-1, 1, 1)).to(x)
        base_x = (out_x[None] - pad + tap_x.reshape(-1, 1, 1)).to(x)
        pos_y = (base_y + offsets[:, :, 0]).flatten(1)
        pos_x = (base_x + offsets[:, :, 1]).flatten(1)
        columns = bilinear_taps(x, pos_y, pos_x).view(b, -1, k * k, ho * wo)
        out = torch.einsum("oik,bikp->bop", self.weight.flatten(2), columns)
        if self.bias is not None:
            out = out + self.bias[:, None]
        return out.view(b, -1, ho, wo)
