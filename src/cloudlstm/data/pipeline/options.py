"""Checks of the datamodule's switches, seeds and study sizes, before any data is read.

Each refusal names the config key (``data.<name>``) and what to give instead. Python's own
conversions would take these silently or fail late: ``bool("maybe")`` is True, and a
negative seed or a DBSCAN ``min_samples`` of 0 failed only once the data were loaded.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from cloudlstm.errors import UserError

log = logging.getLogger(__name__)

# An option that acts only with a study or feature on -> the setting that turns it on.
IDLE_UNLESS: dict[str, str] = {
    "seasonal_days": "data.seasonal=true",
    "seasonal_every_minutes": "data.seasonal=true",
    "dbscan_eps": "data.outliers=dbscan",
    "dbscan_min_samples": "data.outliers=dbscan",
    "outlier_count": "data.outlier_shift=<distance>",
    "outlier_seed": "data.outlier_shift=<distance>",
    "time_zone": "data.time_features=[hour]",
    "subset_seed": "data.num_points=<count>",
}


def check_switch(name: str, value: Any) -> bool:
    """``data.<name>`` as a boolean.

    Raises:
        UserError: ``value`` is not true or false (``data.score_filled=maybe``).
    """
    if not isinstance(value, bool):
        raise UserError(f"data.{name}={value!r}: use true or false.")
    return value


def check_whole(name: str, value: Any, minimum: int) -> int:
    """``data.<name>`` as a whole number >= ``minimum``.

    Raises:
        UserError: ``value`` is not one (``data.subset_seed=-1``, ``data.outlier_count=2.5``).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(f"data.{name}={value!r}: use a whole number >= {minimum}.")
    return value


def check_positive(name: str, value: Any, *, zero: bool = False, null: bool = False) -> Any:
    """``data.<name>`` as a finite number > 0 (>= 0 with ``zero``), or None with ``null``.

    Raises:
        UserError: ``value`` is not one (``data.seasonal_days=0``, ``data.outlier_shift=-1``).
    """
    if value is None and null:
        return None
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and math.isfinite(value) and (value > 0 or (zero and value == 0)):
        return value
    bound = ">= 0" if zero else "> 0"
    raise UserError(
        f"data.{name}={value!r}: use a finite number {bound}{' or null' if null else ''}."
    )


def check_study_options(
    seasonal: Any,
    seasonal_days: Any,
    seasonal_every_minutes: Any,
    dbscan: tuple[Any, Any],
    shift: tuple[Any, Any, Any],
) -> None:
    """The seasonal input's window, DBSCAN's ``(eps, min_samples)`` and the outlier study's
    ``(outlier_shift, outlier_count, outlier_seed)``; checked whether or not the study runs,
    as a typo in them is never a choice.

    Raises:
        UserError: one of them is out of range.
    """
    check_switch("seasonal", seasonal)
    check_positive("seasonal_days", seasonal_days)
    check_positive("seasonal_every_minutes", seasonal_every_minutes)
    check_positive("dbscan_eps", dbscan[0], null=True)
    check_whole("dbscan_min_samples", dbscan[1], 1)
    check_positive("outlier_shift", shift[0], zero=True, null=True)
    check_whole("outlier_count", shift[1], 1)
    check_whole("outlier_seed", shift[2], 0)


def warn_idle_options(changed: Mapping[str, Any], active: Mapping[str, bool]) -> None:
    """Warn of each option of :data:`IDLE_UNLESS` given another value than its default
    (``changed``: name -> value) while what uses it is off (``active``: the setting of
    :data:`IDLE_UNLESS` -> whether it is on): the run goes on without it, which the user
    who set it did not mean."""
    for name, value in changed.items():
        setting = IDLE_UNLESS.get(name)
        if setting is not None and not active[setting]:
            log.warning(
                "data.%s=%r changes nothing without %s: turn that on, or leave data.%s out.",
                name,
                value,
                setting,
                name,
            )
