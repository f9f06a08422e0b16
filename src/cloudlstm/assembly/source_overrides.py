"""Which of a command's overrides set options of ``data.source``, and which may change a
job's data: the rules that the sweeper (before any job runs), the Optuna search and a
job's own check (:mod:`cloudlstm.assembly.source_options`) share; the jobs' composed
sources, each composed once, are :mod:`cloudlstm.assembly.job_sources`'. Hydra and
OmegaConf alone, as the sweepers read them as they start: the data sources import torch
and pandas (seconds).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from hydra.core.override_parser.types import Override

SOURCE = "data.source."


@dataclass(frozen=True)
class SourceOverrides:
    """A command's overrides of ``data.source.<option>``, and the config's sweep's."""

    swept: set[str]  # data.source.<option> keys of the config's sweep the command leaves
    given: dict[str, str]  # {option: the command's override as given}


def source_overrides(params: Iterable[str], command: Sequence[Override]) -> SourceOverrides:
    """The ``data.source.<option>`` overrides of ``command`` (a sweep's command line, or a
    job's: :func:`job_command`), told from those that the config's sweep sets (the keys of
    ``hydra.sweeper.params``, ``params``) and the command leaves to it: a key that the
    command sets is the command's, as its value is (``experiment=paper/mobile``'s sweep of
    ``data.source.city``, replaced by the command's ``data.source.city=city2``). A deletion
    (``~data.source.x``) sets nothing.
    """
    keys = {o.key_or_group for o in command}
    return SourceOverrides(
        swept={key for key in _keys(params) - keys if key.startswith(SOURCE)},
        given={
            o.key_or_group.removeprefix(SOURCE): str(o.input_line)
            for o in command
            if o.key_or_group.startswith(SOURCE) and not o.is_delete()
        },
    )


def composed_source(loader: Any, config: Any, job: Sequence[str]) -> Any:
    """A sweep's job's composed ``data.source`` (None where its config has none): the
    config of the job's overrides ``job`` as Hydra's ``loader`` composes it for the
    sweep's ``config``."""
    cfg = loader.load_sweep_config(config, list(job))
    return (cfg.get("data") or {}).get("source")


def job_command(task: Sequence[Override], params: Iterable[str], multirun: bool) -> list[Override]:
    """The overrides of a job (``hydra.overrides.task``) that its command gave: in a
    sweep's job (``multirun``), those of the keys of the config's sweep (``params``) left
    out, as their values are the sweep's (the command's own, checked by the sweeper before
    any job ran, are among them); in a run, all (a run does not sweep)."""
    config = _keys(params) if multirun else set()
    return [o for o in task if o.key_or_group not in config]


def _keys(params: Iterable[str]) -> set[str]:
    """The keys that ``hydra.sweeper.params``' keys set (``+data.source.x``: its key)."""
    return {key.lstrip("+~") for key in params}
