"""Which points a CloudLSTM-family forecast depends on: exact "poke" tests.

Change one point's whole history, forecast again, and see which points' forecasts move
(the pattern of ``test_knn_mlp_sees_exactly_its_k_nearest_neighbours``). Neighbours are
computed independently, by sorting distances (``cloud_reference.neighbours_by_sorting``):

* K = 1: every DConv sees only the point itself, so only that point's forecast moves;
* one DConv layer, K > 1: exactly the points that have p among their K nearest move;
* deeper models: every DConv call inside the model moves exactly the points that have, in
  some input channel, a neighbour whose input moved, so the moved set grows with depth
  hop by hop. For this the weights from values to output coordinates are zeroed: the
  coordinates (input and hidden) then do not depend on the values and every call sees the
  same neighbours in both runs; otherwise a poke may also move hidden coordinates and
  with them neighbour sets, and the receptive field is no longer a fixed set.
"""

from __future__ import annotations

import pytest
import torch
from cloud_reference import neighbours_by_sorting

from cloudlstm.models import CloudCNN, CloudSeq2Seq, values_to_cloud
from cloudlstm.nn import CELLS, DConv

N, M, C, J = 12, 4, 2, 3
POKED = 5


def inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(1, M, N, C, generator=gen), torch.rand(1, N, 2, generator=gen)


def poked(x: torch.Tensor, point: int = POKED) -> torch.Tensor:
    """``x`` with the given point's history changed (every step and channel)."""
    out = x.clone()
    out[:, :, point] += 1.0
    return out


def moved_points(model, x: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
    """``(N,)`` bool: whose forecast (any step, any channel) moves when POKED is poked."""
    with torch.no_grad():
        return (model(poked(x), coords) != model(x, coords)).any(dim=(0, 1, 3))


def seeing(neighbours: list[list[int]], moved: torch.Tensor) -> torch.Tensor:
    """``(N,)`` bool: the points with a moved point among their neighbours."""
    return torch.tensor([bool(moved[nb].any()) for nb in neighbours])


def one_hot(point: int) -> torch.Tensor:
    return torch.arange(N) == point


def freeze_coordinates(model: torch.nn.Module) -> None:
    """Zero every DConv's weights from input values to output coordinates."""
    with torch.no_grad():
        for layer in model.modules():
            if isinstance(layer, DConv):
                layer.weight[:, :, : layer.value_features, layer.out_value_features :] = 0


# ---------------------------------------------------------------------------- K = 1


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_k1_forecast_of_a_point_depends_on_its_own_history_only(cell):
    torch.manual_seed(0)
    x, coords = inputs()
    model = CloudSeq2Seq(C, output_steps=J, k=1, cell=cell, hidden_channels=4, num_layers=2)
    assert torch.equal(moved_points(model, x, coords), one_hot(POKED))


def test_k1_cloudcnn_is_local_too_and_attention_is_global():
    torch.manual_seed(0)
    x, coords = inputs()
    cnn = CloudCNN(C, input_steps=M, output_steps=J, k=1, hidden_channels=4, num_layers=3)
    assert torch.equal(moved_points(cnn, x, coords), one_hot(POKED))
    # Attention scores are averaged over all points: every forecast sees every point.
    attention = CloudSeq2Seq(C, output_steps=J, k=1, hidden_channels=4, attention=True)
    assert moved_points(attention, x, coords).all()


# ---------------------------------------------------------------- one DConv, K > 1


@pytest.mark.parametrize("k", [2, 4, 7])
def test_one_dconv_moves_exactly_the_points_that_have_p_as_a_neighbour(k):
    torch.manual_seed(0)
    x, coords = inputs()
    expected = seeing(neighbours_by_sorting(coords[0], k), one_hot(POKED))
    assert 1 < expected.sum() < N
    layer = DConv(C, 3, k=k)
    with torch.no_grad():
        before = layer(values_to_cloud(x[:, -1], coords))
        after = layer(values_to_cloud(poked(x)[:, -1], coords))
    assert torch.equal((before != after).any(dim=(0, 2, 3)), expected)
    # The same for a whole forecaster made of one DConv (CloudCNN without hidden layers).
    model = CloudCNN(C, input_steps=M, output_steps=J, k=k, num_layers=0)
    assert torch.equal(moved_points(model, x, coords), expected)


# ---------------------------------------------------------------- deeper models


def record_dconv_calls(model: torch.nn.Module, x: torch.Tensor, coords: torch.Tensor):
    """``(module, input, output)`` of every DConv call of one forward, in call order."""
    calls = []

    def hook(module, args, output):
        # a cell passes [S; H] as its two parts: the input is their concatenation
        cloud = args[0] if isinstance(args[0], torch.Tensor) else torch.cat(args[0], dim=2)
        calls.append((module, cloud.detach(), output.detach()))

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, DConv)]
    try:
        with torch.no_grad():
            forecast = model(x, coords)
    finally:
        for handle in handles:
            handle.remove()
    return forecast, calls


