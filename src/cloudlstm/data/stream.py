"""The container for a point-cloud stream (a multichannel time series at N points).

Its arrays may be in memory or memory-mapped from the stream cache
(:mod:`cloudlstm.data.cache`): a memory-mapped ``values`` stays one (it is not
copied), and the checks below read it a time chunk at a time.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field

import numpy as np

from cloudlstm.data.chunks import time_chunks

__all__ = ["UNITS_KEY", "PointCloudStream"]

# metadata key: {channel name: its unit}, as the source gives the values (a channel not
# named: unknown). The data summary carries it, and eval.py refuses data in other units.
UNITS_KEY = "units"


@dataclass
class PointCloudStream:
    """A point-cloud stream: C channels observed at N fixed points over T time steps.

    Attributes:
        values: ``(T, N, C)`` float32 measurements in raw units. NaN (or inf) is allowed only
            where ``mask`` is False.
        mask: ``(T, N, C)`` bool, True where the value was really observed.
        coords: ``(N, L)`` float point coordinates in raw units (e.g. km, degrees).
        channel_names: C channel names.
        point_ids: N unique point identifiers.
        timestamps: optional ``(T,)`` ``datetime64`` array, strictly increasing.
        name: a short name used in summaries and logs.
        metadata: free-form extras. Keys with a meaning elsewhere: ``"step_minutes"`` (float,
            sampling period), ``"steps_per_day"`` (int), ``"source"`` (str, where it came from),
            :data:`UNITS_KEY` (``{channel: unit}``).
        trajectory: optional ``(T, N, L)`` float positions of *moving* points in raw units
            (finite everywhere). When given, ``coords`` must be its first step
            (``trajectory[0]``) and the datamodule makes positions part of the forecast.

    ``__post_init__`` converts ``values`` to float32, ``mask`` to bool and ``coords`` to
    float64 and raises ``ValueError`` when the parts do not fit together. Arrays that already
    have the right type and layout are kept as they are (an ``np.memmap`` stays one).
    """

    values: np.ndarray
    mask: np.ndarray
    coords: np.ndarray
    channel_names: list[str]
    point_ids: list[str]
    timestamps: np.ndarray | None = None
    name: str = "stream"
    metadata: dict = field(default_factory=dict)
    trajectory: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.values = _checked_values(self.values)
        t, n, c = self.values.shape
        self.mask = _checked_mask(self.mask, self.values)
        _check_observed(self.values, self.mask)
        self.coords = _checked_coords(self.coords, n)
        self.channel_names = [str(s) for s in self.channel_names]
        if len(self.channel_names) != c:
            raise ValueError(
                f"PointCloudStream.channel_names has {len(self.channel_names)} names but values "
                f"has C={c} channels."
            )
        self.point_ids = [str(s) for s in self.point_ids]
        if len(self.point_ids) != n:
            raise ValueError(
                f"PointCloudStream.point_ids has {len(self.point_ids)} ids but values has N={n} "
                "points."
            )
        if len(set(self.point_ids)) != n:
            raise ValueError("PointCloudStream.point_ids must be unique; found duplicates.")
        if self.timestamps is not None:
            self.timestamps = _checked_timestamps(self.timestamps, t)
        self.name = str(self.name)
        if self.trajectory is not None:
            self.trajectory = self._check_trajectory(np.asanyarray(self.trajectory))

    def _check_trajectory(self, traj: np.ndarray) -> np.ndarray:
        expected = (self.num_steps, self.num_points, self.num_dims)
        if traj.shape != expected:
            raise ValueError(
                f"PointCloudStream.trajectory must have shape (T, N, L) = {expected}; got "
                f"{traj.shape}."
            )
        traj = _contiguous(traj, np.float64)
        for a, b in time_chunks(0, len(traj), traj[0].size, itemsize=8):
            if np.isfinite(traj[a:b]).all():
                continue
            t, n, _ = np.argwhere(~np.isfinite(traj[a:b]))[0]
            t += a
            raise ValueError(
                f"PointCloudStream.trajectory has NaN/inf positions (first at t={t}, point={n}): "
                "moving points need a position at every step; fill the gaps first."
            )
        if not np.allclose(traj[0], self.coords):
            raise ValueError("PointCloudStream.coords must equal trajectory[0] for moving points.")
        return traj

    @property
    def memory_mapped(self) -> bool:
        """True when ``values`` is read from a file on disk (a memory map), not held in RAM."""
        base = self.values
        while isinstance(base, np.ndarray):  # a copy of a memmap is still of that type
            base = base.base
        return isinstance(base, mmap.mmap)

    @property
    def moving(self) -> bool:
        """True when the points move (``trajectory`` is set)."""
        return self.trajectory is not None

    @classmethod
    def from_values(
        cls,
        values: np.ndarray,
        coords: np.ndarray,
        channel_names: list[str] | None = None,
        point_ids: list[str] | None = None,
        timestamps: np.ndarray | None = None,
        name: str = "stream",
    ) -> PointCloudStream:
        """Build a stream whose mask is ``isfinite(values)`` and with default names/ids."""
        values = np.asarray(values, dtype=np.float32)
        if values.ndim != 3:
            raise ValueError(f"values must have shape (T, N, C); got {values.shape}.")
        _, n, c = values.shape
        return cls(
            values=values,
            mask=np.isfinite(values),
            coords=coords,
            channel_names=channel_names or [f"ch{i}" for i in range(c)],
            point_ids=point_ids or [f"p{i:03d}" for i in range(n)],
            timestamps=timestamps,
            name=name,
        )

    @property
    def num_steps(self) -> int:
        return self.values.shape[0]

    @property
    def num_points(self) -> int:
        return self.values.shape[1]

    @property
    def num_channels(self) -> int:
        return self.values.shape[2]

    @property
    def num_dims(self) -> int:
        return self.coords.shape[1]

    @property
    def missing_fraction(self) -> float:
        return float(1.0 - self.mask.mean())

    def select_points(self, index: np.ndarray | list[int]) -> PointCloudStream:
        """A new stream with only the points ``index`` (in that order; copies)."""
        index = np.asarray(index, dtype=np.int64)
        return PointCloudStream(
            values=self.values[:, index],
            mask=self.mask[:, index],
            coords=self.coords[index],
            channel_names=list(self.channel_names),
            point_ids=[self.point_ids[i] for i in index],
            timestamps=None if self.timestamps is None else self.timestamps.copy(),
            name=self.name,
            metadata=dict(self.metadata),
            trajectory=None if self.trajectory is None else self.trajectory[:, index],
        )

    def step_minutes(self) -> float | None:
        """The sampling period in minutes, from ``metadata`` or the timestamps' median gap;
        None when unknown."""
        minutes = self.metadata.get("step_minutes")
        if minutes is None and self.timestamps is not None and self.num_steps > 1:
            minutes = np.median(np.diff(self.timestamps) / np.timedelta64(1, "s")) / 60.0
        return None if minutes is None else float(minutes)

    def steps_per_day(self) -> int | None:
        """Steps in one day, from ``metadata`` or the timestamps; None when unknown or when a
        day is not a whole number of steps."""
        if "steps_per_day" in self.metadata:
            return int(self.metadata["steps_per_day"])
        minutes = self.step_minutes()
        if not minutes or (1440.0 / minutes) % 1 > 1e-9:
            return None
        return int(round(1440.0 / minutes))

    def __repr__(self) -> str:
        return (
            f"PointCloudStream(name={self.name!r}, T={self.num_steps}, N={self.num_points}, "
            f"C={self.num_channels}, L={self.num_dims}, missing={self.missing_fraction:.1%})"
        )


def _checked_values(values: np.ndarray) -> np.ndarray:
    """``values`` as C-contiguous float32 ``(T, N, C)`` with no empty axis."""
    values = np.asanyarray(values)
    if values.ndim != 3:
        raise ValueError(
            f"PointCloudStream.values must have shape (T, N, C) (3 dims); got shape "
            f"{values.shape}. Add missing axes, e.g. values[..., None] for one channel."
        )
    if not (np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)):
        raise ValueError(
            f"PointCloudStream.values must be numeric; got dtype {values.dtype}. "
            "Convert it with values.astype(np.float32)."
        )
    values = _contiguous(values, np.float32)
    if min(values.shape) < 1:
        raise ValueError(
            f"PointCloudStream.values has an empty axis: shape (T, N, C) = {values.shape}."
            " Every axis needs at least one entry."
        )
    return values


def _checked_mask(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``mask`` as C-contiguous bool of the shape of ``values`` (0/1 numbers accepted)."""
    mask = np.asanyarray(mask)
    if mask.shape != values.shape:
        raise ValueError(
            f"PointCloudStream.mask has shape {mask.shape} but values has shape "
            f"{values.shape}; they must match. Use np.isfinite(values) if you have no "
            "explicit mask."
        )
    if mask.dtype != np.bool_:
        if not np.all(np.isin(mask, (0, 1))):
            raise ValueError(
                f"PointCloudStream.mask must be boolean (True = observed); got dtype "
                f"{mask.dtype} with values other than 0/1."
            )
        mask = mask.astype(bool)
    return _contiguous(mask, np.bool_)


