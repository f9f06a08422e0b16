"""X-Conv and the PointCNN / PointLSTM baselines built on it."""

from __future__ import annotations

import pytest
import torch
from conftest import compose_train
from model_checks import check_forecaster, tiny_batch
from omegaconf import open_dict

from cloudlstm.data.spec import DataSpec
from cloudlstm.models.build import build_model
from cloudlstm.models.pointcnn import PointCNN
from cloudlstm.models.pointlstm import PointLSTM
from cloudlstm.nn import NeighbourCountError, knn
from cloudlstm.nn.xconv import XConv, dilated_neighbours


def tiny_pointcnn(**kwargs) -> PointCNN:
    sizes = dict(num_channels=2, input_steps=4, output_steps=3, hidden_channels=8, num_layers=3)
    return PointCNN(**(sizes | dict(k=3) | kwargs))


def tiny_pointlstm(**kwargs) -> PointLSTM:
    sizes = dict(num_channels=2, output_steps=3, hidden_channels=8, num_layers=2, k=3)
    return PointLSTM(**(sizes | kwargs))


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("make", [tiny_pointcnn, tiny_pointlstm])
def test_forecaster_shape_and_learns(make):
    torch.manual_seed(0)
    check_forecaster(make(), m=4, n=12, c=2, j=3)


@pytest.mark.parametrize("make", [tiny_pointcnn, tiny_pointlstm])
def test_permuting_points_permutes_the_forecast(make):
    torch.manual_seed(0)
    model = make(dilation=2).eval()
    x, coords, _ = tiny_batch(m=4, n=12, c=2)
    perm = torch.randperm(12)
    with torch.no_grad():
        out = model(x, coords)
        permuted = model(x[:, :, perm], coords[:, perm])
    torch.testing.assert_close(permuted, out[:, :, perm], atol=1e-5, rtol=1e-5)


def test_xconv_is_invariant_to_scaling_and_shifting_coordinates():
    torch.manual_seed(0)
    conv = XConv(3, 5, k=4)
    features, coords = torch.randn(2, 10, 3), torch.rand(2, 10, 2)
    with torch.no_grad():
        moved = conv(features, 0.3 * coords + torch.tensor([0.5, -0.2]))
        torch.testing.assert_close(moved, conv(features, coords), atol=1e-5, rtol=1e-5)


def test_xconv_with_k1_is_one_affine_map_applied_per_point():
    torch.manual_seed(0)
    conv = XConv(3, 4, k=1)
    coords = torch.rand(1, 6, 2)
    a, b = torch.randn(1, 6, 3), torch.randn(1, 6, 3)
    with torch.no_grad():
        out = conv(a, coords)
        # Other points' features and positions do not matter...
        others = torch.cat([a[:, :1], torch.randn(1, 5, 3)], dim=1)
        torch.testing.assert_close(conv(others, torch.rand(1, 6, 2))[:, 0], out[:, 0])
        # ...the map is the same at every point (equal features -> equal outputs)...
        same = conv(a[:, :1].expand(1, 6, 3), coords)
        torch.testing.assert_close(same, same[:, :1].expand(1, 6, 4))
        # ...and it is affine in the point's own features, and not constant.
        zero = conv(torch.zeros_like(a), coords)
        torch.testing.assert_close(conv(a + b, coords), out + conv(b, coords) - zero)
        assert (out - zero).abs().min() > 1e-4


def test_dilation_2_takes_the_point_then_its_2nd_4th_nearest():
    coords = torch.rand(2, 15, 2, generator=torch.Generator().manual_seed(1))
    index = dilated_neighbours(coords, k=3, dilation=2)
    torch.testing.assert_close(index, knn(coords, 6)[..., [0, 2, 4]])

    # Behaviour: point 0's output ignores its 1st and 3rd nearest, not its 2nd.
    torch.manual_seed(0)
    conv = XConv(2, 3, k=3, dilation=2)
    features = torch.randn(2, 15, 2)
    ranked = knn(coords, 6)[0, 0]
    with torch.no_grad():
        out = conv(features, coords)[0, 0]
        for rank, used in [(1, False), (3, False), (2, True)]:
            changed = features.clone()
            changed[0, ranked[rank]] += 1.0
            moved = (conv(changed, coords)[0, 0] - out).abs().max().item()
            assert (moved > 1e-4) == used, (rank, moved)


