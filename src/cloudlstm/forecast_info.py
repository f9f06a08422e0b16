"""What every checkpoint stores so that its model can forecast new data on its own.

:class:`~cloudlstm.lit.ForecastModule` gathers a :class:`ForecastInfo` from the datamodule
at ``setup`` and writes it into each checkpoint under :data:`INFO_KEY`;
:class:`cloudlstm.forecast.Forecaster` reads it back. New data is then normalised with the
training statistics, never refitted: the value scaler, the coordinate range, the input
offsets and the sampling step all come from here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cloudlstm.data.pipeline.transforms import StandardScaler
from cloudlstm.errors import UserError

INFO_KEY = "forecast_info"
# Bump when the fields change meaning; older checkpoints then ask to be retrained.
INFO_VERSION = 1
DEFAULT_COORD_COLS = ("x", "y", "z")


@dataclass(frozen=True)
class ForecastInfo:
    """The training data's description, as plain Python values (checkpoint-friendly).

    Attributes:
        scaler: :meth:`StandardScaler.to_dict` of the per-channel scaler (all C channels).
        channel_names: the C model channels, value channels then (moving points) ``pos_*``.
        value_channels: the channels read from and written to data columns (no ``pos_*``).
        point_ids: the N training points, in the model's order.
        coords: ``(N, L)`` raw training coordinates (moving points: their first positions).
        coord_lo, coord_span, coord_degenerate: ``(L,)`` raw -> normalised coordinates,
            ``(c - lo) / span`` and 0.5 in degenerate dimensions (see ``scale_coords``).
        input_offsets: the model's input steps relative to the first forecast step.
        output_steps: J.
        step_minutes: the sampling period, or None when the training data had no clock.
        moving: the points move (positions are forecast as ``pos_*`` channels).
        time_col, id_col, coord_cols: the long-format column names.
        model: the model's class name (for messages).
        fixed_points: why the model takes only its training points, or None (any points).
    """

    scaler: dict[str, Any]
    channel_names: list[str]
    value_channels: list[str]
    point_ids: list[str]
    coords: list[list[float]]
    coord_lo: list[float]
    coord_span: list[float]
    coord_degenerate: list[bool]
    input_offsets: list[int]
    output_steps: int
    step_minutes: float | None
    moving: bool
    time_col: str
    id_col: str
    coord_cols: list[str]
    model: str
    fixed_points: str | None
    version: int = INFO_VERSION

    @classmethod
    def gather(cls, datamodule: Any, model: Any) -> ForecastInfo:
        """Collect the info from a set-up :class:`PointCloudDataModule` and its model."""
        stream = datamodule.stream
        channels = list(stream.channel_names)
        num_values = len(channels) - (stream.num_dims if stream.moving else 0)
        lo, span, degenerate = datamodule.coord_scale
        source = datamodule.source
        # data=points: the user's own column names; other data sets get the defaults
        coord_cols = getattr(source, "coord_cols", None) or _default_coord_cols(stream.num_dims)
        return cls(
            scaler=datamodule.scaler.to_dict(),
            channel_names=channels,
            value_channels=channels[:num_values],
            point_ids=list(stream.point_ids),
            coords=np.asarray(stream.coords, dtype=np.float64).tolist(),
            coord_lo=np.asarray(lo, dtype=np.float64).tolist(),
            coord_span=np.asarray(span, dtype=np.float64).tolist(),
            coord_degenerate=np.asarray(degenerate, dtype=bool).tolist(),
            input_offsets=[int(o) for o in datamodule.input_offsets],
            output_steps=int(datamodule.output_steps),
            step_minutes=stream.step_minutes(),
            moving=bool(stream.moving),
            time_col=str(getattr(source, "time_col", "timestamp")),
            id_col=str(getattr(source, "id_col", "id")),
            coord_cols=[str(c) for c in coord_cols],
            model=type(model).__name__,
            fixed_points=getattr(model, "fixed_points", None),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_checkpoint(cls, checkpoint: dict[str, Any], path: Path) -> ForecastInfo:
        """The info stored in a loaded checkpoint.

        Raises:
            UserError: the checkpoint was written before it stored this info, or by another
                version of it.
        """
        state = checkpoint.get(INFO_KEY)
        if state is None or state.get("version") != INFO_VERSION:
            raise UserError(
                f"{path} lacks what forecasting needs (scaler, points, sampling step, ...): it "
                "was written before checkpoints stored it. Retrain the run "
                "(`python train.py ...` with the same settings) to forecast with it."
            )
        return cls(**state)

    @property
    def input_steps(self) -> int:
        """Steps in the model's input (M, plus the seasonal part)."""
        return len(self.input_offsets)

    @property
    def history_steps(self) -> int:
        """How many steps back the input reaches: the history a forecast needs."""
        return -min(self.input_offsets)

    @property
    def step(self) -> np.timedelta64 | None:
        """The sampling period as ``timedelta64[ns]``, or None when unknown."""
        if self.step_minutes is None:
            return None
        return pd.Timedelta(minutes=self.step_minutes).to_timedelta64()

    @property
    def num_dims(self) -> int:
        return len(self.coord_cols)

    def value_scaler(self) -> StandardScaler:
        return StandardScaler.from_dict(self.scaler)


def _default_coord_cols(num_dims: int) -> list[str]:
    if num_dims <= len(DEFAULT_COORD_COLS):
        return list(DEFAULT_COORD_COLS[:num_dims])
    return [f"coord{i}" for i in range(num_dims)]