def _check_observed(values: np.ndarray, mask: np.ndarray) -> None:
    """No NaN/inf value marked observed; read a time chunk at a time, so a memory-mapped
    stream is checked in bounded memory."""
    t, n, c = values.shape
    count, first = 0, None
    for a, b in time_chunks(0, t, n * c):
        bad = mask[a:b] & ~np.isfinite(values[a:b])
        if bad.any():
            count += int(bad.sum())
            if first is None:
                ti, ni, ci = np.argwhere(bad)[0]
                first = (a + ti, ni, ci)
    if count:
        ti, ni, ci = first
        raise ValueError(
            f"PointCloudStream.values has {count} NaN/inf entries where mask is True "
            f"(first at t={ti}, point={ni}, channel={ci}). Set mask=False there "
            "(e.g. mask &= np.isfinite(values))."
        )


def _checked_coords(coords: np.ndarray, n: int) -> np.ndarray:
    """``coords`` as finite float64 ``(N, L)``, one row per point."""
    coords = np.asarray(coords)
    if coords.ndim == 1:
        raise ValueError(
            f"PointCloudStream.coords must have shape (N, L); got a 1-D array of length "
            f"{coords.shape[0]}. Use coords[:, None] for one spatial dimension."
        )
    if coords.ndim != 2:
        raise ValueError(f"PointCloudStream.coords must have shape (N, L); got {coords.shape}.")
    if coords.shape[0] != n:
        raise ValueError(
            f"PointCloudStream.coords has {coords.shape[0]} rows but values has N={n} points; "
            "there must be one coordinate row per point."
        )
    if coords.shape[1] < 1:
        raise ValueError("PointCloudStream.coords needs at least one spatial dimension (L>=1).")
    try:
        coords = coords.astype(np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"PointCloudStream.coords must be numeric: {err}") from err
    if not np.isfinite(coords).all():
        rows = np.unique(np.argwhere(~np.isfinite(coords))[:, 0])
        raise ValueError(
            f"PointCloudStream.coords contains NaN/inf for {len(rows)} point(s) "
            f"(first rows: {rows[:5].tolist()}). Every point needs a finite location: drop "
            "those points or fill in their coordinates."
        )
    return coords