@pytest.mark.parametrize("make", [tiny_pointcnn, tiny_pointlstm])
def test_too_many_neighbours_is_a_clear_error(make):
    x, coords, _ = tiny_batch(m=4, n=5, c=2)
    with pytest.raises(NeighbourCountError, match=r"model\.k <= 5"):
        make(k=6)(x, coords)
    with pytest.raises(NeighbourCountError, match=r"k \* dilation <= 5"):
        make(k=3, dilation=2)(x, coords)


def test_wrong_input_sizes_are_clear_errors():
    x, coords, _ = tiny_batch(m=4, n=12, c=2)
    with pytest.raises(ValueError, match=r"model\.input_steps"):
        tiny_pointcnn()(x[:, :3], coords)
    with pytest.raises(ValueError, match=r"model\.num_channels"):
        tiny_pointlstm()(x[..., :1], coords)
    with pytest.raises(ValueError, match=r"model\.coord_features"):
        tiny_pointlstm()(x, torch.rand(4, 12, 3))
    with pytest.raises(ValueError, match=r"C_in=3"):
        XConv(3, 4, k=2)(torch.randn(1, 5, 2), torch.rand(1, 5, 2))


@pytest.mark.parametrize("make", [tiny_pointcnn, tiny_pointlstm])
def test_72_step_horizon(make):
    x, coords, _ = tiny_batch(m=4, n=12, c=2)
    with torch.no_grad():
        out = make(output_steps=72)(x, coords)
    assert out.shape == (4, 72, 12, 2) and torch.isfinite(out).all()


def xconv_params(c_in: int, c_out: int, k: int = 9, dims: int = 2) -> int:
    """One X-Conv with PointCNN's defaults C_delta = C_out / 4, depth multiplier
    ceil(C_out / C_in): the lifting MLP, X (a dense layer, then two depthwise K x K layers)
    and the separable convolution (depthwise over K, pointwise to C_out)."""
    lifted, mult = max(1, c_out // 4), -(-c_out // c_in)
    lift = (dims * lifted + lifted) + (lifted * lifted + lifted)
    x_matrix = (k * dims * k * k + k * k) + 2 * (k * k * k + k * k)
    separable = k * (lifted + c_in) * mult + ((lifted + c_in) * mult * c_out + c_out)
    return lift + x_matrix + separable


def test_parameter_counts_at_paper_size():
    """N=274 stations, C=6 indicators, M=J=12 (air quality); counts do not depend on N.
    PointCNN: 8 X-Convs of 36 channels on the 72 = M*C input features, then one to J*C;
    PointLSTM: an embedding X-Conv C -> 36, 2 + 2 cells with one X-Conv [x; h] -> 4 gates,
    and an output X-Conv 36 -> C."""
    c, m, j, h = 6, 12, 12, 36
    pointcnn = xconv_params(m * c, h) + 7 * xconv_params(h, h) + xconv_params(h, j * c)
    pointlstm = xconv_params(c, h) + 4 * xconv_params(2 * h, 4 * h) + xconv_params(h, c)
    counts = {"pointcnn": n_params(PointCNN(c, m, j)), "pointlstm": n_params(PointLSTM(c, j))}
    assert counts == {"pointcnn": pointcnn, "pointlstm": pointlstm}
    assert counts == {"pointcnn": 56_691, "pointlstm": 162_251}


@pytest.mark.parametrize("name, cls", [("pointcnn", PointCNN), ("pointlstm", PointLSTM)])
def test_hydra_config_builds_the_model_with_paper_defaults(tmp_path, name, cls):
    cfg = compose_train(tmp_path, [f"model={name}"])
    spec = DataSpec.sized(
        num_channels=2, num_points=12, input_steps=4, output_steps=3, coord_features=2
    )
    assert (cfg.model.k, cfg.model.dilation, cfg.model.hidden_channels) == (9, 1, 36)
    assert cfg.model.num_layers == {"pointcnn": 8, "pointlstm": 2}[name]
    with open_dict(cfg):
        cfg.model.hidden_channels, cfg.model.k = 4, 3
    model = build_model(cfg.model, spec)
    assert isinstance(model, cls)
    x, coords, _ = tiny_batch(m=4, n=12, c=2, j=3)
    assert model(x, coords).shape == (4, 3, 12, 2)
