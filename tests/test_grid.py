"""The Hungarian point-to-grid mapping and the GridForecaster adapter."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from cloudlstm.models import grid_mapping as grid_module
from cloudlstm.models.cnn import CNN2D
from cloudlstm.models.grid_base import GridForecaster
from cloudlstm.models.grid_mapping import GridMapping, cell_centres, grid_shape, hungarian_grid


def displacement(coords: np.ndarray, mapping: GridMapping) -> float:
    """Total squared distance from the points to their cell centres."""
    centres = cell_centres(mapping.height, mapping.width)[mapping.cell]
    return float(((coords - centres) ** 2).sum())


def greedy(coords: np.ndarray) -> GridMapping:
    """Each point in turn takes the nearest cell still free."""
    h, w = grid_shape(len(coords))
    centres = cell_centres(h, w)
    free = np.ones(h * w, dtype=bool)
    cells = []
    for p in coords:
        dist = ((centres - p) ** 2).sum(1)
        dist[~free] = np.inf
        cells.append(int(dist.argmin()))
        free[cells[-1]] = False
    return GridMapping(h, w, np.array(cells))


class LastSteps(GridForecaster):
    """Forecasts the last J observed grid frames: output must equal input point by point."""

    def forward_grid(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, -self.output_steps :]


def test_grid_shape_is_the_smallest_near_square_grid():
    for n in range(1, 400):
        h, w = grid_shape(n)
        assert h <= w <= h + 1 and h * w >= n
        assert h * w - n < w, "no completely empty row"
        best = min(a * b for a in range(1, n + 1) for b in (a, a + 1) if a * b >= n)
        assert h * w == best
    assert grid_shape(274) == (17, 17) and grid_shape(12) == (3, 4)
    with pytest.raises(ValueError, match="at least one point"):
        grid_shape(0)


@pytest.mark.parametrize("n", [1, 7, 30, 274])
def test_mapping_is_a_bijection_no_worse_than_greedy(n):
    coords = np.random.default_rng(n).random((n, 2))
    mapping = hungarian_grid(coords)
    assert (mapping.height, mapping.width) == grid_shape(n)
    assert mapping.cell.dtype == np.int64 and mapping.cell.shape == (n,)
    assert len(set(mapping.cell.tolist())) == n
    assert mapping.cell.min() >= 0 and mapping.cell.max() < mapping.height * mapping.width
    assert displacement(coords, mapping) <= displacement(coords, greedy(coords)) + 1e-12


@pytest.mark.parametrize("seed", range(4))
def test_mapping_equals_brute_force_on_tiny_clouds(seed):
    coords = np.random.default_rng(seed).random((5, 2))  # a 2x3 grid: 720 assignments
    h, w = grid_shape(5)
    best = min(
        itertools.permutations(range(h * w), 5),
        key=lambda cells: displacement(coords, GridMapping(h, w, np.array(cells))),
    )
    mapping = hungarian_grid(coords)
    assert mapping.cell.tolist() == list(best)


def test_points_on_cell_centres_stay_in_their_cells():
    h, w = grid_shape(20)
    order = np.random.default_rng(0).permutation(h * w)[:20]
    mapping = hungarian_grid(cell_centres(h, w)[order])
    assert mapping.cell.tolist() == order.tolist()


def test_to_grid_places_values_and_to_points_inverts_it():
    mapping = hungarian_grid(np.random.default_rng(1).random((10, 2)))  # 3x4: 2 empty cells
    values = torch.randn(2, 5, 10, 3)
    grid = mapping.to_grid(values)
    assert grid.shape == (2, 5, 3, 3, 4)
    flat = grid.flatten(-2)
    assert torch.equal(flat[..., mapping.cell].transpose(-1, -2), values)
    empty = np.setdiff1d(np.arange(12), mapping.cell)
    assert (flat[..., empty] == 0).all()
    assert torch.equal(mapping.to_points(grid), values)
    with pytest.raises(ValueError, match="another point set"):
        mapping.to_grid(torch.randn(2, 11, 3))


def test_disk_cache_is_reused_and_keyed_by_coordinates(tmp_path, monkeypatch):
    coords = np.random.default_rng(2).random((15, 2)).astype(np.float32)
    first = hungarian_grid(coords, tmp_path)
    assert len(list(tmp_path.glob("*.npz"))) == 1

    def refuse(*_):
        raise AssertionError("recomputed although cached")

    monkeypatch.setattr(grid_module, "linear_sum_assignment", refuse)
    again = hungarian_grid(coords.astype(np.float64), tmp_path)  # same values, other dtype
    assert again.cell.tolist() == first.cell.tolist()
    assert (again.height, again.width) == (first.height, first.width)

    monkeypatch.undo()
    hungarian_grid(coords[::-1], tmp_path)
    assert len(list(tmp_path.glob("*.npz"))) == 2
    assert not list(tmp_path.glob("*.tmp")), "no leftover temporary files"


def test_three_dimensional_coordinates_are_refused_clearly():
    with pytest.raises(ValueError, match="grid models need 2-D coordinates"):
        hungarian_grid(np.random.rand(8, 3))
    with pytest.raises(ValueError, match="grid models need 2-D coordinates"):
        LastSteps(2)(torch.randn(1, 3, 8, 2), torch.rand(1, 8, 3))
    with pytest.raises(ValueError, match="NaN"):
        hungarian_grid(np.full((4, 2), np.nan))


def test_grid_forecaster_reads_each_point_back_from_its_own_cell():
    x = torch.randn(3, 4, 13, 2)
    shared = torch.rand(13, 2).expand(3, 13, 2)
    assert torch.equal(LastSteps(2)(x, shared), x[:, -2:])
    moving = torch.rand(3, 13, 2)  # every sample its own mapping
    assert torch.equal(LastSteps(2)(x, moving), x[:, -2:])


def test_mappings_are_memoised_per_coordinate_set(monkeypatch):
    calls = []
    real = grid_module.hungarian_grid
    monkeypatch.setattr(
        "cloudlstm.models.grid_base.hungarian_grid",
        lambda c, d: calls.append(1) or real(c, d),
    )
    model = LastSteps(1)
    coords = torch.rand(1, 9, 2).expand(2, 9, 2)
    for _ in range(3):
        model(torch.randn(2, 2, 9, 1), coords.clone())
    assert len(calls) == 1
    model(torch.randn(2, 2, 9, 1), torch.rand(2, 9, 2))
    assert len(calls) == 3


def test_permuting_points_permutes_the_forecast():
    torch.manual_seed(0)
    model = CNN2D(num_channels=2, input_steps=3, output_steps=2, hidden_channels=8, num_layers=3)
    model.eval()
    x, coords = torch.randn(2, 3, 14, 2), torch.rand(14, 2).expand(2, 14, 2)
    perm = torch.randperm(14)
    with torch.no_grad():
        out = model(x, coords)
        out_perm = model(x[:, :, perm], coords[:, perm])
    torch.testing.assert_close(out_perm, out[:, :, perm])


def test_a_model_built_for_one_grid_refuses_another_number_of_points():
    model = LastSteps(1)
    model.grid_size = grid_shape(12)  # as a subclass built with num_points=12 would set it
    assert model(torch.randn(1, 2, 11, 1), torch.rand(1, 11, 2)).shape == (1, 1, 11, 1)  # 3x4
    with pytest.raises(ValueError, match="model.num_points=20"):
        model(torch.randn(1, 2, 20, 1), torch.rand(1, 20, 2))


def grid_model_names() -> list[str]:
    """The models of conf/model/ that place points on a grid."""
    import hydra
    import yaml

    from tests.conftest import ROOT

    names = []
    for path in sorted((ROOT / "conf" / "model").glob("*.yaml")):
        target = (yaml.safe_load(path.read_text()) or {}).get("_target_")
        if target and issubclass(hydra.utils.get_class(target), GridForecaster):
            names.append(path.stem)
    return names


def test_every_grid_model_is_refused_3d_points_before_it_is_built(tmp_path):
    """One line naming both dimensions and the ways out; a grid model was built and failed
    in its first forward, with a traceback, after the run's folder was made."""
    from cloudlstm.data.spec import DataSpec
    from cloudlstm.errors import UserError, one_line_errors
    from cloudlstm.models.build import build_model
    from tests.conftest import compose_train

    names = grid_model_names()
    assert {"convlstm", "cnn", "predrnnpp"} <= set(names)
    sizes = {"num_channels": 2, "num_points": 9, "input_steps": 6, "output_steps": 3}
    flat = DataSpec.sized(**sizes)
    for name in names:
        cfg = compose_train(tmp_path, [f"model={name}"])
        with pytest.raises(UserError) as refused, one_line_errors():
            build_model(cfg.model, DataSpec.sized(**sizes, coord_features=3))
        assert str(refused.value).endswith(
            "places points on a 2-D grid, and the data's points have 3 coordinate(s): give 2 "
            "coordinate columns (data.source.coord_cols), or choose a point-cloud model "
            "(e.g. model=cloudlstm)."
        )
        assert isinstance(build_model(cfg.model, flat), GridForecaster)
