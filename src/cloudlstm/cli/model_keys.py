"""Model settings the chosen model does not take, such as ``model.k`` for ConvLSTM.

A sweep over models and a setting of some of them, ``python train.py -m
model=cloudlstm,convlstm,lstm model.k=3,6,9``, means: CloudLSTM at each K, and the models
without a K once each. :func:`applicable_jobs` makes the sweep's jobs so (it drops
``model.k`` from the ConvLSTM and LSTM jobs, which are then alike, and keeps one of each)
and says so in one line; Hydra alone would fail on the first ConvLSTM job. A setting that no
model of a sweep or single run takes is a mistake, refused in one line naming the model's
settings (Hydra's own message suggests ``+model.k=3``, which then fails in the model).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cloudlstm.cli.invoked import multirun_flagged
from cloudlstm.errors import UserError
from cloudlstm.paths import config_dir

if TYPE_CHECKING:
    from hydra.core.override_parser.overrides_parser import OverridesParser

ModelKeys = Callable[[list[str]], tuple[str, set[str]]]
SHOWN = 12  # settings named in a message


@dataclass(frozen=True)
class Applicable:
    """A sweep's jobs without the model settings their model does not take."""

    jobs: list[list[str]]
    note: str | None  # the line that says what was dropped, None when nothing was


def model_key(override: str) -> str | None:
    """The setting ``model.<key>=...`` sets (``k`` of ``model.k=3``), else None: other keys,
    ``model=...`` and the ``+``/``~`` forms, which add or delete on purpose."""
    key, sep, _ = override.partition("=")
    parts = key.split(".")
    return parts[1] if sep and len(parts) >= 2 and parts[0] == "model" else None


def applicable_jobs(jobs: Sequence[Sequence[str]], model_keys: ModelKeys) -> Applicable:
    """``jobs`` (each a list of overrides) with each ``model.<key>`` override dropped from
    the jobs whose model does not take ``key``, and the jobs then alike run once.

    Args:
        jobs: the sweep's jobs, in order.
        model_keys: a job's overrides (without ``model.<key>`` ones) -> the name of the
            model its config chooses and that model's settings.

    Raises:
        UserError: no job's model takes a key that the sweep sets.
    """
    settings = [_job_model(job, model_keys) for job in jobs]
    set_keys = {k for job in jobs for o in job if (k := model_key(o)) is not None}
    taken = set().union(*(keys for _, keys in settings))
    untaken = sorted(set_keys - taken)
    if untaken:
        names = sorted({name for name, _ in settings if name})
        raise UserError(foreign_key_message(untaken[0], names, taken))
    kept: list[list[str]] = []
    dropped: dict[str, set[str]] = {}  # model -> its keys dropped
    for job, (name, keys) in zip(jobs, settings, strict=True):
        foreign = {o: k for o in job if (k := model_key(o)) is not None and k not in keys}
        if foreign:
            dropped.setdefault(name, set()).update(foreign.values())
        own = [o for o in job if o not in foreign]
        if own not in kept:
            kept.append(own)
    return Applicable(kept, _note(dropped, len(jobs), len(kept)) if dropped else None)


def _job_model(job: Sequence[str], model_keys: ModelKeys) -> tuple[str, set[str]]:
    if not any(model_key(o) for o in job):
        return "", set()
    return model_keys([o for o in job if model_key(o) is None])


def foreign_key_message(key: str, models: Sequence[str], settings: set[str]) -> str:
    """The one line refusing ``model.<key>`` that none of ``models`` takes."""
    if len(models) == 1:
        which, whose = f"model={models[0]} has no setting {key!r}", "its"
    else:
        which, whose = f"none of model={','.join(models)} has a setting {key!r}", "their"
    names = sorted(settings - {"_target_"})
    shown = ", ".join(names[:SHOWN]) + (" ..." if len(names) > SHOWN else "")
    fix = "Drop it, or choose a model that has it."
    return f"model.{key}: {which} ({whose} settings: {shown}). {fix}"


def _note(dropped: dict[str, set[str]], before: int, after: int) -> str:
    parts = [f"model={name} takes no {', '.join(sorted(keys))}" for name, keys in dropped.items()]
    if before == after:  # one value each: nothing to run once
        return f"{'; '.join(parts)}: such jobs run without those settings."
    return (
        f"{'; '.join(parts)}: such jobs run once, not once per value of those settings "
        f"({before} jobs -> {after})."
    )


def checked_model_keys(argv: Sequence[str], config_name: str = "train") -> list[str]:
    """``argv``, checked for a ``model.<key>=<value>`` (one value, not a sweep) that the model
    of the command's config does not take.

    Hydra applies such an override to the config it composes first (a run's, or a sweep's
    before its jobs) and fails there, suggesting ``+model.<key>=``. So the config is composed
    here as Hydra will, without the model settings (a second or so, only where the command
    has one). A setting its model lacks is then

    * in a single run, refused in one line;
    * in a sweep, whose jobs may choose other models (``-m model=lstm,knn_lstm
      model.hidden_size=8`` where the config's model is CloudLSTM), made a sweep of its one
      value (``model.hidden_size=choice(8)``): Hydra then applies it job by job, and the
      sweeper drops it from the jobs whose model lacks it, or refuses it when no job's model
      takes it (:func:`applicable_jobs`).

    A swept setting is left to the sweeper, and a command Hydra cannot compose to Hydra's own
    message.

    Raises:
        UserError: a single run's model does not take a ``model.<key>`` given.
    """
    overrides = [a for a in argv[1:] if not a.startswith("-")]
    if not any(model_key(o) for o in overrides):
        return list(argv)
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode

    try:
        parser = OverridesParser.create()
        parsed = parser.parse_overrides(overrides)
        single = [o for o, p in zip(overrides, parsed, strict=True) if not p.is_sweep_override()]
        rest = [o for o in single if model_key(o) is None]
        with initialize_config_dir(str(config_dir()), version_base="1.3"):
            cfg = compose(config_name, overrides=rest, return_hydra_config=True)
    except Exception:  # Hydra reports it as it runs the command
        return list(argv)
    settings = set(cfg.get("model") or {})
    foreign = [o for o in single if (k := model_key(o)) is not None and k not in settings]
    if not foreign:
        return list(argv)
    if multirun_flagged(argv) or cfg.hydra.mode == RunMode.MULTIRUN:
        return [_one_value_sweep(a, parser) if a in foreign else a for a in argv]
    name = str(cfg.hydra.runtime.choices.get("model"))
    raise UserError(foreign_key_message(str(model_key(foreign[0])), [name], settings))


def _one_value_sweep(override: str, parser: OverridesParser) -> str:
    """``model.k=3`` as the sweep ``model.k=choice(3)``; unchanged where that is no override
    (an empty value), for Hydra to report."""
    key, _, value = override.partition("=")
    sweep = f"{key}=choice({value})"
    try:
        parser.parse_override(sweep)
    except Exception:
        return override
    return sweep
