"""Hydra's refusals of an override's form, each as one line that names the override as the
user typed it and the one to type instead.

Hydra's own messages name the fix for one value of a sweep (``+data.source.city=a,b`` is
told to drop the ``+`` from ``data.source.city=a``), a fix for a config file's defaults list
(``override model: lstm``) where the command line takes ``model=lstm``, or none at all (a
``~key`` of a key the config lacks). The lines here read the override from the command
line, so a sweep's whole list and the user's quoting are kept.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from types import TracebackType

from omegaconf import DictConfig, OmegaConf

from cloudlstm.cli.override_text import shell_word
from cloudlstm.errors import UserError, config_keys, nearest_name, settings_listing

__all__ = ["key_hint", "override_error_line", "refuse_keyless"]


def refuse_keyless(argv: list[str]) -> None:
    """Refuse an override with nothing before its ``=`` (``=3``, from ``model.k =3``): Hydra
    takes it for a config group named ``''`` and fails with a traceback or a hint to add it.

    Raises:
        UserError: an override of ``argv`` names no setting.
    """
    for arg in argv[1:]:
        if not arg.startswith("-") and arg.lstrip("+~").startswith("="):
            raise UserError(
                f"{shell_word(arg)} names no setting before its '=': give key=value with no "
                "space around the '=', e.g. model.k=6."
            )


def override_error_line(message: str, argv: list[str], tb: TracebackType | None) -> str | None:
    """The line for Hydra's refusal ``message`` of an override of ``argv`` (``tb``: the
    traceback it was raised with, whose frames hold the config being composed), or None
    for a refusal of another kind."""
    for pattern, line in _LINES:
        found = re.search(pattern, message)
        if found:
            return line(found, argv, tb)
    return None


def _given(argv: list[str], key: str, prefix: str) -> str | None:
    """The override of ``argv`` that gives ``key`` with exactly ``prefix`` (``+``, ``~``,
    ``++``) before it, as typed; None where none does (a sweeper's own parameter)."""
    for arg in argv[1:]:
        rest = arg[len(prefix) :]
        if arg.startswith(prefix) and rest[:1] not in "+~" and rest.partition("=")[0] == key:
            return arg
    return None


def _added_existing(found: re.Match, argv: list[str], _: TracebackType | None) -> str:
    """``+key=value`` of a key the config has: without the ``+``, or with ``++``."""
    key = found.group(1)
    given = _given(argv, key, "+") or f"+{key}={found.group(2)}"
    plain = given[1:]
    return (
        f"{shell_word(given)}: the config has {key} already, and + adds only a new setting. "
        f"Set it without the +: {shell_word(plain)} (or {shell_word('+' + given)}, which "
        "sets it whether or not the config has it)."
    )


def _deleted_missing(found: re.Match, argv: list[str], tb: TracebackType | None) -> str:
    """``~key`` of a key the config lacks: the name meant, or the override left out."""
    key = found.group(1)
    given = _given(argv, key, "~") or f"~{key}"
    root = _composed_config(tb)
    hint = key_hint(key, root) if root is not None else ""
    return (
        f"{shell_word(given)}: the config has no setting {key} to delete{hint}. Correct the "
        f"name, or leave {shell_word(given)} out; {settings_listing()}."
    )


def _deleted_other_value(found: re.Match, argv: list[str], _: TracebackType | None) -> str:
    """``~key=value`` where the config's value is another: ``~key`` deletes whatever it is."""
    key, value, asked = found.groups()
    return (
        f"~{key}={asked}: the config's {key} is {value}, not {asked}. Give {shell_word('~' + key)} "
        "to delete it whatever its value."
    )


def _group_added_twice(found: re.Match, argv: list[str], _: TracebackType | None) -> str:
    """``+model=lstm``: a second option of a group the config has one of."""
    group = found.group(1)
    given = _given(argv, group, "+") or f"+{group}={found.group(2)}"
    return (
        f"{shell_word(given)}: the config has a {group} already, and + would add a second. "
        f"Choose it without the +: {shell_word(given[1:])}."
    )


def _group_force_added(found: re.Match, argv: list[str], _: TracebackType | None) -> str:
    """``++model=lstm``: Hydra sets a group's option only without ``++``."""
    given = found.group(1)
    return (
        f"{shell_word(given)}: a config group's option is chosen without ++: "
        f"{shell_word(given.lstrip('+'))}."
    )


Line = Callable[[re.Match, list[str], TracebackType | None], str]
# Hydra's messages (hydra/_internal/config_loader_impl.py, defaults_list.py), each with
# the line that replaces it
_LINES: list[tuple[str, Line]] = [
    (
        r"Could not append to config\. An item is already at '([^']+)'\.\s*"
        r"Either remove \+ prefix: '[^=]*=(.*)'",
        _added_existing,
    ),
    (r"Could not delete from config\. '([^']+)' does not exist\.", _deleted_missing),
    (
        r"Could not delete from config\. The value of '([^']+)' is (.*) and not (.*)\.$",
        _deleted_other_value,
    ),
    (
        r"Multiple values for ([^.\s]+)\. To override a value use 'override [^:]+: (.*)'",
        _group_added_twice,
    ),
    (r"force-add of config groups is not supported: '(.*)'", _group_force_added),
]


def key_hint(key: str, root: DictConfig) -> str:
    """``" (did you mean <key>?)"`` for ``key`` that ``root`` lacks: the same name elsewhere
    in the config (``bad_values`` is ``data.source.bad_values``), or the nearest name beside
    it (``trainer.max_step``); ``""`` where there is neither."""
    path, _, name = key.rpartition(".")
    elsewhere = [k for k in config_keys(root) if k.rsplit(".", 1)[-1] == name and k != key]
    if elsewhere:
        return f" (did you mean {elsewhere[0]}?)"
    parent = OmegaConf.select(root, path, throw_on_resolution_failure=False) if path else root
    if not isinstance(parent, DictConfig):
        return ""
    return nearest_name(name, [str(k) for k in parent], path)


def _composed_config(tb: TracebackType | None) -> DictConfig | None:
    """The config Hydra was applying the overrides to when it refused one: the ``cfg`` of
    its ``_apply_overrides_to_config`` frame (None in a process that did not compose it)."""
    for frame in _frames(tb):
        if frame.f_code.co_name == "_apply_overrides_to_config":
            cfg = frame.f_locals.get("cfg")
            return cfg if isinstance(cfg, DictConfig) else None
    return None


def _frames(tb: TracebackType | None) -> Iterator:
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next
