"""The data's description, made once by the datamodule and carried by everything after it.

A :class:`DataSpec` holds what the model, the training module, a checkpoint and a forecast
of new data need to know of the training data: the points, the channels, the input and
forecast steps, the sampling step, the coordinate scaling and the value scaler. The
datamodule makes it once it is set up (:attr:`PointCloudDataModule.spec`); models are
sized from it (:func:`cloudlstm.models.build.build_model`); the training module carries it
and writes it into every checkpoint under :data:`SPEC_KEY`, the one place a checkpoint
stores the scaler. Nothing is written into the run's config.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np
import pandas as pd

from cloudlstm.data.cache import CachedSource
from cloudlstm.data.covariates import input_names, time_feature_names
from cloudlstm.data.sources.times import TIMES_ZONED_KEY
from cloudlstm.data.transforms import StandardScaler

SPEC_KEY = "data_spec"
# Checkpoints written before the description had its current name and size fields.
OLD_INFO_KEY = "forecast_info"
OLD_INFO_VERSION = 1
DEFAULT_COORD_COLS = ("x", "y", "z")
# The sizes (and the time features' names and the input steps' offsets) a model constructor
# may take from the description (conf/model/*.yaml leave them out; an explicit value must
# agree with the data).
SIZE_KEYS = (
    "num_points",
    "num_channels",
    "input_steps",
    "input_offsets",
    "output_steps",
    "coord_features",
    "steps_per_day",
    "input_channels",
    "future_channels",
    "time_features",
)


@dataclass(frozen=True)
class DataSpec:
    """The training data's description, as plain Python values (checkpoint-friendly).

    Attributes:
        scaler: :meth:`StandardScaler.to_dict` of the per-channel scaler: the C_out targets,
            then the measured covariates.
        channel_names: the C_out forecast channels, value channels then (moving points)
            ``pos_*``.
        value_channels: the channels read from and written to data columns (no ``pos_*``).
        point_ids: the N training points, in the model's order.
        coords: ``(N, L)`` raw training coordinates (moving points: their first positions).
        coord_lo, coord_span, coord_degenerate: ``(L,)`` raw -> normalised coordinates,
            ``(c - lo) / span`` and 0.5 in degenerate dimensions (see ``scale_coords``).
        input_offsets: the model's input steps relative to the first forecast step.
        output_steps: J.
        step_minutes: the sampling period, or None when the data has no clock.
        steps_per_day: steps in one day, or None when unknown or not whole.
        moving: the points move (positions are forecast as ``pos_*`` channels).
        time_col, id_col, coord_cols: the long-format column names.
        point_groups: group name -> indices of its points (e.g. DBSCAN inliers / outliers),
            scored apart at test time.
        model: the class name of the model trained on it (for messages), once known.
        fixed_points: why that model takes only its training points, or None.
        covariate_names: measured input-only channels, after the targets in ``x``.
        time_features: ``data.time_features`` (``hour``, ...): their sin/cos channels
            (:attr:`future_names`) end ``x`` and are a window's ``future``.
        time_zone: ``data.time_zone``, the zone whose clock the time features follow (None:
            the times as read); a forecast's history computes them so too.
        adjacency: ``(N, N)`` weights of a graph of the points, in :attr:`point_ids`' order
            (``data.source.graph``, e.g. a road network), as the source gives them; None
            without one. Passed to the models that take a graph (their constructor's
            ``adjacency``); checkpoints written before it existed read as None.
        graph: the file :attr:`adjacency` was read from (``data.source.graph``), named where
            an evaluation gives another graph; None without one (and in checkpoints written
            before it).
        value_reference: what the training data's values were checked against (each read
            channel's training median, spread and valid range, and ``data.max_abs_z``:
            :func:`~cloudlstm.data.pipeline.absurd_values.training_reference`), so that a
            forecast's history is checked alike; None in checkpoints written before it.
        missing_value: the value the training files wrote for "no reading" (METR-LA's 0),
            read as missing in a forecast's history too; None: none (and in checkpoints
            written before it).
        wide_time_col: the column of the times in the training table, when that table was
            wide and the column named by the user (``data.source.time_col``); a forecast's
            wide history may name it so. None: found by its form.
        time_format, time_unit: how the training files wrote their times
            (``data.source.time_format`` or ``time_unit``), so that a forecast's history is
            read alike; None: dates pandas infers (and in checkpoints written before them).
        first_time: the training stream's first timestamp (ISO text), the origin of its time
            grid: a forecast's history must lie on that grid. None without timestamps (and
            in checkpoints written before it).
        times_zoned: whether the training file wrote its times with a zone or UTC offset
            (read as UTC) rather than as clock times: a history written the other way is
            warned of. None where unknown (sources other than long-format files, and
            checkpoints written before it).

    A model reads ``C_in = input_channels`` channels (:attr:`input_names`) and forecasts
    ``C_out = num_channels`` (see :mod:`cloudlstm.data.covariates`).
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
    steps_per_day: int | None
    moving: bool
    time_col: str = "timestamp"
    id_col: str = "id"
    coord_cols: list[str] = field(default_factory=list)
    point_groups: dict[str, list[int]] = field(default_factory=dict)
    model: str | None = None
    fixed_points: str | None = None
    covariate_names: list[str] = field(default_factory=list)
    time_features: list[str] = field(default_factory=list)
    time_zone: str | None = None
    adjacency: list[list[float]] | None = None
    graph: str | None = None
    value_reference: dict[str, Any] | None = None
    missing_value: float | None = None
    wide_time_col: str | None = None
    time_format: str | None = None
    time_unit: str | None = None
    first_time: str | None = None
    times_zoned: bool | None = None

    # ------------------------------------------------------------------ made from
    @classmethod
    def from_datamodule(cls, datamodule: Any) -> DataSpec:
        """The description of a set-up :class:`PointCloudDataModule`."""
        stream = datamodule.stream
        channels = list(datamodule.channel_names)
        num_values = len(channels) - (stream.num_dims if stream.moving else 0)
        lo, span, degenerate = datamodule.coord_scale
        source = CachedSource.declared_by(datamodule.source)
        # data=points: the user's own column names; other data sets get the defaults
        coord_cols = source.coord_cols or _default_coord_cols(stream.num_dims)
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
            steps_per_day=datamodule.steps_per_day,
            moving=bool(stream.moving),
            time_col=str(source.time_col),
            id_col=str(source.id_col),
            coord_cols=[str(c) for c in coord_cols],
            point_groups={
                name: np.flatnonzero(members).tolist()
                for name, members in getattr(datamodule, "point_groups", {}).items()
            },
            covariate_names=list(datamodule.covariate_names),
            time_features=list(datamodule.time_features),
            time_zone=datamodule.time_zone,
            adjacency=_adjacency(source, stream.point_ids),
            graph=None if source.graph is None else str(source.graph),
            value_reference=_value_reference(datamodule, source),
            missing_value=source.missing_value,
            wide_time_col=source.wide_time_col,
            time_format=source.time_format,
            time_unit=source.time_unit,
            first_time=None if stream.timestamps is None else str(stream.timestamps[0]),
            times_zoned=stream.metadata.get(TIMES_ZONED_KEY),
        )

    @classmethod
    def sized(
        cls,
        num_points: int,
        num_channels: int,
        input_steps: int,
        output_steps: int,
        coord_features: int = 2,
        steps_per_day: int | None = None,
        covariates: int = 0,
        time_features: Sequence[str] = (),
    ) -> DataSpec:
        """A description of data of these sizes, without data (model tables, benchmarks,
        tests): unit scaler, points on a line, consecutive input steps; ``covariates``
        measured ones named ``cov<i>``."""
        scaled = num_channels + covariates
        return cls(
            scaler={"mean": [0.0] * scaled, "std": [1.0] * scaled},
            channel_names=[f"ch{c}" for c in range(num_channels)],
            value_channels=[f"ch{c}" for c in range(num_channels)],
            point_ids=[str(i) for i in range(num_points)],
            coords=[[i / max(1, num_points - 1)] * coord_features for i in range(num_points)],
            coord_lo=[0.0] * coord_features,
            coord_span=[1.0] * coord_features,
            coord_degenerate=[False] * coord_features,
            input_offsets=list(range(-input_steps, 0)),
            output_steps=output_steps,
            step_minutes=None if steps_per_day is None else 1440 / steps_per_day,
            steps_per_day=steps_per_day,
            moving=False,
            coord_cols=_default_coord_cols(coord_features),
            covariate_names=[f"cov{c}" for c in range(covariates)],
            time_features=list(time_features),
        )

    def for_model(self, model: Any) -> DataSpec:
        """This description with the facts of the model trained on it."""
        return replace(
            self, model=type(model).__name__, fixed_points=getattr(model, "fixed_points", None)
        )

    # ------------------------------------------------------------------ sizes
    @property
    def num_points(self) -> int:
        return len(self.point_ids)

    @property
    def num_channels(self) -> int:
        return len(self.channel_names)

    @property
    def future_names(self) -> list[str]:
        """The time features' channels (sin/cos of each), known for the forecast steps."""
        return time_feature_names(self.time_features)

    @property
    def scaled_channels(self) -> list[str]:
        """The channels the scaler normalises, in its order: the stream's (targets, with
        moving points' positions), then the measured covariates."""
        return [*self.channel_names, *self.covariate_names]

    @property
    def read_channels(self) -> list[str]:
        """The columns a forecast's history gives for each point: the value channels and
        the measured covariates."""
        return [*self.value_channels, *self.covariate_names]

    @property
    def input_names(self) -> list[str]:
        """The C_in channels of a window's ``x``: targets, covariates, time features."""
        return input_names(self.channel_names, self.covariate_names, self.time_features)

    @property
    def input_channels(self) -> int:
        """C_in, the channels a model reads."""
        return len(self.input_names)

    @property
    def future_channels(self) -> int:
        """F, the known-future channels of a window's ``future (J, N, F)``."""
        return len(self.future_names)

    @property
    def input_steps(self) -> int:
        """Steps in the model's input (M, plus the seasonal part)."""
        return len(self.input_offsets)

    @property
    def coord_features(self) -> int:
        """L, the coordinate features of a point."""
        return len(self.coord_lo)

    @property
    def num_dims(self) -> int:
        return len(self.coord_cols)

    @property
    def sizes(self) -> dict[str, Any]:
        """The sizes a model may be built with, by constructor argument name."""
        return {key: getattr(self, key) for key in SIZE_KEYS}

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

    def grid_origin(self) -> np.datetime64 | None:
        """The training grid's first time as ``datetime64[ns]``, or None when unknown."""
        return None if self.first_time is None else np.datetime64(self.first_time, "ns")

    def value_scaler(self) -> StandardScaler:
        """The scaler of the C_out forecast channels."""
        return self.input_scaler().select(self.num_channels)

    def input_scaler(self) -> StandardScaler:
        """The scaler of the stream's channels: the targets, then the measured covariates."""
        return StandardScaler.from_dict(self.scaler)

    # ------------------------------------------------------------------ checkpoints
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> DataSpec:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in state.items() if k in known})


