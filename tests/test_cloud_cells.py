"""CloudLSTM, CloudGRU and CloudRNN cells against their equations (paper Eq. (3), DConv in
place of convolution), on both CPU paths: the numba kernels and the torch expression.

* bias-only steps: with zero DConv weights every gate is its own bias, so distinct biases
  pin down the gate order and the activation of each gate (as the ConvLSTM test does);
* reference steps: random weights, each DConv computed by the Eq. (2) loop of
  ``cloud_reference.dconv_loop`` and the gates combined as the equations say.
"""

from __future__ import annotations

import pytest
import torch
from cloud_reference import candidate, dconv_loop
from torch import nn

from cloudlstm.nn import CloudGRUCell, CloudLSTMCell, CloudRNNCell, cells, dconv

U_IN, U_H, K = 2, 3, 3
PATHS = ["numba", "torch"]


@pytest.fixture(params=PATHS)
def path(request, monkeypatch) -> str:
    """Run the cell on the numba kernels (the CPU default) or on the torch expressions."""
    if request.param == "torch":
        for module in (cells, dconv):
            monkeypatch.setattr(module, "use_kernels", lambda tensor: False)
    return request.param


def set_biases(layer: dconv.DConv, *gates: list[float]) -> None:
    """Zero ``layer``'s weights; gate g's output channels get bias ``gates[g]`` (one value
    per feature: the value, then the coordinates)."""
    nn.init.zeros_(layer.weight)
    with torch.no_grad():
        for block, values in zip(layer.bias.chunk(len(gates)), gates, strict=True):
            block.copy_(torch.tensor(values).expand_as(block))


def inputs(dtype=torch.float32, b: int = 2, n: int = 7, seed: int = 0):
    """Input cloud ``(B, N, U_in, 3)`` and a random state ``(B, N, U_h, 3)`` pair."""
    gen = torch.Generator().manual_seed(seed)
    x, hidden, memory = (
        torch.rand(b, n, u, 3, generator=gen, dtype=dtype) for u in (U_IN, U_H, U_H)
    )
    return x, hidden, memory


def sig(values: list[float]) -> torch.Tensor:
    return torch.sigmoid(torch.tensor(values))


# ---------------------------------------------------------------------------- bias only


def test_lstm_bias_only_step(path):
    """``C' = s(b_f) C + s(b_i) g(b_g)``, ``H' = s(b_o) tanh(C')``, gates in order i, f, o, g;
    the candidate g is tanh of the value and tanh(sigmoid) of the coordinates."""
    cell = CloudLSTMCell(U_IN, U_H, k=K)
    bi, bf, bo, bg = [0.3, -0.4, 0.9], [-1.2, 0.7, 0.1], [2.0, -0.5, 1.1], [-0.7, 1.3, -2.1]
    set_biases(cell.gates, bi, bf, bo, bg)
    x, hidden, memory = inputs()
    out, (h_new, c_new) = cell(x, (hidden, memory))
    expected_c = sig(bf) * memory + sig(bi) * candidate(torch.tensor(bg))
    torch.testing.assert_close(c_new, expected_c)
    torch.testing.assert_close(h_new, sig(bo) * torch.tanh(expected_c))
    assert out is h_new


def test_gru_bias_only_step(path):
    """``H' = (1 - s(b_z)) H + s(b_z) g(b_c)``: the update gate is the first of the two."""
    cell = CloudGRUCell(U_IN, U_H, k=K)
    bz, br, bc = [0.8, -1.5, 0.2], [-0.3, 2.0, 1.0], [1.4, -0.6, 0.5]
    set_biases(cell.gates, bz, br)
    set_biases(cell.candidate, bc)
    x, hidden, _ = inputs()
    out, (h_new,) = cell(x, (hidden,))
    expected = (1 - sig(bz)) * hidden + sig(bz) * candidate(torch.tensor(bc))
    torch.testing.assert_close(h_new, expected)
    assert out is h_new


def test_rnn_bias_only_step(path):
    cell = CloudRNNCell(U_IN, U_H, k=K)
    b = [-0.9, 0.4, 1.7]
    set_biases(cell.transition, b)
    x, hidden, _ = inputs()
    out, (h_new,) = cell(x, (hidden,))
    torch.testing.assert_close(h_new, candidate(torch.tensor(b)).expand_as(hidden))
    assert out is h_new


# ---------------------------------------------------------------- loop reference steps


def lstm_reference(cell, x, state):
    hidden, memory = state
    i, f, o, g = dconv_loop(cell.gates, torch.cat([x, hidden], dim=2)).chunk(4, dim=2)
    memory = torch.sigmoid(f) * memory + torch.sigmoid(i) * candidate(g)
    hidden = torch.sigmoid(o) * torch.tanh(memory)
    return hidden, (hidden, memory)


def gru_reference(cell, x, state):
    (hidden,) = state
    gates = torch.sigmoid(dconv_loop(cell.gates, torch.cat([x, hidden], dim=2)))
    update, reset = gates.chunk(2, dim=2)
    new = candidate(dconv_loop(cell.candidate, torch.cat([x, reset * hidden], dim=2)))
    hidden = (1 - update) * hidden + update * new
    return hidden, (hidden,)


def rnn_reference(cell, x, state):
    hidden = candidate(dconv_loop(cell.transition, torch.cat([x, state[0]], dim=2)))
    return hidden, (hidden,)


@pytest.mark.parametrize(
    "cls, reference",
    [(CloudLSTMCell, lstm_reference), (CloudGRUCell, gru_reference), (CloudRNNCell, rnn_reference)],
    ids=["lstm", "gru", "rnn"],
)
def test_two_steps_match_the_equations_with_loop_dconv(path, cls, reference):
    """Two steps (the second from the first's state, whose hidden coordinates have moved,
    so the neighbours differ per channel) equal the equations evaluated with loop DConvs."""
    torch.manual_seed(0)
    cell = cls(U_IN, U_H, k=K).double()
    x, hidden, memory = inputs(torch.float64)
    state = (hidden, memory)[: cls.num_states]  # a random state, not the initial one
    ours, ref = state, state
    for _ in range(2):
        out, ours = cell(x, ours)
        expected, ref = reference(cell, x, ref)
        torch.testing.assert_close(out, expected)
        for a, b in zip(ours, ref, strict=True):
            torch.testing.assert_close(a, b)
