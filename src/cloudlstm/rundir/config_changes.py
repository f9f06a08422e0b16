"""A resumed run keeps its settings: changes to what it trains are refused, or recorded.

A training that resumes in a run directory (``resume=auto`` finds a checkpoint there, or
``resume=<path>``) continues a run whose settings are its ``config.yaml``: that of the
directory, or of the run whose ``checkpoints/`` hold the path (:func:`resumed_run`). A
command that changed a setting would train the rest of the run with it, overwrite
``config.yaml`` and so describe the whole run by the new value (and ``eval.py`` would build
the new model around the old weights). So before anything is written to the directory, the
composed config is compared with the saved one:

* a change to an execution option (:data:`EXECUTION_OPTIONS`: where and on what the run
  executes, what it logs and shows) is taken, and recorded; so is a key the saved config
  does not have and the command does not set (a key of a newer version of the code, at its
  default);
* any other change (the model, the data, the optimizer, the recipe, the seed, the budget,
  a callback that takes part in training) is refused, in one line that lists each key with
  its old and new value and names the ways out: restore the old values, start fresh with
  ``resume=never`` (better in a new directory), or take the change with
  ``allow_changes=[<key>,...]`` (a key or a prefix of keys, e.g. ``optimizer``);
* a taken change is appended to ``<run dir>/config_changes.yaml``: the date, the
  checkpoint resumed from, and each key's old and new value.

Paths that moved with the run (``paths.*``: another checkout, data directory or run
directory) are execution options, and so are the values built from them (checkpoint
directories, caches): those are compared with the old paths replaced by the new ones.

A directory without a checkpoint or without ``config.yaml`` holds no training to resume,
and is not checked. ``train.py`` checks in a Hydra callback (:class:`CheckBeforeTheRun`),
before Hydra writes ``.hydra/`` into the run directory; a job of a sweep is checked as it
starts (Hydra has written the job's ``.hydra/`` by then; ``config.yaml``, the checkpoints
and the rest are untouched).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from cloudlstm.engine.quantile_levels import quantiles_setting
from cloudlstm.errors import UserError, config_keys, nearest_name
from cloudlstm.rundir.divergence import divergence, what_diverged
from cloudlstm.rundir.layout import (
    CHANGES_FILE,
    CONFIG_FILE,
    METRICS_FILE,
    checkpoint_run,
    in_run,
    newest_checkpoint,
    read_run_config,
    resume_candidates,
)

log = logging.getLogger(__name__)

# Keys (or prefixes of keys) that say how a run executes, not what it computes: a resumed
# run may change them. Everything else is a setting of the run.
EXECUTION_OPTIONS = (
    # where files go, what is logged and shown
    "paths", "hydra", "logger", "tags", "task_name", "print_config", "report",
    "module.output_dir", "module.save_predictions",
    "callbacks.progress_bar", "callbacks.model_summary", "callbacks.lr_monitor",
    "callbacks.epoch_timer", "callbacks.sigterm_checkpoint", "callbacks.final_checkpoint",
    "callbacks.moved_run",
    "callbacks.step_checkpoint",  # how often and where, not what: its class since too
    "trainer.enable_progress_bar", "trainer.enable_model_summary",
    "trainer.log_every_n_steps", "trainer.default_root_dir",
    # how the run is started, resumed, tested and reported to a sweeper
    "resume", "allow_changes", "run_lock", "ckpt_path", "test", "optimized_metric",
    # the hardware and the process
    "trainer.accelerator", "trainer.devices", "trainer.num_nodes", "trainer.strategy",
    "trainer.plugins", "torch_threads", "keep_freed_memory",
    "data.num_workers", "data.pin_memory", "model.compile", "model.checkpointing",
    "data.source.download",  # where missing files come from, not what they hold
)  # fmt: skip
ABSENT = "(not set)"


@dataclass(frozen=True)
class Change:
    key: str
    old: Any
    new: Any
    # "execution option", "allow_changes", "new key" (not in the saved config, nor set by
    # the command: a key of a newer version of the code, at its default), or None: refused
    allowed_by: str | None

    def __str__(self) -> str:
        """``key old -> new``, each value cut to 60 characters: how messages name it."""
        return f"{self.key} {_show(self.old)} -> {_show(self.new)}"


class ChangesRefused(UserError):
    """A resume refused for its changed settings (:func:`check_config_changes`), which it
    carries: a check that builds models may name those that reshape the model
    (:func:`reshaping_refusal`)."""

    def __init__(self, message: str, refused: list[Change], source: Path) -> None:
        super().__init__(message)
        self.refused = refused
        self.source = source  # the run directory whose settings the resume would change


def reshaping_refusal(
    run_dir: Path, refused: list[Change], reshaping: list[Change], differences: str
) -> str:
    """The refusal of ``refused`` where ``reshaping`` of them change the weights' shapes
    (``differences``): those a resumed run cannot take even when allowed, so the line
    offers allow_changes for the others alone."""
    shown = _listed_changes(refused)
    keys = [c.key for c in reshaping]
    one = len(keys) == 1
    others = [c.key for c in refused if c.key not in keys]
    rest = (
        f"; the other change{'' if len(others) == 1 else 's'} may be taken with "
        f"allow_changes=[{','.join(others)}]"
        if others
        else ""
    )
    return (
        f"{run_dir} holds a run trained with other settings, which resuming would mix with "
        f"these: {shown}. {', '.join(keys)} {'reshapes' if one else 'reshape'} the model "
        f"({differences}), whose weights a resumed run keeps: restore the old "
        f"{'value' if one else 'values'} of {'it' if one else 'them'}, or start fresh with "
        f"resume=never (better in a new directory){rest}."
    )


def resumed_run(cfg: DictConfig, run_dir: Path) -> Path | None:
    """The run directory whose training this one continues, where it holds the config to
    compare with: ``run_dir`` for ``resume=auto`` where it holds a checkpoint (or a finished
    run), the checkpoint's own run for ``resume=<path>`` (another run's, whose optimizer,
    schedule and step the training takes on); None where it trains anew, or where the
    checkpoint lies outside any run directory."""
    resume = cfg.get("resume", "auto")
    if not cfg.get("train") or resume in (None, False, "never"):
        return None
    if resume != "auto":
        return checkpoint_run(Path(str(resume)))
    if not (run_dir / CONFIG_FILE).is_file():
        return None
    has_run = bool(resume_candidates(run_dir)) or (run_dir / METRICS_FILE).is_file()
    return run_dir if has_run else None


# settings with more than one way to write one value: each to its one form
SAME_FORM = {"module.quantiles": quantiles_setting}


def config_changes(cfg: DictConfig, run_dir: Path, saved: DictConfig | None = None) -> list[Change]:
    """The differences of ``cfg`` (without ``hydra``) from ``run_dir``'s ``config.yaml``
    (``saved``, where it has been read already)."""
    new = _job_container(cfg)
    saved = read_run_config(run_dir) if saved is None else saved
    old = OmegaConf.to_container(saved, resolve=False)
    old_paths, new_paths = old.get("paths") or {}, new.get("paths") or {}
    # values built from the paths follow them; the paths' own change is recorded
    old = {k: v if k == "paths" else _moved(v, old_paths, new_paths) for k, v in old.items()}
    allowed = [str(key) for key in (cfg.get("allow_changes") or [])]
    given = _overridden_keys(cfg)
    changes = []
    for key, before, after in _diff(old, new):
        if key in SAME_FORM and SAME_FORM[key](before) == SAME_FORM[key](after):
            continue  # the same setting written another way
        if is_execution_option(key):
            by = "execution option"
        elif _under(key, allowed):
            by = "allow_changes"
        elif before == ABSENT and _new_in_the_code(key, after, given):
            by = "new key"  # the code has it now, at its default; the command does not set it
        else:
            by = None
        changes.append(Change(key, before, after, by))
    return changes


def _new_in_the_code(key: str, value: Any, given: list[str]) -> bool:
    """Whether ``key``, which the saved config lacks, is a key of a newer version of the
    code at its default rather than a setting of this command's: the command sets neither
    it nor a key under it, and sets no group above it (``data=metr_la``), unless the key is
    a leaf at null. A group choice on the command line gives every key of its file, and a
    resume repeats the run's own (``model=cloudgru_k3``): a null leaf the code added since
    (``data.source.units``) is the feature left off, as the run had it, where a whole node
    (``callbacks=ema`` adding ``callbacks.ema``) or a value is a setting the run lacked."""
    if any(_under(g, [key]) for g in given):
        return False  # the key itself, or one under it, is set on the command line
    above = any(_under(key, [g]) for g in given)
    return not above or value is None


def _overridden_keys(cfg: DictConfig) -> list[str]:
    """The keys (and config groups) the command line sets, as dotted keys."""
    if "hydra" in cfg:
        overrides = cfg.hydra.overrides.task
    elif HydraConfig.initialized():
        overrides = HydraConfig.get().overrides.task
    else:
        return []
    keys = []
    for override in OmegaConf.to_container(overrides, resolve=False):
        key = str(override).split("=", 1)[0].lstrip("~+").split("@", 1)[0]
        keys.append(key.replace("/", "."))
    return keys


def check_config_changes(cfg: DictConfig, run_dir: Path) -> list[Change]:
    """Refuse a resume whose settings changed; returns the changes it takes (none where
    this is no resume), for :func:`record_changes`.

    Raises:
        UserError: a setting changed that is neither an execution option nor allowed.
    """
    run_dir = Path(run_dir)
    source = resumed_run(cfg, run_dir)
    saved = None if source is None else read_run_config(source)
    taken = [change["key"] for change in settings_changed(source)] if source else []
    check_allowed_keys(cfg, saved, taken)
    if source is None or saved is None:
        return []
    changes = config_changes(cfg, source, saved)
    _check_kept(source, changes)  # first: allow_changes cannot take these
    refused = [c for c in changes if c.allowed_by is None]
    if refused:
        raise ChangesRefused(_refusal(source, run_dir, refused), refused, source)
    diverged = divergence(source)
    if diverged and not any(c.allowed_by == "allow_changes" for c in changes):
        log.warning(
            "%s: its last training diverged %s; resuming it with the same settings may "
            "diverge again (resume=never starts fresh).", source, what_diverged(diverged)
        )  # fmt: skip
    return changes


def _check_kept(source: Path, changes: list[Change]) -> None:
    """Refuse a change that a resume cannot take, even allowed: another seed (a resumed run
    restores its random state with its checkpoint, ``callbacks.rng_state``, so its initial
    weights and the order of its batches stay those of the seed it started with, which its
    config must then name), or another validation metric to select by (a ``monitor``: the
    best checkpoint, early stopping's count and a plateau's were judged by the old one, and
    scores of two metrics do not compare).

    Raises:
        UserError: such a change is among the changes (named by its top-level key where
            it has one: ``monitor`` before the ``module.monitor`` it sets).
    """
    for change in sorted(changes, key=lambda c: c.key.count(".")):
        if change.key == "seed":
            why = (
                f"{source} goes on from its checkpoint's random state (its initial weights, "
                f"the order of its batches), drawn with seed {change.old}"
            )
            what = "its seed"
        elif change.key.rpartition(".")[2] == "monitor":
            why = (
                f"{source} chose its best checkpoint so far, and counted early stopping's "
                f"patience, by {change.old}, whose scores do not compare with {change.new}'s"
            )
            what = "the metric it selects by"
        else:
            continue
        raise UserError(
            f"{change}: {why}, so a resume cannot change {what}, even with allow_changes. "
            f"Keep {change.key}={change.old}, or train with {change.key}={change.new} anew: "
            "resume=never (better in a new directory)."
        )


def check_allowed_keys(
    cfg: DictConfig, saved: DictConfig | None, taken: Iterable[str] = ()
) -> None:
    """``allow_changes`` is a list of keys, each a key (or a prefix of keys) of the config
    or of the resumed run's ``saved`` one (None for a fresh run), or one whose change the
    run has ``taken`` before (a key both configs lack since then: the same command run
    again): a misspelt entry would let nothing through, and the refusal it was meant to
    answer would come again.

    Raises:
        UserError: ``allow_changes`` is no list, or an entry names no key.
    """
    entries = cfg.get("allow_changes")
    if entries is None:
        return
    if not OmegaConf.is_list(entries) and not isinstance(entries, list):
        raise UserError(
            f"allow_changes={entries!r}: give a list of keys, e.g. allow_changes=[{entries}]."
        )
    if not entries:
        return  # the default: nothing to look up
    keys = {*config_keys(cfg), *(config_keys(saved) if saved is not None else ()), *taken}
    for entry in map(str, entries):
        if entry not in keys and not _under(entry, ["hydra"]):
            raise UserError(
                f"allow_changes=[{entry}]: the config has no key {entry}"
                f"{nearest_name(entry, keys)}; name keys of the run or their prefixes, "
                "e.g. allow_changes=[optimizer] or allow_changes=[optimizer.lr]."
            )


class CheckBeforeTheRun(Callback):
    """``hydra.callbacks.config_changes`` of ``train.py``: the check of
    :func:`check_config_changes`, before Hydra writes ``.hydra/`` into the run directory
    (``on_run_start``; a multirun's jobs are checked as they start)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not config.get("train"):
            return
        run_dir = Path(os.path.abspath(str(config.hydra.run.dir)))
        if not (run_dir / CONFIG_FILE).is_file():
            return  # a new directory (the default's time stamp): nothing to compare with
        cfg = copy.deepcopy(config)
        with read_write(cfg), open_dict(cfg):
            cfg.hydra.runtime.output_dir = str(run_dir)  # as Hydra sets it for the job
        before = HydraConfig.instance().cfg
        HydraConfig.instance().set_config(cfg)
        try:
            self.check(cfg, run_dir)
        except UserError as err:
            # Hydra turns a callback's exception into a warning and runs the job: the
            # refusal ends the program here, as one line
            sys.exit(str(err))
        finally:
            HydraConfig.instance().cfg = before

    def check(self, cfg: DictConfig, run_dir: Path) -> None:
        """The check itself, on the job's config (``hydra.runtime`` set as for the job)."""
        check_config_changes(cfg, run_dir)  # train() records them


def _job_container(cfg: DictConfig) -> dict[str, Any]:
    """The resolved job config, as ``config.yaml`` is written (without ``hydra``)."""
    job = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])
    return OmegaConf.to_container(job, resolve=True)