def stored_spec(checkpoint: dict[str, Any]) -> dict[str, Any] | None:
    """The description a checkpoint holds, as a dict, or None when it holds none."""
    if SPEC_KEY in checkpoint:
        return checkpoint[SPEC_KEY]
    old = checkpoint.get(OLD_INFO_KEY)
    if old is None or old.get("version") != OLD_INFO_VERSION:
        return None
    minutes = old.get("step_minutes")
    per_day = 1440.0 / minutes if minutes else None
    return {
        **old,
        "steps_per_day": int(round(per_day)) if per_day and per_day % 1 < 1e-9 else None,
    }


def _value_reference(datamodule: Any, source: CachedSource) -> dict[str, Any] | None:
    """What the datamodule's values were checked against (None for a datamodule without
    those checks), for :attr:`DataSpec.value_reference`."""
    # imported here: the pipeline's datamodule imports this module
    from cloudlstm.data.pipeline.absurd_values import merged_ranges, training_reference

    train = (getattr(datamodule, "bounds", None) or {}).get("train")
    if train is None or not hasattr(datamodule, "max_abs_z"):
        return None
    stream = datamodule.stream
    given = getattr(datamodule, "valid_ranges", None) or {}
    ranges = merged_ranges(source.physical_ranges(), given, stream.channel_names)
    held_out = getattr(datamodule, "held_out", None)
    return training_reference(stream, train, datamodule.max_abs_z, ranges, held_out)


def _adjacency(source: CachedSource, point_ids: Sequence[str]) -> list[list[float]] | None:
    """The graph ``source`` gives of the points ``point_ids``
    (:meth:`~cloudlstm.data.cache.CachedSource.adjacency`), as nested lists."""
    weights = source.adjacency(list(point_ids))
    return None if weights is None else np.asarray(weights, dtype=np.float64).tolist()


def _default_coord_cols(num_dims: int) -> list[str]:
    if num_dims <= len(DEFAULT_COORD_COLS):
        return list(DEFAULT_COORD_COLS[:num_dims])
    return [f"coord{i}" for i in range(num_dims)]
