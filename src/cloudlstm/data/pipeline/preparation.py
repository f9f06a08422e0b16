"""The stream a datamodule windows, made ready: the source loaded, the point subset drawn,
absurd and out-of-range values refused (or made missing), moving points' positions added as
channels, the time features computed, and the scaler fitted on the training part.

What a source declares besides its stream (its ``bad_values`` mode, its ``path``, its
``physical_ranges()``) is the data-source protocol of :class:`~cloudlstm.data.cache.CachedSource`;
a bare stream, or any other object with ``load()``, declares its defaults.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cloudlstm.data.cache import CachedSource
from cloudlstm.data.covariates import stream_covariates, time_features
from cloudlstm.data.pipeline.absurd_values import (
    Range,
    check_resolution,
    checked_stream,
    merged_ranges,
)
from cloudlstm.data.pipeline.held_out import DROPPED_WHY, HoldOut
from cloudlstm.data.pipeline.model_input import positions_before_covariates
from cloudlstm.data.pipeline.split_rule import SplitRule
from cloudlstm.data.sources.times import TIMES_ZONED_KEY
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.data.transforms import StandardScaler
from cloudlstm.errors import UserError

log = logging.getLogger(__name__)

__all__ = [
    "as_source",
    "data_name",
    "fitted_scaler",
    "prepared_stream",
    "time_feature_values",
    "warn_fixed_per_point",
    "warn_flat_channels",
    "with_position_channels",
]


def as_source(source: Any) -> Any:
    """``source`` itself (a stream, or anything with ``.load()``), or the source a Hydra
    config mapping with ``_target_`` describes.

    Raises:
        TypeError: neither a stream nor anything with ``.load()``.
    """
    if isinstance(source, Mapping) and "_target_" in source:
        from hydra.utils import instantiate

        source = instantiate(source)
    if not isinstance(source, PointCloudStream) and not callable(getattr(source, "load", None)):
        raise TypeError(
            "PointCloudDataModule: source must have a .load() -> PointCloudStream method "
            f"(or be a PointCloudStream); got {type(source).__name__}."
        )
    return source


def prepared_stream(
    source: Any,
    subset: tuple[int, int] | None,
    split: SplitRule,
    max_abs_z: float | None,
    valid_ranges: Mapping[str, Range | None],
    holdout: HoldOut | None = None,
) -> PointCloudStream:
    """The stream the model sees: the source's, restricted to the point subset, checked
    for absurd and out-of-range values, with position channels for moving points.

    Args:
        source: a stream, or anything with ``.load() -> PointCloudStream``.
        subset: ``(num_points, seed)`` of a random point subset; None: every point.
        split: where the parts lie: values are checked against the training part.
        max_abs_z, valid_ranges: the datamodule's checks
            (:mod:`~cloudlstm.data.pipeline.absurd_values`).
        holdout: the points held out of training (:mod:`~cloudlstm.data.pipeline.held_out`),
            whose readings the checks take no statistics from; None: none.
    """
    stream = source if isinstance(source, PointCloudStream) else None
    if stream is None:
        stream = source.load()
    if not isinstance(stream, PointCloudStream):
        raise TypeError(
            f"{type(source).__name__}.load() must return a PointCloudStream; got "
            f"{type(stream).__name__}."
        )
    if subset is not None:
        stream = _random_subset(stream, *subset)
    train = split.bounds(stream)["train"]
    held_out = None
    if holdout is not None:
        what = data_name(source, stream)
        if subset is not None:  # the points drawn from it are what the ids must be among
            what = f"the data.num_points={subset[0]} drawn from {what}"
        dropped = {key: stream.metadata.get(key) or () for key in DROPPED_WHY}
        held_out = holdout.mask(stream.point_ids, what, dropped)
    stream = _without_absurd_values(stream, source, train, max_abs_z, valid_ranges, held_out)
    if stream.moving:
        stream = with_position_channels(stream)
    return stream


def _random_subset(stream: PointCloudStream, num_points: int, seed: int) -> PointCloudStream:
    """``num_points`` points drawn with their own generator (``seed``), in stream order."""
    if num_points > stream.num_points:
        raise UserError(
            f"PointCloudDataModule: num_points={num_points} but stream '{stream.name}' has only "
            f"{stream.num_points} points; use at most {stream.num_points} (or null for all)."
        )
    keep = np.sort(np.random.default_rng(seed).choice(stream.num_points, num_points, replace=False))
    return stream.select_points(keep)


def _without_absurd_values(
    stream: PointCloudStream,
    source: Any,
    train: tuple[int, int],
    max_abs_z: float | None,
    valid_ranges: Mapping[str, Range | None],
    held_out: np.ndarray | None = None,
) -> PointCloudStream:
    """``stream`` checked for values outside their channel's valid range and for absurd
    values (:mod:`~cloudlstm.data.pipeline.absurd_values`) against its ``train`` part (the
    ``held_out`` points' readings aside), as the source's ``bad_values`` mode says."""
    declared = CachedSource.declared_by(source)
    mode = declared.bad_values
    option = "data.source.bad_values" if mode is not None else None
    ranges = merged_ranges(declared.physical_ranges(), valid_ranges, stream.channel_names)
    return checked_stream(
        stream,
        train,
        max_abs_z,
        mode or "error",
        data_name(source, stream),
        option,
        valid_ranges=ranges,
        held_out=held_out,
    )


def data_name(source: Any, stream: PointCloudStream) -> str:
    """How messages about the data name it: its file (the source's ``path``), or else the
    stream."""
    path = CachedSource.declared_by(source).path
    return f"file {path}" if path is not None else f"stream '{stream.name}'"


def position_channels(stream: PointCloudStream) -> list[str]:
    """The names of a moving stream's position channels: ``pos_x, pos_y[, pos_z]``."""
    axes = "xyz" if stream.num_dims <= 3 else range(stream.num_dims)
    return [f"pos_{axis}" for axis in list(axes)[: stream.num_dims]]


def with_position_channels(stream: PointCloudStream) -> PointCloudStream:
    """Moving points: the L positions as channels (:func:`position_channels`), always
    observed, after the values and before the measured covariates
    (:func:`~cloudlstm.data.pipeline.model_input.positions_before_covariates`)."""
    names = position_channels(stream)
    positions = stream.trajectory.astype(np.float32)
    split = stream.num_channels - len(stream_covariates(stream.channel_names, stream.metadata))
    values = positions_before_covariates(stream.values, positions, split)
    mask = positions_before_covariates(stream.mask, np.ones(positions.shape, dtype=bool), split)
    channels = list(stream.channel_names)
    return PointCloudStream(
        values=values,
        mask=mask,
        coords=stream.coords,
        channel_names=[*channels[:split], *names, *channels[split:]],
        point_ids=stream.point_ids,
        timestamps=stream.timestamps,
        name=stream.name,
        metadata=stream.metadata,
        trajectory=stream.trajectory,
    )


def time_feature_values(
    stream: PointCloudStream, names: list[str], zone: str | None = None, source: Any = None
) -> np.ndarray | None:
    """``(T, F)`` time features ``names`` of the stream's steps (on ``zone``'s clock when
    given, see :func:`~cloudlstm.data.covariates.time_features`), or None without any.

    Warns where ``zone`` is given but the ``source`` file wrote its times as clock times
    without a zone: they are read as UTC and the features move by the zone's offset.

    Raises:
        UserError: features asked for a stream without timestamps.
    """
    if not names:
        return None
    if stream.timestamps is None:
        raise UserError(
            f"data.time_features={names} needs timestamps, but stream "
            f"'{stream.name}' has none; leave data.time_features empty."
        )
    clock_times = stream.metadata.get(TIMES_ZONED_KEY) is False
    if zone is not None and clock_times and getattr(source, "time_unit", None) is None:
        log.warning(
            "data.time_zone=%s reads the times as UTC, but %s writes them as clock times "
            "without a zone: the time features move by the zone's offset. If they are that "
            "zone's clock already, leave data.time_zone=null.",
            zone,
            data_name(source, stream),
        )
    return time_features(stream.timestamps, names, zone)


def warn_flat_channels(scaler: StandardScaler, channels: list[str], what: str) -> None:
    """Warn of each channel whose training readings do not vary (the scaler's standard
    deviation at its floor): there is nothing to forecast in it, and its test error is
    about 0 whatever the model, which a table would show as skill."""
    for k, name in enumerate(channels):
        if scaler.std[k] <= scaler.min_std:
            log.warning(
                "%s: channel %r does not vary over the training part (every reading is "
                "%.6g): there is nothing to forecast in it, and its test error will be about "
                "0 whatever the model.",
                what,
                name,
                scaler.mean[k],
            )


def warn_fixed_per_point(
    values: np.ndarray,
    mask: np.ndarray,
    scaler: StandardScaler,
    channels: list[str],
    what: str,
    positions: Sequence[str] = (),
) -> None:
    """Warn of each channel that varies between points but holds one value at each point
    over the training part ``values`` (``(T, N, C)``, observed where ``mask``): a fixed
    attribute (an elevation, a coordinate ``z`` in a file read with two), which the model
    forecasts perfectly from its inputs, so that its scores, averaged in, flatter the model.
    ``positions``: the moving points' position channels (``pos_y`` of points that move
    along x alone), which no option leaves out: their warning says where to read the
    scores without them."""
    for k, name in enumerate(channels):
        if scaler.std[k] <= scaler.min_std:
            continue  # warned of as flat
        seen = mask[..., k]
        counted = seen.sum(axis=0) >= 2
        if not counted.any():
            continue
        lo = np.where(seen, values[..., k], np.inf).min(axis=0)
        hi = np.where(seen, values[..., k], -np.inf).max(axis=0)
        if np.all(hi[counted] == lo[counted]) and name in positions:
            log.warning(
                "%s: no point moves along %r over the training part: its forecast is its "
                "input, and its near-0 errors, averaged in, flatter every model. Read the "
                "value channels' scores alone in metrics.json's per_channel (compare "
                "--channels).",
                what,
                name.removeprefix("pos_"),
            )
        elif np.all(hi[counted] == lo[counted]):
            log.warning(
                "%s: channel %r holds one value at each point over the training part (a "
                "fixed attribute, e.g. an elevation or a third coordinate): its forecast is "
                "its input, and its near-0 errors, averaged in, flatter every model. List it "
                "in data.source.coord_cols if it is a coordinate, or leave it out with "
                "data.source.value_cols.",
                what,
                name,
            )


def fitted_scaler(
    stream: PointCloudStream,
    train: tuple[int, int],
    state: dict | None,
    what: str,
    max_abs_z: float | None,
    held_out: np.ndarray | None = None,
) -> StandardScaler:
    """The scaler of the ``train`` part, fitted on its observed values (refused when it
    normalises a channel's readings to one number:
    :func:`~cloudlstm.data.pipeline.absurd_values.check_resolution`), or the one ``state``
    (:meth:`StandardScaler.to_dict`) holds.

    Args:
        stream: the prepared stream (:func:`prepared_stream`).
        train: the training part's ``[start, end)``.
        state: a run's scaler to restore instead of fitting one; None: fit.
        what: how messages name the data (:func:`data_name`).
        max_abs_z: the datamodule's absurd-value threshold, named by the resolution check.
        held_out: ``(N,)`` bool, points held out of training: the scaler does not fit
            their readings.

    Raises:
        UserError: the restored scaler has another number of channels than the stream.
    """
    tr0, tr1 = train
    if state is not None:
        scaler = StandardScaler.from_dict(state)
    else:
        mask = stream.mask[tr0:tr1]
        if held_out is not None:  # a copy: the stream's mask (maybe memory-mapped) stays
            mask = np.array(mask, dtype=bool)
            mask[:, held_out] = False
        scaler = StandardScaler().fit(stream.values[tr0:tr1], mask)
        check_resolution(stream, (tr0, tr1), scaler, what, max_abs_z, held_out)
        warn_flat_channels(scaler, stream.channel_names, what)
        positions = position_channels(stream) if stream.moving else []
        warn_fixed_per_point(
            stream.values[tr0:tr1], mask, scaler, stream.channel_names, what, positions
        )
    if scaler.num_channels != stream.num_channels:
        raise UserError(
            f"PointCloudDataModule: restored scaler has {scaler.num_channels} channels "
            f"but the stream has {stream.num_channels}."
        )
    return scaler
