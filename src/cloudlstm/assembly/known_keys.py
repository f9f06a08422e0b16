"""Settings that nothing would read, refused by name before anything is built.

Hydra adds a key with ``+``: ``+model.kk=3`` puts ``kk`` in the model's config, where its
constructor fails with a ``TypeError`` of several lines, or a traceback for the optimizer,
the schedule and the training module; ``+foo=1`` at the top puts a key in the run's config
that no code reads, and the run trains as if it were not there. A key misspelt in a config
file does the same. So before the data are read:

* each node with a ``_target_`` (the model, the datamodule and its source, the optimizer,
  the schedule, the Trainer, the callbacks, the loggers) may hold only the arguments its
  target declares, unless the target takes ``**kwargs`` (the W&B logger passes them on);
* a top-level key added with ``+key=value`` is refused: the top-level settings are fixed;
* each entry of a group of objects (``callbacks``, ``logger``) is one to build, with a
  ``_target_``, or null (left out): ``+callbacks.early_stop.patience=5``, a misspelt
  ``early_stopping``, would make an entry that nothing builds. Where the group builds
  nothing (``callbacks=none``), a recipe's setting of a callback it would have
  (``callbacks.early_stopping.patience``) is moot, and only entries added with ``+`` are
  refused;
* a value of a type other than its target declares (``bool``, ``int``, ``float``) is
  refused as a model's option is (:mod:`cloudlstm.models.options`): an early stopping's
  ``patience=maybe`` or ``-1``, a Trainer's ``max_steps=2.5``.

A key added inside another plain node (``+paths.foo=1``) is not checked: such nodes are
read key by key, and an extra key there changes nothing.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, ListConfig, OmegaConf

from cloudlstm.errors import UserError, locate, nearest_name, settings_listing
from cloudlstm.models.build import BUILD_OPTIONS
from cloudlstm.models.options import check_option_types, parameters_of

# Hydra's own keys of a node it instantiates
_HYDRA_KEYS = {"_target_", "_partial_", "_recursive_", "_convert_", "_args_"}
# keys a node may hold beyond its target's arguments: they are taken out before it is built
_BUILD_KEYS = {"model": set(BUILD_OPTIONS)}
# an argument list longer than this is not written out in the message
_LIST_AT_MOST = 16
# the groups whose entries are each an object to build (assembly.config.instantiate_group)
OBJECT_GROUPS = ("callbacks", "logger")


def check_known_keys(cfg: DictConfig) -> None:
    """Refuse a key of ``cfg`` that nothing reads (module docstring).

    Raises:
        UserError: names the key, the class or function it was meant for, the nearest
            argument it takes and the way out.
    """
    check_added_top_level_keys(cfg)
    added = _added_keys()
    for group in OBJECT_GROUPS:
        check_group_entries(cfg, group, added)
    for path, node in _target_nodes(cfg, ""):
        _check_node(path, node)
    check_moot_fractions(cfg)


# the split fractions, which data.split_times replaces
_FRACTIONS = ("data.val_fraction", "data.test_fraction")


def check_moot_fractions(cfg: DictConfig) -> None:
    """Refuse ``data.test_fraction`` or ``data.val_fraction`` given on the command line
    where ``data.split_times`` sets the parts: the fraction would be ignored in silence.

    Raises:
        UserError: naming the fraction and the two ways out.
    """
    data = cfg.get("data")
    if not isinstance(data, DictConfig) or data.get("split_times") is None:
        return
    given = [o.key_or_group for o in _task_overrides() if o.key_or_group in _FRACTIONS]
    if given:
        raise UserError(
            f"{given[0]} has no effect: data.split_times sets where the parts begin. Give "
            f"the parts' times in data.split_times, or data.split_times=null to split by the "
            "fractions."
        )


def check_added_top_level_keys(cfg: DictConfig) -> None:
    """Refuse ``+key=value`` at the top level of a config composed by Hydra (no code reads
    a new top-level key). Nothing is checked outside a Hydra job, or for a config group
    added with ``+`` (``+experiment=...``).

    Raises:
        UserError: names the override and the nearest top-level setting.
    """
    if not HydraConfig.initialized():
        return
    groups = set(HydraConfig.get().runtime.choices)
    for override in _adding_overrides():
        key = override.key_or_group
        if "." in key or "/" in key or key in groups:
            continue
        known = [k for k in cfg if k != key and k != "hydra"]
        raise UserError(
            f"{override.input_line}: there is no top-level setting {key}, so nothing would "
            f"read it{nearest_name(key, known)}. Give a setting the config has, without the "
            f"+: {settings_listing()}."
        )


def _added_keys() -> set[str]:
    """The keys of the overrides that add one with ``+`` (none outside a Hydra job)."""
    return {o.key_or_group for o in _adding_overrides()}


def _adding_overrides() -> list[Any]:
    """The job's overrides that add a key with ``+`` (none outside a Hydra job)."""
    return [o for o in _task_overrides() if o.is_add()]


