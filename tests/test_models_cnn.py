"""Grid CNN baselines (CNN, 3D-CNN, DefCNN) and the deformable convolution."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from model_checks import check_forecaster
from omegaconf import OmegaConf
from torch import nn

from cloudlstm.cli.train import train
from cloudlstm.data.spec import DataSpec
from cloudlstm.models.build import build_model
from cloudlstm.models.cnn import CNN2D
from cloudlstm.models.cnn3d import CNN3D
from cloudlstm.models.defcnn import DefCNN
from cloudlstm.nn.deform_conv import DeformConv2d
from tests.conftest import ROOT, TINY, compose_train

MODELS = {"cnn": CNN2D, "cnn3d": CNN3D, "defcnn": DefCNN}
TINY_SIZE = {"hidden_channels": 8, "num_layers": 3}


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("cls", MODELS.values(), ids=MODELS.keys())
def test_tiny_model_has_the_interface_and_learns(cls):
    torch.manual_seed(0)
    check_forecaster(cls(num_channels=2, input_steps=4, output_steps=3, **TINY_SIZE))


@pytest.mark.parametrize("cls", MODELS.values(), ids=MODELS.keys())
def test_long_horizon_and_wrong_window_size(cls):
    model = cls(num_channels=2, input_steps=4, output_steps=72, **TINY_SIZE)
    x, coords = torch.randn(2, 4, 10, 2), torch.rand(2, 10, 2)
    assert model(x, coords).shape == (2, 72, 10, 2)
    with pytest.raises(ValueError, match="model.input_steps"):
        model(torch.randn(2, 5, 10, 2), coords)


def test_parameter_counts_at_paper_size():
    """N=274 (17x17 grid), C=6, M=J=12, eleven layers of 108 channels."""
    c, m, j, h = 6, 12, 12, 108
    bn = 2 * h
    cnn = (m * c * h * 9 + bn) + 9 * (h * h * 9 + bn) + (h * j * c * 9 + j * c)
    offsets = (m * c * 18 * 9 + 18) + 10 * (h * 18 * 9 + 18)  # 2*3*3 offsets per layer
    cnn3d = (c * h * 27 + bn) + 9 * (h * h * 27 + bn) + (h * j * c * m * 9 + j * c)
    counts = {name: num_params(cls(c, m, j)) for name, cls in MODELS.items()}
    assert counts == {"cnn": cnn, "cnn3d": cnn3d, "defcnn": cnn + offsets}
    assert counts == {"cnn": 1_086_984, "cnn3d": 3_693_888, "defcnn": 1_273_806}


def test_defcnn_starts_as_the_cnn_with_the_same_weights():
    torch.manual_seed(0)
    deform = DefCNN(num_channels=2, input_steps=3, output_steps=2, **TINY_SIZE).eval()
    plain = CNN2D(num_channels=2, input_steps=3, output_steps=2, **TINY_SIZE).eval()
    shared = {k: v for k, v in deform.state_dict().items() if ".offset." not in k}
    plain.load_state_dict(shared)
    x, coords = torch.randn(2, 3, 11, 2), torch.rand(2, 11, 2)
    with torch.no_grad():
        torch.testing.assert_close(deform(x, coords), plain(x, coords), atol=1e-5, rtol=0)


@pytest.mark.parametrize("cls", MODELS.values(), ids=MODELS.keys())
def test_covariates_are_input_planes_and_the_future_is_not_read(cls):
    """C_in = 2 targets + 2 covariates + 2 time features in, C_out = 2 out; ``future`` is
    required (F > 0) but does not change the forecast."""
    torch.manual_seed(0)
    kw = dict(num_channels=2, input_steps=4, output_steps=3, input_channels=6, **TINY_SIZE)
    model = cls(future_channels=2, **kw).eval()
    x, coords = torch.randn(2, 4, 10, 6), torch.rand(2, 10, 2)
    with torch.no_grad():
        out = model(x, coords, torch.randn(2, 3, 10, 2))
        assert out.shape == (2, 3, 10, 2)
        assert torch.equal(model(x, coords, torch.randn(2, 3, 10, 2)), out)
        x[..., 2:] = 0  # the covariates are read
        assert not torch.equal(model(x, coords, torch.randn(2, 3, 10, 2)), out)
    with pytest.raises(ValueError, match="future"):
        model(x, coords)


def test_cnn3d_forecast_does_not_look_at_other_samples_in_eval():
    model = CNN3D(num_channels=2, input_steps=4, output_steps=3, **TINY_SIZE).eval()
    x, coords = torch.randn(3, 4, 9, 2), torch.rand(9, 2).expand(3, 9, 2)
    with torch.no_grad():
        whole = model(x, coords)
        single = model(x[1:2], coords[1:2])
    torch.testing.assert_close(whole[1:2], single)


class FixedOffsets(nn.Module):
    """Stands in for the offsets conv: returns the same offsets for any input."""

    def __init__(self, offsets: torch.Tensor) -> None:
        super().__init__()
        self.offsets = offsets

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.offsets.expand(x.shape[0], -1, -1, -1)


def deform_conv_loop(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, offsets: torch.Tensor, pad: int
) -> torch.Tensor:
    """Per output pixel, per kernel tap: bilinear sample (0 outside), multiply, add."""

    def pixel(img: torch.Tensor, y: int, x_: int) -> torch.Tensor:
        inside = 0 <= y < img.shape[1] and 0 <= x_ < img.shape[2]
        return img[:, y, x_] if inside else torch.zeros(img.shape[0])

    b, _, height, width = x.shape
    out_ch, _, k, _ = weight.shape
    ho, wo = offsets.shape[-2:]
    out = torch.zeros(b, out_ch, ho, wo)
    for n in range(b):
        for i in range(ho):
            for j in range(wo):
                acc = bias.clone()
                for t in range(k * k):
                    dy, dx = offsets[0, 2 * t, i, j].item(), offsets[0, 2 * t + 1, i, j].item()
                    py, px = i - pad + t // k + dy, j - pad + t % k + dx
                    y0, x0 = int(torch.floor(torch.tensor(py))), int(torch.floor(torch.tensor(px)))
                    fy, fx = py - y0, px - x0
                    sample = (
                        (1 - fy) * (1 - fx) * pixel(x[n], y0, x0)
                        + (1 - fy) * fx * pixel(x[n], y0, x0 + 1)
                        + fy * (1 - fx) * pixel(x[n], y0 + 1, x0)
                        + fy * fx * pixel(x[n], y0 + 1, x0 + 1)
                    )
                    acc = acc + weight[:, :, t // k, t % k] @ sample
                out[n, :, i, j] = acc
    return out


@pytest.mark.parametrize("padding", [0, 1])
def test_deform_conv_at_zero_offsets_is_conv2d(padding):
    torch.manual_seed(0)
    deform = DeformConv2d(3, 5, kernel_size=3, padding=padding)
    conv = nn.Conv2d(3, 5, 3, padding=padding)
    conv.load_state_dict({"weight": deform.weight, "bias": deform.bias})
    x = torch.randn(2, 3, 6, 7)
    with torch.no_grad():
        torch.testing.assert_close(deform(x), conv(x), atol=1e-5, rtol=0)


def test_deform_conv_matches_a_direct_loop_at_fractional_offsets():
    torch.manual_seed(1)
    deform = DeformConv2d(2, 3, kernel_size=3, padding=1)
    offsets = torch.rand(1, 18, 4, 5) * 4 - 2  # reaching past the border, too
    deform.offset = FixedOffsets(offsets)
    x = torch.randn(2, 2, 4, 5)
    with torch.no_grad():
        expected = deform_conv_loop(x, deform.weight, deform.bias, offsets, pad=1)
        torch.testing.assert_close(deform(x), expected, atol=1e-5, rtol=0)


def test_gradients_reach_the_offsets_conv():
    torch.manual_seed(2)
    deform = DeformConv2d(2, 3)
    deform(torch.randn(2, 2, 5, 5)).pow(2).sum().backward()
    assert deform.offset.weight.grad.abs().sum() > 0
    assert deform.offset.bias.grad.abs().sum() > 0


def test_deform_conv_refuses_too_small_input():
    with pytest.raises(ValueError, match="too small"):
        DeformConv2d(1, 1, kernel_size=3, padding=0)(torch.randn(1, 1, 2, 2))


@pytest.mark.parametrize("name", MODELS)
def test_configs_hold_paper_defaults_and_data_sizes(name):
    cfg = OmegaConf.create(
        {
            "model": OmegaConf.load(ROOT / "conf" / "model" / f"{name}.yaml"),
            "paths": {"data_dir": "/data"},
        }
    )  # fmt: skip
    assert cfg.model.hidden_channels == 108 and cfg.model.num_layers == 11
    assert cfg.model.grid_cache_dir == "/data/grid_mappings"
    model = build_model(cfg.model, DataSpec.sized(274, 6, 12, 12))
    assert isinstance(model, MODELS[name]) and model.output_steps == 12


def test_cnn_trains_end_to_end_and_caches_its_grid(tmp_path):
    overrides = [o for o in TINY if not o.startswith(("model.", "~callbacks"))]
    cfg = compose_train(
        tmp_path,
        [*overrides, "model=cnn", "model.hidden_channels=4", "model.num_layers=2",
         "trainer.max_epochs=1", "logger=none", "callbacks=none"],
    )  # fmt: skip
    results = train(cfg)
    assert results["test"]["overall"]["mae"]["mean"] > 0
    assert len(list(Path(cfg.paths.data_dir, "grid_mappings").glob("hungarian_*.npz"))) == 1
