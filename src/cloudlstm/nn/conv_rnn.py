"""Convolutional recurrent cells on grids: ConvLSTM, and PredRNN++'s Causal LSTM and
Gradient Highway Unit (GHU).

Every tensor is a grid ``(B, channels, H, W)``; convolutions use "same" zero padding, so
H and W never change. Where an equation sums convolutions of several tensors
(``W_x * X + W_h * H``), it is computed as one convolution over their channel
concatenation: exactly equal, one kernel launch.
"""

from __future__ import annotations

import torch
from torch import nn

LSTMState = tuple[torch.Tensor, torch.Tensor]  # (hidden H, memory C), each (B, hid, H, W)


def same_conv(in_channels: int, out_channels: int, kernel_size: int) -> nn.Conv2d:
    """A stride-1 convolution whose output keeps the input's H x W (odd kernels only)."""
    if kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(
            f"model.kernel_size={kernel_size}: grid models need an odd kernel size "
            "(1, 3, 5, ...) so that 'same' padding keeps the grid size."
        )
    return nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)


def zero_state(x: torch.Tensor, channels: int) -> torch.Tensor:
    """Zeros ``(B, channels, H, W)`` on ``x``'s device and dtype, ``x (B, *, H, W)``."""
    b, _, h, w = x.shape
    return x.new_zeros(b, channels, h, w)


class ConvLSTMCell(nn.Module):
    """ConvLSTM (Shi et al., 2015) without peepholes, i.e. the paper's CloudLSTM equations
    with ordinary convolution in place of DConv::

        i, f, o = sigma(W_{i,f,o} * [X; H_{t-1}] + b)
        C_t = f . C_{t-1} + i . tanh(W_g * [X; H_{t-1}] + b_g)
        H_t = o . tanh(C_t)

    ``self.gates`` holds ``W_{i,f,o,g}`` stacked in that order along its output channels.
    Input ``x (B, U_in, H, W)`` and state ``(H, C)`` -> new hidden ``(B, U_h, H, W)``.
    """

    def __init__(self, input_channels: int, hidden_channels: int, kernel_size: int = 3) -> None:
        super().__init__()
        self.hidden_channels = hidden_channels
        self.gates = same_conv(input_channels + hidden_channels, 4 * hidden_channels, kernel_size)

    def initial_state(self, x: torch.Tensor) -> LSTMState:
        """Zero hidden and memory states shaped like ``x``'s grid."""
        return zero_state(x, self.hidden_channels), zero_state(x, self.hidden_channels)

    def forward(self, x: torch.Tensor, state: LSTMState) -> tuple[torch.Tensor, LSTMState]:
        hidden, memory = state
        i, f, o, g = self.gates(torch.cat([x, hidden], dim=1)).chunk(4, dim=1)
        memory = torch.sigmoid(f) * memory + torch.sigmoid(i) * torch.tanh(g)
        hidden = torch.sigmoid(o) * torch.tanh(memory)
        return hidden, (hidden, memory)


class CausalLSTMCell(nn.Module):
    """PredRNN++'s Causal LSTM (Wang et al., 2018, Eq. 1): two memories in cascade.

    The temporal memory C is updated first; the spatiotemporal memory M (arriving from the
    layer below, or from the top layer at the previous step) is updated from the *new* C::

        g, i, f    = (tanh, sigma, sigma)(W_1 * [X; H_{t-1}; C_{t-1}])
        C_t        = f . C_{t-1} + i . g
        g', i', f' = (tanh, sigma, sigma)(W_2 * [X; C_t; M_in])
        M_t        = f' . tanh(W_3 * M_in) + i' . g'
        o          = tanh(W_4 * [X; C_t; M_t])
        H_t        = o . tanh(W_5 * [C_t; M_t])          (W_5 a 1x1 convolution)

    ``temporal`` and ``spatial`` hold ``W_1`` and ``W_2`` with outputs stacked g, i, f.
    Input ``x (B, U_in, H, W)``, state ``(H, C)`` and ``m (B, U_h, H, W)`` ->
    ``(H_t, (H_t, C_t), M_t)``, all ``(B, U_h, H, W)``.
    """

    def __init__(self, input_channels: int, hidden_channels: int, kernel_size: int = 3) -> None:
        super().__init__()
        self.hidden_channels = hidden_channels
        both = input_channels + 2 * hidden_channels
        self.temporal = same_conv(both, 3 * hidden_channels, kernel_size)
        self.spatial = same_conv(both, 3 * hidden_channels, kernel_size)
        self.memory = same_conv(hidden_channels, hidden_channels, kernel_size)
        self.output = same_conv(both, hidden_channels, kernel_size)
        self.fuse = nn.Conv2d(2 * hidden_channels, hidden_channels, 1)

    def initial_state(self, x: torch.Tensor) -> LSTMState:
        """Zero hidden and temporal-memory states shaped like ``x``'s grid."""
        return zero_state(x, self.hidden_channels), zero_state(x, self.hidden_channels)

    def forward(
        self, x: torch.Tensor, state: LSTMState, m: torch.Tensor
    ) -> tuple[torch.Tensor, LSTMState, torch.Tensor]:
        hidden, c = state
        g, i, f = self.temporal(torch.cat([x, hidden, c], dim=1)).chunk(3, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        g, i, f = self.spatial(torch.cat([x, c, m], dim=1)).chunk(3, dim=1)
        m = torch.sigmoid(f) * torch.tanh(self.memory(m)) + torch.sigmoid(i) * torch.tanh(g)
        o = torch.tanh(self.output(torch.cat([x, c, m], dim=1)))
        hidden = o * torch.tanh(self.fuse(torch.cat([c, m], dim=1)))
        return hidden, (hidden, c), m


class GradientHighwayUnit(nn.Module):
    """PredRNN++'s GHU (Eq. 2): a switch gate S mixes a new transform P with the old Z::

        P   = tanh(W_p * [X; Z_{t-1}])
        S   = sigma(W_s * [X; Z_{t-1}])
        Z_t = S . P + (1 - S) . Z_{t-1}

    so Z_t is, element by element, a convex combination of P and Z_{t-1}; where S is near
    0 the gradient flows along Z unattenuated (the "highway"). ``self.gates`` holds
    ``W_p`` then ``W_s``. ``x (B, U_in, H, W)``, ``z (B, U_h, H, W)`` -> ``(B, U_h, H, W)``.
    """

    def __init__(self, input_channels: int, hidden_channels: int, kernel_size: int = 3) -> None:
        super().__init__()
        self.hidden_channels = hidden_channels
        self.gates = same_conv(input_channels + hidden_channels, 2 * hidden_channels, kernel_size)

    def initial_state(self, x: torch.Tensor) -> torch.Tensor:
        """Zero highway state shaped like ``x``'s grid."""
        return zero_state(x, self.hidden_channels)

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        p, s = self.gates(torch.cat([x, z], dim=1)).chunk(2, dim=1)
        s = torch.sigmoid(s)
        return s * torch.tanh(p) + (1 - s) * z
