"""STGCN baseline: the distance graph, the Chebyshev convolution and the forecaster."""

from __future__ import annotations

import pytest
import torch
from model_checks import check_forecaster
from torch import nn

from cloudlstm.models.stgcn import STGCN
from cloudlstm.nn.graph import ChebGraphConv, DistanceGraph, distance_weights, scaled_laplacian


def small(**kwargs) -> STGCN:
    args = {"num_channels": 2, "input_steps": 4, "output_steps": 3, "hidden_channels": 8}
    return STGCN(**{**args, **kwargs})


def test_learns_tiny_problem_with_short_input():
    # M=4 < 2 (kt - 1) * 2 + 1 = 9: exercises the causal left padding.
    torch.manual_seed(0)  # before the model is built: its weights must not depend on test order
    check_forecaster(small(), m=4, n=12, c=2, j=3)


@pytest.mark.parametrize("n", [1, 2, 7, 40])
def test_scaled_laplacian_spectrum_in_unit_interval(n):
    torch.manual_seed(n)
    coords = torch.rand(3, n, 2)
    lap = DistanceGraph()(coords)
    assert lap.shape == (3, n, n)
    assert torch.allclose(lap, lap.transpose(1, 2))
    eig = torch.linalg.eigvalsh(lap.double())
    assert eig.min() >= -1 - 1e-5 and eig.max() <= 1 + 1e-5
    assert torch.allclose(eig[:, -1], torch.ones(3, dtype=torch.float64), atol=1e-5)


def test_isolated_point_gives_finite_laplacian():
    coords = torch.tensor([[[0.0, 0.0], [0.05, 0.0], [0.0, 0.05], [1.0, 1.0]]])
    weights = distance_weights(coords, 0.1, 0.5)
    assert weights[0, 3].sum() == 0  # the far point has degree 0
    lap = scaled_laplacian(weights)
    assert torch.isfinite(lap).all()
    eig = torch.linalg.eigvalsh(lap.double())
    assert eig.min() >= -1 - 1e-6 and eig.max() <= 1 + 1e-6
    # A graph with no edges at all (sigma tiny) is also fine.
    assert torch.isfinite(scaled_laplacian(distance_weights(coords, 1e-4, 0.5))).all()


def test_weights_follow_gaussian_threshold():
    coords = torch.tensor([[[0.0], [0.5], [0.6], [2.0]]])
    w = distance_weights(coords, 1.0, 0.5)[0]
    assert torch.allclose(w[0, 1], torch.exp(torch.tensor(-0.25)))
    assert w[0, 3] == 0  # exp(-4) < epsilon: no edge
    assert (w.diagonal() == 0).all()
    assert torch.equal(w, w.T)


def test_chebyshev_order_one_is_a_per_point_linear_layer():
    torch.manual_seed(0)
    conv = ChebGraphConv(5, 3, ks=1)
    linear = nn.Linear(5, 3)
    linear.load_state_dict(conv.linear.state_dict())
    x = torch.randn(2, 4, 10, 5)
    lap = DistanceGraph()(torch.rand(2, 10, 2))
    assert torch.allclose(conv(x, lap), linear(x), atol=1e-6)


def test_chebyshev_terms_match_explicit_polynomials():
    torch.manual_seed(0)
    conv = ChebGraphConv(2, 3, ks=3)
    lap = DistanceGraph()(torch.rand(1, 9, 2))[0]
    x = torch.randn(1, 9, 2)
    t2 = 2 * lap @ lap - torch.eye(9)
    expected = conv.linear(torch.cat([x, lap @ x, t2 @ x], dim=-1))
    assert torch.allclose(conv(x, lap[None]), expected, atol=1e-5)


def test_permuting_points_permutes_output():
    torch.manual_seed(0)
    model = small().eval()
    x = torch.randn(2, 4, 15, 2)
    coords = torch.rand(2, 15, 2)
    perm = torch.randperm(15)
    with torch.no_grad():
        out = model(x, coords)
        out_perm = model(x[:, :, perm], coords[:, perm])
    assert torch.allclose(out[:, :, perm], out_perm, atol=1e-5)


def test_graph_cache_reuses_and_recomputes():
    graph = DistanceGraph()
    coords = torch.rand(15, 2).expand(3, 15, 2)
    first = graph(coords)
    assert first.shape == (1, 15, 15)  # shared points: one graph for the batch
    assert graph(coords.clone()) is first  # same bytes: cached
    moved = coords.clone()
    moved[:, 0] = 1 - moved[:, 0]
    second = graph(moved)
    assert second is not first and not torch.allclose(second, first)
    per_sample = graph(torch.rand(3, 15, 2))
    assert per_sample.shape == (3, 15, 15)  # different points per sample: one graph each


def test_per_sample_graphs_match_single_sample_runs():
    torch.manual_seed(0)
    model = small().eval()
    x = torch.randn(2, 4, 10, 2)
    coords = torch.rand(2, 10, 2)
    with torch.no_grad():
        joint = model(x, coords)
        alone = torch.cat([model(x[i : i + 1], coords[i : i + 1]) for i in range(2)])
    assert torch.allclose(joint, alone, atol=1e-5)


def test_long_horizon_output_shape():
    torch.manual_seed(0)
    model = small(input_steps=12, output_steps=72)
    out = model(torch.randn(2, 12, 10, 2), torch.rand(2, 10, 2))
    assert out.shape == (2, 72, 10, 2)


def test_paper_size_parameter_count():
    """Two ST-Conv blocks of 36 channels (kt = ks = 3), then the output layer; C=6, M=J=12."""
    c, m, j, h, kt, ks = 6, 12, 12, 36, 3, 3

    def linear(i: int, o: int) -> int:
        return i * o + o

    def gated(i: int, o: int, width: int) -> int:  # [P, Q] over `width` steps, residual
        return linear(width * i, 2 * o) + (linear(i, o) if i != o else 0)

    def block(i: int) -> int:  # temporal, Chebyshev (ks terms), temporal, layer norm
        return gated(i, h, kt) + linear(ks * h, h) + gated(h, h, kt) + 2 * h

    remaining = m - 2 * 2 * (kt - 1)  # steps left for the output layer's temporal conv
    output = gated(h, h, remaining) + 2 * h + linear(h, h) + linear(h, j * c)
    model = STGCN(num_channels=c, input_steps=m, output_steps=j)
    assert sum(p.numel() for p in model.parameters()) == block(c) + block(h) + output
    assert sum(p.numel() for p in model.parameters()) == 47_664
    assert model.pad == 0  # M=12 needs no padding with kt=3 and 2 blocks


def test_bad_input_errors_are_clear():
    torch.manual_seed(0)
    model = small()
    with pytest.raises(ValueError, match="input_steps"):
        model(torch.randn(1, 5, 10, 2), torch.rand(1, 10, 2))
    bad = torch.rand(1, 10, 2)
    bad[0, 3, 0] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        model(torch.randn(1, 4, 10, 2), bad)
    with pytest.raises(ValueError, match="epsilon"):
        small(epsilon=0.0)
    with pytest.raises(ValueError, match="model.kt"):
        small(kt=0)
