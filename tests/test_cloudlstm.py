"""Cells and whole CloudLSTM-family forecasters: shapes, properties, learning."""

import pytest
import torch
from cloud_reference import dconv_loop

from cloudlstm.data.transforms import normalize_coords
from cloudlstm.models import CloudCNN, CloudSeq2Seq
from cloudlstm.models.base import values_to_cloud
from cloudlstm.nn import (
    CELLS,
    CloudAttention,
    DConv,
    NeighbourCountError,
    channel_neighbours,
    shared_neighbours,
)

SMALL = dict(k=4, hidden_channels=6, num_layers=2)


def batch(b=2, m=5, n=20, c=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, m, n, c, generator=g), torch.rand(b, n, 2, generator=g)


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_cell_state_shapes_and_moving_neighbours(cell):
    torch.manual_seed(0)
    layer = CELLS[cell](input_channels=3, hidden_channels=5, k=4)
    coords = torch.rand(2, 25, 2)
    state = layer.initial_state(coords)
    assert all(s.shape == (2, 25, 5, 3) for s in state)
    x = torch.rand(2, 25, 3, 3)
    h1, state = layer(x, state)
    h2, state = layer(x, state)
    assert h2.shape == (2, 25, 5, 3)
    # location variance: the hidden coordinates move, so neighbour sets change over time
    n0 = channel_neighbours(layer.initial_state(coords)[0], 4, 1)
    assert not torch.equal(channel_neighbours(h1, 4, 1), n0)
    assert not torch.equal(channel_neighbours(h2, 4, 1), channel_neighbours(h1, 4, 1))


@pytest.mark.parametrize("cell", sorted(CELLS))
@pytest.mark.parametrize("attention", [False, True])
def test_forecast_shape_and_longer_horizon(cell, attention):
    x, coords = batch(m=4)
    model = CloudSeq2Seq(3, output_steps=7, cell=cell, attention=attention, **SMALL)
    assert model(x, coords).shape == (2, 7, 20, 3)  # J > M is allowed


def test_shared_neighbours_equal_per_channel_neighbours():
    torch.manual_seed(0)
    x, coords = batch(m=1)
    coords[:, 5] = coords[:, 3]  # a tie: two points at one place
    cloud = values_to_cloud(x[:, 0], coords)  # (B, N, C, 1+L): C channels, same points
    expected = channel_neighbours(cloud, 4, value_features=1)
    assert torch.equal(shared_neighbours(coords, 4, channels=3), expected)


def test_the_embedding_searches_once_per_sample_and_forecasts_the_same(monkeypatch):
    """One kNN of B clouds replaces the embedding's B*M*C + J*B*C; the forecast is unchanged."""
    import cloudlstm.nn.dconv as dconv

    torch.manual_seed(0)
    x, coords = batch(m=4)  # B=2, M=4, N=20, C=3
    model = CloudSeq2Seq(3, output_steps=5, **SMALL)
    searched = []  # clouds per kNN call
    real_knn = dconv.knn

    def counting_knn(points: torch.Tensor, k: int, **options) -> torch.Tensor:
        searched.append(points.shape[:-2].numel())
        return real_knn(points, k, **options)

    monkeypatch.setattr(dconv, "knn", counting_knn)
    shared = model(x, coords)
    assert searched[0] == 2  # the embedding's one search: B clouds
    with_shared = sum(searched)

    def own_search(cloud: torch.Tensor, neighbours: torch.Tensor | None = None) -> torch.Tensor:
        return DConv.forward(model.embed, cloud)  # the neighbours given are ignored

    searched.clear()
    monkeypatch.setattr(model.embed, "forward", own_search)
    assert torch.equal(model(x, coords), shared)
    assert sum(searched) - with_shared == 2 * 4 * 3 + 5 * 2 * 3  # B*M*C + J*B*C


@pytest.mark.parametrize("attention", [False, True])
def test_permutation_equivariance(attention):
    torch.manual_seed(0)
    x, coords = batch()
    model = CloudSeq2Seq(3, output_steps=3, attention=attention, **SMALL)
    perm = torch.randperm(20)
    out = model(x, coords)
    torch.testing.assert_close(model(x[:, :, perm], coords[:, perm]), out[:, :, perm])


def test_invariant_to_shifting_and_scaling_raw_coordinates():
    torch.manual_seed(0)
    x, _ = batch()
    raw = torch.rand(20, 2) * 100
    model = CloudSeq2Seq(3, output_steps=2, **SMALL)

    def forecast(raw_coords):
        coords = torch.as_tensor(normalize_coords(raw_coords.numpy()), dtype=torch.float32)
        return model(x, coords.expand(2, -1, -1))

    torch.testing.assert_close(forecast(raw), forecast(raw * 3.7 + torch.tensor([500.0, -20.0])))


