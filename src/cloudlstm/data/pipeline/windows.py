"""Sliding (input, target) windows over a normalised point-cloud stream."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

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
    :func:`cloudlstm.data.pipeline.datamodule.seasonal_offsets`); it reaches back
    ``H = -min(input_offsets)`` steps.

    Window ``i`` starts at absolute time index ``window_starts[i] = start + i * stride``; its
    input lies in ``[t0, t0 + H)`` and its target is ``[t0 + H, t0 + H + J)``, with
    ``t0 + H + J <= end`` (``H = M`` by default). Items are dicts (see ``docs/design.md``)::

        {"x": (M, N, C) float32, "y": (J, N, C) float32, "coords": (N, L) float32,
         "x_mask": (M, N, C) bool, "y_mask": (J, N, C) bool}

    Entries without a value (NaN/inf, necessarily mask False) are set to 0, i.e. the
    normalised mean, so no NaN ever reaches a model; finite values under mask False (filled
    upstream, e.g. by interpolation) are kept. The masks say which entries are real. With
    ``return_index=True`` each item also holds ``"t0"``, the window's absolute start index
    (a 0-d int64 tensor).

    Args:
        values: ``(T, N, C)`` normalised values (numpy or torch); NaN allowed where mask False.
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
    ) -> None:
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

        values_t = torch.as_tensor(values)
        if values_t.ndim != 3:
            raise ValueError(
                f"WindowDataset: values must have shape (T, N, C); got {tuple(values_t.shape)}."
            )
        num_total = values_t.shape[0]
        if mask is None:
            mask_t = torch.isfinite(values_t)
        else:
            mask_t = torch.as_tensor(mask).to(torch.bool)
            if mask_t.shape != values_t.shape:
                raise ValueError(
                    f"WindowDataset: mask shape {tuple(mask_t.shape)} != values shape "
                    f"{tuple(values_t.shape)}."
                )
        coords_t = torch.as_tensor(coords, dtype=torch.float32)
        if coords_t.ndim != 2 or coords_t.shape[0] != values_t.shape[1]:
            raise ValueError(
                f"WindowDataset: coords must have shape (N, L) with N={values_t.shape[1]}; got "
                f"{tuple(coords_t.shape)}."
            )
        if not torch.isfinite(coords_t).all():
            raise ValueError("WindowDataset: coords contain NaN/inf.")

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
        span = self.history_steps + self.output_steps
        available = end - start
        if available < span:
            raise ValueError(
                f"WindowDataset: one window needs {self.history_steps} input (history) + "
                f"{self.output_steps} output = {span} consecutive steps, but only "
                f"{available} are available in [{start}, {end}). Use a longer series, a larger "
                "part (split fraction), or shorter input/output windows."
            )

        vals = values_t[start:end].to(torch.float32)
        msk = mask_t[start:end]
        bad = msk & ~torch.isfinite(vals)
        if bad.any():
            raise ValueError(
                f"WindowDataset: {int(bad.sum())} entries are NaN/inf but marked observed in the "
                "mask; set mask False there."
            )
        # Entries with no value at all become 0 (the normalised mean) so models never see NaN;
        # values filled upstream (e.g. interpolated, mask False) are kept as they are.
        finite = torch.isfinite(vals)
        self.values = torch.where(finite, vals, torch.zeros((), dtype=torch.float32)).contiguous()
        self.mask = msk.contiguous()
        self.coords = coords_t.contiguous()
        self.coords_track = None
        if coords_track is not None:
            track = torch.as_tensor(coords_track, dtype=torch.float32)
            if track.shape != (num_total, *coords_t.shape):
                raise ValueError(
                    f"WindowDataset: coords_track must have shape (T, N, L) = "
                    f"{(num_total, *coords_t.shape)}; got {tuple(track.shape)}."
                )
            self.coords_track = track[start:end].contiguous()
        self._input_index = torch.from_numpy(offsets + self.history_steps)
        n = count_windows(available, self.history_steps, self.output_steps, self.stride)
        self.window_starts = start + self.stride * np.arange(n, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.window_starts)

    def time_range(self, index: int) -> tuple[int, int, int]:
        """Absolute ``(t0, t_split, t_end)``: input is ``[t0, t_split)``, target
        ``[t_split, t_end)``."""
        t0 = int(self.window_starts[index])
        return t0, t0 + self.history_steps, t0 + self.history_steps + self.output_steps

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"window index {index} out of range for {len(self)} windows")
        t0 = int(self.window_starts[index]) - self.start
        m = t0 + self.history_steps
        e = m + self.output_steps
        if self._contiguous:  # a view, no copy
            x, x_mask = self.values[t0:m], self.mask[t0:m]
        else:
            x, x_mask = self.values[t0 + self._input_index], self.mask[t0 + self._input_index]
        coords = self.coords if self.coords_track is None else self.coords_track[m - 1]
        item = {
            "x": x,
            "y": self.values[m:e],
            "coords": coords,
            "x_mask": x_mask,
            "y_mask": self.mask[m:e],
        }
        if self.return_index:
            item["t0"] = torch.tensor(int(self.window_starts[index]), dtype=torch.int64)
        return item

    def __repr__(self) -> str:
        return (
            f"WindowDataset(windows={len(self)}, range=[{self.start}, {self.end}), "
            f"M={self.input_steps}, history={self.history_steps}, J={self.output_steps}, "
            f"stride={self.stride})"
        )
