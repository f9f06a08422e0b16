"""Sliding (input, target) windows over a point-cloud stream, read (and normalised) lazily."""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import Dataset

from cloudlstm.data.chunks import time_chunks
from cloudlstm.data.pipeline.model_input import normalised, with_time_features

if TYPE_CHECKING:
    from cloudlstm.data.transforms import StandardScaler

__all__ = ["WindowDataset", "contiguous_offsets", "count_windows"]


def count_windows(num_steps: int, input_steps: int, output_steps: int, stride: int = 1) -> int:
    """Number of windows of ``input_steps + output_steps`` steps cut from ``num_steps`` steps."""
    span = input_steps + output_steps
    if num_steps < span:
        return 0
    return (num_steps - span) // stride + 1


def contiguous_offsets(input_steps: int) -> np.ndarray:
    """Offsets ``-M, ..., -1`` of M consecutive input steps before the first target step."""
    return np.arange(-int(input_steps), 0, dtype=np.int64)


class WindowDataset(Dataset):
    """Windows of M input and J target steps cut strictly inside the time range ``[start, end)``.

    By default the input is the M steps right before the target. With ``input_offsets`` (M
    negative ints, in the order the model reads them; repeats allowed) the input of a window
    whose target starts at ``t`` is the steps ``t + input_offsets`` instead (e.g. a
    sub-sampled week then the last half hour, see
    :func:`cloudlstm.data.pipeline.splits.seasonal_offsets`); it reaches back
    ``H = -min(input_offsets)`` steps.

    Window ``i`` starts at absolute time index ``window_starts[i] = start + i * stride``; its
    input lies in ``[t0, t0 + H)`` and its target is ``[t0 + H, t0 + H + J)``, with
    ``t0 + H + J <= end`` (``H = M`` by default). Items are dicts (see ``docs/design.md``)::

        {"x": (M, N, C_in) float32, "y": (J, N, C_out) float32, "coords": (N, L) float32,
         "x_mask": (M, N, C_in) bool, "y_mask": (J, N, C_out) bool}

    plus ``"future": (J, N, F)`` with ``time_features``. The input holds every channel of
    ``values`` and then the F time features (``C_in = C + F``); the target holds the first
    ``num_targets`` channels (``C_out``; the rest are measured covariates, input only, see
    :mod:`cloudlstm.data.covariates`).

    Windows are read from ``values`` when they are asked for: the arrays are neither copied
    nor normalised up front, so a memory-mapped stream (``np.memmap``, e.g. from the stream
    cache) is read a window at a time from disk or the page cache. With a ``scaler`` each
    window is normalised as it is read, ``(v - mean) / std`` in float32, exactly as
    normalising the whole array first would. Entries without a value (NaN/inf, necessarily
    mask False) are set to 0, i.e. the normalised mean, so no NaN ever reaches a model;
    finite values under mask False (filled upstream, by the last reading) are kept. The
    masks say which entries are real. (The rule is :mod:`cloudlstm.data.pipeline.model_input`'s,
    which forecasting follows too.) With ``return_index=True`` each item also holds
    ``"t0"``, the window's absolute start index (a 0-d int64 tensor).

    Args:
        values: ``(T, N, C)`` values (numpy, an ``np.memmap`` or torch), normalised unless a
            ``scaler`` is given; NaN allowed where mask False.
        mask: ``(T, N, C)`` bool, True = observed. ``None`` means ``isfinite(values)``.
        coords: ``(N, L)`` normalised coordinates.
        input_steps: M.
        output_steps: J.
        stride: step between consecutive window starts.
        start, end: the time range (absolute indices into ``values``) windows must stay in;
            ``end=None`` means ``T``.
        return_index: add ``"t0"`` to each item.
        input_offsets: optional M input offsets relative to the first target step (see above);
            ``input_steps`` must equal their number.
        coords_track: optional ``(T, N, L)`` normalised positions of moving points; an item's
            ``coords`` are then the positions at its last input step (the latest ones known).
        scaler: a fitted :class:`~cloudlstm.data.transforms.StandardScaler`:
            ``values`` are raw and each window is normalised with it.
        check_mask: refuse NaN/inf entries marked observed (one pass over ``[start, end)``,
            a time chunk at a time); the datamodule skips it, its stream checked that already.
        num_targets: C_out, the channels forecast (the first ones); None: all of them.
        time_features: optional ``(T, F)`` float32 known-future features (e.g. the time of
            day as sin/cos), appended to ``x`` and given for the forecast steps as
            ``future``; always observed.
        hide_inputs, hide_targets: optional ``(N,)`` bool: points whose readings (every
            channel of ``values``) the input, respectively the target, holds as 0 with mask
            False, whatever ``values`` hold there: points held out of training
            (:mod:`cloudlstm.data.pipeline.held_out`). Time features are not readings.
    """

    def __init__(
        self,
        values: np.ndarray | torch.Tensor,
        mask: np.ndarray | torch.Tensor | None,
        coords: np.ndarray | torch.Tensor,
        input_steps: int,
        output_steps: int,
        stride: int = 1,
        start: int = 0,
        end: int | None = None,
        return_index: bool = False,
        input_offsets: np.ndarray | list[int] | None = None,
        coords_track: np.ndarray | torch.Tensor | None = None,
        scaler: StandardScaler | None = None,
        check_mask: bool = True,
        num_targets: int | None = None,
        time_features: np.ndarray | None = None,
        hide_inputs: np.ndarray | None = None,
        hide_targets: np.ndarray | None = None,
    ) -> None:
        offsets = _checked_offsets(input_steps, output_steps, stride, input_offsets)
        values, mask, coords_t = _checked_arrays(values, mask, coords)
        self._mean = self._std = None
        if scaler is not None:
            if scaler.num_channels != values.shape[2]:
                raise ValueError(
                    f"WindowDataset: the scaler has {scaler.num_channels} channels, values "
                    f"{values.shape[2]}."
                )
            self._mean = scaler.mean.astype(np.float32)
            self._std = scaler.std.astype(np.float32)
        num_total = values.shape[0]
        end = num_total if end is None else int(end)
        start = int(start)
        if not 0 <= start <= end <= num_total:
            raise ValueError(
                f"WindowDataset: need 0 <= start <= end <= T={num_total}; got start={start}, "
                f"end={end}."
            )
        self.input_steps = int(input_steps)
        self.output_steps = int(output_steps)
        self.stride = int(stride)
        self.start = start
        self.end = end
        self.return_index = bool(return_index)
        self.input_offsets = offsets
        self.history_steps = int(-offsets.min())
        self._contiguous = bool((offsets == contiguous_offsets(input_steps)).all())
        self._check_span(end - start)
        if check_mask and mask is not None:
            _check_observed(values, mask, start, end)
        # the whole arrays, indexed with absolute steps; windows are read in __getitem__
        self.values = values
        self.mask = mask
        self.coords = coords_t.contiguous()
        self.coords_track = _checked_track(coords_track, (num_total, *coords_t.shape))
        self._input_index = offsets + self.history_steps
        self.num_targets = _checked_targets(num_targets, values.shape[2])
        self.time_features = _checked_time_features(time_features, num_total)
        self.hide_inputs = _checked_points(hide_inputs, values.shape[1])
        self.hide_targets = _checked_points(hide_targets, values.shape[1])
        n = count_windows(end - start, self.history_steps, self.output_steps, self.stride)
        self.window_starts = start + self.stride * np.arange(n, dtype=np.int64)

    def _check_span(self, available: int) -> None:
        """A ``ValueError`` when ``available`` steps hold no window."""
        span = self.history_steps + self.output_steps
        if available < span:
            raise ValueError(
                f"WindowDataset: one window needs {self.history_steps} input (history) + "
                f"{self.output_steps} output = {span} consecutive steps, but only "
                f"{available} are available in [{self.start}, {self.end}). Use a longer series, "
                "a larger part (split fraction), or shorter input/output windows."
            )

    def __len__(self) -> int:
        return len(self.window_starts)

    def time_range(self, index: int) -> tuple[int, int, int]:
        """Absolute ``(t0, t_split, t_end)``: input is ``[t0, t_split)``, target
        ``[t_split, t_end)``."""
        t0 = int(self.window_starts[index])
        return t0, t0 + self.history_steps, t0 + self.history_steps + self.output_steps

    def _read(
        self,
        steps: slice | np.ndarray,
        channels: int | None = None,
        hidden: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Normalised values (no NaN, :func:`~cloudlstm.data.pipeline.model_input.normalised`)
        and mask of the given S time steps (and the first ``channels`` channels; None: all):
        new ``(S, N, C)`` float32 and bool arrays; the ``hidden`` points' are 0 and False."""
        cut = slice(None, channels)
        raw = self.values[steps, :, cut]
        mean = None if self._mean is None else self._mean[cut]
        std = None if self._std is None else self._std[cut]
        window = normalised(raw, mean, std)
        observed = (
            np.isfinite(raw) if self.mask is None else np.array(_bool(self.mask[steps, :, cut]))
        )
        if hidden is not None:
            window[:, hidden] = 0.0
            observed[:, hidden] = False
        return window, observed

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"window index {index} out of range for {len(self)} windows")
        t0 = int(self.window_starts[index])
        m = t0 + self.history_steps
        e = m + self.output_steps
        steps = slice(t0, m) if self._contiguous else t0 + self._input_index
        x, x_mask = self._read(steps, hidden=self.hide_inputs)
        y, y_mask = self._read(slice(m, e), self.num_targets, self.hide_targets)
        past = None if self.time_features is None else self.time_features[steps]
        x, x_mask = with_time_features(x, x_mask, past)
        coords = self.coords if self.coords_track is None else self.coords_track[m - 1]
        item = {
            "x": torch.from_numpy(x),
            "y": torch.from_numpy(y),
            "coords": coords,
            "x_mask": torch.from_numpy(x_mask),
            "y_mask": torch.from_numpy(y_mask),
        }
        if self.time_features is not None:
            item["future"] = _at_points(self.time_features[m:e], x.shape[1])
        if self.return_index:
            item["t0"] = torch.tensor(t0, dtype=torch.int64)
        return item

    def __getstate__(self) -> dict:
        # DataLoader workers started by "spawn" get the dataset pickled: a memory-mapped
        # array goes as its file name, not as its data
        state = dict(self.__dict__)
        for name in ("values", "mask"):
            state[name] = _MappedFile.of(state[name]) or state[name]
        return state

    def __setstate__(self, state: dict) -> None:
        for name in ("values", "mask"):
            if isinstance(state[name], _MappedFile):
                state[name] = state[name].open()
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return (
            f"WindowDataset(windows={len(self)}, range=[{self.start}, {self.end}), "
            f"M={self.input_steps}, history={self.history_steps}, J={self.output_steps}, "
            f"stride={self.stride})"
        )


