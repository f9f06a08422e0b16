"""bf16 autocast on CPU against float32, and ``model.compile`` as a build option.

Stated tolerances: one DConv with given neighbours, relative to the output's scale, within
1e-2 forward (bf16 keeps 8 bits of mantissa: ~4e-3 per rounding) and 3e-2 for the weight
gradient. A whole seq2seq forecast is compared on its mean absolute difference relative to
its mean magnitude, within 0.15: bf16 rounding moves hidden coordinates by ~1e-3, which
reorders near-tied neighbours, and the recurrence carries each reordering forward; such a
flip is a discontinuity of the K-nearest rule, not an operator's error, so it is bounded,
not removed. The neighbour search itself always runs on float32 coordinates.
"""

from __future__ import annotations

import pytest
import torch
from conftest import compose_train

from cloudlstm.models import CloudSeq2Seq
from cloudlstm.nn import DConv, channel_neighbours
from cloudlstm.nn.knn import knn, knn_reference


def _bf16() -> torch.autocast:
    return torch.autocast("cpu", dtype=torch.bfloat16)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().float() - b).abs().max() / b.abs().max())


def test_dconv_under_autocast_matches_float32() -> None:
    torch.manual_seed(0)
    conv = DConv(8, 16, 9)
    cloud = torch.rand(4, 100, 8, 3)
    neighbours = channel_neighbours(cloud, 9, 1)
    reference = conv(cloud, neighbours)
    reference.square().sum().backward()
    grad32 = conv.weight.grad.clone()
    conv.zero_grad()
    with _bf16():
        out = conv(cloud, neighbours)
    assert out.dtype == torch.bfloat16
    out.float().square().sum().backward()
    assert _relative(out, reference) < 1e-2
    assert _relative(conv.weight.grad, grad32) < 3e-2


def test_neighbour_search_runs_on_float32_coordinates() -> None:
    """bf16 coordinates are searched after an exact cast to float32, never in bf16, where
    squared distances of close points would collapse into ties."""
    coords = torch.rand(6, 200, 2).bfloat16()
    expected = knn_reference(coords.float(), 9)
    assert torch.equal(knn(coords, 9), expected)
    assert torch.equal(knn(coords, 9, method="cells"), expected)
    cloud = torch.cat([torch.rand(6, 200, 1), coords.float()], -1)[:, :, None]  # (B, N, 1, 3)
    with _bf16():  # DConv's own search, inside autocast
        assert torch.equal(channel_neighbours(cloud.bfloat16(), 9, 1)[:, :, 0], expected)


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_seq2seq_trains_under_autocast(cell: str) -> None:
    torch.manual_seed(0)
    model = CloudSeq2Seq(num_channels=3, output_steps=4, k=6, cell=cell, hidden_channels=8)
    x, coords = torch.randn(2, 5, 40, 3), torch.rand(2, 40, 2)
    reference = model(x, coords).detach()
    with _bf16():
        out = model(x, coords)
        loss = out.float().square().mean()
    loss.backward()
    assert out.dtype == torch.bfloat16 and out.shape == reference.shape
    assert float((out.float() - reference).abs().mean() / reference.abs().mean()) < 0.15
    for name, param in model.named_parameters():
        assert param.grad is not None and bool(torch.isfinite(param.grad).all()), name


def _model_config(tmp_path, name: str, compile: str):
    """The composed train config of ``model=name`` with ``model.compile=compile``, its
    data keys filled as a datamodule would fill them."""
    cfg = compose_train(tmp_path, [f"model={name}", f"model.compile={compile}"])
    cfg.data_info.update(num_channels=2, output_steps=3, coord_features=2, num_points=12)
    cfg.data_info.update(input_steps=4, steps_per_day=24)
    return cfg


def test_compile_is_a_build_option_of_every_model(tmp_path) -> None:
    """``model.compile`` composes for any model, is taken out before the constructor sees it,
    and compiles in place: parameter names, so checkpoints, do not change."""
    from cloudlstm.models.build import build_model

    for name in ("cloudlstm", "convlstm", "persistence"):
        cfg = _model_config(tmp_path, name, "true")
        compiled = build_model(cfg.model)
        plain = build_model(cfg.model, compile=False)
        assert getattr(compiled, "_compiled_call_impl", None) is not None, name
        assert getattr(plain, "_compiled_call_impl", None) is None, name
        assert list(compiled.state_dict()) == list(plain.state_dict())


def test_compile_takes_a_mode_and_refuses_anything_else(tmp_path, monkeypatch) -> None:
    """``model.compile=reduce-overhead`` (CUDA graphs) reaches ``torch.compile`` as its mode;
    a typo is a user error that names the key and the choices, before anything is built."""
    from cloudlstm.errors import UserError
    from cloudlstm.models.build import COMPILE_MODES, build_model

    modes = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: modes.append(kw["mode"]))
    for value, expected in [
        ("true", None),
        ("default", None),
        ("reduce-overhead", "reduce-overhead"),
    ]:
        build_model(_model_config(tmp_path, "persistence", value).model)
        assert modes.pop() == expected
    built = []
    monkeypatch.setattr("hydra.utils.instantiate", lambda *a, **k: built.append(1))
    for typo in ("reduce_overhead", "yes", "1"):
        cfg = _model_config(tmp_path, "persistence", typo)
        with pytest.raises(UserError, match="model.compile=.* is not a boolean or a torch") as err:
            build_model(cfg.model)
        assert all(mode in str(err.value) for mode in COMPILE_MODES)
    assert not built and not modes


@pytest.mark.slow
def test_compiled_cloudlstm_equals_eager_on_cpu() -> None:
    """torch.compile of the dense work between the (excluded) searches and numba kernels."""
    torch.manual_seed(0)
    model = CloudSeq2Seq(num_channels=3, output_steps=4, k=6, hidden_channels=8)
    x, coords = torch.randn(2, 5, 40, 3), torch.rand(2, 40, 2)
    eager = model(x, coords)
    model.compile()
    torch.testing.assert_close(model(x, coords), eager, rtol=1e-5, atol=1e-5)
