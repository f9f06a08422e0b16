"""The Lightning datamodule: a stream split chronologically, normalised and cut into windows.

:class:`PointCloudDataModule` ties the pipeline's modules together, one job each:
:mod:`~cloudlstm.data.pipeline.preparation` (the source loaded and checked, the scaler),
:mod:`~cloudlstm.data.pipeline.splits` (the parts and the input steps),
:mod:`~cloudlstm.data.pipeline.coordinates` (what the model sees of the points' places),
:mod:`~cloudlstm.data.pipeline.windows` (the windows), :mod:`~cloudlstm.data.pipeline.loaders`
(the batches) and :mod:`~cloudlstm.data.pipeline.summary` (what it says of the data).
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader

from cloudlstm.data.covariates import check_time_features, check_time_zone, stream_covariates
from cloudlstm.data.pipeline.absurd_values import (
    DEFAULT_MAX_ABS_Z,
    check_max_abs_z,
    check_valid_ranges,
)
from cloudlstm.data.pipeline.coordinates import CoordScale, check_outlier_options, model_coords
from cloudlstm.data.pipeline.held_out import check_holdout, held_out_groups
from cloudlstm.data.pipeline.loaders import (
    each_window_once,
    epoch_progress,
    move_epoch_progress,
    ordered_loader,
    training_loader,
)
from cloudlstm.data.pipeline.options import (
    check_study_options,
    check_switch,
    check_whole,
    warn_idle_options,
)
from cloudlstm.data.pipeline.preparation import (
    as_source,
    data_name,
    fitted_scaler,
    prepared_stream,
    time_feature_values,
)
from cloudlstm.data.pipeline.resumable import ResumableLoader
from cloudlstm.data.pipeline.split_rule import SplitRule
from cloudlstm.data.pipeline.splits import (
    SPLITS,
    check_observed_targets,
    check_split_lengths,
    seasonal_input_offsets,
    warn_unread_points,
    window_ranges,
)
from cloudlstm.data.pipeline.summary import print_summary, summary
from cloudlstm.data.pipeline.windows import WindowDataset, contiguous_offsets
from cloudlstm.data.spec import DataSpec
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.data.transforms import StandardScaler
from cloudlstm.errors import UserError

__all__ = ["PointCloudDataModule"]


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
        split_times: instead of the fractions, the times at which the parts begin:
            ``{"val": ..., "test": ...}``, optionally ``"train"`` (where training begins) and
            ``"end"`` (where the test ends) (:mod:`~cloudlstm.data.pipeline.split_rule`).
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
        seasonal: feed the paper's seasonal input
            (:func:`~cloudlstm.data.pipeline.splits.seasonal_offsets`): the last
            ``input_steps`` steps plus a ``seasonal_days`` window sampled every
            ``seasonal_every_minutes``.
        outliers: ``"dbscan"`` marks DBSCAN noise points of the (normalised) coordinates as
            outliers (``dbscan_eps``, ``dbscan_min_samples``); metrics are then also reported
            separately for inliers and outliers.
        outlier_shift: the paper's controlled study: move ``outlier_count`` random points
            (``outlier_seed``) this far from the centre (normalised units, see
            :func:`cloudlstm.data.pipeline.outliers.shift_outliers`); they become the outlier group.
        score_filled: also train on and score entries that were filled (a filled target
            equals the series' last reading, which favours persistence; the paper's protocol
            fills gaps and then uses the whole series). Default False: the batch masks mark
            only really observed entries, so the loss and the metrics ignore filled ones.
        time_features: known-future input channels from the timestamps, any of ``hour``,
            ``weekday``, ``yearday`` (sin and cos of each; see
            :mod:`cloudlstm.data.covariates`). The stream's measured covariates
            (declared by its source, e.g. ``data.source.covariates`` for Beijing) are input
            channels too; neither is forecast.
        time_zone: the IANA zone whose clock the time features follow (``Europe/Rome``): the
            stream's times are read as UTC and the features take the zone's offset of each
            day, daylight saving included. None: the times as read (clock times where the
            file wrote them without a zone, UTC where it wrote offsets or Unix times).
        holdout_points: points held out of training (:mod:`cloudlstm.data.pipeline.held_out`):
            a fraction in (0, 1) or a number of points, drawn with ``holdout_seed``, or a
            list of point ids; None: none. Their readings never reach a training or
            validation window (0 with masks False) nor the scaler; test metrics score them
            as the point group ``held_out`` beside ``trained``.
        holdout_history: test inputs hold the held-out points' own readings; False: none
            (the forecast comes from the other points alone).

    The stream is loaded once; the scaler is fitted on the training part only (a time chunk
    at a time); coordinates are min-max normalised to [0, 1]. Windows are read from the
    stream's arrays and normalised when a batch asks for them: a stream from the cache is
    memory-mapped, so the values are never held whole in memory (a point subset and the
    position channels of moving points are in-memory copies). Each split's windows have
    their targets inside it; validation and test inputs may reach back into the part before
    (:func:`~cloudlstm.data.pipeline.splits.window_ranges`).
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
        split_times: Mapping[str, Any] | None = None,
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
        time_zone: str | None = None,
        holdout_points: Any = None,
        holdout_seed: int = 0,
        holdout_history: bool = True,
    ) -> None:
        super().__init__()
        check_outlier_options(outliers, outlier_shift)
        check_study_options(
            seasonal,
            seasonal_days,
            seasonal_every_minutes,
            (dbscan_eps, dbscan_min_samples),
            (outlier_shift, outlier_count, outlier_seed),
        )
        self.holdout = check_holdout(holdout_points, holdout_seed, holdout_history)
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
        self.source = as_source(source)
        self.input_steps = int(input_steps)
        self.output_steps = int(output_steps)
        self.batch_size = int(batch_size)
        self.val_fraction = float(val_fraction)
        self.test_fraction = float(test_fraction)
        self.split = SplitRule(self.val_fraction, self.test_fraction, split_times)
        self.stride = int(stride)
        self.num_workers = int(num_workers)
        self.pin_memory = check_switch("pin_memory", pin_memory)
        subset_seed = check_whole("subset_seed", subset_seed, 0)
        self.subset = None if num_points is None else (int(num_points), subset_seed)
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
        self.score_filled = check_switch("score_filled", score_filled)
        self.time_features = check_time_features(time_features)
        self.time_zone = check_time_zone(time_zone)
        warn_idle_options(
            _changed_options(self.hparams),
            {
                "data.seasonal=true": seasonal,
                "data.outliers=dbscan": outliers == "dbscan",
                "data.outlier_shift=<distance>": outlier_shift is not None,
                "data.time_features=[hour]": bool(self.time_features),
                "data.num_points=<count>": num_points is not None,
            },
        )
        self._clear()

    def _clear(self) -> None:
        """What loading and :meth:`setup` fill in, empty."""
        self.point_groups: dict[str, np.ndarray] = {}
        self.held_out: np.ndarray | None = None  # (N,) bool, set in setup with holdout_points
        self._stream: PointCloudStream | None = None
        self._built = False
        self._scaler_state: dict | None = None
        self._trained_coord_scale: CoordScale | None = None
        self.scaler = StandardScaler()
        self.datasets: dict[str, WindowDataset | None] = dict.fromkeys(SPLITS)
        self._time_values: np.ndarray | None = None  # (T, F) time features, set in setup
        self.bounds: dict[str, tuple[int, int]] = {}  # where each split's targets lie
        self.window_bounds: dict[str, tuple[int, int]] = {}  # ... and its windows, inputs too
        self._coords: torch.Tensor | None = None
        # (lo, span, degenerate): raw -> normalised coordinates (scale_coords), set in setup
        self.coord_scale: CoordScale | None = None

    # ------------------------------------------------------------------ loading / setup
    @property
    def stream(self) -> PointCloudStream:
        """The stream the model sees (loaded on first access, then kept): the source's data,
        restricted to the point subset, with position channels appended for moving points
        (:func:`~cloudlstm.data.pipeline.preparation.prepared_stream`)."""
        if self._stream is None:
            self._stream = prepared_stream(
                self.source,
                self.subset,
                self.split,
                self.max_abs_z,
                self.valid_ranges,
                self.holdout,
            )
        return self._stream

    @property
    def steps_per_day(self) -> int | None:
        """Steps in one day (for seasonal inputs and seasonal baselines); None if unknown."""
        return self.stream.steps_per_day()

    def prepare_data(self) -> None:
        # Generates / downloads (and caches) the data; loads it only once per process.
        _ = self.stream

    def _windowed_splits(self) -> list[str]:
        """The splits long enough for a window (an optional one may be shorter)."""
        span = self.history_steps + self.output_steps
        return [s for s, (first, end) in self.window_bounds.items() if end - first >= span]

    def _optional_splits(self) -> set[str]:
        """The splits that may hold no window: those given a zero fraction, and, where the
        data serve a trained run's evaluation (its scaler given), all but the test part:
        new data may be all test (``data.test_fraction=1``)."""
        if self._scaler_state is not None:
            return {*self.split.optional, "train", "val"}
        return self.split.optional

    def _scored_splits(self) -> list[str]:
        """The splits whose targets are trained on or scored: the windowed ones, or, with a
        trained run's scaler (:meth:`use_scaler`: the data serve its evaluation), the test
        part alone."""
        splits = self._windowed_splits()
        return [s for s in splits if s == "test"] if self._scaler_state is not None else splits

    def setup(self, stage: str | None = None) -> None:
        """Split the stream, fit (or restore) the scaler, normalise the coordinates and cut
        each split's windows; once (later calls do nothing)."""
        if self._built:
            return
        stream = self.stream
        self.bounds = self.split.bounds(stream)
        self.split.warn_between_steps(stream)
        self.window_bounds = window_ranges(self.bounds, self.history_steps)
        check_split_lengths(
            self.bounds,
            self.window_bounds,
            self.history_steps,
            self.output_steps,
            self._optional_splits(),
            stream.name,
            stream.num_steps,
            self._history_words(),
        )
        if not self.score_filled:
            check_observed_targets(
                stream.mask,
                self.bounds,
                self.num_channels,
                self._scored_splits(),
                stream.name,
                stream.missing_fraction,
                stream.timestamps,
            )
        warn_unread_points(
            stream.mask,
            self.bounds,
            self.num_channels,
            self._scored_splits(),
            stream.point_ids,
            stream.name,
            self.score_filled,
            stream.timestamps,
        )
        if self.holdout is not None:
            what = data_name(self.source, stream)
            self.held_out = self.holdout.mask(stream.point_ids, what)
            targets = stream.mask[..., : self.num_channels]  # a view: covariates are not scored
            trained = self._scaler_state is not None  # a trained run's evaluation
            self.holdout.check_scored(
                self.held_out,
                targets,
                self.bounds["test"],
                stream.point_ids,
                what,
                trained,
                self.score_filled,
            )
        self.scaler = fitted_scaler(
            stream,
            self.bounds["train"],
            self._scaler_state,
            data_name(self.source, stream),
            self.max_abs_z,
            self.held_out,
        )
        self._coords, track, self.coord_scale, self.point_groups = model_coords(
            stream, self.bounds["train"][1], self.outlier_options, self._trained_coord_scale
        )
        if self.held_out is not None:
            self.point_groups = {**self.point_groups, **held_out_groups(self.held_out)}
        self._time_values = time_feature_values(
            stream, self.time_features, self.time_zone, self.source
        )
        # No normalised copy of the values: each window is read from the stream (memory-mapped
        # when it comes from the cache) and normalised when it is asked for; filled
        # (last-reading) values are kept, only entries with no value at all become 0.
        mask = None if self.score_filled else stream.mask  # None: every finite value counts
        offsets = self.input_offsets
        windowed = self._windowed_splits()
        for split, (first, end) in self.window_bounds.items():
            if split not in windowed:
                self.datasets[split] = None
                continue
            hide_inputs, hide_targets = self._hidden(split)
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
                hide_inputs=hide_inputs,
                hide_targets=hide_targets,
            )
        self._built = True

    def _hidden(self, split: str) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The points whose readings a ``split`` window hides from its input and from its
        target (:meth:`~cloudlstm.data.pipeline.held_out.HoldOut.hidden`); None: none."""
        if self.held_out is None:
            return None, None
        return self.holdout.hidden(split, self.held_out)

    @property
    def input_offsets(self) -> np.ndarray:
        """Each window's input steps relative to its first target step: ``-M, ..., -1``, or
        the seasonal ones (:func:`~cloudlstm.data.pipeline.splits.seasonal_offsets`)."""
        if self.seasonal is None:
            return contiguous_offsets(self.input_steps)
        return seasonal_input_offsets(
            self.input_steps, self.steps_per_day, self.seasonal, self.stream.name
        )

    def _history_words(self) -> str:
        """What makes up the history a window reaches back, as its settings name it."""
        if self.seasonal is None:
            return f"data.input_steps={self.input_steps}"
        days = f"{self.seasonal[0]:g}"
        return (
            f"data.input_steps={self.input_steps} and, with data.seasonal=true, the "
            f"data.seasonal_days={days} days before them"
        )

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
    def train_dataloader(self) -> ResumableLoader:
        """Shuffled anew each epoch; a checkpoint holds where the epoch stands, so a run
        resumed mid-epoch continues it exactly (:mod:`cloudlstm.data.pipeline.resumable`)."""
        return training_loader(
            self.train_dataset,
            self.batch_size,
            self.num_workers,
            self.pin_memory,
            self.trainer,
            self._train_progress,
            self._move_train_progress,
        )

    def _train_progress(self) -> tuple[int, float] | None:
        """The trainer's progress through its epoch, read when it is asked for
        (:func:`~cloudlstm.data.pipeline.loaders.epoch_progress`)."""
        return epoch_progress(self.trainer)

    def _move_train_progress(self, batches: int) -> None:
        """Move the trainer's count of its epoch's batches (a resumed pass continues
        elsewhere than it says: :func:`~cloudlstm.data.pipeline.loaders.move_epoch_progress`)."""
        if self.trainer is not None:
            move_epoch_progress(self.trainer, batches)

    def val_dataloader(self) -> DataLoader | list:
        # as the test loader's: under DDP every window scored once, as in one process
        dataset = self.val_dataset
        sampler = None if dataset is None else each_window_once(dataset, self.trainer)
        return ordered_loader(dataset, self.batch_size, self.num_workers, self.pin_memory, sampler)

    def test_dataloader(self) -> DataLoader | list:
        # Not shuffled: windows come in chronological order. Under DDP no window is repeated
        # to even out the ranks, so none is scored twice (loaders.each_window_once).
        dataset = self.test_dataset
        sampler = None if dataset is None else each_window_once(dataset, self.trainer)
        return ordered_loader(dataset, self.batch_size, self.num_workers, self.pin_memory, sampler)

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
        their :class:`DataSpec`, not in a datamodule state of their own. The data then serve
        that run's evaluation: only their test part must hold observed targets."""
        self._scaler_state = dict(scaler)
        self.scaler = StandardScaler.from_dict(self._scaler_state)

    def use_point_order(self, point_ids: Sequence[Any]) -> bool:
        """Put the data's points in the order of ``point_ids`` (a training run's) where they
        are the same points in another order (a wide table's columns reordered): a model
        tied to its points reads each by its place, and a point model sees the points as
        its run did. Call before :meth:`setup`. Returns whether the order changed."""
        stream = self.stream
        have = [str(p) for p in stream.point_ids]
        want = [str(p) for p in point_ids]
        if have == want or len(set(have)) != len(have) or sorted(have) != sorted(want):
            return False
        place = {p: i for i, p in enumerate(have)}
        self._stream = stream.select_points([place[p] for p in want])
        return True

    def use_coord_scale(self, lo: Any, span: Any, degenerate: Any) -> None:
        """Place positions as a training run did (its :class:`DataSpec`'s ``coord_lo``,
        ``coord_span``, ``coord_degenerate``, each ``(L,)``) instead of scaling them to
        their own range: call before :meth:`setup`. Evaluating on other positions then
        feeds the model the geometry it learned, as ``predict.py`` does."""
        self._trained_coord_scale = (np.asarray(lo), np.asarray(span), np.asarray(degenerate))

    def summary(self) -> dict[str, Any]:
        """Sizes of the data and of each split (all plain Python types;
        :func:`~cloudlstm.data.pipeline.summary.summary`)."""
        self._ensure_setup()
        return summary(self)

    def print_summary(self, console: Any = None) -> None:
        """Print :meth:`summary` as a small rich table."""
        print_summary(self.summary(), console)

    def __repr__(self) -> str:
        return (
            f"PointCloudDataModule(source={self.source!r}, M={self.input_steps}, "
            f"J={self.output_steps}, batch_size={self.batch_size})"
        )