def _checked_offsets(
    input_steps: int,
    output_steps: int,
    stride: int,
    input_offsets: np.ndarray | list[int] | None,
) -> np.ndarray:
    """The ``(M,)`` int64 input offsets (``-M, ..., -1`` by default), after checking the
    window's sizes."""
    for arg, val, lo in (("input_steps", input_steps, 1), ("output_steps", output_steps, 1)):
        if int(val) != val or val < lo:
            raise ValueError(f"WindowDataset: {arg} must be an integer >= {lo}; got {val}.")
    if int(stride) != stride or stride < 1:
        raise ValueError(f"WindowDataset: stride must be an integer >= 1; got {stride}.")
    offsets = contiguous_offsets(input_steps) if input_offsets is None else input_offsets
    offsets = np.asarray(offsets, dtype=np.int64)
    if offsets.ndim != 1 or len(offsets) != input_steps or (offsets >= 0).any():
        raise ValueError(
            f"WindowDataset: input_offsets must be {input_steps} negative "
            f"steps (relative to the first target step); got {offsets.tolist()}."
        )
    return offsets


def _checked_targets(num_targets: int | None, channels: int) -> int | None:
    """C_out, when it leaves covariates (None: every channel is a target)."""
    if num_targets is None or int(num_targets) == channels:
        return None
    if not 1 <= int(num_targets) < channels:
        raise ValueError(
            f"WindowDataset: num_targets must be in [1, {channels}]; got {num_targets}."
        )
    return int(num_targets)


