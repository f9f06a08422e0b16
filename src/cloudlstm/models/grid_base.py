"""Adapter that lets grid (image) models forecast point clouds via the Hungarian mapping."""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from cloudlstm.models.base import ForecastModel
from cloudlstm.models.grid_mapping import GridMapping, check_grid_coords, grid_shape, hungarian_grid


def check_window(x: torch.Tensor, input_steps: int, num_channels: int) -> None:
    """Clear error when ``x (B, M, N, C)`` does not have the M and C a model was built for."""
    if x.shape[1] != input_steps or x.shape[3] != num_channels:
        raise ValueError(
            f"this model was built for {input_steps} input steps x {num_channels} channels, "
            f"got x {tuple(x.shape)} (B, M, N, C): set model.input_steps / "
            "model.num_channels to match the data."
        )


def to_grid(values: torch.Tensor, index: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """Point values ``(B, T, N, C)`` written to their cells, ``index (B or 1, 1, 1, N)``
    (flat), of an ``h x w`` grid: ``(B, T, C, H, W)``, 0 in empty cells."""
    b, t, n, c = values.shape
    grid = values.new_zeros(b, t, c, h * w)
    grid.scatter_(-1, index.expand(b, t, c, n), values.transpose(-1, -2))
    return grid.unflatten(-1, (h, w))


class GridForecaster(ForecastModel):
    """Adapter: points -> (Hungarian) grid -> :meth:`forward_grid` -> back to the same N points.

    Each distinct coordinate set in a batch gets its own mapping (:func:`hungarian_grid`),
    memoised in memory by the coordinates' bytes and on disk under ``grid_cache_dir``.
    Empty cells are 0 on the way in and ignored on the way out, so the output at a point
    is read from the very cell its input was written to.

    Subclasses implement ``forward_grid(x (B, M, C_in, H, W)) -> (B, J, C_out, H, W)``.
    One that reads the time features of the forecast steps sets :attr:`reads_future`; its
    ``forward_grid(x, future)`` then gets them gridded as ``x`` is, ``(B, J, F, H, W)``
    (0 in empty cells, like every channel of ``x``). Subclasses taking covariates set
    :attr:`channels`. One built for a fixed grid sets ``self.grid_size =
    grid_shape(num_points)`` so that data with another number of points fails with a
    clear message.
    """

    grid_size: tuple[int, int] | None = None
    # the coordinates it places on a grid: x and y (refused otherwise before it is built,
    # cloudlstm.models.build.check_refused)
    coordinate_dims = 2
    # True: forward_grid takes the gridded ``future`` too (when the data has time features)
    reads_future: bool = False
    fixed_points = (
        "it is a grid model: its Hungarian point-to-grid mapping, and what it learned on that "
        "grid, belong to the training points"
    )
    _MAX_CACHED = 1024  # distinct coordinate sets kept in memory (moving points never repeat)

    def __init__(self, output_steps: int, grid_cache_dir: str | None = None) -> None:
        super().__init__()
        self.output_steps = output_steps
        self.grid_cache_dir = grid_cache_dir
        self._mappings: OrderedDict[bytes, GridMapping] = OrderedDict()

    def mapping(self, coords: torch.Tensor) -> GridMapping:
        """The grid mapping of one coordinate set ``(N, 2)``."""
        points = coords.detach().cpu().numpy()
        key = points.tobytes()
        if key in self._mappings:
            self._mappings.move_to_end(key)
        else:
            self._mappings[key] = hungarian_grid(points, self.grid_cache_dir)
            if len(self._mappings) > self._MAX_CACHED:
                self._mappings.popitem(last=False)
        return self._mappings[key]

    @torch.compiler.disable  # host checks: one graph break, not one per check
    def check_input(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> None:
        if self.channels is not None and x.dim() == 4 and x.shape[3] != self.channels.inp:
            raise ValueError(
                f"this grid model reads C_in={self.channels.inp} channels (model.num_channels"
                f"={self.channels.out} targets, then any covariates and time features), got x "
                f"{tuple(x.shape)} (B, M, N, C): build it from the data it forecasts."
            )
        super().check_input(x, coords, future)
        check_grid_coords(coords)
        if self.grid_size is not None and grid_shape(x.shape[2]) != self.grid_size:
            raise ValueError(
                f"this model was built for a {self.grid_size[0]}x{self.grid_size[1]} grid but "
                f"the data has {x.shape[2]} points (grid {grid_shape(x.shape[2])}): set "
                f"model.num_points={x.shape[2]}."
            )

    @torch.compiler.disable  # NumPy, the mapping's cache: host work outside a compiled graph
    def cells(self, coords: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        """Flat cell index of every point ``(B or 1, N)`` and the grid's ``H, W``."""
        if bool((coords == coords[:1]).all()):  # static points: one mapping for the batch
            maps = [self.mapping(coords[0])]
        else:
            maps = [self.mapping(c) for c in coords]
        cells = torch.stack([torch.as_tensor(m.cell) for m in maps]).to(coords.device)
        return cells, maps[0].height, maps[0].width

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``x (B, M, N, C_in)``, ``coords (B, N, 2)`` (``future (B, J, N, F)`` with time
        features) -> ``(B, J, N, C_out)``."""
        self.check_input(x, coords, future)
        n = x.shape[2]
        cells, h, w = self.cells(coords)
        index = cells[:, None, None, :]  # (B or 1, 1, 1, N), broadcast over time and channel
        grid = to_grid(x, index, h, w)
        taught = {}  # a decoder's truth, in its cells (empty cells: its forecasts)
        if self.teacher is not None:
            taught["teacher"] = self.teacher.mapped(lambda v: to_grid(v, index, h, w))
        if future is None or not self.reads_future:
            out = self.forward_grid(grid, **taught)  # (B, J, C_out, H, W)
        else:
            out = self.forward_grid(grid, to_grid(future, index, h, w), **taught)
        b, j, c = out.shape[:3]
        values = out.flatten(-2).gather(-1, index.expand(b, j, c, n))
        return values.transpose(-1, -2)

    def output_head(self) -> list[nn.Module]:
        """The layers of :meth:`forward_grid` that produce the grid forecast; implemented by
        subclasses. The forecast at the points is read from those grid cells, nothing
        added, so a zero grid forecast is a zero forecast."""
        raise NotImplementedError(f"{type(self).__name__} does not name its output head")

    def forward_grid(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, M, C_in, H, W) -> (B, J, C_out, H, W)``; implemented by subclasses (with
        :attr:`reads_future`: ``forward_grid(x, future=None)``)."""
        raise NotImplementedError
