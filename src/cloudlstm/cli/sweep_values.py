"""The values a sweep override of ``python train.py -m`` runs, or one line refusing it.

Hydra expands ``range(3,9,0)`` with Python's ``range``, whose step of 0 is a ``ValueError``
with a traceback (a float range's, a ``HydraException`` naming the bounds in 50 digits).
"""

from __future__ import annotations

from hydra.core.override_parser.types import Override, RangeSweep

from cloudlstm.errors import UserError


def sweep_values(override: Override, where: str = "the command line") -> list[str]:
    """The values, as strings, that the discrete sweep ``override`` gives its key.

    Args:
        override: a parsed sweep override (``choice``, ``range``, ``glob``).
        where: where it was given, named first in a refusal (``the command line``,
            ``hydra.sweeper.params.seed``), as the Optuna sweeper names it.

    Raises:
        UserError: a range whose step is 0, or a sweep of no value (``range(5,1)``, a glob
            matching no option), which would launch no job and exit 0.
    """
    value = override.value()
    if override.is_range_sweep() and isinstance(value, RangeSweep) and value.step == 0:
        raise UserError(_zero_step_line(override, value, where))
    values = list(override.sweep_string_iterator())
    if not values:
        raise UserError(_empty_line(override, value, where))
    return values


def _empty_line(override: Override, value: object, where: str) -> str:
    """The refusal of a sweep of no value, worded as the Optuna sweeper's of an empty
    range, with the range counting the other way (or the one value) as the fix."""
    key = override.get_key_element()
    said = f"{where}: {override.input_line or key!r}"
    if not isinstance(value, RangeSweep):  # a glob: its patterns match no option
        loader = override.config_loader
        options = loader.get_group_options(key) if loader is not None else []
        return (
            f"{said} is an empty sweep: it matches no option of {key}; name one of "
            f"{', '.join(options) or 'its options'}."
        )
    start, stop, step = value.start, value.stop, value.step
    assert start is not None and stop is not None  # the grammar requires both
    if start == stop:
        fix = f"give the one value, {key}={_num(start)}, or a stop beyond its start"
    else:
        fix = (
            f"count towards its stop, e.g. '{key}=range({_num(start)},{_num(stop)},{_num(-step)})'"
        )
    return f"{said} is an empty range (its stop is excluded): no job would run; {fix}."


def _zero_step_line(override: Override, value: RangeSweep, where: str) -> str:
    """The refusal of a range with a step of 0, with the same range stepping towards its
    stop (or the one value, where the range starts at its stop)."""
    key = override.get_key_element()
    start, stop = value.start, value.stop
    assert start is not None and stop is not None  # the grammar requires both
    said = f"{where}: {override.input_line or key!r} has a step of 0"
    if start == stop:  # no step makes it more than empty
        return (
            f"{said}, and its stop is its start; give the one value, {key}={_num(start)}, "
            "or a range with a step other than 0 towards a stop beyond its start."
        )
    step: float = (stop - start) / 2  # a float range: two values
    if isinstance(start, int) and isinstance(stop, int):
        step = 1 if stop > start else -1
    fix = _range(start, stop, step, value.shuffle)
    return f"{said}, which never reaches its stop; give a step other than 0, e.g. '{key}={fix}'."


def _range(start: float, stop: float, step: float, shuffle: bool) -> str:
    """A range as an override writes it: ``range(3,9,1)``, ``shuffle(range(3,9,1))``."""
    text = f"range({_num(start)},{_num(stop)},{_num(step)})"
    return f"shuffle({text})" if shuffle else text


def _num(value: float) -> str:
    """A number as written: 3 for an int, 0.001 for a float (six digits at most)."""
    return str(value) if isinstance(value, int) else f"{value:.6g}"
