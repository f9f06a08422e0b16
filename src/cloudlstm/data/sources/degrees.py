"""Coordinate columns named as degrees of latitude or longitude, and their ranges.

A latitude beyond ±90 or a longitude beyond ±180 degrees is a mistyped value (``340.0`` for
``34.0``): min-max scaled with the others, it squeezes every other point's coordinate to
about one value, without a word. A column of another name (``x``, metres east) is a plane
coordinate of any range, and is not judged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from cloudlstm.errors import UserError

__all__ = ["LATITUDE_NAMES", "LONGITUDE_NAMES", "check_degrees"]

LONGITUDE_NAMES = ("longitude", "lon", "lng")
LATITUDE_NAMES = ("latitude", "lat")
# the range of a coordinate column named as degrees of latitude or longitude
_DEGREES = {**dict.fromkeys(LATITUDE_NAMES, 90.0), **dict.fromkeys(LONGITUDE_NAMES, 180.0)}


def check_degrees(
    coords: np.ndarray, cols: Sequence[str], row_name: Callable[[int], str], what: str
) -> None:
    """Refuse a latitude beyond ±90 or a longitude beyond ±180 degrees in ``coords (R, L)``,
    whose columns are named ``cols``; ``row_name(row)`` says which point and row it is
    (``"point 'p3' (line 4)"``). NaN (an empty cell) is not judged.

    Raises:
        UserError: naming the row, the column and the value, and how many rows are out.
    """
    for j, col in enumerate(cols):
        limit = _DEGREES.get(str(col).lower())
        if limit is None:
            continue
        outside = np.flatnonzero(np.abs(coords[:, j]) > limit)
        if outside.size:
            row = int(outside[0])
            raise UserError(
                f"{what}: {row_name(row)} has {col}={coords[row, j]:g}, outside "
                f"[-{limit:g}, {limit:g}] degrees ({outside.size} row(s) in all): correct it."
            )
