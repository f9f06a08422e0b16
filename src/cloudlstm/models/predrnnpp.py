"""Seq2seq PredRNN++ baseline (Wang et al., 2018) on the Hungarian grid."""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.convlstm import RecurrentGridSeq2Seq
from cloudlstm.nn.conv_rnn import CausalLSTMCell, GradientHighwayUnit, LSTMState

# Per-layer (H, C), the spatiotemporal memory M, the GHU state Z (None without a GHU).
PredRNNState = tuple[list[LSTMState], torch.Tensor, torch.Tensor | None]


class CausalLSTMStack(nn.Module):
    """``num_layers`` Causal LSTM cells with a GHU between the first and the second.

    Per step, the input goes up through layer 1, the GHU, then layers 2..L. The
    spatiotemporal memory M zig-zags: it goes up through the layers within a step and
    from the top layer at step t-1 into layer 1 at step t (PredRNN++ Fig. 3). With one
    layer there is no GHU. ``x (B, hidden, H, W)`` -> top hidden, same shape.
    """

    def __init__(self, hidden_channels: int, num_layers: int, kernel_size: int) -> None:
        super().__init__()
        self.hidden_channels = hidden_channels
        self.cells = nn.ModuleList(
            CausalLSTMCell(hidden_channels, hidden_channels, kernel_size) for _ in range(num_layers)
        )
        self.highway = (
            GradientHighwayUnit(hidden_channels, hidden_channels, kernel_size)
            if num_layers > 1
            else None
        )

    def initial_state(self, x: torch.Tensor) -> PredRNNState:
        """All zeros, shaped like ``x``'s grid."""
        layers = [cell.initial_state(x) for cell in self.cells]
        memory = torch.zeros_like(layers[0][0])
        highway = None if self.highway is None else self.highway.initial_state(x)
        return layers, memory, highway

    def forward(self, x: torch.Tensor, state: PredRNNState) -> tuple[torch.Tensor, PredRNNState]:
        layers, memory, highway = state
        new_layers = []
        for index, (cell, layer_state) in enumerate(zip(self.cells, layers, strict=True)):
            x, layer_state, memory = cell(x, layer_state, memory)
            new_layers.append(layer_state)
            if index == 0 and self.highway is not None:
                highway = self.highway(x, highway)
                x = highway
        return x, (new_layers, memory, highway)


class PredRNNpp(RecurrentGridSeq2Seq):
    """Seq2seq PredRNN++ (paper appendix: 2 stacks, 36 channels, 3x3 filters).

    The same seq2seq frame as :class:`~cloudlstm.models.ConvLSTM` (separate encoder and
    decoder stacks, autoregressive decoder; see :class:`RecurrentGridSeq2Seq`) with
    :class:`CausalLSTMStack` as the stacks. The decoder starts from all of the encoder's
    final state: every layer's ``(H, C)``, the GHU state Z and the top layer's M, which
    enters the decoder's first layer as it would the next step of a single stack.

    Covariates as in the ConvLSTM: the embedding reads all C_in channels, and each decoder
    step reads its forecast with the covariates held and the time features of its step.

    ``x (B, M, N, C_in)``, ``coords (B, N, 2)`` (``future (B, J, N, F)`` with time
    features) -> ``(B, J, N, C_out)``.
    """

    def make_stack(self, hidden_channels: int, num_layers: int, kernel_size: int) -> nn.Module:
        return CausalLSTMStack(hidden_channels, num_layers, kernel_size)
