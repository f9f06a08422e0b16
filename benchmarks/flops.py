"""FLOP formulas the benchmarks register with torch's ``FlopCounterMode`` (imported for that).

``nn.LSTM`` / ``nn.GRU`` on CPU run as one oneDNN op that ``FlopCounterMode`` does not
count; without these the LSTM baselines would count no FLOPs at all.
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import register_flop_formula


@register_flop_formula(torch.ops.aten.mkldnn_rnn_layer)
def rnn_layer_flops(inputs: list[int], w_ih: list[int], w_hh: list[int], *_, **__) -> int:
    """2 x (time steps x batch) x gates x (input + hidden) per layer."""
    rows = 1
    for size in inputs[:-1]:
        rows *= size
    return 2 * rows * w_ih[0] * (w_ih[1] + w_hh[1])


@register_flop_formula(torch.ops.aten.mkldnn_rnn_layer_backward)
def rnn_layer_backward_flops(inputs: list[int], w_ih: list[int], w_hh: list[int], *_, **__) -> int:
    """Gradients of the inputs and hidden states, and of the weights: twice the forward."""
    return 2 * rnn_layer_flops(inputs, w_ih, w_hh)
