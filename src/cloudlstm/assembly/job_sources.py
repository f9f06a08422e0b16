"""A sweep's jobs' composed ``data.source``, each composed once per distinct data
(:class:`JobSources`): which of a job's overrides may change it, told from the configs
they choose and from what the source's interpolations read. Hydra and OmegaConf alone,
as :mod:`cloudlstm.assembly.source_overrides`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from typing import Any

from hydra.core.default_element import GroupDefault, InputDefault
from hydra.core.object_type import ObjectType
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.plugins.config_source import ConfigLoadError
from omegaconf import OmegaConf

# what an override may set where that cannot be told from its configs: anything
ANY = "*"
# what an interpolation reads: ${key}, ${.key} (relative), a key that oc.select or
# oc.dict.* names; and Hydra's resolver (${hydra:...}), which reads the hydra node
_READ = re.compile(
    r"\$\{\s*(?:oc\.(?:select|dict\.keys|dict\.values)\s*:\s*)?(\.*)([\w\-]+(?:\.[\w\-]+)*)\s*[},]"
)
_HYDRA = re.compile(r"\$\{\s*hydra\s*:")
# the group whose choice a defaults entry's interpolation reads: ${flavor}
_CHOICE = re.compile(r"\$\{\s*([^}\s]+)\s*\}")


class JobSources:
    """A sweep's jobs' composed ``data.source``, each composed once per distinct data: of
    ``experiment=paper/mobile``'s 108 jobs, one per city (composing each job took 45 s).

    Two jobs share their source where their overrides differ only in some that cannot
    change it. An override of a key outside ``data`` (``seed``, ``model.k``) changes it
    only through what its interpolations read (``${paths.data_dir}``): such an override
    tells jobs apart only where the source reads its key. A config group's choice
    (``model=lstm``) places its config, and those of its defaults list, where their
    packages say: ``model`` for ``conf/model/lstm.yaml``, anywhere for a ``# @package
    _global_`` one (its keys then say where: ``conf/model/cloudlstm_mae.yaml`` sets
    ``module``, an experiment ``data``). One whose configs cannot be told (a choice that
    deletes, a defaults list that overrides or interpolates) may change anything, and so
    may the choice of a group that a defaults entry of any config interpolates
    (``- /dataset@data: ${flavor}``, the presets' ``${scale}/${experiment}``): that entry
    loads another config by it, wherever it stands (:func:`interpolated_groups`).
    """

    def __init__(self, compose: Callable[[list[str]], Any], repository: Any) -> None:
        """``compose``: a job's overrides -> its ``data.source``; ``repository``: Hydra's
        config repository of the sweep (its search path)."""
        self._compose = compose
        self._repository = repository
        self._places: dict[str, frozenset[str]] = {}  # override -> the first keys it sets
        self._interpolated: frozenset[str] | None = None  # read once, for a group's choice
        # the overrides that may set data -> (the first keys the source reads, sources)
        self._by_data: dict[tuple[str, ...], tuple[frozenset[str], dict[Any, Any]]] = {}

    def __call__(self, job: list[str]) -> Any:
        data = tuple(o for o in job if self._sets(o) & {"data", ANY})
        if data not in self._by_data:
            source = self._compose(job)
            self._by_data[data] = (read_roots(source), {})
            self._by_data[data][1][self._reading(job, data)] = source
        _, sources = self._by_data[data]
        key = self._reading(job, data)
        if key not in sources:
            sources[key] = self._compose(job)
        return sources[key]

    def _reading(self, job: list[str], data: tuple[str, ...]) -> tuple[str, ...]:
        """The overrides of ``job`` outside ``data`` that set a key its source reads."""
        read = self._by_data[data][0]
        return tuple(o for o in job if o not in data and (ANY in read or self._sets(o) & read))

    def _sets(self, override: str) -> frozenset[str]:
        if override not in self._places:
            (parsed,) = OverridesParser.create().parse_overrides([override])
            places = set_roots(parsed, self._repository)
            if places != {ANY} and self._repository.group_exists(parsed.key_or_group):
                if self._interpolated is None:
                    self._interpolated = interpolated_groups(self._repository)
                if parsed.key_or_group in self._interpolated:
                    places = frozenset({ANY})
            self._places[override] = places
        return self._places[override]


def interpolated_groups(repository: Any) -> frozenset[str]:
    """The groups whose choice a defaults entry of a config of ``repository`` (Hydra's
    config repository: its search path) interpolates: ``flavor`` of ``- /dataset@data:
    ${flavor}``, ``scale`` and ``experiment`` of ``${scale}/${experiment}``."""
    read: set[str] = set()
    groups = [""]
    while groups:
        group = groups.pop()
        within = f"{group}/" if group else ""
        groups += [within + g for g in repository.get_group_options(group, ObjectType.GROUP)]
        for name in repository.get_group_options(group, ObjectType.CONFIG):
            try:
                loaded = repository.load_config(within + name)
            except ConfigLoadError:
                continue  # a config no job loads, or whose load fails the job itself
            for entry in (loaded.defaults_list if loaded else None) or []:
                # as written (a list of options included): its path needs a parent
                written = entry.value if isinstance(entry, GroupDefault) else entry.path
                read |= set(_CHOICE.findall(str(written)))
    return frozenset(read)


def set_roots(override: Override, repository: Any) -> frozenset[str]:
    """The first keys of the config that ``override`` may set (``{"*"}``: any)."""
    key = override.key_or_group
    if not repository.group_exists(key):
        return frozenset({key.split(".")[0]})
    value = override.value()
    if override.is_delete() or not isinstance(value, str):
        return frozenset({ANY})  # a deleted choice, a list of options, none
    choice = GroupDefault(group=key, value=value, package=override.package)
    choice.update_parent("", "")
    return _placed(choice, repository)


def _placed(default: InputDefault, repository: Any) -> frozenset[str]:
    """The first keys where ``default``'s config and those of its defaults list go."""
    try:
        loaded = repository.load_config(default.get_config_path())
    except ConfigLoadError:
        loaded = None
    if loaded is None:
        return frozenset() if default.is_optional() else frozenset({ANY})
    default.set_package_header(loaded.header.get("package"))
    package = default.get_final_package()
    roots = set(loaded.config) - {"defaults"} if package == "" else {package.split(".")[0]}
    for entry in loaded.defaults_list or []:
        if entry.is_self():
            continue
        child = copy.copy(entry)  # the repository's, cached: another parent may load it
        child.update_parent(default.get_group_path(), package)
        if child.is_override() or child.is_interpolation():
            return frozenset({ANY})  # another group's choice, or one read from choices
        if isinstance(child, GroupDefault) and child.is_options():
            return frozenset({ANY})
        roots |= _placed(child, repository)
    return frozenset(roots)


def read_roots(source: Any) -> frozenset[str]:
    """The first keys of what the interpolations of ``source`` (a composed node) read,
    followed through the config (``${paths.data_dir}``, then what that reads; relative ones
    from where they are); ``hydra`` for Hydra's resolver."""
    if not OmegaConf.is_config(source):
        return frozenset()
    config = OmegaConf.to_container(source._get_root(), resolve=False)
    where = source._get_full_key(None)
    roots: set[str] = set()
    seen: set[str] = set()
    todo = [where.split(".") if where else []]
    while todo:
        path = todo.pop()
        for at, text in _strings(_at(config, path), path):
            if _HYDRA.search(text):
                roots.add("hydra")
            for dots, key in _READ.findall(text):
                read = _absolute(at, dots, key)
                if read is None:
                    return frozenset({ANY})  # above the config's root: unknown
                if ".".join(read) not in seen:
                    seen.add(".".join(read))
                    roots.add(read[0])
                    todo.append(read)
    return frozenset(roots)


def _absolute(at: list[str], dots: str, key: str) -> list[str] | None:
    """The path read by ``${<dots><key>}`` in the value at path ``at`` (None: above the
    root): ``${.x}`` reads a key beside it, each further dot one level up."""
    if not dots:
        return key.split(".")
    up = len(at) - len(dots)
    return None if up < 0 else [*at[:up], *key.split(".")]


def _strings(value: Any, path: list[str]) -> Iterator[tuple[list[str], str]]:
    """The strings in ``value`` (plain containers) at any depth, each with its path."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, [*path, str(key)])
    elif isinstance(value, list):
        for num, item in enumerate(value):
            yield from _strings(item, [*path, str(num)])


def _at(config: Any, path: list[str]) -> Any:
    """The value at ``path`` in ``config`` (plain containers), or None."""
    for part in path:
        if isinstance(config, dict):
            config = config.get(part)
        elif isinstance(config, list) and part.isdigit() and int(part) < len(config):
            config = config[int(part)]
        else:
            return None
    return config
