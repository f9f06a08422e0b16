"""The graph baselines DCRNN, Graph WaveNet, AGCRN and STAEformer.

Each one's defining equations on a tiny graph against a hand computation (the two random
walks and K diffusion steps; the gated TCN's receptive field and the adaptive adjacency's
softmax; the node-adaptive weights; the token widths and the attention axes); a toy task
where space matters, which each learns far better than a per-point model; what the
transductive ones refuse (other points, moving points) and what the others take; the
parameter counts at METR-LA's size against the reference configurations; and a short
training of each through ``train.py``'s code path on the default data and on Beijing.
The zoo's tests over every ``conf/model/*.yaml`` (``test_anchor_heads.py``,
``test_compile.py``) cover them too.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import ROOT, TINY, compose_train
from model_checks import check_forecaster

from cloudlstm.cli.train import train
from cloudlstm.data.spec import DataSpec
from cloudlstm.errors import UserError
from cloudlstm.models.agcrn import AGCRN, NodeAdaptiveGraphConv
from cloudlstm.models.base import ForecastModel
from cloudlstm.models.build import build_model, count_parameters
from cloudlstm.models.dcrnn import DCRNN
from cloudlstm.models.graph_wavenet import GraphWaveNet
from cloudlstm.models.linear import TimeLinear
from cloudlstm.models.staeformer import STAEformer
from cloudlstm.models.stid import STID
from cloudlstm.nn.graph import (
    DiffusionConv,
    TransitionGraph,
    adaptive_adjacency,
    transition_matrices,
)

NAMES = ["dcrnn", "graph_wavenet", "agcrn", "staeformer"]
# Each model at a few units: the equations and the toy task, in seconds.
SMALL: dict[str, dict] = {
    "dcrnn": {"hidden_channels": 8, "num_layers": 1},
    "graph_wavenet": {
        "hidden_channels": 8,
        "skip_channels": 16,
        "end_channels": 16,
        "blocks": 2,
        "node_dim": 4,
        "dropout": 0.0,
    },
    "agcrn": {"hidden_channels": 8, "num_layers": 1, "node_dim": 4},
    "staeformer": {
        "embed_dim": 8,
        "time_dim": 4,
        "adaptive_dim": 8,
        "feed_forward_dim": 16,
        "num_heads": 2,
        "num_layers": 1,
        "dropout": 0.0,
    },
    "stid": {"embed_dim": 8, "node_dim": 4, "num_layers": 1},
}
BEIJING = ROOT.parent / "shared" / "data" / "beijing_multisite"
STAEFORMER = f"{STAEformer.__module__}.STAEformer"


def small(name: str, spec: DataSpec, **keys) -> ForecastModel:
    """``model=name`` at :data:`SMALL` widths, built for ``spec`` as every run builds it."""
    torch.manual_seed(0)
    cls = {
        "dcrnn": DCRNN,
        "graph_wavenet": GraphWaveNet,
        "agcrn": AGCRN,
        "staeformer": STAEformer,
        "stid": STID,
    }
    target = f"{cls[name].__module__}.{cls[name].__name__}"
    return build_model({"_target_": target, **SMALL[name], **keys}, spec)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One torch thread: these tiny models are slower on two busy cores than on one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------- DCRNN: diffusion
# A directed graph on 3 points, W_ij the edge from i to j: out-degrees 2, 2, 1 and
# in-degrees 1, 1, 3.
W = torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 2.0], [1.0, 0.0, 0.0]])
FORWARD = torch.tensor([[0.0, 0.5, 0.5], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])  # D_O^-1 W
BACKWARD = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [1 / 3, 2 / 3, 0.0]])  # D_I^-1 W^T


def test_the_two_random_walks_of_a_directed_graph():
    walks = transition_matrices(W)
    torch.testing.assert_close(walks[0], FORWARD)
    torch.testing.assert_close(walks[1], BACKWARD)
    isolated = transition_matrices(torch.zeros(3, 3))  # no edge at all: zero rows, no NaN
    assert torch.equal(isolated, torch.zeros(2, 3, 3))


def test_diffusion_convolution_sums_k_steps_of_each_walk():
    """With an identity linear layer the output channels are the terms themselves:
    ``x, P_f x, P_f^2 x, P_b x, P_b^2 x`` (K = 2), computed by hand for x = (1, 2, 3)."""
    conv = DiffusionConv(1, 5, supports=2, steps=2)
    with torch.no_grad():
        conv.linear.weight.copy_(torch.eye(5))
        conv.linear.bias.zero_()
    x = torch.tensor([[[1.0], [2.0], [3.0]]])  # (B, N, C)
    walks = transition_matrices(W)[None]  # (1, 2, N, N)
    out = conv(x, [walks[:, 0], walks[:, 1]])[0]
    expected = torch.tensor(
        [
            [1.0, 2.0, 3.0],  # x
            [2.5, 3.0, 1.0],  # P_f x: the mean of each point's out-neighbours, by weight
            [2.0, 1.0, 2.5],  # P_f (P_f x)
            [3.0, 1.0, 5 / 3],  # P_b x: its in-neighbours
            [5 / 3, 3.0, 5 / 3],  # P_b (P_b x)
        ]
    ).T
    torch.testing.assert_close(out, expected)
    with pytest.raises(ValueError, match="expected 2 supports"):
        conv(x, [walks[:, 0]])


def test_diffusion_over_time_steps_equals_each_step_diffused_alone():
    """x with a middle (time) dimension: each time step is diffused as a (B, N, C) input
    would be, for one graph for the batch (N, N) or (1, N, N), and one per sample (B, N, N);
    gradients reach every input and support."""
    g = torch.Generator().manual_seed(0)
    conv = DiffusionConv(3, 4, supports=3, steps=2)
    x = torch.randn(2, 5, 6, 3, generator=g, requires_grad=True)  # (B, T, N, C)
    shared = torch.rand(6, 6, generator=g).requires_grad_()
    single = torch.rand(1, 6, 6, generator=g)
    per_sample = torch.rand(2, 6, 6, generator=g).requires_grad_()
    supports = [shared, single, per_sample]
    out = conv(x, supports)
    assert out.shape == (2, 5, 6, 4)
    for t in range(5):
        torch.testing.assert_close(out[:, t], conv(x[:, t], supports), rtol=1e-5, atol=1e-6)
    out.square().sum().backward()
    assert all(v.grad is not None and v.grad.abs().sum() > 0 for v in (x, shared, per_sample))


def test_dcrnn_kernel_keeps_self_loops_and_drops_weights_below_epsilon():
    """Points at 0, 0.5 and 2 with sigma = 1: ``exp(-0.25)`` kept, ``exp(-2.25) = 0.105``
    kept at epsilon 0.1, ``exp(-4)`` dropped; each point weighs itself 1."""
    coords = torch.tensor([[[0.0], [0.5], [2.0]]])
    walks = TransitionGraph(sigma=1.0, epsilon=0.1)(coords)
    a, b = math.exp(-0.25), math.exp(-2.25)
    weights = torch.tensor([[1.0, a, 0.0], [a, 1.0, b], [0.0, b, 1.0]])
    expected = weights / weights.sum(dim=1, keepdim=True)
    assert walks.shape == (1, 2, 3, 3)
    torch.testing.assert_close(walks[0, 0], expected)
    torch.testing.assert_close(walks[0, 1], expected)  # symmetric: both walks are equal


def test_dcrnn_takes_a_given_graph_for_its_points_only():
    model = DCRNN(num_channels=1, output_steps=2, hidden_channels=4, adjacency=W.tolist())
    torch.testing.assert_close(model.walks, torch.stack([FORWARD, BACKWARD]))
    assert "walks" not in model.state_dict()  # the graph comes from the config
    assert "data.source.graph" in model.fixed_points
    assert DCRNN(num_channels=1, output_steps=2).fixed_points is None
    with pytest.raises(ValueError, match="3 points but x has 4"):
        model(torch.randn(1, 3, 4, 1), torch.rand(1, 4, 2))
    with pytest.raises(ValueError, match="non-negative"):
        DCRNN(num_channels=1, output_steps=2, adjacency=-W)
    with pytest.raises(ValueError, match="data has 5 points"):
        GraphWaveNet(num_points=5, num_channels=1, output_steps=2, adjacency=W)


@pytest.mark.parametrize("name", NAMES)
def test_a_graph_given_with_the_data_replaces_the_kernel_or_is_left_out(name):
    """``data.source.graph`` reaches the models that take a graph as ``adjacency``; AGCRN
    and STAEformer learn theirs and are built as without it."""
    spec = replace(DataSpec.sized(3, 1, 4, 2), adjacency=W.tolist())
    if name in ("agcrn", "staeformer"):
        given, plain = small(name, spec), small(name, replace(spec, adjacency=None))
        for (key, a), (_, b) in zip(
            given.state_dict().items(), plain.state_dict().items(), strict=True
        ):
            torch.testing.assert_close(a, b, msg=key)  # same seed, same model
        return
    model = small(name, spec)
    torch.testing.assert_close(model.walks, torch.stack([FORWARD, BACKWARD]))
    assert model.fixed_points is not None  # tied to the graph's points
    assert model(torch.randn(2, 4, 3, 1), torch.rand(2, 3, 2)).shape == (2, 2, 3, 1)


@pytest.mark.parametrize("steps", [0, 1, 2])
def test_dcrnn_reaches_k_hops_per_cell_step(steps):
    """On a chain of 8 points, one input step and one forecast step, one layer: the encoder's
    cell, from a zero state, diffuses the input K hops; the decoder's cell diffuses that state
    K hops into its reset gate and the reset state K more in its candidate. So a change at
    point 0 reaches points 0 .. 3K and no further. In float64: the far end's share is small
    enough to vanish in float32 rounding."""
    torch.manual_seed(0)
    chain = torch.diag(torch.ones(7), 1) + torch.diag(torch.ones(7), -1)
    model = DCRNN(
        num_channels=1,
        output_steps=1,
        hidden_channels=4,
        num_layers=1,
        diffusion_steps=steps,
        adjacency=chain,
    )
    model = model.double().eval()
    x, coords = torch.randn(1, 1, 8, 1, dtype=torch.float64), torch.rand(1, 8, 2)
    poked = x.clone()
    poked[:, :, 0] += 1.0
    with torch.no_grad():
        changed = (model(poked, coords) - model(x, coords)).abs()[0, 0, :, 0] > 0
    assert changed.nonzero().flatten().tolist() == list(range(3 * steps + 1))


# ---------------------------------------------------------------- Graph WaveNet
def test_adaptive_adjacency_is_the_row_softmax_of_the_rectified_products():
    e1 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    e2 = torch.tensor([[1.0, 0.0], [0.0, 2.0], [-1.0, 0.0]])
    # E1 E2^T = [[1, 0, -1], [0, 2, 0], [1, 2, -1]]; ReLU zeroes the negatives
    e, e2_ = math.e, math.e**2
    expected = torch.tensor(
        [
            [e / (e + 2), 1 / (e + 2), 1 / (e + 2)],
            [1 / (e2_ + 2), e2_ / (e2_ + 2), 1 / (e2_ + 2)],
            [e / (e + e2_ + 1), e2_ / (e + e2_ + 1), 1 / (e + e2_ + 1)],
        ]
    )
    torch.testing.assert_close(adaptive_adjacency(e1, e2), expected)


def test_graph_wavenet_receptive_field_is_thirteen_steps():
    """Kernel 2, dilations 1, 2 in each of 4 blocks: 1 + 4 (1 + 2) = 13 input steps reach
    the forecast (eval mode: batch norm with its running statistics mixes nothing)."""
    torch.manual_seed(0)
    model = GraphWaveNet(
        num_points=5, num_channels=1, output_steps=2, hidden_channels=4, skip_channels=8
    )
    model.eval()
    assert model.receptive_field == 13
    x, coords = torch.randn(1, 16, 5, 1), torch.rand(5, 2).expand(1, 5, 2)
    with torch.no_grad():
        base = model(x, coords)
        for step, reaches in [(2, False), (3, True), (15, True)]:  # 16 - 13 = 3 is the first
            poked = x.clone()
            poked[:, step] += 1.0
            assert (not torch.equal(model(poked, coords), base)) == reaches, step


@pytest.mark.parametrize(("graph", "supports"), [("both", 3), ("distance", 2), ("adaptive", 1)])
def test_graph_wavenet_diffuses_over_the_walks_and_the_adaptive_adjacency(graph, supports):
    """Diffusion order 2 over each support: ``(1 + 2 S) C`` inputs to each 1 x 1 layer."""
    model = GraphWaveNet(num_points=5, num_channels=1, output_steps=2, graph=graph)
    assert model.gcn[0].linear.in_features == (1 + 2 * supports) * 32
    assert (model.source is not None) == (graph != "distance")
    assert (model.fixed_points is None) == (graph == "distance")
    with pytest.raises(ValueError, match="model.graph='nope'"):
        GraphWaveNet(num_points=5, num_channels=1, output_steps=2, graph="nope")


# ---------------------------------------------------------------- AGCRN
def test_agcrn_weights_are_each_points_embedding_times_the_pools():
    """``y_n = x_n W_n0 + (S x)_n W_n1 + b_n`` with ``W_nk = sum_d E_nd pool_dk`` and
    ``b_n = sum_d E_nd bias_d``, point by point in plain loops."""
    torch.manual_seed(0)
    conv = NodeAdaptiveGraphConv(2, 3, cheb_k=2, node_dim=2)
    embeddings = torch.randn(4, 2)
    adjacency = adaptive_adjacency(embeddings, embeddings)
    x = torch.randn(4, 1, 2)  # point-major: (N, B, C_in)
    out = conv(x, adjacency, conv.node_parameters(embeddings))[:, 0]
    spread = adjacency @ x[:, 0]
    for n in range(4):
        w = [sum(embeddings[n, d] * conv.weights_pool[d, k] for d in range(2)) for k in range(2)]
        b = sum(embeddings[n, d] * conv.bias_pool[d] for d in range(2))
        torch.testing.assert_close(out[n], x[n, 0] @ w[0] + spread[n] @ w[1] + b)
    # points with one embedding share one set of weights
    twins = embeddings.clone()
    twins[1] = twins[0]
    weights, bias = conv.node_parameters(twins)
    assert torch.equal(weights[0], weights[1]) and torch.equal(bias[0], bias[1])


def _agcrn_batch_major(model: AGCRN, x: torch.Tensor) -> torch.Tensor:
    """AGCRN's equations as written, batch-major and each point's weights made again at
    every step of every cell: the reference the model's point-major form must equal."""

    def conv(g: NodeAdaptiveGraphConv, h: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        terms = [h, s @ h]  # (B, N, C) each; Chebyshev terms T_0, T_1
        for _ in range(2, g.cheb_k):
            terms.append(2 * (s @ terms[-1]) - terms[-2])
        weights = torch.einsum("nd,dkio->nkio", model.embeddings, g.weights_pool)
        out = torch.einsum("bnki,nkio->bno", torch.stack(terms[: g.cheb_k], dim=2), weights)
        return out + model.embeddings @ g.bias_pool

    s = model.adjacency()
    b, m, n, _ = x.shape
    states = [x.new_zeros(b, n, cell.hidden_channels) for cell in model.cells]
    for t in range(m):
        inp = x[:, t]
        for layer, cell in enumerate(model.cells):
            h = states[layer]
            z, r = torch.sigmoid(conv(cell.gates, torch.cat([inp, h], -1), s)).chunk(2, -1)
            c = torch.tanh(conv(cell.candidate, torch.cat([inp, r * h], -1), s))
            inp = states[layer] = z * h + (1 - z) * c
    return model.head(states[-1]).view(b, n, model.output_steps, -1).transpose(1, 2)


@pytest.mark.parametrize("cheb_k", [1, 2, 3])
def test_agcrn_computes_its_equations_and_their_gradients(cheb_k: int):
    """The point-major model with each point's weights made once per forward equals the
    equations written batch-major, weights made at every step: forecasts and gradients."""
    torch.manual_seed(cheb_k)
    model = AGCRN(num_points=7, num_channels=2, output_steps=3, hidden_channels=5, cheb_k=cheb_k)
    x = torch.randn(4, 6, 7, 2)
    coords = torch.rand(1, 7, 2).expand(4, 7, 2)
    out = model(x, coords)
    assert out.shape == (4, 3, 7, 2)
    grads = torch.autograd.grad(out.square().sum(), list(model.parameters()))
    reference = _agcrn_batch_major(model, x)
    expected = torch.autograd.grad(reference.square().sum(), list(model.parameters()))
    torch.testing.assert_close(out, reference)
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want)


