"""Model options checked against what the model's constructor declares, for every model.

A constructor that declares ``attention: bool`` would take ``model.attention=maybe`` as
true (a non-empty string), and one that declares ``forget_bias: float`` would take ``nan``
and fail steps later, in a neighbour search. So each option is checked against its declared
type before the model is built: ``bool`` takes true or false, ``int`` a whole number,
``float`` a finite number (``| None``: or null; ``int | float`` either; an annotation
written ``Optional[...]`` or ``Union[...]``, as Lightning's and torch's are, reads the same),
a ``dropout`` a probability in [0, 1), a ``patience`` and a ``min_delta`` a number >= 0, a
``gradient_clip_val`` a finite number >= 0, a ``val_check_interval`` a number > 0, an
``accumulate_grad_batches`` and a ``check_val_every_n_epoch`` a whole number >= 1, and a
``max_epochs`` or ``max_steps`` anything but 0 (no training, then a test written up as a
finished run).
Ranges beyond these are each constructor's own (``hidden_channels >= 1``). The same check
serves every other node of a config with a ``_target_``
(:mod:`cloudlstm.assembly.known_keys`): an early stopping's ``patience``, a Trainer's
``max_steps``, an optimizer's ``weight_decay``.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
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
    parameters = parameters_of(model_cls)
    for key, value in options.items():
        if key not in parameters:
            continue  # _target_, or a key the build path reports in its own words
        declared = _declared(parameters[key].annotation)
        problem = _problem(key, value, declared)
        if problem and _is_list(value) and declared[0] is not None:
            shown = ",".join(map(str, value))
            problem = (
                f"give one value, not a list; to run each, sweep them: -m {where}.{key}={shown}"
            )
        if problem:
            name = getattr(model_cls, "__name__", str(model_cls))
            raise UserError(f"{name}: {where}.{key}={_shown(value)}: {problem}")


def _is_list(value: Any) -> bool:
    """Whether ``value`` is a list as a config gives one (a ListConfig or a list)."""
    return isinstance(value, Sequence) and not isinstance(value, str)


def _shown(value: Any) -> str:
    """A value as an override writes it: a ListConfig as ``[3, 4]``, not its class."""
    return repr(list(value)) if _is_list(value) else repr(value)


@functools.cache  # the same few classes in every config a process checks (a sweep's jobs)
def parameters_of(target: Callable[..., Any]) -> Mapping[str, inspect.Parameter]:
    """``inspect.signature(target).parameters``, read once per class or function."""
    return inspect.signature(target).parameters


@functools.cache
def _declared(annotation: Any) -> tuple[str | None, bool]:
    """``(kind, optional)``: one of :data:`_KINDS`, ``"number"`` (``int | float``) or None
    (any other type), and whether None is allowed, from an annotation as a string
    (``"float | None"``) or an object (``Optional[int]``, ``Union[int, float, None]``). A
    tensor, which no config gives, is left out: ``lr: float | Tensor`` is a float."""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    names = _type_names(text)
    optional = bool(names & {"None", "NoneType"})
    kinds = names - {"None", "NoneType", "Tensor"}
    if kinds == {"int", "float"}:
        return "number", optional
    kind = next(iter(kinds)) if len(kinds) == 1 else None
    return (kind if kind in _KINDS else None), optional


def _type_names(text: str) -> set[str]:
    """The types an annotation's text unites, each by its last dotted name:
    ``"Union[int, torch.Tensor, None]"`` and ``"int | torch.Tensor | None"`` give
    ``{"int", "Tensor", "None"}``; ``"Optional[int]"`` gives ``{"int", "None"}``; a generic
    such as ``"dict[str, int]"`` is one name, ``"dict"``."""
    text = text.strip()
    parts = _split_outside_brackets(text, "|")
    if len(parts) > 1:
        return set().union(*map(_type_names, parts))
    head, _, inner = text.partition("[")
    head = head.rsplit(".", 1)[-1]
    if head == "Optional":
        return _type_names(inner[:-1]) | {"None"}
    if head == "Union":
        return set().union(*map(_type_names, _split_outside_brackets(inner[:-1], ",")))
    return {head}


def _split_outside_brackets(text: str, separator: str) -> list[str]:
    """``text`` split at each ``separator`` outside square brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def _problem(key: str, value: Any, declared: tuple[str | None, bool]) -> str | None:
    """What is wrong with ``value`` for a parameter declared as ``declared``; None if
    nothing."""
    kind, optional = declared
    if value is None:
        return None if optional or kind is None else "give a value (null is not one here)."
    if kind == "bool" and not isinstance(value, bool):
        return "use true or false."
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if key == "gradient_clip_val" and not (number and 0 <= value < math.inf):
        # Lightning takes a negative value for no clipping: a recipe's clipping silently gone
        return "give a number >= 0 (0 or null: no clipping), e.g. trainer.gradient_clip_val=1.0."
    if kind == "int" and not (number and isinstance(value, int)):
        return "use a whole number."
    if kind in ("float", "number") and not (number and math.isfinite(value)):
        return "use a finite number."
    if key == "dropout" and number and not 0 <= value < 1:
        return "use a probability in [0, 1) (0: no dropout)."
    if key == "val_check_interval" and number and not value > 0:  # Lightning divides by it
        return "give a number of training steps >= 1 or a fraction of an epoch in (0, 1]."
    if key == "accumulate_grad_batches" and number and value < 1:  # Lightning divides by it
        return "give a whole number of batches >= 1 (1: a step for every batch)."
    if key == "check_val_every_n_epoch" and number and value < 1:  # Lightning divides by it
        return (
            "give a whole number of epochs >= 1, or null to validate every "
            "trainer.val_check_interval steps across epochs (the recipe's)."
        )
    if key == "max_time" and _no_time(value):
        # Lightning's timer then stops after the first epoch or validation, as a finished run
        return 'no time to train: give a duration "DD:HH:MM:SS" above 0, or null for none.'
    if key in ("max_epochs", "max_steps") and value == 0:
        # Lightning trains no step, and the run would test the untrained model as finished
        return (
            "no step would train: give -1 (no limit) or a number >= 1; train=false tests "
            "without training."
        )
    if key == "patience" and number and value < 0:  # Lightning would stop at once
        return "use a whole number >= 0 (the validations without improvement to wait)."
    if key == "min_delta" and number and value < 0:  # a worse score would count as better
        return (
            "use a number >= 0: the least change of the monitored score that counts as an "
            "improvement (0: any)."
        )
    return None


def _no_time(value: Any) -> bool:
    """Whether a ``max_time`` written ``"DD:HH:MM:SS"`` is a duration of 0; a value of
    another form is Lightning's to read or refuse."""
    if not isinstance(value, str):
        return False
    parts = value.split(":")
    return all(p.strip().isdigit() for p in parts) and all(int(p) == 0 for p in parts)
