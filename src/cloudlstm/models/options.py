"""Model options checked against what the model's constructor declares, for every model.

A constructor that declares ``attention: bool`` would take ``model.attention=maybe`` as
true (a non-empty string), and one that declares ``forget_bias: float`` would take ``nan``
and fail steps later, in a neighbour search. So each option is checked against its declared
type before the model is built: ``bool`` takes true or false, ``int`` a whole number,
``float`` a finite number (``| None``: or null), a ``dropout`` a probability in [0, 1) and a
``patience`` a number >= 0. Ranges beyond these are each constructor's own
(``hidden_channels >= 1``). The same check serves every other node of a config with a
``_target_`` (:mod:`cloudlstm.assembly.known_keys`): an early stopping's ``patience``, a
Trainer's ``max_steps``, an optimizer's ``weight_decay``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

from cloudlstm.errors import UserError

_KINDS = ("bool", "int", "float")


def check_option_types(
    model_cls: Callable[..., Any], options: Mapping[str, Any], where: str = "model"
) -> None:
    """Refuse an option of ``options`` (a model config, or the config node ``where`` of any
    other class or function) that its signature declares otherwise.

    Raises:
        UserError: names the class, the ``<where>.<key>`` and what to give.
    """
    parameters = inspect.signature(model_cls).parameters
    for key, value in options.items():
        if key not in parameters:
            continue  # _target_, or a key the build path reports in its own words
        problem = _problem(key, value, _declared(parameters[key].annotation))
        if problem:
            name = getattr(model_cls, "__name__", str(model_cls))
            raise UserError(f"{name}: {where}.{key}={value!r}: {problem}")


def _declared(annotation: Any) -> tuple[str | None, bool]:
    """``(kind, optional)``: one of :data:`_KINDS` (None for any other type) and whether
    None is allowed, from an annotation such as ``"float | None"``."""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    parts = [part.strip() for part in text.split("|")]
    optional = "None" in parts
    kinds = [part for part in parts if part != "None"]
    kind = kinds[0] if len(kinds) == 1 and kinds[0] in _KINDS else None
    return kind, optional


def _problem(key: str, value: Any, declared: tuple[str | None, bool]) -> str | None:
    """What is wrong with ``value`` for a parameter declared as ``declared``; None if
    nothing."""
    kind, optional = declared
    if value is None:
        return None if optional or kind is None else "give a value (null is not one here)."
    if kind == "bool" and not isinstance(value, bool):
        return "use true or false."
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "int" and not (number and isinstance(value, int)):
        return "use a whole number."
    if kind == "float" and not (number and math.isfinite(value)):
        return "use a finite number."
    if key == "dropout" and number and not 0 <= value < 1:
        return "use a probability in [0, 1) (0: no dropout)."
    if key == "patience" and number and value < 0:  # Lightning would stop at once
        return "use a whole number >= 0 (the validations without improvement to wait)."
    return None