def _checked_timestamps(timestamps: np.ndarray, t: int) -> np.ndarray:
    """``(T,)`` strictly increasing ``datetime64`` timestamps."""
    ts = np.asarray(timestamps)
    if not np.issubdtype(ts.dtype, np.datetime64):
        try:
            ts = ts.astype("datetime64[ns]")
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"PointCloudStream.timestamps must be datetime64; got dtype {ts.dtype}."
            ) from err
    if ts.shape != (t,):
        raise ValueError(
            f"PointCloudStream.timestamps has shape {ts.shape} but values has T={t} steps; "
            f"expected shape ({t},)."
        )
    if np.isnat(ts).any():
        raise ValueError("PointCloudStream.timestamps contains NaT.")
    if t > 1 and not (np.diff(ts) > np.timedelta64(0)).all():
        raise ValueError(
            "PointCloudStream.timestamps must be strictly increasing; sort the stream by "
            "time and drop duplicate steps."
        )
    return ts


def _contiguous(array: np.ndarray, dtype: type) -> np.ndarray:
    """``array`` itself when it is C-contiguous of ``dtype`` (a memory map stays one), else a
    C-contiguous copy of that type."""
    if array.dtype == dtype and array.flags.c_contiguous:
        return array
    return np.ascontiguousarray(array, dtype=dtype)