def _task_overrides() -> list[Any]:
    """The job's parsed overrides (none outside a Hydra job)."""
    if not HydraConfig.initialized():
        return []
    return OverridesParser.create().parse_overrides(list(HydraConfig.get().overrides.task))


def check_group_entries(cfg: DictConfig, group: str, added: set[str] = frozenset()) -> None:
    """Refuse an entry of the group ``group`` of ``cfg`` that is neither null nor a node with
    a ``_target_``: nothing would build it, so what it sets would change nothing. Where no
    entry builds an object, only an entry ``added`` with ``+`` (keys of overrides) is.

    Raises:
        UserError: names the entry, the nearest entry that builds an object and the way out.
    """
    entries = cfg.get(group)
    if not isinstance(entries, DictConfig):
        return
    buildable = [str(k) for k in entries if _builds(entries, str(k))]
    for key in entries:
        key = str(key)
        node = entries._get_node(key)
        if node._is_none() or OmegaConf.is_interpolation(entries, key) or _builds(entries, key):
            continue
        entry = f"{group}.{key}"
        if not buildable and not any(a == entry or a.startswith(f"{entry}.") for a in added):
            continue  # a setting of a callback the chosen group does not have
        if buildable:
            names = ("one of " if len(buildable) > 1 else "") + ", ".join(sorted(buildable))
            way_out = f"Set a key of {names}, or give it a _target_."
        else:
            way_out = f"This config builds no {group}: give it a _target_, or leave it out."
        raise UserError(
            f"{group}.{key}: there is no {group} entry {key}{nearest_name(key, buildable, group)}, "
            f"and this one has no _target_, so nothing would be built from it. {way_out}"
        )


def _builds(entries: DictConfig, key: str) -> bool:
    """Whether entry ``key`` of ``entries`` is a node with a ``_target_``."""
    node = entries._get_node(key)
    return isinstance(node, DictConfig) and not node._is_none() and "_target_" in node


def _target_nodes(node: DictConfig, path: str) -> Iterator[tuple[str, DictConfig]]:
    """``(path, node)`` of each node with a ``_target_`` at or below ``node``, ``hydra``
    left out; a node that is an interpolation is not followed."""
    if "_target_" in node:
        yield path, node
    for key in node:
        if (not path and key == "hydra") or OmegaConf.is_interpolation(node, str(key)):
            continue
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            yield from _target_nodes(child, f"{path}.{key}" if path else str(key))


def _check_node(path: str, node: DictConfig) -> None:
    """Refuse a key of ``node`` that its target does not take, then a value of another type
    than its target declares (:func:`~cloudlstm.models.options.check_option_types`)."""
    target = _target(str(node._get_node("_target_")._value()), f"{path}._target_")
    if target is None:
        return
    arguments = _arguments(target)  # None: takes **kwargs, so any key
    allowed = (arguments or set()) | _HYDRA_KEYS | _BUILD_KEYS.get(path, set())
    unknown = [] if arguments is None else [key for key in node if key not in allowed]
    if unknown:
        key = unknown[0]
        name = getattr(target, "__name__", str(node._target_))
        if len(arguments) <= _LIST_AT_MOST:
            takes = f"; it takes {', '.join(sorted(arguments))}"
        else:
            takes = f" (it takes {len(arguments)} settings, its documentation lists them)"
        raise UserError(
            f"{path}.{key}: {name} has no setting {key}{nearest_name(key, arguments, path)}"
            f"{takes}. Correct the name, or leave it out."
        )
    check_option_types(target, _plain_values(node), where=path)


@functools.cache  # the same few targets in every config a process checks (a sweep's jobs)
def _target(name: str, key: str) -> Callable[..., Any] | None:
    """The class or function ``name`` (the ``_target_`` of setting ``key``) where it has a
    signature, or None.

    Raises:
        UserError: ``name`` cannot be imported (:func:`~cloudlstm.errors.locate`).
    """
    target = locate(name, key)
    try:
        parameters_of(target)
    except (TypeError, ValueError):  # a builtin without one: its own call checks its keys
        return None
    return target


def _plain_values(node: DictConfig) -> dict[str, Any]:
    """The keys of ``node`` whose values are set and resolve here to a plain value or a
    list (not a node): an interpolation that resolves only later (``${hydra:...}``) is left
    out. A list is checked against a declared number or switch (``optimizer.lr=[0.1]``)."""
    values = {}
    for key in node:
        if OmegaConf.is_missing(node, str(key)):
            continue
        try:
            value = node[key]
        except Exception:  # noqa: BLE001 - resolved where it is used, and reported there
            continue
        if isinstance(value, ListConfig):
            values[str(key)] = OmegaConf.to_container(value, resolve=True)
        elif not isinstance(value, DictConfig):
            values[str(key)] = value
    return values


def _arguments(target: Callable[..., Any]) -> set[str] | None:
    """The names of the arguments ``target`` takes, or None where it takes any
    (``**kwargs``)."""
    parameters = parameters_of(target)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return None
    positional = inspect.Parameter.VAR_POSITIONAL
    return {name for name, p in parameters.items() if p.kind is not positional}
