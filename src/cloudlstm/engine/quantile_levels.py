"""``module.quantiles`` and ``module.calibrate`` read and checked, without torch: the
training module takes them from here through :mod:`cloudlstm.engine.quantiles`, and
``compare`` (which starts without torch) tells two ways of writing one set of levels
apart with :func:`quantiles_setting`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cloudlstm.errors import UserError

CALIBRATIONS = ("none", "conformal")


def check_quantiles(value: Any) -> tuple[float, ...]:
    """``module.quantiles`` as ascending floats; ``()`` for None.

    Raises:
        UserError: an empty list, or not a list of distinct numbers strictly between 0 and 1.
    """
    if value is None:
        return ()
    if _no_levels(value):  # a list of no level is no request: null is the one for points
        raise UserError(
            "module.quantiles=[] lists no level: give module.quantiles=null for point "
            "forecasts only, or levels such as module.quantiles=[0.1,0.5,0.9]."
        )
    items = value if isinstance(value, Sequence) and not isinstance(value, str) else [value]
    items = list(items)
    numbers = [v for v in items if isinstance(v, int | float) and not isinstance(v, bool)]
    levels = sorted(float(v) for v in numbers)
    strays = [v for v in items if not (isinstance(v, int | float) and not isinstance(v, bool))]
    if strays or not all(0 < t < 1 for t in levels) or (len(set(levels)) != len(levels)):
        stray = ""
        if strays:  # named: the list shows '0.9' quoted, but a reader may miss the quotes
            kind = "text, not a number" if isinstance(strays[0], str) else "not a number"
            stray = f"{_item(strays[0])} is {kind}: "
        else:
            stray = _level_faults(numbers)
        raise UserError(
            f"module.quantiles={_shown(value)}: {stray}give distinct levels strictly between "
            "0 and 1, e.g. module.quantiles=[0.1,0.5,0.9] (null: point forecasts only)."
        )
    # The point forecast is the median, trained by its pinball loss: without 0.5 it would
    # be another level's forecast, scored by every point metric as if it were the median.
    if levels and 0.5 not in levels:
        raise UserError(
            f"module.quantiles={_shown(value)}: the point forecast is the median, so the "
            "levels must include 0.5, e.g. module.quantiles=[0.1,0.5,0.9]."
        )
    _check_spacing(levels, value)
    return tuple(levels)


def _level_faults(numbers: list[float]) -> str:
    """Which of ``numbers`` are no levels, named as a reader finds them in a long list:
    those outside (0, 1) (percentages written whole shown as levels) and those given twice,
    followed by ``: ``."""
    outside = [v for v in numbers if not 0 < v < 1]
    twice = [v for i, v in enumerate(numbers) if v in numbers[:i] and v not in numbers[i + 1 :]]
    faults = []
    if outside:
        faults.append(f"{', '.join(_item(v) for v in outside)} outside (0, 1)")
        if all(1 <= v < 100 for v in numbers):  # 10, 50, 90: percentages
            faults[-1] += f" (percentages? module.quantiles={_shown([v / 100 for v in numbers])})"
    if twice:
        faults.append(f"{', '.join(_item(v) for v in twice)} given twice")
    return "; ".join(faults) + ": "


def quantiles_setting(value: Any) -> Any:
    """``module.quantiles`` in one form, to tell settings apart: the ascending levels as
    the module takes them, None for none (``0.5`` is ``[0.5]``, ``[0.9,0.5,0.1]`` is
    ``[0.1,0.5,0.9]``, ``[]`` is null, as runs saved before it was refused trained it); a
    value :func:`check_quantiles` refuses stays as given."""
    if _no_levels(value):
        return None
    try:
        return list(check_quantiles(value)) or None
    except UserError:
        return value


def _no_levels(value: Any) -> bool:
    """Whether ``value`` is a list of no level (``[]``)."""
    return isinstance(value, Sequence) and not isinstance(value, str) and not value


def _check_spacing(levels: Sequence[float], value: Any) -> None:
    """Refuse two levels closer than 1e-5 (ascending ``levels``): their columns of a
    forecast file would be named alike (``q10``, ``q10.0001``) or as one.

    Raises:
        UserError: two levels closer than 1e-5.
    """
    for low, high in zip(levels, levels[1:], strict=False):
        if round(high - low, 12) < 1e-5:  # rounded: 0.12346 - 0.12345 is 1e-5 less a hair
            raise UserError(
                f"module.quantiles={_shown(value)}: {low!r} and {high!r} are closer than "
                f"1e-5 (columns {level_name(low)} and {level_name(high)} of the forecast "
                "files): give levels that differ by at least 1e-5."
            )


def _shown(value: Any) -> str:
    """``value`` as the command line writes a list: text quoted, so that ``'0.9'`` does
    not print as the number ``0.9``."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        return "[" + ",".join(_item(v) for v in value) + "]"
    return repr(value)


def _item(value: Any) -> str:
    """One item of ``module.quantiles`` as the command line writes it."""
    if isinstance(value, str):
        return repr(value)
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, Sequence):
        return _shown(value)
    return str(value)


def check_calibration(value: Any, levels: Sequence[float]) -> str:
    """``module.calibrate``: ``none`` or ``conformal`` (which needs quantiles).

    Raises:
        UserError: another value, or ``conformal`` without ``module.quantiles``.
    """
    name = "none" if value is None else str(value)
    if name not in CALIBRATIONS:
        raise UserError(f"module.calibrate={value!r} is not one of {list(CALIBRATIONS)}.")
    if name == "conformal" and len(levels) < 2:
        raise UserError(
            "module.calibrate=conformal calibrates the intervals around the median: give "
            "levels beside 0.5 too, e.g. module.quantiles=[0.1,0.5,0.9]."
        )
    return name


def centre_index(levels: Sequence[float]) -> int:
    """Index of the level nearest 0.5 (the first of two as near): the point forecast."""
    return min(range(len(levels)), key=lambda i: (abs(levels[i] - 0.5), i))


def level_name(tau: float) -> str:
    """A level's column suffix: ``0.1`` -> ``q10``, ``0.025`` -> ``q2.5``."""
    return f"q{round(100 * tau, 6):g}"
