"""Sliding (input, target) windows over a normalised point-cloud stream."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = ["WindowDataset", "count_windows"]


def count_windows(num_steps: int, input_steps: int, output_steps: int, stride: int = 1) -> int:
    """Number of windows of ``input_steps + output_steps`` steps cut from ``num_steps`` steps."""
    span = input_steps + output_steps
    if num_steps < span:
        return 0
    return (num_steps - span) // stride + 1


class WindowDataset(Dataset):
    """Windows of M input and J target steps cut strictly inside the time range ``[start, end)``.

    Window ``i`` starts at absolute time index ``window_starts[i] = start + i * stride``; its
    input covers ``[t0, t0 + M)`` and its target ``[t0 + M, t0 + M + J)``, with
    ``t0 + M + J <= end``. Items are dicts (see ``docs/design.md``)::

        {"x": (M, N, C) float32, "y": (J, N, C) float32, "coords": (N, L) float32,
         "x_mask": (M, N, C) bool, "y_mask": (J, N, C) bool}

    Missing entries (mask False) are filled with 0, i.e. the normalised mean, so no NaN ever
    reaches a model; the masks say which entries are real. With ``return_index=True`` each item
    also holds ``"t0"``, the window's absolute start index (a 0-d int64 tensor).

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
    ) -> None:
        for arg, val, lo in (("input_steps", input_steps, 1), ("output_steps", output_steps, 1)):
            if int(val) != val or val < lo:
                raise ValueError(f"WindowDataset: {arg} must be an integer >= {lo}; got {val}.")
        if int(stride) != stride or stride < 1:
            raise ValueError(f"WindowDataset: stride must be an integer >= 1; got {stride}.")

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
        span = self.input_steps + self.output_steps
        available = end - start
        if available < span:
            raise ValueError(
                f"WindowDataset: one window needs input_steps + output_steps = "
                f"{self.input_steps} + {self.output_steps} = {span} consecutive steps, but only "
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
        # Fill missing entries with 0 (the normalised mean) so models never see NaN.
        self.values = torch.where(msk, vals, torch.zeros((), dtype=torch.float32)).contiguous()
        self.mask = msk.contiguous()
        self.coords = coords_t.contiguous()
        n = count_windows(available, self.input_steps, self.output_steps, self.stride)
        self.window_starts = start + self.stride * np.arange(n, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.window_starts)

    def time_range(self, index: int) -> tuple[int, int, int]:
        """Absolute ``(t0, t_split, t_end)``: input is ``[t0, t_split)``, target
        ``[t_split, t_end)``."""
        t0 = int(self.window_starts[index])
        return t0, t0 + self.input_steps, t0 + self.input_steps + self.output_steps

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"window index {index} out of range for {len(self)} windows")
        t0 = int(self.window_starts[index]) - self.start
        m = t0 + self.input_steps
        e = m + self.output_steps
        item = {
            "x": self.values[t0:m],
            "y": self.values[m:e],
            "coords": self.coords,
            "x_mask": self.mask[t0:m],
            "y_mask": self.mask[m:e],
        }
        if self.return_index:
            item["t0"] = torch.tensor(int(self.window_starts[index]), dtype=torch.int64)
        return item

    def __repr__(self) -> str:
        return (
            f"WindowDataset(windows={len(self)}, range=[{self.start}, {self.end}), "
            f"M={self.input_steps}, J={self.output_steps}, stride={self.stride})"
        )
