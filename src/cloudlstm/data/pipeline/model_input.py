"""How a model's input is put together: one rule, for training and for forecasting.

The channels of a window's input ``x`` are, in this order (:mod:`cloudlstm.data.covariates`)::

    [measured values | positions (moving points) | measured covariates | time features]

Values, positions and covariates are normalised with the training part's scaler and an entry
without a value (NaN/inf) becomes 0, the normalised mean, so no NaN ever reaches a model;
the time features come last, the same at every point and always observed.

Training (the datamodule's stream, whose position channels :func:`positions_before_covariates`
places, and :class:`~cloudlstm.data.pipeline.windows.WindowDataset`, which reads windows
from it) and forecasting (:func:`~cloudlstm.data.pipeline.forecast_input.build_input`, a
history table made into one input) both call the functions here, so that a model is served
its input exactly as it was trained on it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["normalised", "positions_before_covariates", "with_time_features"]


def positions_before_covariates(
    channels: np.ndarray, positions: np.ndarray, num_values: int
) -> np.ndarray:
    """Moving points' positions as channels: ``positions (..., L)`` put after the first
    ``num_values`` channels of ``channels (..., C)`` (the measured values) and before the
    rest (the measured covariates, which stay the last, input-only channels).

    Works for values (positions cast to their dtype, e.g. float32) and for masks (bool).

    Returns:
        ``(..., C + L)``.
    """
    positions = np.asarray(positions, dtype=channels.dtype)
    return np.concatenate(
        [channels[..., :num_values], positions, channels[..., num_values:]], axis=-1
    )


def normalised(raw: np.ndarray, mean: np.ndarray | None, std: np.ndarray | None) -> np.ndarray:
    """``raw (..., C)`` normalised, ``(raw - mean) / std`` in float32, with every entry
    without a value (NaN/inf) set to 0.

    Finite values are kept whatever their mask says (filled ones, the last reading held,
    are read as filled); the masks say which entries are real.

    Args:
        raw: ``(..., C)`` raw values (any float dtype, an ``np.memmap`` slice included).
        mean, std: ``(C,)`` float32 scaler statistics; None: ``raw`` is normalised already.

    Returns:
        A new ``(..., C)`` float32 array.
    """
    if mean is not None:
        window = np.subtract(raw, mean, dtype=np.float32)
        window /= std
    else:
        window = np.array(raw, dtype=np.float32)
    np.nan_to_num(window, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    return window


def with_time_features(
    x: np.ndarray, x_mask: np.ndarray, features: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """``x (S, N, C)`` and its mask with the time features ``features (S, F)`` of its S
    steps appended as the last channels: the same at each of the N points, observed.

    Returns:
        ``(x (S, N, C + F), x_mask (S, N, C + F))`` in the dtypes of ``x`` and ``x_mask``;
        ``x`` and ``x_mask`` themselves without features (None).
    """
    if features is None:
        return x, x_mask
    steps, points = x.shape[:2]
    shape = (steps, points, features.shape[-1])
    at_points = np.broadcast_to(np.asarray(features, dtype=x.dtype)[:, None, :], shape)
    x = np.concatenate([x, at_points], axis=-1)
    x_mask = np.concatenate([x_mask, np.ones(shape, dtype=x_mask.dtype)], axis=-1)
    return x, x_mask
