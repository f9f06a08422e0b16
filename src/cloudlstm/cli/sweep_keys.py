"""Which override gives a key of a sweep its values: the command's, over the config's sweep.

Hydra's basic sweeper groups a sweep's overrides by key *with* their prefix, so that
``experiment=paper/mobile ++data.source.city=city2`` ran each job of the preset's sweep
(``hydra.sweeper.params``: ``data.source.city: city1,city2``) with both overrides: City 2
twice, as two jobs alike (and ``~data.source.city`` each city once, deleted). The plain
``data.source.city=city2`` replaced the sweep. Whatever its prefix, a key that the command
sets (``key=``, ``+key=``, ``++key=``) or deletes (``~key``) is the command's: a
deletion drops the config's sweep of the key, and every job runs without it, as a run of
the same command would.
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.override_parser.types import Override


def set_key(override: Override) -> str:
    """The key (a group's with its package, ``model@x``) that ``override`` sets or deletes,
    without its prefix: ``data.source.city`` of ``++data.source.city=city2`` and of
    ``~data.source.city``."""
    return override.get_key_element().lstrip("+~")


def command_first(overrides: Sequence[Override], config: int) -> list[Override]:
    """``overrides`` (the config's sweep's first, ``config`` of them, then the command's:
    as Hydra's ``BasicSweeper.sweep`` orders them), each of the config's whose key the
    command sets or deletes too, with any prefix, replaced in its place by the command's
    first override of that key: as Hydra replaces it where both have the same prefix, so
    the jobs come in the same order."""
    command = list(overrides[config:])
    merged: list[Override] = []
    for override in overrides[:config]:
        mine = [num for num, o in enumerate(command) if set_key(o) == set_key(override)]
        merged.append(command.pop(mine[0]) if mine else override)
    return merged + command


def replaced(overrides: Sequence[Override], config: int) -> set[int]:
    """The positions of the config's overrides that :func:`command_first` replaces."""
    command = {set_key(o) for o in overrides[config:]}
    return {num for num, o in enumerate(overrides[:config]) if set_key(o) in command}
