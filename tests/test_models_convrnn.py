"""ConvLSTM and PredRNN++ grid baselines: their cells against the equations, and the
whole forecasters through the point interface."""

from __future__ import annotations

import pytest
import torch
from conftest import compose_train
from model_checks import check_forecaster, tiny_batch
from torch import nn

from cloudlstm.data.spec import DataSpec
from cloudlstm.models.build import build_model
from cloudlstm.models.convlstm import ConvLSTM
from cloudlstm.models.predrnnpp import CausalLSTMStack, PredRNNpp
from cloudlstm.nn.conv_rnn import CausalLSTMCell, ConvLSTMCell, GradientHighwayUnit

MODELS = [ConvLSTM, PredRNNpp]
TINY = dict(num_channels=2, hidden_channels=4, num_layers=2, kernel_size=3)


def set_biases(conv: nn.Conv2d, *values: float) -> None:
    """Zero ``conv``'s weights and give each consecutive output block one bias value."""
    nn.init.zeros_(conv.weight)
    with torch.no_grad():
        for block, value in zip(conv.bias.chunk(len(values)), values, strict=True):
            block.fill_(value)


def conv_by_loops(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Zero-padded 'same' convolution written out pixel by pixel: ``(U, H, W)`` -> ``(V, H, W)``."""
    u, h, w = x.shape
    v, _, k, _ = weight.shape
    weight, bias = weight.detach(), bias.detach()
    r = k // 2
    out = torch.zeros(v, h, w, dtype=torch.float64)
    for o in range(v):
        for row in range(h):
            for col in range(w):
                total = float(bias[o])
                for i in range(u):
                    for dr in range(k):
                        for dc in range(k):
                            rr, cc = row + dr - r, col + dc - r
                            if 0 <= rr < h and 0 <= cc < w:
                                total += float(weight[o, i, dr, dc]) * float(x[i, rr, cc])
                out[o, row, col] = total
    return out


# ----------------------------------------------------------------------------- cells


def test_convlstm_cell_bias_only_step_matches_equations():
    """With zero weights every gate is its bias: C' = s(b_f) C + s(b_i) tanh(b_g),
    H' = s(b_o) tanh(C'); distinct biases pin down the gate order i, f, o, g."""
    cell = ConvLSTMCell(2, 3)
    bi, bf, bo, bg = 0.3, -1.2, 2.0, -0.7
    set_biases(cell.gates, bi, bf, bo, bg)
    x = torch.randn(2, 2, 4, 5)
    hidden, memory = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    out, (h_new, c_new) = cell(x, (hidden, memory))
    sig = lambda v: torch.sigmoid(torch.tensor(v))  # noqa: E731
    expected_c = sig(bf) * memory + sig(bi) * torch.tanh(torch.tensor(bg))
    torch.testing.assert_close(c_new, expected_c)
    torch.testing.assert_close(h_new, sig(bo) * torch.tanh(expected_c))
    assert out is h_new


def test_convlstm_cell_matches_pixel_loop_reference():
    """Random weights: the cell equals the gate equations with each convolution written as
    explicit loops over pixels, kernel taps and channels (zero padding at the border)."""
    torch.manual_seed(1)
    cell = ConvLSTMCell(2, 2, kernel_size=3).double()
    x, hidden, memory = (torch.randn(1, 2, 3, 4, dtype=torch.float64) for _ in range(3))
    _, (h_new, c_new) = cell(x, (hidden, memory))

    z = conv_by_loops(torch.cat([x, hidden], 1)[0], cell.gates.weight, cell.gates.bias)
    i, f, o, g = z.chunk(4)
    c_ref = torch.sigmoid(f) * memory[0] + torch.sigmoid(i) * torch.tanh(g)
    h_ref = torch.sigmoid(o) * torch.tanh(c_ref)
    torch.testing.assert_close(c_new[0], c_ref)
    torch.testing.assert_close(h_new[0], h_ref)


def test_causal_cell_bias_only_step_matches_equations():
    """Zero weights: C' = s(f) C + s(i) tanh(g), M' = s(f') tanh(b_3) + s(i') tanh(g'),
    H' = tanh(b_4) tanh(b_5), each gate its own bias (order g, i, f in W_1 and W_2)."""
    cell = CausalLSTMCell(2, 3)
    g, i, f = -0.4, 0.8, 1.5
    g2, i2, f2 = 0.6, -0.9, 0.2
    b3, b4, b5 = 0.5, -1.1, 0.7
    set_biases(cell.temporal, g, i, f)
    set_biases(cell.spatial, g2, i2, f2)
    set_biases(cell.memory, b3)
    set_biases(cell.output, b4)
    set_biases(cell.fuse, b5)
    x, hidden, c, m = (torch.randn(2, k, 4, 4) for k in (2, 3, 3, 3))
    out, (h_new, c_new), m_new = cell(x, (hidden, c), m)
    t = torch.tensor
    expected_c = torch.sigmoid(t(f)) * c + torch.sigmoid(t(i)) * torch.tanh(t(g))
    expected_m = torch.sigmoid(t(f2)) * torch.tanh(t(b3)) + torch.sigmoid(t(i2)) * torch.tanh(t(g2))
    torch.testing.assert_close(c_new, expected_c)
    torch.testing.assert_close(m_new, expected_m.expand_as(m_new))
    torch.testing.assert_close(h_new, (torch.tanh(t(b4)) * torch.tanh(t(b5))).expand_as(h_new))
    assert out is h_new


def test_causal_cell_updates_c_before_m():
    """The cascade: the new temporal memory C ignores the incoming spatiotemporal memory M,
    while the new M (and H) depend on the old C through the new C."""
    torch.manual_seed(0)
    cell = CausalLSTMCell(2, 3)
    x = torch.randn(1, 2, 4, 4)
    hidden, c, m = (torch.randn(1, 3, 4, 4, requires_grad=True) for _ in range(3))
    h_new, (_, c_new), m_new = cell(x, (hidden, c), m)
    (grad_c_wrt_m,) = torch.autograd.grad(c_new.sum(), m, allow_unused=True)
    assert grad_c_wrt_m is None or grad_c_wrt_m.abs().max() == 0
    for output in (m_new, h_new):
        (grad,) = torch.autograd.grad(output.sum(), c, retain_graph=True)
        assert grad.abs().max() > 0


def test_ghu_is_convex_combination_of_transform_and_old_state():
    """Z_t = S P + (1 - S) Z_{t-1}, S = sigma(W_s * [X; Z]) in [0, 1], P = tanh(W_p * [X; Z])."""
    torch.manual_seed(0)
    ghu = GradientHighwayUnit(2, 3)
    x, z = torch.randn(2, 2, 5, 5), 2 * torch.randn(2, 3, 5, 5)
    z_new = ghu(x, z)
    pre = nn.functional.conv2d(torch.cat([x, z], 1), ghu.gates.weight, ghu.gates.bias, padding=1)
    p, s = torch.tanh(pre[:, :3]), torch.sigmoid(pre[:, 3:])
    torch.testing.assert_close(z_new, s * p + (1 - s) * z)
    assert ((s >= 0) & (s <= 1)).all()
    lo, hi = torch.minimum(p, z), torch.maximum(p, z)
    assert ((z_new >= lo - 1e-6) & (z_new <= hi + 1e-6)).all()


@pytest.mark.parametrize("switch, expect_old", [(-30.0, True), (30.0, False)])
def test_ghu_switch_closed_passes_state_open_takes_transform(switch, expect_old):
    ghu = GradientHighwayUnit(2, 3)
    set_biases(ghu.gates, 0.4, switch)  # P = tanh(0.4) everywhere, S = sigma(switch)
    z = torch.randn(1, 3, 4, 4)
    z_new = ghu(torch.randn(1, 2, 4, 4), z)
    expected = z if expect_old else torch.full_like(z, torch.tanh(torch.tensor(0.4)).item())
    torch.testing.assert_close(z_new, expected)


def test_spatiotemporal_memory_zigzags_from_top_layer_to_first():
    """Layer 1 at step 1 cannot see layer 2's weights; at step 2 it does, through the M
    that left the top layer at step 1."""
    torch.manual_seed(0)
    stack = CausalLSTMStack(hidden_channels=3, num_layers=2, kernel_size=3)
    x = torch.randn(1, 3, 4, 4)
    top_weight = stack.cells[1].temporal.weight
    state = stack.initial_state(x)
    _, state = stack(x, state)
    (grad,) = torch.autograd.grad(state[0][0][0].sum(), top_weight, allow_unused=True)
    assert grad is None or grad.abs().max() == 0
    _, state = stack(x, state)
    (grad,) = torch.autograd.grad(state[0][0][0].sum(), top_weight)
    assert grad.abs().max() > 0


def test_single_layer_stack_has_no_highway():
    stack = CausalLSTMStack(hidden_channels=3, num_layers=1, kernel_size=3)
    assert stack.highway is None
    out, _ = stack(torch.randn(1, 3, 2, 2), stack.initial_state(torch.randn(1, 3, 2, 2)))
    assert out.shape == (1, 3, 2, 2)


# ----------------------------------------------------------------------------- models


@pytest.mark.parametrize("model_cls", MODELS)
def test_forecaster_learns(model_cls):
    torch.manual_seed(0)
    check_forecaster(model_cls(output_steps=3, **TINY), m=4, n=12, c=2, j=3)


@pytest.mark.parametrize("model_cls", MODELS)
def test_long_horizon_beyond_input_length(model_cls):
    """J = 72 > M = 4: the decoder runs on its own forecasts."""
    model = model_cls(output_steps=72, **TINY)
    x, coords, _ = tiny_batch(b=2, m=4, n=12, c=2, j=1)
    with torch.no_grad():
        out = model(x, coords)
    assert out.shape == (2, 72, 12, 2)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("model_cls", MODELS)
def test_decoder_is_autoregressive_prefix_consistent(model_cls):
    """Same weights, longer horizon: the first steps are unchanged (step j depends only
    on the input and the forecasts before it)."""
    torch.manual_seed(0)
    short = model_cls(output_steps=3, **TINY)
    long = model_cls(output_steps=9, **TINY)
    long.load_state_dict(short.state_dict())
    x, coords, _ = tiny_batch(b=2, m=4, n=12, c=2, j=1)
    with torch.no_grad():
        torch.testing.assert_close(long(x, coords)[:, :3], short(x, coords))


# Paper size: C=6 channels, 36 hidden channels, 3x3 filters, 2 layers per stack.
EMBED = 6 * 36 * 9 + 36  # 3x3 conv C -> 36
HEAD = 36 * 6 + 6  # 1x1 conv 36 -> C
CONVLSTM_CELL = 72 * 144 * 9 + 144  # W over [X; H] -> 4 gates
CAUSAL_CELL = 2 * (108 * 108 * 9 + 108) + (36 * 36 * 9 + 36) + (108 * 36 * 9 + 36) + 72 * 36 + 36
GHU = 72 * 72 * 9 + 72


@pytest.mark.parametrize(
    "model_cls, expected",
    [
        (ConvLSTM, EMBED + 4 * CONVLSTM_CELL + HEAD),  # 376,026
        (PredRNNpp, EMBED + 2 * (2 * CAUSAL_CELL + GHU) + HEAD),  # 1,133,754
    ],
)
def test_paper_size_parameters_and_shape(model_cls, expected):
    """N = 274 points -> a 17 x 17 grid, C = 6, M = J = 12."""
    model = model_cls(num_channels=6, output_steps=12)
    assert sum(p.numel() for p in model.parameters()) == expected
    x, coords, _ = tiny_batch(b=1, m=12, n=274, c=6, j=1)
    with torch.no_grad():
        assert model.forward_grid(torch.zeros(1, 12, 6, 17, 17)).shape == (1, 12, 6, 17, 17)
        assert model(x, coords).shape == (1, 12, 274, 6)


@pytest.mark.parametrize("name, model_cls", [("convlstm", ConvLSTM), ("predrnnpp", PredRNNpp)])
def test_hydra_config_builds_paper_model_and_caches_the_grid(tmp_path, name, model_cls):
    cfg = compose_train(tmp_path, [f"model={name}"])
    spec = DataSpec.sized(
        num_channels=2, num_points=7, input_steps=3, output_steps=2, coord_features=2
    )
    model = build_model(cfg.model, spec)
    assert isinstance(model, model_cls) and model.output_steps == 2
    assert (cfg.model.hidden_channels, cfg.model.num_layers, cfg.model.kernel_size) == (36, 2, 3)
    x, coords, _ = tiny_batch(b=1, m=3, n=7, c=2, j=1)
    with torch.no_grad():
        assert model(x, coords).shape == (1, 2, 7, 2)
    assert list((tmp_path / "data" / "grid_mappings").glob("*.npz"))


@pytest.mark.parametrize("model_cls", MODELS)
def test_clear_errors(model_cls):
    with pytest.raises(ValueError, match="odd kernel size"):
        model_cls(output_steps=3, **{**TINY, "kernel_size": 2})
    with pytest.raises(ValueError, match="must be >= 1"):
        model_cls(output_steps=3, **{**TINY, "num_layers": 0})
    model = model_cls(output_steps=3, **TINY)
    x, coords, _ = tiny_batch(m=4, n=12, c=2, j=1, dims=3)
    with pytest.raises(ValueError, match="2-D coordinates"):
        model(x, coords)
    x, coords, _ = tiny_batch(m=4, n=12, c=3, j=1)
    with pytest.raises(ValueError, match="num_channels"):
        model(x, coords)


@pytest.mark.parametrize("model_cls", MODELS)
def test_decoder_reads_its_forecast_the_held_covariates_and_the_step_time_features(model_cls):
    """With covariates (C_in = 2 targets + 1 measured + 2 time features): the embedding
    reads the last observed frame first, then at each step j > 0 the forecast of step
    j - 1, the covariate held at its last value and the time features of step j - 1."""
    torch.manual_seed(0)
    model = model_cls(output_steps=3, input_channels=5, future_channels=2, **TINY)
    x, future = torch.randn(2, 4, 5, 3, 4), torch.randn(2, 3, 2, 3, 4)
    read = []
    model.embed.register_forward_hook(lambda _m, inputs, _out: read.append(inputs[0]))
    with torch.no_grad():
        out = model.forward_grid(x, future)
    assert out.shape == (2, 3, 2, 3, 4)
    decoded = read[1:]  # read[0]: the M input frames, embedded at once
    assert len(decoded) == 3 and torch.equal(decoded[0], x[:, -1])
    for j in (1, 2):
        assert torch.equal(decoded[j][:, :2], out[:, j - 1])
        assert torch.equal(decoded[j][:, 2:3], x[:, -1, 2:3])
        assert torch.equal(decoded[j][:, 3:], future[:, j - 1])
    with pytest.raises(ValueError, match="future"):
        model.forward_grid(x)


@pytest.mark.parametrize("model_cls", MODELS)
def test_covariates_through_the_point_interface(model_cls):
    """``x (B, M, N, C_in)`` and ``future (B, J, N, F)`` -> ``(B, J, N, C_out)``; the
    future is required exactly when the model has time features."""
    model = model_cls(output_steps=3, input_channels=6, future_channels=2, **TINY)
    x, coords, _ = tiny_batch(b=2, m=4, n=12, c=6, j=1)
    future = torch.randn(2, 3, 12, 2)
    with torch.no_grad():
        assert model(x, coords, future).shape == (2, 3, 12, 2)
    with pytest.raises(ValueError, match="future"):
        model(x, coords)
    with pytest.raises(ValueError, match="C_in=6"):
        model(x[..., :5], coords, future)