# ---------------------------------------------------------------- STAEformer
def test_staeformer_tokens_have_each_embedding_at_its_width():
    """Input 24 + time of day 24 + day of week 24 + spatial 0 + adaptive 80 = 152; each input
    step's time of day picks its own slot of the day."""
    spec = DataSpec.sized(5, 1, 12, 12, steps_per_day=24, time_features=["hour", "weekday"])
    model = build_model({"_target_": STAEFORMER}, spec)
    assert model.model_dim == 152 and model.spatial_embedding is None
    hours = torch.arange(12.0).view(1, 12, 1).expand(2, 12, 5)  # step t at hour t
    angle = 2 * math.pi * hours / 24
    # value, hour sin/cos, weekday sin/cos (angle 0: day 0 of the 7)
    parts = [torch.randn(2, 12, 5), angle.sin(), angle.cos(), 0 * angle, 0 * angle + 1]
    x = torch.stack(parts, dim=-1)
    tokens = model.tokens(x)
    assert tokens.shape == (2, 12, 5, 152)
    hour_table = model.time_embeddings["hour"].weight
    torch.testing.assert_close(tokens[0, 7, 3, 24:48], hour_table[7])
    day_table = model.time_embeddings["weekday"].weight
    torch.testing.assert_close(tokens[1, :, 0, 48:72], day_table[0].expand(12, 24))
    torch.testing.assert_close(tokens[0, 4, 2, 72:], model.adaptive_embedding[4, 2])
    plain = DataSpec.sized(5, 1, 12, 12)  # no time features: tokens without them
    assert build_model({"_target_": STAEFORMER}, plain).model_dim == 104