def check_every_dconv_call(model, x, coords) -> list[torch.Tensor]:
    """Poke POKED; for every DConv call of the forward, assert that exactly the points with a
    moved neighbour (in some input channel, neighbours from that channel's coordinates) move.
    Returns the moved points ``(N,)`` of each forecast step."""
    forecast, calls = record_dconv_calls(model, x, coords)
    forecast_poked, calls_poked = record_dconv_calls(model, poked(x), coords)
    assert len(calls) == len(calls_poked)
    for (layer, cloud, out), (_, cloud_p, out_p) in zip(calls, calls_poked, strict=True):
        h = layer.value_features
        assert torch.equal(cloud[..., h:], cloud_p[..., h:]), "coordinates must not move"
        moved_in = (cloud != cloud_p).any(-1)  # (B', N, U_in): per point and channel
        for b in range(cloud.shape[0]):
            expected = torch.zeros(N, dtype=torch.bool)
            for u in range(cloud.shape[2]):
                near = neighbours_by_sorting(cloud[b, :, u, h:], layer.k)
                expected |= seeing(near, moved_in[b, :, u])
            assert torch.equal((out[b] != out_p[b]).any(dim=(1, 2)), expected)
    return list((forecast != forecast_poked).any(dim=3)[0])


def test_cloudcnn_receptive_field_grows_hop_by_hop_with_depth():
    x, coords = inputs()
    one_hop = seeing(neighbours_by_sorting(coords[0], 3), one_hot(POKED))
    moved = []
    for hidden_layers in range(3):
        torch.manual_seed(0)
        model = CloudCNN(C, M, J, k=3, hidden_channels=5, num_layers=hidden_layers)
        freeze_coordinates(model)
        moved.append(check_every_dconv_call(model, x, coords)[0])
    assert torch.equal(moved[0], one_hop)
    for shallow, deep in zip(moved, moved[1:], strict=False):
        assert (deep & shallow).equal(shallow) and deep.sum() > shallow.sum(), moved


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_cloudlstm_every_dconv_uses_exactly_its_neighbours(cell):
    """Every DConv inside the seq2seq model (embedding, gates, candidates, head; hidden
    channels each with their own coordinates) moves exactly the points with a moved
    neighbour; so the forecast's moved set never shrinks from one step to the next and
    reaches beyond the one-hop set."""
    x, coords = inputs()
    torch.manual_seed(0)
    model = CloudSeq2Seq(C, output_steps=J, k=3, cell=cell, hidden_channels=3, num_layers=1)
    freeze_coordinates(model)
    moved = check_every_dconv_call(model, x, coords)
    one_hop = seeing(neighbours_by_sorting(coords[0], 3), one_hot(POKED))
    assert (moved[0] & one_hop).equal(one_hop) and moved[0].sum() > one_hop.sum()
    for early, late in zip(moved, moved[1:], strict=False):
        assert (late & early).equal(early)
