"""What ``predictions.npz`` holds beside the forecasts, read from the tested data: which
point each entry of the N axis is, which target cells were readings and when each forecast
step falls (:func:`tested_data`).

The test loop's own mask (a batch's ``y_mask``) says which cells were scored; with
``data.score_filled=true`` that is every cell with a value, filled gaps included, so the
readings come from the stream's mask instead, at the same steps and points.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["tested_data"]


def tested_data(datamodule: Any, starts: np.ndarray, scored: np.ndarray) -> dict[str, np.ndarray]:
    """``observed`` ``(W, J, N, C)`` bool (True: the target was a reading, not a filled
    gap), ``point_ids`` ``(N,)`` str (the N axis, in order: a point subset or a wide
    table's columns put in the training order leave it no other way back to the data's
    ids) and, where the data has timestamps, ``forecast_time`` ``(W, J)`` datetime64 (to
    tell forecasts apart by when they fall: a holiday, a weekday), of the test windows
    starting at ``starts`` ``(W,)`` (absolute steps) whose scored cells are ``scored``
    ``(W, J, N, C)``.

    Without a datamodule holding a stream (a module tested on a loader of its own) only the
    loader's mask is known: ``observed`` is ``scored`` and the rest is left out. Typed
    ``Any``: a trainer's datamodule may be any Lightning one; a
    :class:`~cloudlstm.data.pipeline.datamodule.PointCloudDataModule` has a stream.
    """
    stream = getattr(datamodule, "stream", None)
    if stream is None:
        return {"observed": scored}
    _, horizon, _, channels = scored.shape
    steps = starts[:, None] + datamodule.history_steps + np.arange(horizon)  # (W, J)
    # a (W * J) list of steps: a memory-mapped mask is read at those rows alone
    read = np.asarray(stream.mask[steps.ravel(), :, :channels], dtype=bool)
    arrays = {
        "observed": read.reshape(scored.shape),
        "point_ids": np.asarray(stream.point_ids, dtype=str),
    }
    if stream.timestamps is not None:
        arrays["forecast_time"] = np.asarray(stream.timestamps, dtype="datetime64[ns]")[steps]
    return arrays
