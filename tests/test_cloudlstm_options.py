"""CloudLSTM's options beyond the paper (model.neighbours / residual / forget_bias) and the
training losses (module.loss / loss_weights): what each changes, checked by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import compose_train

from cloudlstm.data.transforms import StandardScaler
from cloudlstm.engine.module import ForecastModule, masked_loss, real_unit_weights
from cloudlstm.models import CloudSeq2Seq
from cloudlstm.models import cloudlstm as cloudlstm_module

SMALL = dict(k=4, hidden_channels=6, num_layers=2)


def batch(b=2, m=5, n=20, c=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, m, n, c, generator=g), torch.rand(b, n, 2, generator=g)


def zero_head(model: CloudSeq2Seq) -> CloudSeq2Seq:
    torch.nn.init.zeros_(model.head.weight)
    torch.nn.init.zeros_(model.head.bias)
    return model


@pytest.mark.parametrize("attention", [False, True])
def test_residual_model_with_a_silent_head_is_persistence(attention):
    """The head forecasts changes: when it outputs nothing, every step repeats the last frame
    (the paper's model then forecasts zeros)."""
    torch.manual_seed(0)
    x, coords = batch()
    model = zero_head(CloudSeq2Seq(3, output_steps=4, attention=attention, residual=True, **SMALL))
    assert torch.equal(model(x, coords), x[:, -1:].expand(-1, 4, -1, -1))
    plain = zero_head(CloudSeq2Seq(3, output_steps=4, attention=attention, **SMALL))
    assert torch.equal(plain(x, coords), torch.zeros(2, 4, 20, 3))


def test_residual_first_step_is_the_last_frame_plus_the_plain_forecast():
    """Both decoders start from the last frame, so with the same weights the residual
    model's first step is that frame plus the paper model's first step."""
    torch.manual_seed(0)
    x, coords = batch()
    plain = CloudSeq2Seq(3, output_steps=3, **SMALL)
    residual = CloudSeq2Seq(3, output_steps=3, residual=True, **SMALL)
    residual.load_state_dict(plain.state_dict())
    out, base = residual(x, coords), plain(x, coords)
    torch.testing.assert_close(out[:, 0], x[:, -1] + base[:, 0])
    assert not torch.allclose(out[:, 1:], x[:, -1:] + base[:, 1:])  # then they part


def test_static_neighbours_search_only_the_points(monkeypatch):
    """With neighbours=static no hidden cloud is searched: the one search per sample, at the
    points, gives every DConv its neighbours."""

    def no_search(*args, **kwargs):
        raise AssertionError("a hidden cloud was searched")

    torch.manual_seed(0)
    x, coords = batch()
    model = CloudSeq2Seq(3, output_steps=3, attention=True, neighbours="static", **SMALL)
    out = model(x, coords)
    monkeypatch.setattr(cloudlstm_module, "search", no_search)
    torch.testing.assert_close(model(x, coords), out)
    dynamic = CloudSeq2Seq(3, output_steps=3, attention=True, **SMALL)
    with pytest.raises(AssertionError, match="searched"):
        dynamic(x, coords)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_static_neighbours_keep_permutation_equivariance(checkpointing):
    torch.manual_seed(0)
    x, coords = batch()
    model = CloudSeq2Seq(
        3, output_steps=3, neighbours="static", checkpointing=checkpointing, **SMALL
    )
    perm = torch.randperm(20)
    out = model(x, coords)
    torch.testing.assert_close(model(x[:, :, perm], coords[:, perm]), out[:, :, perm])
    out.square().mean().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_static_neighbours_ignore_the_hidden_coordinates():
    """Static: the hidden states' coordinate features still enter the kernels, but do not
    choose neighbours, so the forecast differs from the dynamic model's with the same
    weights."""
    torch.manual_seed(0)
    x, coords = batch()
    dynamic = CloudSeq2Seq(3, output_steps=3, **SMALL)
    static = CloudSeq2Seq(3, output_steps=3, neighbours="static", **SMALL)
    static.load_state_dict(dynamic.state_dict())
    assert not torch.allclose(static(x, coords), dynamic(x, coords))


def test_forget_bias_shifts_only_the_forget_gates():
    torch.manual_seed(0)
    plain = CloudSeq2Seq(3, output_steps=2, **SMALL)
    torch.manual_seed(0)
    biased = CloudSeq2Seq(3, output_steps=2, forget_bias=1.0, **SMALL)
    for a, b in zip(
        (*plain.encoder, *plain.decoder), (*biased.encoder, *biased.decoder), strict=True
    ):
        i, f, o, g = (b.gates.bias - a.gates.bias).view(4, 6, -1)
        torch.testing.assert_close(f, torch.ones_like(f))
        assert not (i.any() or o.any() or g.any())


def test_bad_options_are_clear_errors():
    with pytest.raises(ValueError, match="model.neighbours='fixed'"):
        CloudSeq2Seq(3, output_steps=2, neighbours="fixed")
    with pytest.raises(ValueError, match="needs model.cell=lstm"):
        CloudSeq2Seq(3, output_steps=2, cell="gru", forget_bias=1.0)
    for key, value in (("loss", "huber"), ("loss_weights", "std")):
        with pytest.raises(ValueError, match=f"module.{key}='{value}'"):
            ForecastModule(torch.nn.Linear(1, 1), torch.optim.Adam, **{key: value})


def test_mae_loss_by_hand():
    pred = torch.tensor([[1.0, 2.0], [3.0, 5.0]])
    target = torch.tensor([[0.0, 4.0], [3.0, 1.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    assert masked_loss(pred, target, mask, "mae").item() == pytest.approx((1 + 2 + 0) / 3)
    assert masked_loss(pred, target, mask, "mse").item() == pytest.approx((1 + 4 + 0) / 3)
    weights = torch.tensor([2.0, 0.5])  # channels are the last axis
    assert masked_loss(pred, target, mask, "mae", weights).item() == pytest.approx(
        (2 * 1 + 0.5 * 2 + 2 * 0) / 3
    )


@pytest.mark.parametrize("kind", ["mae", "mse"])
def test_real_unit_weights_make_the_loss_the_real_unit_error(kind):
    """On normalised values, the weighted loss times the mean weight is the loss on real
    values, the units of the reported metrics."""
    rng = np.random.default_rng(0)
    real = rng.normal([10.0, 1000.0, 0.1], [5.0, 400.0, 0.05], size=(64, 3))
    scaler = StandardScaler().fit(real)
    pred_real = real + rng.normal(0, [1.0, 100.0, 0.01], size=real.shape)
    pred, target = (torch.as_tensor(scaler.transform(v)).float() for v in (pred_real, real))
    mask = torch.ones_like(target)
    weights = real_unit_weights(scaler.std, kind)
    power = 2 if kind == "mse" else 1
    scale = float(np.mean(np.asarray(scaler.std).reshape(-1) ** power))
    on_real = masked_loss(torch.as_tensor(pred_real), torch.as_tensor(real), mask, kind)
    assert masked_loss(pred, target, mask, kind, weights).item() * scale == pytest.approx(
        on_real.item(), rel=1e-5
    )


@pytest.mark.parametrize(
    ("preset", "residual"), [("cloudlstm_mae", False), ("cloudlstm_residual", True)]
)
def test_presets_are_the_paper_model_with_their_options(tmp_path, preset, residual):
    """The ablation's presets: CloudLSTM at the paper's size trained on the real-unit MAE
    (a module option, so the presets are global, and they win over the recipe's loss), with
    or without residual decoding; other keys still override."""
    cfg = compose_train(tmp_path, [f"model={preset}", "model.k=3", "recipe=paper"])
    paper = compose_train(tmp_path, ["model=cloudlstm", "recipe=paper"])
    assert cfg.model.residual is residual and not paper.model.residual
    assert (cfg.module.loss, cfg.module.loss_weights) == ("mae", "real_units")
    assert (paper.module.loss, paper.module.loss_weights) == ("mse", "equal")
    for key in ("_target_", "hidden_channels", "num_layers", "cell", "neighbours"):
        assert cfg.model[key] == paper.model[key]
    assert cfg.model.k == 3 and cfg.hydra.runtime.choices.model == preset