def _checked_time_features(features: np.ndarray | None, num_steps: int) -> np.ndarray | None:
    """``(T, F)`` float32 time features (None when there are none)."""
    if features is None or np.shape(features)[-1] == 0:
        return None
    features = np.asarray(features, dtype=np.float32)
    if features.ndim != 2 or features.shape[0] != num_steps or not np.isfinite(features).all():
        raise ValueError(
            f"WindowDataset: time_features must be finite (T={num_steps}, F); got {features.shape}."
        )
    return features


def _checked_points(points: np.ndarray | None, num_points: int) -> np.ndarray | None:
    """An ``(N,)`` bool selection of points; None when it selects none."""
    if points is None:
        return None
    points = np.asarray(points)
    if points.dtype != np.bool_ or points.shape != (num_points,):
        raise ValueError(
            f"WindowDataset: hidden points must be ({num_points},) bool; got "
            f"{points.dtype} {points.shape}."
        )
    return points.copy() if points.any() else None


def _at_points(features: np.ndarray, num_points: int) -> torch.Tensor:
    """``(S, F)`` time features -> ``(S, N, F)``, the same at every point."""
    return torch.from_numpy(features).unsqueeze(1).expand(-1, num_points, -1).contiguous()


def _checked_arrays(
    values: np.ndarray | torch.Tensor,
    mask: np.ndarray | torch.Tensor | None,
    coords: np.ndarray | torch.Tensor,
) -> tuple[np.ndarray, np.ndarray | None, torch.Tensor]:
    """``values (T, N, C)`` and ``mask`` as numpy arrays (memory maps stay maps) and
    ``coords (N, L)`` as a float32 tensor, their shapes checked against each other."""
    values = _numpy(values)
    if values.ndim != 3:
        raise ValueError(
            f"WindowDataset: values must have shape (T, N, C); got {tuple(values.shape)}."
        )
    if mask is not None:
        mask = _numpy(mask)
        if mask.shape != values.shape:
            raise ValueError(
                f"WindowDataset: mask shape {tuple(mask.shape)} != values shape "
                f"{tuple(values.shape)}."
            )
    coords_t = torch.as_tensor(coords, dtype=torch.float32)
    if coords_t.ndim != 2 or coords_t.shape[0] != values.shape[1]:
        raise ValueError(
            f"WindowDataset: coords must have shape (N, L) with N={values.shape[1]}; got "
            f"{tuple(coords_t.shape)}."
        )
    if not torch.isfinite(coords_t).all():
        raise ValueError("WindowDataset: coords contain NaN/inf.")
    return values, mask, coords_t


