"""Value scaling and coordinate normalisation."""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import torch

from cloudlstm.data.chunks import time_chunks

__all__ = ["StandardScaler", "coord_scale", "normalize_coords", "scale_coords"]

ArrayT = TypeVar("ArrayT", np.ndarray, torch.Tensor)


class StandardScaler:
    """Per-channel standardisation ``(x - mean) / std`` over the last axis.

    ``fit`` uses only observed (mask True and finite) entries. ``transform`` and
    ``inverse_transform`` accept numpy arrays or torch tensors of shape ``(..., C)`` and return
    the same type (tensors stay on their device and keep their autograd graph).

    Args:
        min_std: floor for the fitted standard deviation, so a constant channel does not divide
            by zero.
    """

    def __init__(self, min_std: float = 1e-6) -> None:
        if not min_std > 0:
            raise ValueError(f"min_std must be > 0; got {min_std}.")
        self.min_std = float(min_std)
        self.mean: np.ndarray | None = None
        self.std: np.ndarray | None = None

    @property
    def fitted(self) -> bool:
        return self.mean is not None

    @property
    def num_channels(self) -> int:
        self._check_fitted()
        return int(self.mean.shape[0])

    def fit(self, values: np.ndarray, mask: np.ndarray | None = None) -> StandardScaler:
        """Fit per-channel mean/std on the observed entries of ``values`` ``(..., C)``.

        Arrays of more than one dimension are read in chunks along the first (time) axis
        (:mod:`cloudlstm.data.chunks`), so a memory-mapped stream is fitted with
        bounded memory: each chunk's count, mean and sum of squared deviations are merged
        into the running ones (Chan et al.'s pairwise update), which gives the same numbers
        as one pass over everything up to rounding (one chunk: exactly the same).
        """
        values = np.asanyarray(values)
        if values.ndim < 1:
            raise ValueError("StandardScaler.fit needs an array of shape (..., C).")
        if mask is not None:
            mask = np.asanyarray(mask)
            if mask.shape != values.shape:
                raise ValueError(
                    f"StandardScaler.fit: mask shape {mask.shape} != values shape {values.shape}."
                )
        c = values.shape[-1]
        counts = np.zeros(c)
        mean = np.zeros(c)
        m2 = np.zeros(c)
        ranges = (
            time_chunks(0, len(values), values[0].size, itemsize=8)
            if values.ndim > 1
            else [(None, None)]
        )
        for a, b in ranges:
            part = values[a:b]
            n_b, mean_b, m2_b = _moments(part, None if mask is None else mask[a:b], c)
            total = counts + n_b
            if not counts.any():
                counts, mean, m2 = n_b, mean_b, m2_b
                continue
            with np.errstate(invalid="ignore", divide="ignore"):
                delta = mean_b - mean
                share = np.where(total > 0, n_b / np.maximum(total, 1), 0.0)
                mean = np.where(n_b > 0, mean + delta * share, mean)
                m2 = m2 + np.where(n_b > 0, m2_b + delta**2 * counts * share, 0.0)
            counts = total
        if (counts == 0).any():
            empty = np.flatnonzero(counts == 0).tolist()
            raise ValueError(
                f"StandardScaler.fit: channel(s) {empty} have no observed values in the fitting "
                "data, so their mean/std are undefined. Use a longer training part or drop them."
            )
        self.mean = mean
        self.std = np.maximum(np.sqrt(m2 / counts), self.min_std)
        return self

    def _check_fitted(self) -> None:
        if self.mean is None or self.std is None:
            raise RuntimeError("StandardScaler is not fitted; call fit() or from_dict() first.")

    def _params(self, x: ArrayT) -> tuple[Any, Any]:
        self._check_fitted()
        if x.shape[-1] != self.mean.shape[0]:
            raise ValueError(
                f"StandardScaler was fitted on {self.mean.shape[0]} channels but got an input "
                f"with last dimension {x.shape[-1]} (shape {tuple(x.shape)}); inputs must be "
                "(..., C)."
            )
        if isinstance(x, torch.Tensor):
            dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
            mean = torch.as_tensor(self.mean, dtype=dtype, device=x.device)
            std = torch.as_tensor(self.std, dtype=dtype, device=x.device)
            return mean, std
        dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64
        return self.mean.astype(dtype), self.std.astype(dtype)

    def transform(self, x: ArrayT) -> ArrayT:
        """Raw -> normalised. NaN stays NaN."""
        if not isinstance(x, torch.Tensor):
            x = np.asarray(x)
        mean, std = self._params(x)
        return (x - mean) / std

    def inverse_transform(self, x: ArrayT) -> ArrayT:
        """Normalised -> raw."""
        if not isinstance(x, torch.Tensor):
            x = np.asarray(x)
        mean, std = self._params(x)
        return x * std + mean

    def select(self, channels: int) -> StandardScaler:
        """The scaler of the first ``channels`` channels (e.g. the targets before the
        covariates); itself when that is all of them."""
        self._check_fitted()
        if channels == self.num_channels:
            return self
        part = StandardScaler(self.min_std)
        part.mean, part.std = self.mean[:channels].copy(), self.std[:channels].copy()
        return part

    def to_dict(self) -> dict[str, Any]:
        self._check_fitted()
        return {"mean": self.mean.tolist(), "std": self.std.tolist(), "min_std": self.min_std}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> StandardScaler:
        scaler = cls(min_std=state.get("min_std", 1e-6))
        mean = np.asarray(state["mean"], dtype=np.float64)
        std = np.asarray(state["std"], dtype=np.float64)
        if mean.ndim != 1 or mean.shape != std.shape:
            raise ValueError(
                f"StandardScaler.from_dict: mean/std must be 1-D of equal length; got "
                f"{mean.shape} and {std.shape}."
            )
        if not (np.isfinite(mean).all() and np.isfinite(std).all() and (std > 0).all()):
            raise ValueError("StandardScaler.from_dict: mean/std must be finite and std > 0.")
        scaler.mean, scaler.std = mean, std
        return scaler

    def __repr__(self) -> str:
        if not self.fitted:
            return "StandardScaler(unfitted)"
        return (
            f"StandardScaler(mean={np.round(self.mean, 4).tolist()}, "
            f"std={np.round(self.std, 4).tolist()})"
        )


