"""What ``predictions.npz`` holds beside the forecasts, read from the tested data: which
point each entry of the N axis is and when each forecast step falls (:func:`tested_data`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["tested_data"]


def tested_data(datamodule: Any, starts: np.ndarray, horizon: int) -> dict[str, np.ndarray]:
    """``point_ids`` ``(N,)`` str (the N axis, in order: a point subset, a held-out split or
    a wide table's columns put in the training order leave it no other way back to the
    data's ids) and, where the data has timestamps, ``forecast_time`` ``(W, J)``
    datetime64 (to tell forecasts apart by when they fall: a holiday, a weekday), of the J
    forecast steps of the test windows starting at ``starts`` ``(W,)`` (absolute steps).

    Without a datamodule holding a stream (a module tested on a loader of its own) nothing
    is known of them: empty. Typed ``Any``: a trainer's datamodule may be any Lightning
    one; a :class:`~cloudlstm.data.pipeline.datamodule.PointCloudDataModule` has a stream.
    """
    stream = getattr(datamodule, "stream", None)
    if stream is None:
        return {}
    arrays = {"point_ids": np.asarray(stream.point_ids, dtype=str)}
    if stream.timestamps is not None:
        steps = starts[:, None] + datamodule.history_steps + np.arange(horizon)  # (W, J)
        arrays["forecast_time"] = np.asarray(stream.timestamps, dtype="datetime64[ns]")[steps]
    return arrays
