"""Overrides that choose an option of one of train.py's config groups (``model=convlstm``,
``+data=beijing``), read from the command line before Hydra starts.

``eval.py`` and ``predict.py`` take a trained run as it is: another model or data set
there makes no sense, and Hydra would answer "No match in the defaults list" with the
advice to add it with ``+``, which merges a second model's keys into the run's config.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from cloudlstm.paths import config_dir

__all__ = ["group_choices", "train_groups"]


def train_groups() -> set[str]:
    """The config groups of ``train.py``: the folders of ``conf/``."""
    return {d.name for d in config_dir().iterdir() if d.is_dir()}


def group_choices(argv: list[str], keep: Collection[str] = ()) -> Iterator[tuple[str, str]]:
    """``(override, group)`` for each override of ``argv`` that chooses an option of a
    train.py config group not in ``keep`` (``+``, ``++`` and ``~`` forms too;
    ``hydra/launcher=...`` is the group ``hydra``)."""
    groups = train_groups() - set(keep)
    for arg in argv[1:]:
        key, sep, _ = arg.lstrip("+~").partition("=")
        group = key.split("/")[0]
        if not arg.startswith("-") and sep and "." not in key and group in groups:
            yield arg, group