def _moments(
    values: np.ndarray, mask: np.ndarray | None, c: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per channel: the count, mean and sum of squared deviations from it of the observed
    (finite, and mask True) entries of ``values (..., C)``; mean and sum are 0 where the
    count is. Works in place on one float64 copy (a chunk of a large stream)."""
    work = np.array(values, dtype=np.float64).reshape(-1, c)
    observed = np.isfinite(work)
    if mask is not None:
        observed &= np.asarray(mask, dtype=bool).reshape(-1, c)
    missing = ~observed
    work[missing] = 0.0
    counts = observed.sum(axis=0).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(counts > 0, work.sum(axis=0) / counts, 0.0)
    work -= mean
    work[missing] = 0.0
    np.square(work, out=work)
    return counts, mean, work.sum(axis=0)


def coord_scale(coords: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The per-dimension ``(lo, span, degenerate)`` of :func:`normalize_coords` for ``(N, L)``
    coordinates, so that other coordinates can be mapped the same way (:func:`scale_coords`).

    ``span`` is 1 in a degenerate dimension (all points share one value), which maps to 0.5.
    """
    lo = coords.min(axis=0)
    hi = coords.max(axis=0)
    span = hi - lo
    scale = np.maximum(np.abs(hi), np.abs(lo))
    degenerate = span <= 1e-12 * np.maximum(scale, 1.0)
    return lo, np.where(degenerate, 1.0, span), degenerate


def scale_coords(
    coords: np.ndarray, lo: np.ndarray, span: np.ndarray, degenerate: np.ndarray
) -> np.ndarray:
    """``(coords - lo) / span`` over the last axis (``(..., L)``), 0.5 in degenerate dimensions.

    Not clipped: coordinates outside the fitted range (e.g. a point added later) map outside
    [0, 1] rather than piling up on its border.
    """
    out = (np.asarray(coords, dtype=np.float64) - lo) / span
    out[..., np.asarray(degenerate, dtype=bool)] = 0.5
    return out


def normalize_coords(coords: np.ndarray) -> np.ndarray:
    """Min-max normalise ``(N, L)`` coordinates to [0, 1] per dimension.

    A degenerate dimension (all points share one value) maps to 0.5. The result is invariant
    to shifting and (positively) scaling each raw dimension.
    """
    coords = np.asarray(coords, dtype=np.float64)
    if coords.ndim != 2:
        raise ValueError(f"normalize_coords expects shape (N, L); got {coords.shape}.")
    if coords.shape[0] == 0:
        raise ValueError("normalize_coords got zero points.")
    if not np.isfinite(coords).all():
        raise ValueError(
            "normalize_coords: coordinates contain NaN/inf; every point needs a finite location."
        )
    return np.clip(scale_coords(coords, *coord_scale(coords)), 0.0, 1.0)