def _changed_options(given: Mapping[str, Any]) -> dict[str, Any]:
    """The datamodule's options ``given`` another value than their defaults."""
    defaults = inspect.signature(PointCloudDataModule.__init__).parameters
    return {
        name: value
        for name, value in given.items()
        if name in defaults and value != defaults[name].default
    }


def _check_sizes(num_points: int | None, counts: Mapping[str, Any]) -> None:
    """The point subset and every count of ``counts`` (window steps, batch size, stride)."""
    if num_points is not None and (isinstance(num_points, bool) or num_points < 1):
        raise UserError(f"PointCloudDataModule: num_points must be >= 1; got {num_points}.")
    for name, value in counts.items():
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise UserError(f"PointCloudDataModule: {name} must be an integer >= 1; got {value}.")


def _check_loading(val_fraction: float, test_fraction: float, num_workers: int) -> None:
    """The split fractions (validation in [0, 1), test in [0, 1]: all of the data, for the
    evaluation of a trained run on new data) and the loaders' worker count (>= 0)."""
    if not (math.isfinite(val_fraction) and 0.0 <= val_fraction < 1.0):
        raise UserError(
            f"PointCloudDataModule: val_fraction must be in [0, 1); got {val_fraction}."
        )
    if not (math.isfinite(test_fraction) and 0.0 <= test_fraction <= 1.0):
        raise UserError(
            f"PointCloudDataModule: test_fraction must be in [0, 1]; got {test_fraction}."
        )
    if int(num_workers) != num_workers or num_workers < 0:
        raise UserError(f"PointCloudDataModule: num_workers must be >= 0; got {num_workers}.")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    # each worker is a process with its own copy of the dataset: far more than the CPUs
    # run no faster and exhaust the memory (1000 workers were killed for it)
    if cpus and num_workers > 4 * cpus:
        raise UserError(
            f"PointCloudDataModule: num_workers={num_workers} loader processes for the {cpus} "
            f"CPU(s) this job may use: give at most {4 * cpus}, e.g. data.num_workers="
            f"{min(cpus, 4)} (0: load in the training process)."
        )