@pytest.mark.parametrize("cell", sorted(CELLS))
@pytest.mark.parametrize("attention", [False, True])
def test_a_shorter_horizon_is_a_prefix_of_a_longer_one(cell, attention):
    """The decoder is autoregressive from the last observed frame; attention looks at the M
    encoder states and the current decoder state, and the head maps one step at a time: no
    part depends on J. So the first J' steps of a J-step forecast are the J'-step forecast,
    also of a model built for J' with the same weights."""
    torch.manual_seed(0)
    x, coords = batch(m=4)
    model = CloudSeq2Seq(3, output_steps=6, cell=cell, attention=attention, **SMALL)
    long = model(x, coords)
    short = CloudSeq2Seq(3, output_steps=2, cell=cell, attention=attention, **SMALL)
    short.load_state_dict(model.state_dict())
    torch.testing.assert_close(short(x, coords), long[:, :2])


def test_attention_weights_are_a_distribution_and_the_context_their_weighted_sum():
    """Scores ``e_j = mean over points of v . tanh(W * [H_enc_j; H_dec])``, with ``W *`` one
    DConv over the concatenated channels (computed here by the Eq. (2) loop); weights are
    their softmax over the M encoder steps; the context is the weights' sum of the states."""
    torch.manual_seed(0)
    b, m, n, u = 2, 5, 9, 3
    attention = CloudAttention(u, k=3)
    encoder, decoder = torch.rand(b, m, n, u, 3), torch.rand(b, n, u, 3)
    context, weights = attention(decoder, encoder, attention.project_encoder(encoder))

    assert weights.shape == (b, m) and (weights > 0).all()
    torch.testing.assert_close(weights.sum(dim=1), torch.ones(b))
    expected = sum(weights[:, j, None, None, None] * encoder[:, j] for j in range(m))
    torch.testing.assert_close(context, expected)

    joint = DConv(2 * u, u, k=3, coord_activation=False)
    with torch.no_grad():
        joint.weight.copy_(
            torch.cat([attention.encoder_proj.weight, attention.decoder_proj.weight], dim=0)
        )
        joint.bias.copy_(attention.encoder_proj.bias)
        scores = torch.stack(
            [
                (
                    torch.tanh(dconv_loop(joint, torch.cat([encoder[:, j], decoder], dim=2)))
                    * attention.score
                )
                .sum(dim=(-1, -2))
                .mean(dim=-1)
                for j in range(m)
            ],
            dim=1,
        )
    torch.testing.assert_close(weights, torch.softmax(scores, dim=1))


def test_gradients_reach_every_parameter_and_the_coordinates():
    torch.manual_seed(0)
    x, coords = batch()
    coords.requires_grad_(True)
    model = CloudSeq2Seq(3, output_steps=2, attention=True, **SMALL)
    model(x, coords).pow(2).mean().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.any()]
    assert not missing
    assert coords.grad.abs().sum() > 0


def test_k_larger_than_point_count_is_a_clear_error():
    x, coords = batch(n=6)
    with pytest.raises(NeighbourCountError, match="only 6 points"):
        CloudSeq2Seq(3, output_steps=2, k=9, hidden_channels=4)(x, coords)


def test_unknown_cell_is_a_clear_error():
    with pytest.raises(ValueError, match="model.cell='lsmt'"):
        CloudSeq2Seq(3, output_steps=2, cell="lsmt")


def test_paper_size_parameter_count():
    # embed DConv(C->36) + 4 LSTM cells DConv(72 -> 4*36) + head DConv(36 -> C), K=9, F=3
    c = 6
    model = CloudSeq2Seq(c, output_steps=12)
    dconv = lambda u_in, u_out: u_in * 9 * 3 * 3 * u_out + u_out * 3  # noqa: E731
    expected = dconv(c, 36) + 4 * dconv(72, 144) + dconv(36, c)
    assert sum(p.numel() for p in model.parameters()) == expected


@pytest.mark.parametrize(
    "make",
    [
        lambda: CloudSeq2Seq(2, output_steps=3, **SMALL),
        lambda: CloudSeq2Seq(2, output_steps=3, attention=True, cell="gru", **SMALL),
        lambda: CloudCNN(2, input_steps=4, output_steps=3, k=4, hidden_channels=6, num_layers=2),
    ],
    ids=["cloudlstm", "attention-cloudgru", "cloudcnn"],
)
def test_a_few_steps_lower_the_training_loss(make):
    torch.manual_seed(0)
    model = make()
    x, coords = batch(b=4, m=4, n=15, c=2)
    y = 0.5 * x[:, -1:].expand(-1, 3, -1, -1)  # damped persistence: learnable by all
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = (model(x, coords) - y).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


def test_cloudcnn_shape_and_equivariance():
    torch.manual_seed(0)
    x, coords = batch(m=4)
    model = CloudCNN(3, input_steps=4, output_steps=5, k=4, hidden_channels=6, num_layers=3)
    out = model(x, coords)
    assert out.shape == (2, 5, 20, 3)
    perm = torch.randperm(20)
    torch.testing.assert_close(model(x[:, :, perm], coords[:, perm]), out[:, :, perm])
