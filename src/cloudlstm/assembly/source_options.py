"""Options of a data source that the source it builds does not read, refused where the
command sets them.

``data=mobile`` builds its generator without ``data.source.path`` and a file's reader with
one (:func:`cloudlstm.data.sources.mobile.mobile_traffic`), and its config holds the options
of both, so that either can be set. Each source read only those of its own and dropped the
others without a word: ``data.source.bad_values=warn`` without a file,
``data.source.num_days=30`` with one, changed nothing.

Only what the command sets (its overrides, a sweep's of the command line included, and a
key of the config's sweep that the command sets itself: ``experiment=paper/mobile
data.source.city=city2`` with a file) is refused (a multirun's once, before any job runs:
:func:`check_command_sweeps`), and only at a value other than the one the data set's
config gives (``conf/data/<name>.yaml``): every option is in the config at that value,
whichever source runs, and an experiment's settings and sweep (``experiment=paper/mobile``)
are the experiment's, not the user's. ``eval.py``'s command is its own: a run's saved config.yaml
sets nothing.

A key of ``data.source`` that the config's sweep sets (``hydra.sweeper.params``) and the
job's source does not read is no user's mistake but no setting either:
``experiment=paper/mobile`` sweeps the generator's two cities, and with a file it ran every
model twice on the same data. :func:`read_sweeps` drops it from such jobs, which then run
once, and says so in one line before any job runs.

``data=beijing`` and ``data=airq`` fetch ``data.source.url`` only with
``data.source.download=true``: their sources refuse another url without it, wherever it
comes from (:func:`cloudlstm.data.sources.download.check_url_read`), but for a run's own url
that ``eval.py`` reads back from its config.yaml (:func:`saved_url_left_out`).
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from cloudlstm.assembly.mobile_options import (
    MOBILE_TARGET,
    unread_by,
    unread_options,
    unread_sweep_note,
)
from cloudlstm.assembly.source_overrides import SOURCE, job_command, source_overrides
from cloudlstm.errors import UserError, locate
from cloudlstm.paths import config_dir

# each source checked -> the configs (conf/data/<name>.yaml) whose merge gives its defaults
DEFAULTS = {MOBILE_TARGET: ("points", "mobile")}


def check_read_source_options(data: DictConfig) -> None:
    """Refuse the options of ``data.source`` that the command sets and its source does not
    read (none outside a Hydra job): a generator's or a file's options of ``data=mobile``.

    Raises:
        UserError: names each such option as the command sets it, and the way out.
    """
    refusal = _refusal(data.get("source"), _set_by_the_command())
    if refusal is not None:
        raise UserError(refusal)


def check_command_sweeps(
    jobs: Sequence[Sequence[str]],
    given: dict[str, str],
    source_of: Callable[[list[str]], Any],
) -> None:
    """Refuse a sweep, before any job runs, whose command sets (``given``) an option of
    ``data.source`` that a job's source does not read: each job refused it in its own line
    (``data.source.num_days=30,60`` with a file: two), after the jobs before it had run.

    Args:
        jobs: the sweep's jobs (each a list of overrides), in order.
        given: ``{option: the command's override as given}`` (``num_days:
            data.source.num_days=30,60``), the config's sweep's options that the command
            leaves to it left out.
        source_of: a job's overrides -> its composed ``data.source`` (None where it has
            none); not called where ``given`` is empty.

    Raises:
        UserError: the first such job's refusal, naming the command's overrides.
    """
    if not given:
        return
    for job in jobs:
        refusal = _refusal(source_of(list(job)), given)
        if refusal is not None:
            raise UserError(refusal)


def _refusal(source: Any, given: dict[str, str]) -> str | None:
    """The line refusing the options of ``given`` (``{option: override as given}``) that
    ``source`` (a composed ``data.source``) does not read and that are set at a value other
    than its data set's config gives; None where there is none."""
    if not isinstance(source, DictConfig) or source.get("_target_") not in DEFAULTS:
        return None
    defaults = _defaults(DEFAULTS[source["_target_"]])
    set_here = {
        key: line
        for key, line in given.items()
        if key in source and _value(source, key) != defaults.get(key, object())
    }
    return unread_options(source.get("path"), set_here)


def _set_by_the_command() -> dict[str, str]:
    """``{option: its override as given}`` of the job's overrides of ``data.source.<option>``
    (none outside a Hydra job; a deletion sets nothing). In a sweep's job, a key that the
    config's sweep (``hydra.sweeper.params``) sets is the config's: ``experiment=paper/mobile``
    sweeps ``data.source.city`` for the generator, and its job of City 2 was refused with a
    file (the command's own value of such a key the sweeper checked before any job ran).
    A run does not sweep: its overrides are all the command's."""
    if not HydraConfig.initialized():
        return {}
    hydra = HydraConfig.get()
    params = hydra.sweeper.get("params") or {}
    parsed = OverridesParser.create().parse_overrides(list(hydra.overrides.task))
    command = job_command(parsed, params, hydra.mode == RunMode.MULTIRUN)
    return source_overrides(params, command).given


