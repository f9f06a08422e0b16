"""The columns of a forecast file (``Forecaster.forecast``, predict.py), named once, and the
check that a run's names give each column a name of its own."""

from __future__ import annotations

from collections.abc import Sequence

from cloudlstm.data.spec import DataSpec
from cloudlstm.engine.quantile_levels import level_name
from cloudlstm.errors import UserError

HORIZON_COLUMN = "horizon"
# How many of a point's input entries (input steps x channels) were filled (the last reading held)
# instead of read; 0: the forecast saw only real readings.
FILLED_COLUMN = "filled_inputs"


def quantile_column(channel: str, tau: float) -> str:
    """A channel's column of the level ``tau``: ``no2`` at 0.1 -> ``no2_q10``."""
    return f"{channel}_{level_name(tau)}"


def forecast_columns(spec: DataSpec, levels: Sequence[float]) -> list[tuple[str, str]]:
    """``(name, what it holds)`` of each column of a forecast file, in the file's order: the
    time, the horizon, the point id, the coordinates, the value channels, each value
    channel's quantiles at ``levels``, the count of filled inputs."""
    return [
        (spec.time_col, "the time"),
        (HORIZON_COLUMN, "the horizon"),
        (spec.id_col, "the point id"),
        *((c, "a coordinate") for c in spec.coord_cols),
        *((c, "a channel") for c in spec.value_channels),
        *(
            (quantile_column(c, tau), f"channel {c}'s quantile {tau}")
            for c in spec.value_channels
            for tau in levels
        ),
        (FILLED_COLUMN, "the count of filled inputs"),
    ]


def check_forecast_columns(spec: DataSpec, levels: Sequence[float]) -> None:
    """Refuse names that would give two columns of a forecast file one name: the second
    would overwrite the first in the file.

    Raises:
        UserError: two columns share a name.
    """
    held: dict[str, str] = {}
    for name, what in forecast_columns(spec, levels):
        if name in held:
            raise UserError(
                f"Column {name!r} of this run's forecasts would hold both {held[name]} and "
                f"{what}, and one would overwrite the other: rename {name!r} where the data "
                "names it (a column of the file, or data.source.channel of a wide table); a "
                "forecast file's own columns are horizon, filled_inputs and "
                "<channel>_q<percent> for each quantile level."
            )
        held[name] = what