def test_staeformer_attends_over_time_at_each_point_then_over_points_at_each_step():
    torch.manual_seed(0)
    model = small("staeformer", DataSpec.sized(6, 1, 4, 2)).eval()
    h = torch.randn(1, 4, 6, model.model_dim)
    poked = h.clone()
    poked[:, 1, 2] += 1.0  # step 1 of point 2
    with torch.no_grad():
        temporal = (model.temporal[0](poked, axis=1) - model.temporal[0](h, axis=1)).abs()
        spatial = (model.spatial[0](poked, axis=2) - model.spatial[0](h, axis=2)).abs()
    moved = temporal.amax(-1) > 0  # (B, M, N): which tokens changed
    assert moved[0, :, 2].all() and not moved[0, :, [0, 1, 3, 4, 5]].any()  # point 2's steps
    moved = spatial.amax(-1) > 0
    assert moved[0, 1, :].all() and not moved[0, [0, 2, 3], :].any()  # step 1's points


def test_staeformer_attention_is_multi_head_softmax_attention_per_sequence():
    """The layer's attention against softmax(q k^T / sqrt(d)) v written out per head, on
    (B, T, N, D) tokens attended over the points; gradients agree too."""
    from cloudlstm.models.staeformer import SelfAttentionLayer

    torch.manual_seed(0)
    layer = SelfAttentionLayer(model_dim=8, feed_forward_dim=16, num_heads=2, dropout=0.0)
    x = torch.randn(2, 3, 5, 8, requires_grad=True)
    got = layer.attention(x)
    q, k, v = (f(x).unflatten(-1, (2, 4)) for f in (layer.query, layer.key, layer.value))
    scores = torch.einsum("btnhd,btmhd->bthnm", q, k) / 2.0  # sqrt(d) = 2
    heads = torch.einsum("bthnm,btmhd->btnhd", scores.softmax(-1), v)
    expected = layer.out(heads.flatten(-2))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    grads = [torch.autograd.grad(y.square().sum(), x)[0] for y in (got, expected)]
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------- all four
def spatial_task(samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Space matters: each point's next two values are the weighted mean of its neighbours'
    last values, then of their means (DCRNN's kernel of 12 fixed positions without the
    self-loops), from independent noise, so a point's own history says nothing of its
    future. ``x (samples, 4, 12, 1)``, ``coords (samples, 12, 2)``, ``y (samples, 2, 12, 1)``."""
    coords = torch.rand(12, 2, generator=torch.Generator().manual_seed(0))
    walk = TransitionGraph()(coords[None])[0, 0]
    walk = walk - torch.diag(walk.diagonal())
    walk = walk / walk.sum(dim=-1, keepdim=True)
    x = torch.randn(samples, 4, 12, 1, generator=torch.Generator().manual_seed(seed))
    first = walk @ x[:, -1]
    y = torch.stack([first, walk @ first], dim=1)
    return x, coords.expand(samples, 12, 2).contiguous(), y


def fitted_mse(model: ForecastModel, steps: int = 150) -> float:
    """Test MSE after ``steps`` Adam steps on 64 training samples."""
    torch.manual_seed(0)
    x, coords, y = spatial_task(64, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        ((model(x, coords) - y) ** 2).mean().backward()
        opt.step()
    model.eval()
    x, coords, y = spatial_task(256, 2)
    with torch.no_grad():
        return ((model(x, coords) - y) ** 2).mean().item()


@pytest.mark.parametrize("name", NAMES)
def test_each_learns_where_space_matters_far_better_than_a_per_point_model(name, one_thread):
    """Measured: the per-point linear map 0.153 (the variance of the target); DCRNN 0.006,
    Graph WaveNet 0.005, AGCRN 0.011, STAEformer 0.024."""
    spec = DataSpec.sized(12, 1, 4, 2)
    per_point = fitted_mse(TimeLinear(num_channels=1, input_steps=4, output_steps=2))
    assert per_point > 0.12  # nothing to learn from a point's own noise
    assert fitted_mse(small(name, spec)) < 0.3 * per_point


@pytest.mark.parametrize("name", NAMES)
def test_each_forecasts_the_interface_shape_and_learns_a_tiny_problem(name, one_thread):
    check_forecaster(small(name, DataSpec.sized(12, 2, 4, 3)), m=4, n=12, c=2, j=3)


@pytest.mark.parametrize("name", ["agcrn", "staeformer", "graph_wavenet", "stid"])
def test_learned_per_point_models_refuse_other_points_and_moving_points(name):
    spec = DataSpec.sized(6, 1, 4, 2)
    model = small(name, spec)
    assert "training point" in model.fixed_points
    assert spec.for_model(model).fixed_points == model.fixed_points  # what forecasts read
    x, coords = torch.randn(2, 4, 6, 1), torch.rand(6, 2).expand(2, 6, 2)
    assert model(x, coords).shape == (2, 2, 6, 1)
    with pytest.raises(ValueError, match="trained on 6 points|built for"):
        model(torch.randn(2, 4, 7, 1), torch.rand(2, 7, 2))
    moved = coords + 0.01  # the same points elsewhere: moving points
    with pytest.raises(UserError, match="positions changed") as err:
        model(x, moved)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("target", "keys", "refused"),
    [
        ("cloudlstm.models.agcrn.AGCRN", {}, "AGCRN"),
        ("cloudlstm.models.staeformer.STAEformer", {}, "STAEformer"),
        (
            "cloudlstm.models.graph_wavenet.GraphWaveNet",
            {},
            "Graph WaveNet with an adaptive adjacency",
        ),
        ("cloudlstm.models.stid.STID", {}, "STID"),
        ("cloudlstm.models.graph_wavenet.GraphWaveNet", {"graph": "distance"}, None),
        ("cloudlstm.models.dcrnn.DCRNN", {}, None),
        ("cloudlstm.models.stgcn.STGCN", {}, None),
    ],
)
def test_data_of_moving_points_is_refused_at_the_build_for_per_point_models(target, keys, refused):
    """AGCRN, STAEformer and Graph WaveNet's adaptive graph were refused at their second
    training batch, STID not at all: each learns a vector per point that stands for a
    place. Models that build their graph from the positions take moving points."""
    moving = replace(DataSpec.sized(6, 1, 4, 2), moving=True)
    config = {"_target_": target, **keys}
    if refused is None:
        build_model(config, moving)
        return
    with pytest.raises(UserError) as err:
        build_model(config, moving)
    assert str(err.value).startswith(
        f"{refused} takes only points that stay where they were in training, but the data's "
        "points move (moving points): "
    )
    build_model(config, replace(moving, moving=False))


@pytest.mark.parametrize(
    ("name", "keys"), [("dcrnn", {}), ("graph_wavenet", {"graph": "distance"})]
)
def test_distance_graph_models_take_any_and_moving_points(name, keys):
    """Each sample's graph from its own positions: a batch equals its samples run alone."""
    model = small(name, DataSpec.sized(6, 1, 4, 2), **keys).eval()
    assert model.fixed_points is None
    x, coords = torch.randn(3, 4, 9, 1), torch.rand(3, 9, 2)
    with torch.no_grad():
        joint = model(x, coords)
        alone = torch.cat([model(x[i : i + 1], coords[i : i + 1]) for i in range(3)])
    torch.testing.assert_close(joint, alone, rtol=1e-4, atol=1e-5)


# METR-LA's size: N = 207, C = 1, M = J = 12; the time features' form of it, 5-minute steps.
METR_LA = DataSpec.sized(207, 1, 12, 12)
METR_LA_CLOCK = DataSpec.sized(207, 1, 12, 12, steps_per_day=288, time_features=["hour", "weekday"])


def linear(i: int, o: int) -> int:
    return i * o + o


def reference_dcrnn(input_dim: int) -> int:
    """liyaguang/DCRNN at dcrnn_la.yaml: 2 + 2 DCGRU layers of 64, 2 walks x 2 steps + 1."""
    terms = 2 * 2 + 1

    def cell(i: int) -> int:  # gates and candidate
        return linear(terms * (i + 64), 128) + linear(terms * (i + 64), 64)

    return cell(input_dim) + cell(64) + cell(1) + cell(64) + linear(64, 1)


def reference_graph_wavenet(in_dim: int) -> int:
    """nnzhan/Graph-WaveNet's defaults: node vectors, start 1 x 1, 8 layers of filter, gate,
    residual (built, unused with the graph convolution), skip, batch norm and the graph
    convolution over 3 supports of order 2; the two end 1 x 1 layers."""
    layer = 2 * linear(2 * 32, 32) + linear(32, 32) + linear(32, 256) + 2 * 32
    layer += linear((2 * 3 + 1) * 32, 32)
    return 2 * 207 * 10 + linear(in_dim, 32) + 8 * layer + linear(256, 512) + linear(512, 12)


def reference_agcrn() -> int:
    """LeiBAI/AGCRN at PEMSD4_AGCRN.conf (N = 207): embeddings, 2 cells, the end conv."""

    def cell(i: int) -> int:
        width = i + 64
        return 10 * 2 * width * 128 + 10 * 128 + 10 * 2 * width * 64 + 10 * 64

    return 207 * 10 + cell(1) + cell(64) + 12 * 64 + 12


def reference_staeformer() -> int:
    """XDZhelheim/STAEformer at its METR-LA config: input (value, tod, dow) 3 -> 24, the
    time tables, the adaptive embedding, 6 layers of width 152, the mixed projection."""
    d = 24 + 24 + 24 + 80
    layer = 4 * linear(d, d) + linear(d, 256) + linear(256, d) + 2 * 2 * d
    return linear(3, 24) + 288 * 24 + 7 * 24 + 12 * 207 * 80 + 6 * layer + linear(12 * d, 12)


@pytest.mark.parametrize(
    ("name", "spec", "ours", "reference", "why"),
    [
        # the reference's METR-LA config reads the time of day as a second input
        ("dcrnn", METR_LA, 371_393, reference_dcrnn(1), "equal at input_dim 1"),
        # ours builds no residual 1 x 1 layers where the graph convolution replaces them
        ("graph_wavenet", METR_LA, 300_920, reference_graph_wavenet(1) - 8 * linear(32, 32), ""),
        ("agcrn", METR_LA, 747_810, reference_agcrn(), "equal"),
        # 5 input channels (value, hour and weekday sin/cos) against the reference's 3
        ("staeformer", METR_LA_CLOCK, 1_259_028, reference_staeformer() + 2 * 24, ""),
    ],
)
def test_parameter_counts_at_metr_la_size_match_the_reference_configuration(
    tmp_path, name, spec, ours, reference, why
):
    cfg = compose_train(tmp_path, [f"model={name}"])
    assert count_parameters(build_model(cfg.model, spec)) == ours == reference, why


def test_reference_counts():
    """The references' own counts (docs/baselines.md), from their layer shapes."""
    assert reference_dcrnn(2) == 372_353
    assert reference_graph_wavenet(2) == 309_400
    assert reference_agcrn() == 747_810
    assert reference_staeformer() == 1_258_980


# ---------------------------------------------------------------- through train.py
JOB = [o for o in TINY if not o.startswith("model.")]
QUIET = ["logger=csv", "report.figures=false", "print_config=false", "torch_threads=1"]


def model_overrides(name: str) -> list[str]:
    return [f"model={name}", *(f"model.{k}={v}" for k, v in SMALL[name].items())]


@pytest.fixture(scope="module")
def beijing_cache(tmp_path_factory) -> Path:
    """One Beijing cache for the four runs."""
    return tmp_path_factory.mktemp("beijing")


def trained(cfg) -> dict:
    """The results of ``train.py``'s job ``cfg``: it trained and tested."""
    results = train(cfg)
    assert results["steps"] > 0
    assert math.isfinite(results["test"]["overall"]["mae"]["mean"])
    return results


@pytest.mark.parametrize("name", NAMES)
def test_each_trains_and_tests_through_train_py_on_the_default_data(tmp_path, name):
    cfg = compose_train(tmp_path, [*JOB, *QUIET, *model_overrides(name)])
    results = trained(cfg)
    assert results["run"]["model"] == name and (Path(cfg.paths.output_dir) / "csv").is_dir()


@pytest.mark.skipif(not BEIJING.is_dir(), reason=f"the Beijing data copy is not at {BEIJING}")
@pytest.mark.parametrize("name", NAMES)
def test_each_trains_on_beijing_with_its_time_features(tmp_path, beijing_cache, name):
    cfg = compose_train(
        tmp_path,
        [
            "data=beijing",
            f"data.source.root={BEIJING}",
            "data.time_features=[hour,weekday]",
            "data.batch_size=8",
            "trainer=cpu",
            "trainer.max_epochs=1",
            "trainer.limit_train_batches=3",
            "trainer.val_check_interval=3",
            "trainer.limit_val_batches=1",
            "trainer.limit_test_batches=1",
            "trainer.enable_progress_bar=false",
            "~callbacks.progress_bar",
            "~callbacks.model_summary",
            *QUIET,
            *model_overrides(name),
        ],
    )
    cfg.paths.data_dir = str(beijing_cache)
    results = trained(cfg)
    assert results["data"]["num_points"] == 12 and results["data"]["time_features"]
