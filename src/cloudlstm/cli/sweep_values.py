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
        UserError: a range whose step is 0.
    """
    value = override.value()
    if override.is_range_sweep() and isinstance(value, RangeSweep) and value.step == 0:
        raise UserError(_zero_step_line(override, value, where))
    return list(override.sweep_string_iterator())


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
    fix = f"range({_num(start)},{_num(stop)},{_num(step)})"
    fix = f"shuffle({fix})" if value.shuffle else fix
    return f"{said}, which never reaches its stop; give a step other than 0, e.g. '{key}={fix}'."


def _num(value: float) -> str:
    """A number as written: 3 for an int, 0.001 for a float (six digits at most)."""
    return str(value) if isinstance(value, int) else f"{value:.6g}"
