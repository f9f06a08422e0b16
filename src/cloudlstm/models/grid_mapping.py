"""Point cloud -> image grid mapping for the grid baselines (CNN, 3D-CNN, ConvLSTM, ...).

The paper maps each point cloud onto a grid with the Hungarian algorithm: every point gets
its own cell of a near-square grid so that the total (squared) displacement of the points
from their positions to the cell centres is minimal. The mapping only depends on the
point coordinates, so it is computed once per coordinate set and cached on disk.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from cloudlstm.errors import replacing


def grid_shape(num_points: int) -> tuple[int, int]:
    """The near-square grid ``(H, W)`` holding ``num_points`` cells, ``H <= W``.

    ``W = ceil(sqrt(N))`` and ``H = ceil(N / W)``, so ``W - H`` is 0 or 1 and there is no
    completely empty row (``H * W - N < W``).
    """
    if num_points < 1:
        raise ValueError(f"a grid needs at least one point, got num_points={num_points}.")
    width = math.isqrt(num_points - 1) + 1  # ceil(sqrt(N)) without float rounding
    return -(-num_points // width), width


@dataclass(frozen=True, eq=False)
class GridMapping:
    """Which grid cell each of N points occupies; converts values between the two layouts.

    ``cell`` is ``(N,)`` int64, the flat index ``row * width + col`` of each point's cell,
    all distinct. ``eq=False`` because array fields make field-wise equality ambiguous.
    """

    height: int
    width: int
    cell: np.ndarray

    def __post_init__(self) -> None:
        cell = np.asarray(self.cell, dtype=np.int64)
        if cell.ndim != 1 or len(np.unique(cell)) != len(cell):
            raise ValueError("GridMapping.cell must be a 1-D array of distinct cell indices.")
        if len(cell) and (cell.min() < 0 or cell.max() >= self.height * self.width):
            raise ValueError(
                f"GridMapping.cell indices must lie in [0, {self.height * self.width}) "
                f"for a {self.height}x{self.width} grid."
            )
        object.__setattr__(self, "cell", cell)

    @property
    def num_points(self) -> int:
        return len(self.cell)

    def _index(self, device: torch.device) -> torch.Tensor:
        return torch.as_tensor(self.cell, device=device)

    def to_grid(self, values: torch.Tensor) -> torch.Tensor:
        """``(..., N, C)`` point values -> ``(..., C, H, W)`` grid; empty cells are 0."""
        if values.dim() < 2 or values.shape[-2] != self.num_points:
            raise ValueError(
                f"to_grid expects values (..., N={self.num_points}, C), got "
                f"{tuple(values.shape)}: the mapping was built for another point set."
            )
        per_channel = values.transpose(-1, -2)  # (..., C, N)
        flat = per_channel.new_zeros(*per_channel.shape[:-1], self.height * self.width)
        flat[..., self._index(values.device)] = per_channel
        return flat.unflatten(-1, (self.height, self.width))

    def to_points(self, grid: torch.Tensor) -> torch.Tensor:
        """``(..., C, H, W)`` grid -> ``(..., N, C)`` values read at the points' cells."""
        if grid.dim() < 3 or tuple(grid.shape[-2:]) != (self.height, self.width):
            raise ValueError(
                f"to_points expects a grid (..., C, {self.height}, {self.width}), got "
                f"{tuple(grid.shape)}."
            )
        return grid.flatten(-2)[..., self._index(grid.device)].transpose(-1, -2)


def check_grid_coords(coords: np.ndarray | torch.Tensor) -> None:
    """Raise a clear error unless ``coords`` is ``(..., N, 2)``: grids are 2-D."""
    if coords.ndim < 2 or coords.shape[-1] != 2:
        raise ValueError(
            f"grid models need 2-D coordinates (..., N, 2), got shape {tuple(coords.shape)}. "
            "Use a point-cloud model (e.g. model=cloudlstm) for 1-D or 3-D coordinates."
        )


def cell_centres(height: int, width: int) -> np.ndarray:
    """``(H * W, 2)`` centres of the cells in flat order, as ``(x, y)`` in [0, 1]^2.

    Coordinate 0 runs along the columns and coordinate 1 along the rows.
    """
    rows, cols = np.divmod(np.arange(height * width), width)
    return np.stack([(cols + 0.5) / width, (rows + 0.5) / height], axis=1)


def _assign(coords: np.ndarray) -> GridMapping:
    height, width = grid_shape(len(coords))
    diff = coords[:, None, :] - cell_centres(height, width)[None, :, :]
    cost = (diff**2).sum(-1)  # (N, H*W): squared point-to-centre distances
    points, cells = linear_sum_assignment(cost)
    # rows come back sorted and N <= H*W, so every point is assigned, in point order
    assert np.array_equal(points, np.arange(len(coords)))
    return GridMapping(height, width, cells.astype(np.int64))


def coords_key(coords: np.ndarray) -> str:
    """Hash of the coordinates (as float64, so float32 and float64 copies agree)."""
    data = np.ascontiguousarray(coords, dtype=np.float64)
    return hashlib.sha256(str(data.shape).encode() + data.tobytes()).hexdigest()[:32]


def hungarian_grid(coords: np.ndarray, cache_dir: str | Path | None = None) -> GridMapping:
    """Assign each of N points its own cell of the ``grid_shape(N)`` grid over [0, 1]^2.

    ``coords`` ``(N, 2)`` in [0, 1]. The assignment minimises the total squared distance
    from the points to their cell centres (Hungarian algorithm, ``O(N^3)``). With a
    ``cache_dir`` the result is stored as ``hungarian_<hash of coords>.npz`` there and
    loaded on later calls; ``None`` computes it every time.
    """
    coords = np.asarray(coords, dtype=np.float64)
    check_grid_coords(coords)
    if coords.ndim != 2 or len(coords) == 0 or not np.isfinite(coords).all():
        raise ValueError(
            f"hungarian_grid expects finite coords (N, 2) with N >= 1, got shape "
            f"{coords.shape}{'' if np.isfinite(coords).all() else ' with NaN/inf values'}."
        )
    if cache_dir is None:
        return _assign(coords)
    path = Path(cache_dir) / f"hungarian_{coords_key(coords)}.npz"
    if path.exists():
        with np.load(path) as saved:
            return GridMapping(int(saved["height"]), int(saved["width"]), saved["cell"])
    mapping = _assign(coords)
    # written beside it, then renamed: parallel jobs (DDP, sweeps) never read a part of it
    with replacing(path) as part:
        np.savez(part, height=mapping.height, width=mapping.width, cell=mapping.cell)
    return mapping