@functools.cache  # read once a process, not once per job of a sweep (108: 4 s)
def _defaults(names: tuple[str, ...]) -> dict[str, Any]:
    """The source options as the configs ``conf/data/<name>.yaml`` of ``names`` give them,
    merged in turn (``data=mobile`` takes those of ``conf/data/points.yaml`` first: its
    defaults list); not to be changed."""
    folder = config_dir() / "data"
    merged = OmegaConf.merge(*(OmegaConf.load(folder / f"{n}.yaml").source for n in names))
    return OmegaConf.to_container(merged, resolve=False)  # type: ignore[return-value]


def _value(source: DictConfig, key: str) -> Any:
    """``source[key]`` as plain Python (a list for a ListConfig), resolved."""
    value = source[key]
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def saved_url_left_out(cfg: DictConfig, overrides: Sequence[str]) -> DictConfig:
    """``eval.py``'s ``cfg`` (a run's config.yaml under the command's ``overrides``), as a
    copy without ``data.source.url`` where the url is the run's own, not its source's
    default, and nothing fetches it (``data.source.download`` not true): a run saved before
    such a url was refused, or one evaluated with ``data.source.download=false``, reads the
    files that are there, and its source would refuse the url
    (:func:`cloudlstm.data.sources.download.check_url_read`). A url that the command gives
    is kept, for the source to refuse; ``cfg`` is not changed.
    """
    source = (cfg.get("data") or {}).get("source")
    if not isinstance(source, DictConfig) or "url" not in source or "_target_" not in source:
        return cfg
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    if source.get("download") is True or any(o.key_or_group == f"{SOURCE}url" for o in parsed):
        return cfg
    built = inspect.signature(locate(source["_target_"], "data.source._target_")).parameters
    if "url" not in built or source["url"] == built["url"].default:
        return cfg  # the source's own url (or none it reads): nothing to leave out
    kept = copy.deepcopy(cfg)
    with open_dict(kept):
        del kept.data.source["url"]
    return kept


def read_sweeps(
    jobs: Sequence[Sequence[str]],
    swept: set[str],
    source_of: Callable[[list[str]], Any],
) -> tuple[list[list[str]], str | None]:
    """``jobs`` (each a list of overrides), each without its overrides of the options of
    ``swept`` (``data.source.<option>`` keys that the config's sweep sets) that its source
    does not read (a generator's option with data=mobile's file), and the jobs then alike
    run once; with the line that says so (None where nothing was dropped).

    Args:
        jobs: the sweep's jobs, in order.
        swept: the ``data.source.<option>`` keys that the config's sweep sets, not the
            command (whose options a source does not read are refused before any job runs,
            :func:`check_command_sweeps`).
        source_of: a job's overrides -> its composed ``data.source`` (None where it has
            none); called only for jobs that set a key of ``swept``.
    """
    kept: list[list[str]] = []
    # each job's data.source.path -> the options dropped from its jobs, in order
    dropped: dict[str | None, list[str]] = {}
    read: set[str] = set()  # the options that a job's source reads
    for job in jobs:
        options = {o: key.removeprefix(SOURCE) for o in job if (key := _key(o)) in swept}
        source = source_of(list(job)) if options else None
        unread = _unread(source, options)
        read |= {option for o, option in options.items() if o not in unread}
        if unread:
            path = source.get("path")
            some = dropped.setdefault(None if path is None else str(path), [])
            some += [o for o in unread.values() if o not in some]
        own = [o for o in job if o not in unread]
        if own not in kept:
            kept.append(own)
    if not dropped:
        return kept, None
    everywhere = not read & {o for some in dropped.values() for o in some}
    return kept, unread_sweep_note(dropped, len(jobs), len(kept), everywhere)


def _key(override: str) -> str:
    """The key an override string sets (``data.source.city`` of ``data.source.city=city2``)."""
    return override.split("=", 1)[0].lstrip("+~")


def _unread(source: Any, options: dict[str, str]) -> dict[str, str]:
    """The overrides of ``options`` (``{override: option}``) that ``source`` (a job's
    ``data.source``) does not read."""
    if not isinstance(source, DictConfig) or source.get("_target_") != MOBILE_TARGET:
        return {}
    ignored = unread_by(source.get("path"))
    return {o: option for o, option in options.items() if option in ignored}
