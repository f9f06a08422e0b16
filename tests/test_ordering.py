"""Z-order of the points (nn/ordering.py) and CloudSeq2Seq's ``spatial_order``."""

from __future__ import annotations

import pytest
import torch

from cloudlstm.models import CloudSeq2Seq
from cloudlstm.nn.ordering import morton_order


def test_z_order_of_a_grid() -> None:
    """On a 4 x 4 grid the curve visits 2 x 2 blocks one after the other (x the low bit)."""
    ys, xs = torch.meshgrid(torch.arange(4.0), torch.arange(4.0), indexing="ij")
    coords = torch.stack([xs, ys], -1).reshape(1, 16, 2)
    visited = coords[0, morton_order(coords)[0]].tolist()
    assert visited[:4] == [[0, 0], [1, 0], [0, 1], [1, 1]]
    assert visited[4:8] == [[2, 0], [3, 0], [2, 1], [3, 1]]
    assert visited[-1] == [3, 3]


@pytest.mark.parametrize("dims", [1, 2, 3, 4])
def test_order_is_a_permutation_per_sample_and_scale_free(dims: int) -> None:
    coords = torch.rand(3, 500, dims, generator=torch.Generator().manual_seed(dims))
    order = morton_order(coords)
    assert torch.equal(order.sort(1).values, torch.arange(500).expand(3, -1))
    assert torch.equal(morton_order(coords * 7.5 - 3.0), order)  # each sample's own box


def test_neighbouring_points_end_up_close_in_memory() -> None:
    """The reason for the order: a point's nearest neighbour is a few rows away."""
    coords = torch.rand(1, 4000, 2, generator=torch.Generator().manual_seed(0))
    nearest = torch.cdist(coords[0], coords[0]).fill_diagonal_(float("inf")).argmin(1)
    rank = morton_order(coords)[0].argsort()  # row of each point after sorting
    before = (nearest - torch.arange(4000)).abs().float().median()
    after = (rank[nearest] - rank).abs().float().median()
    assert after < before / 50


@pytest.mark.parametrize("attention", [False, True])
def test_spatial_order_changes_where_not_what(attention: bool) -> None:
    """Same forecasts and gradients in the caller's point order, with and without sorting
    (continuous random positions: no exact distance ties to break differently)."""
    torch.manual_seed(0)
    model = CloudSeq2Seq(3, output_steps=3, k=5, hidden_channels=6, attention=attention)
    x = torch.randn(2, 4, 60, 3, requires_grad=True)
    coords = torch.rand(2, 60, 2)
    outputs, grads = [], []
    for spatial_order in (True, False):
        model.spatial_order = spatial_order
        model.zero_grad()
        x.grad = None
        out = model(x, coords)
        out.square().sum().backward()
        outputs.append(out.detach())
        grads.append([x.grad.clone()] + [p.grad.clone() for p in model.parameters()])
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-6)
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