def _moved(node: Any, old_paths: dict, new_paths: dict) -> Any:
    """``node`` with the old ``paths.*`` values inside its strings replaced by the new."""
    pairs = sorted(
        (
            (str(old_paths[k]), str(new_paths[k]))
            for k in old_paths
            if k in new_paths and old_paths[k] != new_paths[k] and len(str(old_paths[k])) > 1
        ),
        key=lambda pair: -len(pair[0]),
    )
    if not pairs:
        return node

    def move(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: move(v) for k, v in value.items()}
        if isinstance(value, list):
            return [move(v) for v in value]
        if isinstance(value, str):
            for old, new in pairs:
                if value == old or value.startswith(old.rstrip("/") + "/"):
                    return new + value[len(old) :]
        return value

    return move(node)


def _diff(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(key, old, new) of each difference: down to the keys where both have a mapping, a
    whole mapping where one side has none (a callback added: one difference)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in [*old, *(k for k in new if k not in old)]:
            path = f"{prefix}.{key}" if prefix else str(key)
            out += _diff(old.get(key, ABSENT), new.get(key, ABSENT), path)
        return out
    return [] if old == new and type(old) is type(new) else [(prefix, old, new)]


def _under(key: str, entries: Any) -> bool:
    return any(key == e or key.startswith(f"{e}.") for e in entries)


def is_execution_option(key: str) -> bool:
    """Whether ``key`` (dotted) says how a run executes, not what it computes
    (:data:`EXECUTION_OPTIONS`)."""
    return _under(key, EXECUTION_OPTIONS)


def _show(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def _listed_changes(changes: list[Change], listed: int = 8) -> str:
    """``key old -> new, ...``: the first ``listed`` changes, and how many more."""
    shown = ", ".join(str(change) for change in changes[:listed])
    return shown + (f" and {len(changes) - listed} more" if len(changes) > listed else "")


def _refusal(source: Path, run_dir: Path, refused: list[Change]) -> str:
    """The refusal of a resume of ``source``'s training in ``run_dir`` (often the same)."""
    shown = _listed_changes(refused)
    keys = [c.key for c in refused]
    if len(keys) > 4:  # e.g. another model: its group
        keys = list(dict.fromkeys(key.split(".")[0] for key in keys))
    diverged = divergence(source)
    if diverged:  # other settings are the fix; its checkpoints are of the diverged ones
        return (
            f"{source} holds a run that diverged {what_diverged(diverged)}; its checkpoints "
            f"are from before the divergence, of its old settings ({shown}). To train with "
            "the new ones, start fresh with resume=never in this directory, or in a new "
            f"directory; allow_changes=[{','.join(keys)}] would instead continue its last "
            f"checkpoint with them (recorded in {run_dir / CHANGES_FILE})."
        )
    return (
        f"{source} holds a run trained with other settings, which resuming would mix with "
        f"these: {shown}. Restore the old values, start fresh with resume=never (better in a "
        f"new directory), or resume with the new values: allow_changes=[{','.join(keys)}] "
        f"(recorded in {run_dir / CHANGES_FILE})."
    )


def settings_changed(run_dir: Path) -> list[dict[str, Any]]:
    """The changes of the run's settings that ``allow_changes`` took while it trained (from
    its ``config_changes.yaml``, first to last): ``{"key", "old", "new", "resumed_from"}``
    each. Its ``config.yaml`` holds the last values alone, so ``metrics.json`` lists these
    beside it, for ``compare`` to say which rows they concern. Execution options and keys new
    in the code are left out: they change nothing the run computes. A file that cannot be
    read is warned of, and lists nothing."""
    path = Path(run_dir) / CHANGES_FILE
    if not path.is_file():
        return []
    try:
        entries = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        entries = None
        log.warning("%s cannot be read (%s): metrics.json lists none of its changes.", path, err)
    taken = []
    for entry in entries if isinstance(entries, list) else []:
        changes = entry.get("changes") if isinstance(entry, dict) else None
        for key, change in (changes if isinstance(changes, dict) else {}).items():
            if isinstance(change, dict) and change.get("allowed_by") == "allow_changes":
                old, new, resumed = change.get("old"), change.get("new"), entry.get("resumed_from")
                taken.append({"key": key, "old": old, "new": new, "resumed_from": resumed})
    return taken


def record_changes(run_dir: Path, changes: list[Change], cfg: DictConfig) -> None:
    """Append the changes taken to ``config_changes.yaml`` (rank 0 only; none: nothing)."""
    from cloudlstm.rundir.lock import is_rank_zero

    if not changes or not is_rank_zero():
        return
    run_dir = Path(run_dir)
    resume = cfg.get("resume", "auto")
    if resume == "auto":
        newest = newest_checkpoint(run_dir)
        resume = None if newest is None else str(newest)
    entry = {
        "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "resumed_from": in_run(resume, run_dir),  # as metrics.json names checkpoints
        "changes": {
            c.key: {"old": c.old, "new": c.new, "allowed_by": c.allowed_by} for c in changes
        },
    }
    with (run_dir / CHANGES_FILE).open("a") as out:
        yaml.safe_dump([entry], out, sort_keys=False, default_flow_style=False)
