"""DConv's weighting through oneDNN (nn/onednn_matmul.py): the same product and gradients
as float64, used where it should be and nowhere else."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from cloudlstm.nn import DConv, onednn_matmul

pytestmark = pytest.mark.skipif(
    not onednn_matmul.ENABLED,
    reason="oneDNN's linear op is used on x86-64 torch builds with oneDNN only "
    "(or CLOUDLSTM_ONEDNN=0 is set)",
)


def grads_against_float64(bias: bool, rows: torch.Tensor, weight: torch.Tensor) -> None:
    """addmm's value and its three gradients equal float64's to float32 rounding."""
    b = torch.randn(weight.shape[1], requires_grad=True) if bias else None
    rows.requires_grad_(True)
    weight.requires_grad_(True)
    out = onednn_matmul.addmm(b, rows, weight)
    assert out.grad_fn is not None and "OneDNN" in type(out.grad_fn).__name__
    grad = torch.randn_like(out)
    inputs = [t for t in (b, rows, weight) if t is not None]
    got = torch.autograd.grad(out, inputs, grad)

    r64, w64, g64 = rows.detach().double(), weight.detach().double(), grad.double()
    want_out = r64 @ w64 + (b.detach().double() if bias else 0)
    want = ([g64.sum(0)] if bias else []) + [g64 @ w64.T, r64.T @ g64]
    torch.testing.assert_close(out.double(), want_out, rtol=1e-5, atol=1e-4)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == torch.float32
        torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("bias", [True, False])
def test_value_and_gradients_equal_float64(bias):
    torch.manual_seed(0)
    grads_against_float64(bias, torch.randn(517, 162), torch.randn(162, 108) / 13)


def test_strided_rows_and_weight():
    """Views as a caller may pass them: rows and weight transposed, not contiguous."""
    torch.manual_seed(1)
    rows = torch.randn(40, 300).T
    weight = torch.randn(18, 40).T
    assert not rows.is_contiguous() and not weight.is_contiguous()
    grads_against_float64(True, rows, weight)


def test_dconv_runs_its_weighting_through_it_and_matches_torch_addmm(monkeypatch):
    torch.manual_seed(2)
    layer = DConv(4, 6, k=5, coord_activation=False)
    cloud = torch.rand(3, 40, 4, 3, requires_grad=True)
    out = layer(cloud)
    # The weighting's node sits right under the output's view.
    assert "OneDNN" in out.grad_fn.next_functions[0][0].name()
    out.square().sum().backward()
    grads = [cloud.grad, layer.weight.grad, layer.bias.grad]

    monkeypatch.setattr(onednn_matmul, "ENABLED", False)
    cloud.grad = layer.weight.grad = layer.bias.grad = None
    reference = layer(cloud)
    assert "Addmm" in reference.grad_fn.next_functions[0][0].name()
    reference.square().sum().backward()
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, [cloud.grad, layer.weight.grad, layer.bias.grad], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", ["float64", "bf16 autocast", "FLOP counting"])
def test_left_to_torch_where_onednn_is_not_float32(case):
    rows, weight, bias = torch.randn(30, 20), torch.randn(20, 8), torch.randn(8)
    if case == "FLOP counting":  # the benchmarks' FLOP counts see the product
        with FlopCounterMode(display=False) as counter:
            out = onednn_matmul.addmm(bias, rows, weight.requires_grad_())
        assert counter.get_total_flops() == 2 * 30 * 20 * 8
    elif case == "float64":
        out = onednn_matmul.addmm(bias.double(), rows.double(), weight.double().requires_grad_())
        assert out.dtype == torch.float64
    else:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = onednn_matmul.addmm(bias, rows, weight.requires_grad_())
        assert out.dtype == torch.bfloat16  # autocast's addmm, not a float32 product
    assert "Addmm" in out.grad_fn.name()


@pytest.mark.parametrize("switch", ["0", "1"])
def test_environment_switch(switch):
    """CLOUDLSTM_ONEDNN=0 leaves every product to torch.addmm (read at import)."""
    code = (
        "import torch\n"
        "from cloudlstm.nn import onednn_matmul as m\n"
        "out = m.addmm(None, torch.randn(5, 4), torch.randn(4, 3, requires_grad=True))\n"
        "print(m.ENABLED, out.grad_fn.name())\n"
    )
    env = {**os.environ, "CLOUDLSTM_ONEDNN": switch}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    enabled, node = result.stdout.split()
    assert enabled == str(switch == "1")
    assert ("OneDNN" in node) == (switch == "1")
