"""DConv against a direct reading of the paper's Eq. (2), and its defining properties."""

import pytest
import torch
from cloud_reference import dconv_loop

from cloudlstm.nn import DConv, NeighbourCountError, channel_neighbours


@pytest.mark.parametrize("coord_activation", [True, False])
@pytest.mark.parametrize("value_features,coord_features", [(1, 2), (2, 3)])
def test_matches_equation_loop(coord_activation, value_features, coord_features):
    torch.manual_seed(0)
    layer = DConv(
        3,
        2,
        k=4,
        value_features=value_features,
        coord_features=coord_features,
        coord_activation=coord_activation,
    )
    cloud = torch.rand(2, 7, 3, value_features + coord_features)
    torch.testing.assert_close(layer(cloud), dconv_loop(layer, cloud), rtol=1e-5, atol=1e-5)


def test_weight_shape_is_the_papers():
    layer = DConv(5, 7, k=9, value_features=1, coord_features=2)
    assert tuple(layer.weight.shape) == (5, 9, 3, 3, 7)  # (U_in, K, H+L, H+L, U_out)


def test_permutation_equivariance_and_intactness():
    torch.manual_seed(1)
    layer = DConv(4, 6, k=5)
    cloud = torch.rand(3, 40, 4, 3)
    perm = torch.randperm(40)
    out = layer(cloud)
    assert out.shape == (3, 40, 6, 3)  # N_out == N_in
    torch.testing.assert_close(layer(cloud[:, perm]), out[:, perm])


def test_each_channel_uses_its_own_neighbours():
    torch.manual_seed(2)
    cloud = torch.rand(1, 30, 2, 3)
    nb = channel_neighbours(cloud, 4, value_features=1)
    assert not torch.equal(nb[..., 0, :], nb[..., 1, :])
    # moving channel 1's points changes only channel 1's neighbour sets
    moved = cloud.clone()
    moved[..., 1, 1:] = torch.rand(1, 30, 2)
    nb2 = channel_neighbours(moved, 4, value_features=1)
    assert torch.equal(nb[..., 0, :], nb2[..., 0, :])
    assert not torch.equal(nb[..., 1, :], nb2[..., 1, :])


def test_coordinates_in_unit_interval_only_with_activation():
    torch.manual_seed(3)
    cloud = torch.rand(2, 20, 3, 3) * 10
    out = DConv(3, 4, k=3)(cloud)
    assert ((out[..., 1:] > 0) & (out[..., 1:] < 1)).all()
    raw = DConv(3, 4, k=3, coord_activation=False)(cloud)
    assert ((raw[..., 1:] < 0) | (raw[..., 1:] > 1)).any()


def test_gradients_reach_weights_values_and_coordinates():
    torch.manual_seed(4)
    layer = DConv(2, 3, k=3)
    cloud = torch.rand(2, 10, 2, 3, requires_grad=True)
    layer(cloud).sum().backward()
    assert layer.weight.grad.abs().sum() > 0 and layer.bias.grad.abs().sum() > 0
    assert cloud.grad[..., 0].abs().sum() > 0  # values
    assert cloud.grad[..., 1:].abs().sum() > 0  # coordinates


def test_k_larger_than_points_is_a_clear_error():
    layer = DConv(2, 3, k=9)
    with pytest.raises(NeighbourCountError, match=r"K=9 .* only 5 points.*model\.k"):
        layer(torch.rand(1, 5, 2, 3))


def test_wrong_channel_count_is_a_clear_error():
    with pytest.raises(ValueError, match="U=2"):
        DConv(2, 3, k=2)(torch.rand(1, 5, 4, 3))


def test_a_cloud_given_as_parts_is_read_as_their_concatenation():
    """Parts with their own neighbours (or none: each part is searched) give the output of
    the concatenated cloud, bit for bit, and their gradients; a wrong total is one line."""
    torch.manual_seed(2)
    layer = DConv(5, 4, k=3)
    a = torch.rand(2, 12, 2, 3, requires_grad=True)
    b = torch.rand(2, 12, 3, 3, requires_grad=True)
    joined = torch.cat([a, b], dim=2)
    expected = layer(joined)
    expected_grads = torch.autograd.grad(expected.square().sum(), (a, b))
    given = (channel_neighbours(a, 3, 1), channel_neighbours(b, 3, 1))
    for neighbours in (None, given):
        out = layer((a, b), neighbours)
        assert torch.equal(out, expected)
        grads = torch.autograd.grad(out.square().sum(), (a, b))
        assert all(torch.equal(g, e) for g, e in zip(grads, expected_grads, strict=True))
    with pytest.raises(ValueError, match=r"U=5.*got \[\(2, 12, 2, 3\), \(2, 12, 2, 3\)\]"):
        layer((a, a))


def test_weight_matrices_lays_each_weight_out_once_with_the_same_gradients():
    """Inside the block every call of a DConv uses one matrix (one copy of the weight
    forward, one of its gradient backward); values and gradients are those of a layout per
    call, bit for bit. Outside it, each call lays the weight out anew."""
    from cloudlstm.nn.dconv import weight_matrices

    torch.manual_seed(3)
    layer = DConv(3, 4, k=3)
    clouds = [torch.rand(2, 10, 3, 3) for _ in range(4)]

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        layer.zero_grad()
        out = sum(layer(cloud).square().sum() for cloud in clouds)
        out.backward()
        return out.detach(), layer.weight.grad.clone()

    per_call = run()
    with weight_matrices():
        first = layer.matrix()
        with weight_matrices():  # nested: the outer block's matrices
            assert layer.matrix() is first
        once = run()
    assert layer.matrix() is not layer.matrix()
    assert torch.equal(once[0], per_call[0]) and torch.equal(once[1], per_call[1])
