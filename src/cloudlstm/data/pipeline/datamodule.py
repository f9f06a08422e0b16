"""Lightning datamodule: load a stream, split it chronologically, normalise, cut windows."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader

from cloudlstm.data.covariates import (
    check_time_features,
    stream_covariates,
    time_feature_names,
    time_features,
)
from cloudlstm.data.pipeline.absurd_values import (
    DEFAULT_MAX_ABS_Z,
    check_max_abs_z,
    check_resolution,
    check_valid_ranges,
    checked_stream,
    merged_ranges,
)
from cloudlstm.data.pipeline.outliers import dbscan_outliers, shift_outliers
from cloudlstm.data.pipeline.resumable import ResumableLoader, ShuffleSampler
from cloudlstm.data.pipeline.windows import WindowDataset, contiguous_offsets, count_windows
from cloudlstm.data.spec import DataSpec
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.data.transforms import (
    StandardScaler,
    coord_scale,
    normalize_coords,
    scale_coords,
)
from cloudlstm.engine.distributed import each_window_once
from cloudlstm.errors import UserError

__all__ = ["PointCloudDataModule", "seasonal_offsets", "split_bounds", "window_ranges"]

OUTLIER_METHODS = ("dbscan",)

SPLITS = ("train", "val", "test")


def split_bounds(
    num_steps: int, val_fraction: float, test_fraction: float
) -> dict[str, tuple[int, int]]:
    """Chronological ``[start, end)`` time ranges of the train / val / test parts.

    The test part is the last ``round(test_fraction * T)`` steps; validation is the last
    ``round(val_fraction * (T - n_test))`` steps of the rest; training is what is left.
    """
    n_test = int(round(test_fraction * num_steps))
    n_trainval = num_steps - n_test
    n_val = int(round(val_fraction * n_trainval))
    n_train = n_trainval - n_val
    return {
        "train": (0, n_train),
        "val": (n_train, n_trainval),
        "test": (n_trainval, num_steps),
    }


def window_ranges(
    bounds: Mapping[str, tuple[int, int]], history: int
) -> dict[str, tuple[int, int]]:
    """The ``[first, end)`` time range each split's windows are cut from.

    Targets stay inside the split (``bounds``). The inputs of validation and test windows
    reach up to ``history`` steps back into the part before: they were observed before the
    forecast time, as a deployed model would have them (the scaler stays fitted on the
    training part alone). So a split needs only J steps, not history + J (the paper's
    seasonal protocol: 6.8 days of validation under a 7-day input window), and every input
    form scores the same target windows. Training inputs cannot start before step 0.
    """
    return {
        split: (start if split == "train" else max(start - history, 0), end)
        for split, (start, end) in bounds.items()
    }


def seasonal_offsets(
    recent_steps: int, steps_per_day: int, days: float = 7, every_minutes: float = 120
) -> np.ndarray:
    """Input offsets of the paper's seasonal input: a sub-sampled week, then the recent steps.

    The paper concatenates the last 30 minutes (6 five-minute steps) with a 7-day window
    sampled every 2 h (84 steps), giving 90 input steps. Offsets are relative to the first
    forecast step: ``-span, -span + every, ..., -every`` (``span = days`` in steps,
    ``every = every_minutes`` in steps), then ``-recent_steps, ..., -1``. Both parts are kept
    whole even where they overlap (as the paper's concatenation does), so
    ``M = recent_steps + days * 1440 / every_minutes``.
    """
    every = steps_per_day * every_minutes / 1440.0
    span = days * steps_per_day
    if (
        every < 1
        or abs(every - round(every)) > 1e-9
        or abs(span / every - round(span / every)) > 1e-9
    ):
        raise UserError(
            f"seasonal input: a step is {1440 / steps_per_day:g} minutes, so "
            f"seasonal_every_minutes={every_minutes:g} and seasonal_days={days:g} must be whole "
            "multiples of it (and the window a whole number of samples)."
        )
    every, span = int(round(every)), int(round(span))
    week = np.arange(-span, 0, every, dtype=np.int64)
    return np.concatenate([week, contiguous_offsets(recent_steps)])


class PointCloudDataModule(LightningDataModule):
    """Datamodule over one point-cloud stream (see ``docs/design.md`` for the batch format).

    Args:
        source: any object with ``.load() -> PointCloudStream`` (a data source, e.g.
            :class:`~cloudlstm.data.sources.synthetic.SyntheticAdvectionDiffusion`), a
            :class:`PointCloudStream` itself, or a Hydra config mapping with ``_target_``
            (``data.source`` in every ``conf/data/*.yaml``: the source's own arguments).
        input_steps: M, past steps fed to the model.
        output_steps: J, future steps to predict.
        batch_size: windows per batch.
        val_fraction: fraction of the non-test steps used for validation (taken from the end).
        test_fraction: fraction of all steps used for testing (the last ones).
        stride: step between window starts (all splits).
        num_workers, pin_memory: passed to the DataLoaders.
        num_points: keep a random subset of this many points (seeded by ``subset_seed``); the
            paper uses 100 antennas for its seasonal study and 50 stations for the outliers.
        max_abs_z: observed values more than this many typical spreads from their channel's
            training median (a robust z-score) are absurd: an error naming them, or missing
            with the source's ``bad_values="warn"``; None: no check (see
            :mod:`cloudlstm.data.pipeline.absurd_values`).
        valid_ranges: ``{channel: [lo, hi]}`` (None for an open end; ``{channel: None}``: no
            check): observed values outside are refused (or missing with
            ``bad_values="warn"``), as absurd values are; these add to and replace the
            physical ranges the source declares (``physical_ranges()``).
        seasonal: feed the paper's seasonal input (:func:`seasonal_offsets`): the last
            ``input_steps`` steps plus a ``seasonal_days`` window sampled every
            ``seasonal_every_minutes``.
        outliers: ``"dbscan"`` marks DBSCAN noise points of the (normalised) coordinates as
            outliers (``dbscan_eps``, ``dbscan_min_samples``); metrics are then also reported
            separately for inliers and outliers.
        outlier_shift: the paper's controlled study: move ``outlier_count`` random points
            (``outlier_seed``) this far from the centre (normalised units, see
            :func:`cloudlstm.data.pipeline.outliers.shift_outliers`); they become the outlier group.
        score_filled: also train on and score entries that were filled by interpolation (the
            paper's protocol: it interpolates gaps and then uses the whole series). Default
            False: the batch masks mark only really observed entries, so the loss and the
            metrics ignore filled ones.
        time_features: known-future input channels from the timestamps, any of ``hour``,
            ``weekday``, ``yearday`` (sin and cos of each; see
            :mod:`cloudlstm.data.covariates`). The stream's measured covariates
            (declared by its source, e.g. ``data.source.covariates`` for Beijing) are input
            channels too; neither is forecast.

    The stream is loaded once; the scaler is fitted on the training part only (a time chunk
    at a time); coordinates are min-max normalised to [0, 1]. Windows are read from the
    stream's arrays and normalised when a batch asks for them: a stream from the cache is
    memory-mapped, so the values are never held whole in memory (a point subset and the
    position channels of moving points are in-memory copies). Each split's windows have
    their targets inside it; validation and test inputs may reach back into the part before
    (:func:`window_ranges`).
    For moving points (a stream with a ``trajectory``) the positions become L extra channels
    ``pos_*`` (scaled like values, so they are forecast and scored too) and each window's
    ``coords`` are the positions at its last input step,
    min-max normalised with the training part's range. Properties such as
    :attr:`num_channels` set the module up on first use, so a model can be sized before
    ``Trainer.fit``.
    """

    def __init__(
        self,
        source: Any,
        input_steps: int = 12,
        output_steps: int = 12,
        batch_size: int = 32,
        val_fraction: float = 0.1,
        test_fraction: float = 0.2,
        stride: int = 1,
        num_workers: int = 0,
        pin_memory: bool = False,
        num_points: int | None = None,
        subset_seed: int = 0,
        max_abs_z: float | None = DEFAULT_MAX_ABS_Z,
        valid_ranges: Mapping[str, Any] | None = None,
        seasonal: bool = False,
        seasonal_days: float = 7,
        seasonal_every_minutes: float = 120,
        outliers: str | None = None,
        dbscan_eps: float | None = None,
        dbscan_min_samples: int = 4,
        outlier_shift: float | None = None,
        outlier_count: int = 10,
        outlier_seed: int = 0,
        score_filled: bool = False,
        time_features: list[str] | None = None,
    ) -> None:
        super().__init__()
        _check_outlier_options(outliers, outlier_shift)
        _check_sizes(
            num_points,
            {
                "input_steps": input_steps,
                "output_steps": output_steps,
                "batch_size": batch_size,
                "stride": stride,
            },
        )
        _check_loading(val_fraction, test_fraction, num_workers)
        self.save_hyperparameters(ignore=["source"], logger=False)
        self.source = _as_source(source)
        self.input_steps = int(input_steps)
        self.output_steps = int(output_steps)
        self.batch_size = int(batch_size)
        self.val_fraction = float(val_fraction)
        self.test_fraction = float(test_fraction)
        self.stride = int(stride)
        self.num_workers = int(num_workers)
        self.pin_memory = bool(pin_memory)
        self.subset = None if num_points is None else (int(num_points), int(subset_seed))
        self.max_abs_z = check_max_abs_z(max_abs_z)
        self.valid_ranges = check_valid_ranges(valid_ranges)
        self.seasonal = (float(seasonal_days), float(seasonal_every_minutes)) if seasonal else None
        self.outlier_options = {
            "outliers": outliers,
            "dbscan_eps": dbscan_eps,
            "dbscan_min_samples": int(dbscan_min_samples),
            "outlier_shift": outlier_shift,
            "outlier_count": int(outlier_count),
            "outlier_seed": int(outlier_seed),
        }
        self.score_filled = bool(score_filled)
        self.time_features = check_time_features(time_features)
        self._clear()

    def _clear(self) -> None:
        """What loading and :meth:`setup` fill in, empty."""
        self.point_groups: dict[str, np.ndarray] = {}
        self._stream: PointCloudStream | None = None
        self._built = False
        self._scaler_state: dict | None = None
        self.scaler = StandardScaler()
        self.datasets: dict[str, WindowDataset | None] = dict.fromkeys(SPLITS)
        self._time_values: np.ndarray | None = None  # (T, F) time features, set in setup
        self.bounds: dict[str, tuple[int, int]] = {}  # where each split's targets lie
        self.window_bounds: dict[str, tuple[int, int]] = {}  # ... and its windows, inputs too
        self._coords: torch.Tensor | None = None
        # (lo, span, degenerate): raw -> normalised coordinates (scale_coords), set in setup
        self.coord_scale: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    # ------------------------------------------------------------------ loading / setup
    @property
    def stream(self) -> PointCloudStream:
        """The stream the model sees (loaded on first access, then kept): the source's data,
        restricted to the point subset, with position channels appended for moving points."""
        if self._stream is None:
            stream = self.source if isinstance(self.source, PointCloudStream) else None
            if stream is None:
                stream = self.source.load()
            if not isinstance(stream, PointCloudStream):
                raise TypeError(
                    f"{type(self.source).__name__}.load() must return a PointCloudStream; got "
                    f"{type(stream).__name__}."
                )
            if self.subset is not None:
                stream = _random_subset(stream, *self.subset)
            stream = self._without_absurd_values(stream)
            if stream.moving:
                stream = _with_position_channels(stream)
            self._stream = stream
        return self._stream

    def _without_absurd_values(self, stream: PointCloudStream) -> PointCloudStream:
        """``stream`` checked for values outside their channel's valid range and for absurd
        values (:mod:`~cloudlstm.data.pipeline.absurd_values`) against its training part, as
        the source's ``bad_values`` mode says."""
        train = split_bounds(stream.num_steps, self.val_fraction, self.test_fraction)["train"]
        mode = getattr(self.source, "bad_values", None)
        what = self._what(stream)
        option = "data.source.bad_values" if mode is not None else None
        declared = getattr(self.source, "physical_ranges", None)
        ranges = merged_ranges(
            declared() if callable(declared) else {}, self.valid_ranges, stream.channel_names
        )
        return checked_stream(
            stream, train, self.max_abs_z, mode or "error", what, option, valid_ranges=ranges
        )

    def _what(self, stream: PointCloudStream) -> str:
        """How messages about the data name it: its file, or else the stream."""
        path = getattr(self.source, "path", None)
        return f"file {path}" if path is not None else f"stream '{stream.name}'"

    @property
    def steps_per_day(self) -> int | None:
        """Steps in one day (for seasonal inputs and seasonal baselines); None if unknown."""
        return self.stream.steps_per_day()

    def prepare_data(self) -> None:
        # Generates / downloads (and caches) the data; loads it only once per process.
        _ = self.stream

    def setup(self, stage: str | None = None) -> None:
        """Split the stream, fit (or restore) the scaler, normalise the coordinates and cut
        each split's windows; once (later calls do nothing)."""
        if self._built:
            return
        stream = self.stream
        self.bounds = split_bounds(stream.num_steps, self.val_fraction, self.test_fraction)
        self.window_bounds = window_ranges(self.bounds, self.history_steps)
        self._check_split_lengths(stream)
        self.scaler = self._fitted_scaler(stream)
        track = self._set_coords(stream)
        self._time_values = self._time_feature_values(stream)
        # No normalised copy of the values: each window is read from the stream (memory-mapped
        # when it comes from the cache) and normalised when it is asked for; filled
        # (interpolated) values are kept, only entries with no value at all become 0.
        mask = None if self.score_filled else stream.mask  # None: every finite value counts
        offsets, span = self.input_offsets, self.history_steps + self.output_steps
        for split, (first, end) in self.window_bounds.items():
            if end - first < span:
                self.datasets[split] = None
                continue
            self.datasets[split] = WindowDataset(
                stream.values,
                mask,
                self._coords,
                len(offsets),
                self.output_steps,
                stride=self.stride,
                start=first,
                end=end,
                input_offsets=offsets,
                coords_track=track,
                return_index=split == "test",  # "t0": orders test windows gathered from ranks
                scaler=self.scaler,
                check_mask=False,  # PointCloudStream checked it
                num_targets=self.num_channels,
                time_features=self._time_values,
            )
        self._built = True

    def _check_split_lengths(self, stream: PointCloudStream) -> None:
        """A ``UserError`` when a split holds no window (a split with a zero fraction may)."""
        h, j = self.history_steps, self.output_steps
        span = h + j
        for split, (first, end) in self.window_bounds.items():
            start = self.bounds[split][0]
            optional = (split == "val" and self.val_fraction == 0) or (
                split == "test" and self.test_fraction == 0
            )
            if end - first >= span or optional:
                continue
            need = (
                f"input_steps + output_steps = {h} + {j} = {span} (input_steps counts the "
                "whole history a window reaches back)"
                if split == "train"
                else f"output_steps = {j} (its inputs reach back into the part before)"
            )
            raise UserError(
                f"PointCloudDataModule: the {split} part of stream '{stream.name}' has "
                f"{end - start} steps (of T={stream.num_steps}), but one window needs "
                f"{need}. Use a longer stream, shorter windows, or different val/test "
                "fractions."
            )

    def _time_feature_values(self, stream: PointCloudStream) -> np.ndarray | None:
        """``(T, F)`` time features of the stream's steps, or None without any."""
        if not self.time_features:
            return None
        if stream.timestamps is None:
            raise UserError(
                f"data.time_features={self.time_features} needs timestamps, but stream "
                f"'{stream.name}' has none; leave data.time_features empty."
            )
        return time_features(stream.timestamps, self.time_features)

    def _fitted_scaler(self, stream: PointCloudStream) -> StandardScaler:
        """The training part's scaler (refused when it normalises a channel's readings to
        one number: :func:`~cloudlstm.data.pipeline.absurd_values.check_resolution`), or the
        one given to :meth:`use_scaler`."""
        tr0, tr1 = self.bounds["train"]
        if self._scaler_state is not None:
            scaler = StandardScaler.from_dict(self._scaler_state)
        else:
            scaler = StandardScaler().fit(stream.values[tr0:tr1], stream.mask[tr0:tr1])
            check_resolution(stream, (tr0, tr1), scaler, self._what(stream), self.max_abs_z)
        if scaler.num_channels != stream.num_channels:
            raise UserError(
                f"PointCloudDataModule: restored scaler has {scaler.num_channels} channels "
                f"but the stream has {stream.num_channels}."
            )
        return scaler

    def _set_coords(self, stream: PointCloudStream) -> torch.Tensor | None:
        """Set :attr:`coords`, :attr:`coord_scale` and the point groups; returns the
        ``(T, N, L)`` normalised positions of moving points (``None`` for static ones).

        Moving points are scaled with the training part's range; static ones min-max
        normalised, then the outlier options applied."""
        if stream.moving:
            tr1 = self.bounds["train"][1]
            self.coord_scale = _track_scale(stream.trajectory, tr1)
            track = torch.as_tensor(_normalize_track(stream.trajectory, tr1), dtype=torch.float32)
            self._coords = track[0]
            return track
        self.coord_scale = coord_scale(stream.coords)
        coords, self.point_groups = self._outliers(normalize_coords(stream.coords))
        self._coords = torch.as_tensor(coords, dtype=torch.float32)
        return None

    def _outliers(self, coords: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Apply the outlier options to normalised coords: (coords, {"inliers", "outliers"})."""
        opts = self.outlier_options
        if opts["outliers"] == "dbscan":
            mask = dbscan_outliers(coords, opts["dbscan_eps"], opts["dbscan_min_samples"])
        elif opts["outlier_shift"] is not None:
            coords, mask = shift_outliers(
                coords, float(opts["outlier_shift"]), opts["outlier_count"], opts["outlier_seed"]
            )
        else:
            return coords, {}
        return coords, {"inliers": ~mask, "outliers": mask}

    @property
    def input_offsets(self) -> np.ndarray:
        """Each window's input steps relative to its first target step: ``-M, ..., -1``, or
        the seasonal ones (:func:`seasonal_offsets`)."""
        if self.seasonal is None:
            return contiguous_offsets(self.input_steps)
        if self.steps_per_day is None:
            raise UserError(
                f"PointCloudDataModule: seasonal=true needs the sampling period of stream "
                f"'{self.stream.name}', but it has no timestamps or step_minutes metadata."
            )
        return seasonal_offsets(self.input_steps, self.steps_per_day, *self.seasonal)

    @property
    def history_steps(self) -> int:
        """How far back (in steps) a window's input reaches: M, or more for seasonal input."""
        return int(-self.input_offsets.min())

    @property
    def model_input_steps(self) -> int:
        """Steps in each window's ``x`` (what models are built for): M, or M + the seasonal part."""
        return len(self.input_offsets)

    def _ensure_setup(self) -> None:
        if not self._built:
            self.setup()

    # ------------------------------------------------------------------ properties
    @property
    def coords(self) -> torch.Tensor:
        """``(N, L)`` normalised coordinates (float32)."""
        self._ensure_setup()
        return self._coords

    @property
    def num_points(self) -> int:
        return self.stream.num_points

    @property
    def num_channels(self) -> int:
        """C_out, the channels forecast and scored (the stream's, less its covariates)."""
        return len(self.channel_names)

    @property
    def num_dims(self) -> int:
        return self.stream.num_dims

    @property
    def channel_names(self) -> list[str]:
        """The C_out target channels: values, then (moving points) positions."""
        stream = self.stream
        return list(stream.channel_names[: stream.num_channels - len(self.covariate_names)])

    @property
    def covariate_names(self) -> list[str]:
        """The stream's measured covariates: input channels after the targets."""
        stream = self.stream
        return stream_covariates(stream.channel_names, stream.metadata)

    @property
    def train_dataset(self) -> WindowDataset | None:
        self._ensure_setup()
        return self.datasets["train"]

    @property
    def val_dataset(self) -> WindowDataset | None:
        self._ensure_setup()
        return self.datasets["val"]

    @property
    def test_dataset(self) -> WindowDataset | None:
        self._ensure_setup()
        return self.datasets["test"]

    # ------------------------------------------------------------------ loaders
    def _loader(self, split: str, shuffle: bool, each_once: bool = False) -> DataLoader | list:
        """The split's loader; ``each_once``: under DDP every window on exactly one rank."""
        self._ensure_setup()
        dataset = self.datasets[split]
        if dataset is None:  # the split was disabled with a zero fraction
            return []
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            sampler=each_window_once(dataset, self.trainer) if each_once else None,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.num_workers > 0,
            drop_last=False,
        )

    def train_dataloader(self) -> ResumableLoader:
        """Shuffled anew each epoch; a checkpoint holds where the epoch stands, so a run
        resumed mid-epoch continues it exactly (:mod:`cloudlstm.data.pipeline.resumable`)."""
        dataset = self.train_dataset
        # Under DDP Lightning puts in its DistributedSampler (shuffled by seed and epoch).
        ddp = self.trainer is not None and self.trainer.world_size > 1
        return ResumableLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=ddp,
            sampler=None if ddp else ShuffleSampler(len(dataset)),
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.num_workers > 0,
            drop_last=False,
            progress=self._train_progress,
        )

    def _train_progress(self) -> tuple[int, float] | None:
        """The trainer's progress through its epoch: (batches finished, batches an epoch
        takes); None without a trainer."""
        trainer = self.trainer
        if trainer is None:
            return None
        done = trainer.fit_loop.epoch_loop.batch_progress.current.processed
        return done, trainer.num_training_batches

    def val_dataloader(self) -> DataLoader | list:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader | list:
        # Not shuffled: windows come in chronological order. Under DDP no window is repeated
        # to even out the ranks, so none is scored twice (cloudlstm.engine.distributed).
        return self._loader("test", shuffle=False, each_once=True)

    def predict_dataloader(self) -> DataLoader | list:
        return self._loader("test", shuffle=False)

    # ------------------------------------------------------------------ description
    @property
    def spec(self) -> DataSpec:
        """The data's description (:class:`~cloudlstm.data.spec.DataSpec`): what models,
        the training module and checkpoints know of the data. Needs the module set up."""
        self._ensure_setup()
        return DataSpec.from_datamodule(self)

    def use_scaler(self, scaler: dict[str, Any]) -> None:
        """Normalise with ``scaler`` (:meth:`StandardScaler.to_dict`, a training run's)
        instead of fitting one: call before :meth:`setup`. Checkpoints hold the scaler in
        their :class:`DataSpec`, not in a datamodule state of their own."""
        self._scaler_state = dict(scaler)
        self.scaler = StandardScaler.from_dict(self._scaler_state)

    # ------------------------------------------------------------------ summary
    def summary(self) -> dict[str, Any]:
        """Sizes of the data and of each split (all plain Python types)."""
        self._ensure_setup()
        stream = self.stream
        steps = {s: e - b for s, (b, e) in self.bounds.items()}
        windows = {
            s: count_windows(e - b, self.history_steps, self.output_steps, self.stride)
            for s, (b, e) in self.window_bounds.items()
        }
        ids = np.asarray(stream.point_ids)
        extras = {k: v for k, v in stream.metadata.items() if k != "generator"}
        return {
            "name": stream.name,
            "num_points": stream.num_points,
            "num_channels": self.num_channels,
            "num_dims": stream.num_dims,
            "channel_names": self.channel_names,
            "covariates": self.covariate_names,
            "time_features": time_feature_names(self.time_features),
            "total_steps": stream.num_steps,
            "steps": steps,
            "windows": windows,
            "bounds": {s: list(b) for s, b in self.bounds.items()},
            "window_bounds": {s: list(b) for s, b in self.window_bounds.items()},
            "missing_fraction": stream.missing_fraction,
            "score_filled": self.score_filled,
            "input_steps": self.model_input_steps,
            "history_steps": self.history_steps,
            "output_steps": self.output_steps,
            "stride": self.stride,
            "steps_per_day": self.steps_per_day,
            "moving": stream.moving,
            "seasonal": self.seasonal is not None,
            "subset": None if self.subset is None else list(self.subset),
            "point_groups": {g: ids[m].tolist() for g, m in self.point_groups.items()},
            "source_metadata": _plain(extras),
        }

    def print_summary(self, console: Any = None) -> None:
        """Print :meth:`summary` as a small rich table."""
        from rich.console import Console
        from rich.table import Table

        info = self.summary()
        table = Table(title=f"data: {info['name']}", show_header=True, header_style="bold")
        table.add_column("item")
        table.add_column("value", justify="right")
        table.add_row("points N", str(info["num_points"]))
        table.add_row("channels C", f"{info['num_channels']} ({', '.join(info['channel_names'])})")
        inputs = [*info["covariates"], *info["time_features"]]
        if inputs:
            table.add_row("input-only channels", ", ".join(inputs))
        table.add_row("total steps T", str(info["total_steps"]))
        window = f"{info['input_steps']} -> {info['output_steps']}"
        if info["seasonal"]:
            window += f" (seasonal, reaching back {info['history_steps']} steps)"
        table.add_row("window M -> J", window)
        if info["moving"]:
            table.add_row("moving points", "positions are forecast as pos_* channels")
        for group, ids in info["point_groups"].items():
            table.add_row(
                group, f"{len(ids)}" + (f": {', '.join(ids[:12])}" if group == "outliers" else "")
            )
        table.add_row("missing", f"{info['missing_fraction']:.2%}")
        for split in SPLITS:
            b, e = info["bounds"][split]
            table.add_row(
                f"{split}",
                f"steps [{b}, {e}) = {info['steps'][split]}, windows {info['windows'][split]}",
            )
        (console or Console()).print(table)

    def __repr__(self) -> str:
        return (
            f"PointCloudDataModule(source={self.source!r}, M={self.input_steps}, "
            f"J={self.output_steps}, batch_size={self.batch_size})"
        )


def _check_outlier_options(outliers: str | None, outlier_shift: float | None) -> None:
    if outliers is not None and outliers not in OUTLIER_METHODS:
        raise UserError(
            f"PointCloudDataModule: unknown outliers={outliers!r}; use one of "
            f"{OUTLIER_METHODS} or null."
        )
    if outliers is not None and outlier_shift is not None:
        raise UserError(
            "PointCloudDataModule: choose either outliers=dbscan (find outliers) or "
            "outlier_shift=<d> (make them), not both."
        )


def _check_sizes(num_points: int | None, counts: Mapping[str, Any]) -> None:
    """The point subset and every count of ``counts`` (window steps, batch size, stride)."""
    if num_points is not None and (isinstance(num_points, bool) or num_points < 1):
        raise UserError(f"PointCloudDataModule: num_points must be >= 1; got {num_points}.")
    for name, value in counts.items():
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise UserError(f"PointCloudDataModule: {name} must be an integer >= 1; got {value}.")


def _check_loading(val_fraction: float, test_fraction: float, num_workers: int) -> None:
    for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not (math.isfinite(value) and 0.0 <= value < 1.0):
            raise UserError(f"PointCloudDataModule: {name} must be in [0, 1); got {value}.")
    if int(num_workers) != num_workers or num_workers < 0:
        raise UserError(f"PointCloudDataModule: num_workers must be >= 0; got {num_workers}.")


def _as_source(source: Any) -> Any:
    """``source`` itself (a stream, or anything with ``.load()``), or the source a Hydra
    config mapping with ``_target_`` describes."""
    if isinstance(source, Mapping) and "_target_" in source:
        from hydra.utils import instantiate

        source = instantiate(source)
    if not isinstance(source, PointCloudStream) and not callable(getattr(source, "load", None)):
        raise TypeError(
            "PointCloudDataModule: source must have a .load() -> PointCloudStream method "
            f"(or be a PointCloudStream); got {type(source).__name__}."
        )
    return source


def _random_subset(stream: PointCloudStream, num_points: int, seed: int) -> PointCloudStream:
    if num_points > stream.num_points:
        raise UserError(
            f"PointCloudDataModule: num_points={num_points} but stream '{stream.name}' has only "
            f"{stream.num_points} points; use at most {stream.num_points} (or null for all)."
        )
    keep = np.sort(np.random.default_rng(seed).choice(stream.num_points, num_points, replace=False))
    return stream.select_points(keep)


def _with_position_channels(stream: PointCloudStream) -> PointCloudStream:
    """Moving points: append the L positions as channels ``pos_x, pos_y[, pos_z]``."""
    axes = "xyz" if stream.num_dims <= 3 else range(stream.num_dims)
    names = [f"pos_{axis}" for axis in list(axes)[: stream.num_dims]]
    positions = stream.trajectory.astype(np.float32)
    # before the measured covariates, which stay the last (input-only) channels
    split = stream.num_channels - len(stream_covariates(stream.channel_names, stream.metadata))
    values = np.concatenate([stream.values[..., :split], positions, stream.values[..., split:]], -1)
    known = np.ones(positions.shape, dtype=bool)
    mask = np.concatenate([stream.mask[..., :split], known, stream.mask[..., split:]], -1)
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


def _normalize_track(trajectory: np.ndarray, train_end: int) -> np.ndarray:
    """Min-max normalise ``(T, N, L)`` positions with the range seen in the training part.

    Later positions may leave [0, 1] slightly; they are not clipped (clipping would pile
    points up on the border and break their neighbourhoods).
    """
    return scale_coords(trajectory, *_track_scale(trajectory, train_end))


def _track_scale(
    trajectory: np.ndarray, train_end: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(lo, span, degenerate)`` of :func:`_normalize_track`: the training part's range."""
    seen = trajectory[: max(train_end, 1)].reshape(-1, trajectory.shape[-1])
    lo, hi = seen.min(axis=0), seen.max(axis=0)
    span = np.where(hi - lo > 1e-12, hi - lo, 1.0)
    return lo, span, np.zeros(len(lo), dtype=bool)


def _plain(value: Any) -> Any:
    """JSON-friendly copy of metadata (numpy scalars/arrays to Python)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value