def _check_observed(values: np.ndarray, mask: np.ndarray, start: int, end: int) -> None:
    """No NaN/inf entry marked observed in ``[start, end)`` (read a time chunk at a time)."""
    bad = 0
    for a, b in time_chunks(start, end, values[0].size):
        bad += int((_bool(mask[a:b]) & ~np.isfinite(values[a:b])).sum())
    if bad:
        raise ValueError(
            f"WindowDataset: {bad} entries are NaN/inf but marked observed in the "
            "mask; set mask False there."
        )


def _checked_track(
    coords_track: np.ndarray | torch.Tensor | None, shape: tuple[int, int, int]
) -> torch.Tensor | None:
    """Moving points' ``(T, N, L)`` normalised positions as a float32 tensor."""
    if coords_track is None:
        return None
    track = torch.as_tensor(coords_track, dtype=torch.float32)
    if track.shape != shape:
        raise ValueError(
            f"WindowDataset: coords_track must have shape (T, N, L) = {shape}; got "
            f"{tuple(track.shape)}."
        )
    return track


def _numpy(array: np.ndarray | torch.Tensor) -> np.ndarray:
    """A numpy view of ``array`` (a CPU copy of a device tensor); numpy arrays, memory maps
    included, are returned as they are."""
    if isinstance(array, torch.Tensor):
        return array.detach().cpu().numpy()
    return np.asanyarray(array)


def _bool(mask: np.ndarray) -> np.ndarray:
    return mask if mask.dtype == np.bool_ else mask.astype(bool)


@dataclass(frozen=True)
class _MappedFile:
    """A memory-mapped ``.npy`` file by name (pickled instead of its data)."""

    filename: str
    shape: tuple[int, ...]
    dtype: str

    @classmethod
    def of(cls, array: Any) -> _MappedFile | None:
        """The file ``array`` maps as a whole, else ``None`` (not a map, or a part of one)."""
        if isinstance(array, np.memmap) and isinstance(array.base, mmap.mmap) and array.filename:
            return cls(str(array.filename), tuple(array.shape), array.dtype.str)
        return None

    def open(self) -> np.ndarray:
        array = np.load(self.filename, mmap_mode="r")
        if tuple(array.shape) != self.shape or array.dtype.str != self.dtype:
            raise ValueError(f"{self.filename} changed since the dataset was made.")
        return array
