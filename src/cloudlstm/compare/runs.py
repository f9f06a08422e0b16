"""Finding finished runs: every ``metrics.json`` with test results, with its flattened config."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cloudlstm.assembly.devices import named_devices, named_nodes
from cloudlstm.compare.settings import (
    HOLDOUT_POINTS_KEY,
    HOLDOUT_SEED_KEY,
    PROCESSES_KEY,
    SEED_KEY,
    TEST_PART_WINDOWS_KEY,
    VALUES_DIGEST_KEY,
    WINDOWS_KEY,
    draws_points,
    holdout_set,
    is_setting,
    with_added_settings,
)
from cloudlstm.engine.declared_metrics import metric_info, metric_names
from cloudlstm.engine.quantile_levels import quantiles_setting
from cloudlstm.errors import UserError
from cloudlstm.rundir.layout import (
    CHECKPOINT_DIR,
    CHOSEN_CHECKPOINTS,
    CONFIG_FILE,
    EVAL_DIR,
    HYDRA_FILE,
    LAST_CHECKPOINT,
    METRICS_FILE,
    TRAIN_LOG,
    config_cut_short,
    in_run,
    load_metrics,
)
from cloudlstm.rundir.old_configs import current_form

# libyaml's parser where PyYAML has it: the same trees, read about ten times faster (a
# comparison of many runs spent most of its time parsing their configs)
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

QUANTILES_KEY = "module.quantiles"
# the DConv models' coordinates: null (the default, and every run from before the option)
# and absolute are the paper's one setting
COORDINATES_KEY = "model.coordinates"
RUN_KEYS = ("model", "data")  # recorded by train.py in metrics.json["run"]
# The key of an evaluation's row (eval.py's re-test of a run): its checkpoint and overrides.
EVALUATION_KEY = "evaluation"
# The key of the runs without config.yaml, "absent", which keeps them in rows of their own
NO_CONFIG_KEY = "config.yaml"


class CompareError(Exception):
    """A user error (missing directory, no runs, unknown key, bad horizon)."""


class UnreadableConfig(CompareError):
    """A run's (or an evaluation's) ``config.yaml`` that cannot be read (:func:`_run_config`):
    :func:`find_runs` passes over its run where it collects such files, as it does a
    damaged ``metrics.json``."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(
            f"{problem}: restore it from a copy, or move its folder out of those compared"
        )
        self.path = path


@dataclass(frozen=True)
class Run:
    """One finished run: its grouping keys and test results."""

    path: Path  # the run directory
    keys: dict[str, Any]  # "model", "data" and the flattened config.yaml
    params: int | None
    epochs: int | None
    train_s: float | None
    overall: dict[str, float]  # metric -> mean over test instances
    per_step: dict[str, list[float]]  # metric -> that mean at each forecast step
    groups: dict[str, dict[str, float]] = field(default_factory=dict)  # inliers/outliers
    # metric -> its value over every forecast value of the test part (test.pooled)
    pooled: dict[str, float] = field(default_factory=dict)
    channels: dict[str, dict[str, float]] = field(default_factory=dict)  # name -> metric -> mean
    wandb_group: str = ""  # the run's W&B group (its sweep), "" if unknown
    train_steps: int | None = None  # optimiser steps (runs with a step budget)
    s_per_1k_steps: float | None = None  # training seconds per 1,000 steps
    evaluated_run: str = ""  # for eval.py's results: the run directory it tested again
    # the validation score of the tested checkpoint, and its metric ("val/mae")
    val_monitor: str | None = None
    val_score: float | None = None
    # the code of the processes that trained it (or of eval.py's), first to last: a commit's
    # first 7 characters, "+changes" where the package's files differed from it, or the version of
    # an installed copy (:mod:`cloudlstm.rundir.provenance`); empty for older runs
    code: tuple[str, ...] = ()
    # the machines its processes trained (or tested) on, first to last: the GPU's name, or
    # "CPU <model>" (:func:`_machines`); empty for older runs
    machines: tuple[str, ...] = ()
    # the changes of its settings taken while it trained (allow_changes: metrics.json's
    # settings_changed), ``key old -> new``; its config holds the last values
    settings_changed: tuple[str, ...] = ()
    # why its model and data are "?" (:func:`_run_names`); "" where they are known
    names_unknown: str = ""

    @property
    def has_config(self) -> bool:
        """Whether a ``config.yaml`` lies beside its ``metrics.json``."""
        return NO_CONFIG_KEY not in self.keys

    def value(self, key: str) -> str:
        """The key's value as text; "" where this run's config lacks it or leaves it empty
        (null or []): an option added later with an empty default (no covariates, say)
        does what the runs from before it did."""
        value = self.keys.get(key)
        return "" if value is None or value == [] else str(value)

    def sample(self, seed: bool = True) -> tuple[tuple[str, str], ...]:
        """What tells this run from the other samples of its setting, as ``(key, value)``
        pairs of the keys it has: its ``seed`` (with ``seed``), and the draw of held-out
        points (``data.holdout_seed``) where ``data.holdout_points`` draws them; a list
        names its points, so two runs of one list and seed are one sample whatever their
        draw's seed."""
        keys = [SEED_KEY] if seed else []
        if draws_points(self.keys.get(HOLDOUT_POINTS_KEY)):
            keys.append(HOLDOUT_SEED_KEY)
        return tuple((key, value) for key in keys if (value := self.value(key)))

    def steps(self, metric: str) -> list[float]:
        if not self.per_step.get(metric):
            raise CompareError(f"{self.path} has no per-step {metric} results")
        return self.per_step[metric]


def find_runs(
    roots: Sequence[Path],
    include_evals: bool = False,
    skipped: list[tuple[Path, str]] | None = None,
) -> list[Run]:
    """Every run with test results under ``roots`` (directories or metrics.json files).

    The results of ``eval.py`` (``<run dir>/eval/<time>/metrics.json``, marked by their
    ``run_dir``) test a run again: they are left out, as they would count one run twice,
    unless ``include_evals``, where they are rows of their own (:data:`EVALUATION_KEY`).
    A run under two of ``roots`` (``outputs/`` and a sweep in it) is one run.

    A ``metrics.json`` that cannot be read (:func:`load_metrics`: damaged, cut short, a
    folder), or the ``config.yaml`` beside it (:class:`UnreadableConfig`), is refused; where
    ``skipped`` is a list, its run is passed over instead, and ``(the file, the line naming
    it and the way out)`` added to ``skipped``.

    Raises:
        UserError: such a metrics.json, where ``skipped`` is None.
        UnreadableConfig: such a config.yaml, where ``skipped`` is None.
    """
    paths: dict[Path, Path] = {}  # each file once, by where it is: folders may overlap
    for root in map(Path, roots):
        if not root.exists():
            raise CompareError(f"{root} does not exist")
        if root.is_file() and root.name != METRICS_FILE:
            raise CompareError(
                f"{root} is no run's {METRICS_FILE}: give run or multirun directories (or "
                f"outputs/), or the {METRICS_FILE} of runs"
            )
        for path in [root] if root.is_file() else _results_under(root):
            paths.setdefault(path.resolve(), path)
    runs = [run for path in paths.values() if (run := _read_run(path, skipped)) is not None]
    return [run for run in runs if include_evals or not run.evaluated_run]


def _read_run(path: Path, skipped: list[tuple[Path, str]] | None) -> Run | None:
    """:func:`load_run` of ``path``; None, its line added to ``skipped``, for a file of the
    run that cannot be read (its metrics.json or its config.yaml) where ``skipped`` collects
    them (a comparison of many runs is not lost to one damaged file)."""
    try:
        results = load_metrics(path)
    except UserError as err:
        return _skip(path, err, skipped)
    try:
        return load_run(path, results)
    except UnreadableConfig as err:
        return _skip(err.path, err, skipped)


def _skip(path: Path, err: Exception, skipped: list[tuple[Path, str]] | None) -> None:
    """Add the file at ``path`` that ``err`` refuses to ``skipped``; raise ``err`` where
    ``skipped`` is None (the caller collects no such files)."""
    if skipped is None:
        raise err
    skipped.append((path, str(err)))


def _results_under(root: Path) -> list[Path]:
    """The ``metrics.json`` files under ``root``, outside hidden folders: those hold no run
    (Hydra's ``.hydra``), or a file being written (:func:`cloudlstm.errors.replacing`), or
    one whose write was killed."""
    return _files_named(root, METRICS_FILE)


def _files_named(root: Path, name: str) -> list[Path]:
    """The files ``name`` under ``root`` outside hidden folders, sorted, through links to
    folders too: runs gathered for a comparison are often links to them (``Path.rglob``
    follows none before Python 3.13). Each real folder is searched once, by the first way
    to it in sorted order, so a link to a folder above it ends instead of looping."""
    found: list[Path] = []
    seen: set[Path] = set()
    for folder, subfolders, files in os.walk(root, followlinks=True):
        real = Path(folder).resolve()
        if real in seen:
            subfolders.clear()
            continue
        seen.add(real)
        subfolders[:] = sorted(sub for sub in subfolders if not sub.startswith("."))
        if name in files or name in subfolders:  # a folder so named: a file it cannot read
            found.append(Path(folder) / name)
    return sorted(found)


def runs_without_results(
    roots: Sequence[Path], runs: Sequence[Run], unread: Sequence[Path] = ()
) -> list[Path]:
    """The run directories under ``roots`` that are none of ``runs`` (those with test
    results, :func:`find_runs`), nor hold one of the ``metrics.json`` files ``unread``
    (named as damaged already): training still, stopped, failed, or trained without
    testing. ``train.py`` logs to ``train.log`` in its run directory from the start;
    evaluations (``eval/``) are not runs, nor are hidden folders (as for results)."""
    with_results = {run.path.resolve() for run in runs} | {p.parent.resolve() for p in unread}
    pending: dict[Path, Path] = {}  # each folder once, where two roots overlap
    for root in map(Path, roots):
        if not root.is_dir():
            continue
        for log in _files_named(root, TRAIN_LOG):
            folder = log.parent
            if EVAL_DIR not in folder.relative_to(root).parts:
                pending.setdefault(folder.resolve(), folder)
    return [folder for real, folder in pending.items() if real not in with_results]


def load_run(path: Path, results: dict[str, Any] | None = None) -> Run | None:
    """The run of one ``metrics.json`` (its ``results``, where read already); None if it
    has no test results (e.g. a failed run)."""
    if results is None:  # a damaged file: a UserError naming it and the ways out
        results = load_metrics(path)
    test = results.get("test")
    if test is None or test == {}:  # never tested (test=false)
        return None
    results_of = _Results(path)
    info, names_unknown = _run_names(results, results_of, path)
    config_path = path.parent / CONFIG_FILE
    cut_short = config_cut_short(config_path)  # its settings are not all there: none used
    has_config = config_path.exists() and not cut_short
    # in today's form: runs of one setting from before and after a class moved group together
    config = flatten(current_form(_run_config(config_path))) if has_config else {}
    if config:  # a run from before a setting existed did what its value in ADDED_SINCE does
        config = with_added_settings(config)
    if QUANTILES_KEY in config:  # the levels as the module took them: [0.9,0.5,0.1] is one
        config[QUANTILES_KEY] = quantiles_setting(config[QUANTILES_KEY])
    if config.get(COORDINATES_KEY) == "absolute":
        config[COORDINATES_KEY] = None
    if HOLDOUT_POINTS_KEY in config:  # the points held out: [p7,p1] holds out [p1,p7]
        config[HOLDOUT_POINTS_KEY] = holdout_set(config[HOLDOUT_POINTS_KEY])
    keys = {"model": info.get("model") or "?", "data": info.get("data") or "?", **config}
    data = results_of.section(results, "data")
    if digest := results_of.text(data, "values_digest", "data.values_digest"):
        keys[VALUES_DIGEST_KEY] = digest
    test = results_of.mapping(test, "test")
    if (windows := _test_windows(test, results_of)) is not None:
        keys[WINDOWS_KEY] = windows
    if (part := _test_part_windows(data, results_of)) is not None:
        keys[TEST_PART_WINDOWS_KEY] = part
    if processes := _test_processes(results, config, results_of):
        keys[PROCESSES_KEY] = processes
    if evaluated_run := results_of.text(results, "run_dir", "run_dir"):
        tested = _tested_config(results, results_of, path)
        keys[EVALUATION_KEY] = _evaluation(results, config, tested, results_of)
        keys.update(_selection_restated(config, tested))
    if not has_config:
        keys[NO_CONFIG_KEY] = "cut short" if cut_short else "absent"
    return Run(
        path=path.parent,
        keys=keys,
        params=results_of.count(results, "num_params"),
        epochs=results_of.count(results, "epochs"),
        train_s=results_of.count(results, "train_time_s"),
        overall=results_of.overall(test),
        pooled=results_of.numbers(test.get("pooled", {}), "test.pooled"),
        **results_of.breakdown(test, "test"),
        # train.py records the group it gave the loggers; a config may name one itself
        wandb_group=info.get("group") or config.get("logger.wandb.group") or "",
        train_steps=results_of.count(results, "steps"),
        s_per_1k_steps=results_of.count(
            results_of.section(results, "cost"), "train_s_per_1k_steps"
        ),
        evaluated_run=evaluated_run or "",
        code=_code(results.get("provenance")),
        machines=_machines(results.get("provenance")),
        settings_changed=_settings_changed(results.get("settings_changed")),
        names_unknown=names_unknown,
        **_selection(results, config, results_of),
    )


def uncalibrated_results(path: Path) -> dict[str, Any] | None:
    """The means of ``test.uncalibrated`` in the ``metrics.json`` at ``path`` (the quantile
    metrics before conformal calibration): ``overall``, and :meth:`_Results.breakdown`'s
    ``per_step``, ``groups`` and ``channels``; None where it has none.

    Raises:
        CompareError: a part of another type, naming the file and the part.
    """
    results = load_metrics(path)
    results_of = _Results(path)
    raw = results_of.section(results, "test").get("uncalibrated")
    if not raw:
        return None
    raw = results_of.mapping(raw, "test.uncalibrated")
    overall = results_of.means(raw.get("overall"), "test.uncalibrated.overall")
    return {"overall": overall, **results_of.breakdown(raw, "test.uncalibrated")}


def _run_info(results: dict[str, Any], results_of: _Results) -> dict[str, Any]:
    """``run``: the model, data set and W&B group train.py recorded, each a string where
    given; null in an evaluation of a run that had not finished."""
    info = results_of.section(results, "run")
    for key in ("model", "data", "group"):
        results_of.text(info, key, f"run.{key}")
    return info


def _run_names(
    results: dict[str, Any], results_of: _Results, path: Path
) -> tuple[dict[str, Any], str]:
    """The model, data set and W&B group of the ``metrics.json`` at ``path`` (its
    ``results``), and why the model or the data set is not known ("" where both are).

    train.py records them in ``run`` (:func:`_run_info`); an evaluation of a run whose
    training had not ended records none, and takes those of the run's ``metrics.json``
    once the training wrote one (:func:`_tested_run_info`). A run killed before it wrote
    one (or a ``metrics.json`` without ``run``) has them as Hydra chose them, in the run's
    ``.hydra/hydra.yaml`` (:func:`_hydra_choices`), the same names train.py records: its
    config.yaml holds class paths, which several configs share.
    """
    info = _run_info(results, results_of)
    evaluation = isinstance(results.get("run_dir"), str)
    if not info and evaluation:
        info = _tested_run_info(results, path)  # eval.py of a run still training then
    if all(info.get(key) for key in RUN_KEYS):
        return info, ""
    runs = _tested_run_dirs(results, path) if evaluation else (path.parent,)
    choices, unknown = _hydra_choices(runs)
    return {**info, **{k: v for k, v in choices.items() if not info.get(k)}}, unknown


def _hydra_choices(runs: Sequence[Path]) -> tuple[dict[str, str], str]:
    """``model`` and ``data`` as Hydra chose them for a run (``hydra.runtime.choices`` of
    its :data:`HYDRA_FILE`), from the first of the folders ``runs`` (where the run may lie)
    that holds that file; with why one of them is not known ("" where both are)."""
    found = next((run / HYDRA_FILE for run in runs if (run / HYDRA_FILE).is_file()), None)
    if found is None:
        return {}, f"{runs[0] / HYDRA_FILE} does not exist"
    try:
        tree: Any = read_yaml_mapping(found)
    except CompareError as err:
        return {}, str(err)
    for key in ("hydra", "runtime", "choices"):
        tree = tree.get(key) if isinstance(tree, dict) else None
    choices = tree if isinstance(tree, dict) else {}
    names = {key: value for key in RUN_KEYS if isinstance(value := choices.get(key), str)}
    missing = [f"hydra.runtime.choices.{key}" for key in RUN_KEYS if key not in names]
    return names, f"{found} has no {' or '.join(missing)}" if missing else ""


def _tested_run_info(results: dict[str, Any], path: Path) -> dict[str, Any]:
    """``run`` of the run an evaluation at ``path`` tested, from that run's metrics.json:
    eval.py of a run whose training had not ended records none (its row's model and data
    were ``?``, a data set of its own), and the training, ended since, wrote it. Empty
    where the run has none (still training, or killed) or it cannot be read: a damaged one
    is named where its own run is compared."""
    for run in _tested_run_dirs(results, path):
        if (found := run / METRICS_FILE).is_file():
            try:
                return _run_info(load_metrics(found), _Results(found))
            except (UserError, CompareError):
                return {}
    return {}


def _tested_run_dirs(results: dict[str, Any], path: Path) -> tuple[Path, Path]:
    """Where the run an evaluation at ``path`` tested lies: its recorded folder, else the
    one the evaluation lies in (``<run>/eval/<time>/``), a run moved since."""
    return Path(results["run_dir"]), path.parent.parent.parent


def _code(processes: Any) -> tuple[str, ...]:
    """The labels of the code of a run's processes (metrics.json's ``provenance``); an entry
    of another shape (a hand-edited file) is left out: the label only informs a note."""
    labels = []
    for process in processes if isinstance(processes, list) else []:
        code = process.get("code") if isinstance(process, dict) else None
        if not isinstance(code, dict):
            continue
        commit = code.get("commit")
        if isinstance(commit, str) and commit:
            labels.append(commit[:7] + ("+changes" if code.get("changed") else ""))
        elif code.get("version"):
            labels.append(f"cloudlstm {code['version']}")
    return tuple(labels)


def _test_windows(test: dict[str, Any], results_of: _Results) -> int | None:
    """How many test windows the run scored: ``test.num_instances``, those with an observed
    target, of every process (the metrics sum them); None where it is not recorded."""
    return _window_count(test, "num_instances", "test.num_instances", results_of)


def _test_part_windows(data: dict[str, Any], results_of: _Results) -> int | None:
    """How many windows the test part of the run's data holds: ``data.windows.test`` of its
    data summary; None where it is not recorded."""
    parts = data.get("windows")
    if parts is None:
        return None
    parts = results_of.mapping(parts, "data.windows")
    return _window_count(parts, "test", "data.windows.test", results_of)


def _window_count(node: dict[str, Any], key: str, where: str, results_of: _Results) -> int | None:
    """``node[key]``: a whole number of windows, or None where it is absent or null."""
    windows = node.get(key)
    if windows is None:
        return None
    if isinstance(windows, bool) or not isinstance(windows, int) or windows < 0:
        raise results_of.refuse(where, windows, "a count of 0 or more")
    return windows


def _test_processes(
    results: dict[str, Any], config: dict[str, Any], results_of: _Results
) -> int | None:
    """How many processes ran the test: the last of ``provenance``'s processes, the one that
    tested (train.py's, or eval.py's own), where it records them (runs since they are);
    else what the flattened ``config`` names (:func:`_configured_processes`)."""
    processes = results.get("provenance")
    last = processes[-1] if isinstance(processes, list) and processes else None
    machine = last.get("machine") if isinstance(last, dict) else None
    if isinstance(machine, dict) and machine.get("processes") is not None:
        count = machine["processes"]
        if not _is_count(count):
            where = f"provenance[{len(processes) - 1}].machine.processes"
            raise results_of.refuse(where, count, "a count of 1 or more")
        return count
    return _configured_processes(config, results_of.path.parent / CONFIG_FILE)


def _configured_processes(config: dict[str, Any], config_path: Path) -> int | None:
    """``trainer.devices`` x ``trainer.num_nodes`` of a flattened run ``config`` (read from
    ``config_path``), counted as Lightning counts them
    (:func:`~cloudlstm.assembly.devices.named_devices`: a list or ``"0,1"``: its length,
    ``"2"``: two; :func:`~cloudlstm.assembly.devices.named_nodes`; 1 node where the config
    names none). None where they name no count: ``auto`` and -1 took every device of the
    machine that ran it, which the config does not say, and a run without a config (or
    ``trainer.devices``) says nothing.

    Raises:
        CompareError: ``trainer.devices`` or ``trainer.num_nodes`` is a value Lightning
            refuses (0, ``"two"``), which no run trained with; the message names the file.
    """
    devices = config.get("trainer.devices")
    nodes = config.get("trainer.num_nodes", 1)
    try:
        count = None if devices is None else named_devices(devices)
    except ValueError as err:
        raise _refused_setting(config_path, "trainer.devices", devices, err) from None
    try:
        nodes = named_nodes(nodes)
    except ValueError as err:
        raise _refused_setting(config_path, "trainer.num_nodes", nodes, err) from None
    return None if count is None else count * nodes


def _refused_setting(config_path: Path, key: str, value: Any, err: ValueError) -> CompareError:
    """The line on a ``key`` in the config at ``config_path`` whose ``value`` Lightning
    refuses (``err`` says why)."""
    return CompareError(
        f"{config_path}: {key}={value!r}: {err}, a value Lightning refuses: this is no "
        "config of a run train.py trained (mend it, or move the run out of the folder)"
    )


def _is_count(value: Any) -> bool:
    """A whole number of 1 or more (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _settings_changed(changes: Any) -> tuple[str, ...]:
    """``key old -> new`` of each change metrics.json's ``settings_changed`` lists; an entry
    of another shape is left out, as in :func:`_code`."""
    return tuple(
        f"{change['key']} {change.get('old')} -> {change.get('new')}"
        for change in (changes if isinstance(changes, list) else [])
        if isinstance(change, dict) and "key" in change
    )


def _machines(processes: Any) -> tuple[str, ...]:
    """The machines of a run's processes (``provenance``'s ``machine``), each once: the
    GPU's name (``NVIDIA H200``) or ``CPU <model>``, what sets its speed; an entry of another
    shape is left out, as in :func:`_code`."""
    labels: dict[str, None] = {}
    for process in processes if isinstance(processes, list) else []:
        machine = process.get("machine") if isinstance(process, dict) else None
        if not isinstance(machine, dict):
            continue
        if machine.get("gpu"):
            labels[str(machine["gpu"])] = None
        elif str(machine.get("device", "")).startswith("cpu"):
            labels[f"CPU {machine.get('cpu') or 'of unknown model'}"] = None
    return tuple(labels)


class _Results:
    """Reads the parts of one ``metrics.json``, each checked to be of the shape train.py
    and eval.py write: a hand-edited file, or another tool's ``metrics.json`` in the
    folder, is refused naming the file and the part, not a traceback."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def refuse(self, where: str, value: Any, wanted: str) -> CompareError:
        return self.refused(f"{where} is {value!r}, not {wanted}")

    def refused(self, problem: str) -> CompareError:
        return CompareError(
            f"{self.path}: {problem}: this file is not a run's results as train.py and "
            "eval.py write them (move it out of the folder)"
        )

    def mapping(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.refuse(where, value, "a mapping")
        return value

    def section(self, results: dict[str, Any], key: str) -> dict[str, Any]:
        """``results[key]``: a mapping, or {} where it is absent or null."""
        value = results.get(key)
        return {} if value is None else self.mapping(value, key)

    def text(self, node: dict[str, Any], key: str, where: str) -> str | None:
        """``node[key]``: a string, or None where it is absent or null."""
        value = node.get(key)
        if value is not None and not isinstance(value, str):
            raise self.refuse(where, value, "a string")
        return value

    def texts(self, node: dict[str, Any], key: str) -> list[str]:
        """``node[key]``: a list of strings, or [] where it is absent or null."""
        values = node.get(key)
        if values is None:
            return []
        if not isinstance(values, list):
            raise self.refuse(key, values, "a list of strings")
        for i, value in enumerate(values):
            if not isinstance(value, str):
                raise self.refuse(f"{key}[{i}]", value, "a string")
        return values

    def number(self, node: dict[str, Any], key: str) -> Any:
        """``node[key]``: a number, or None where it is absent or null."""
        value = node.get(key)
        if value is not None and not _is_number(value):
            raise self.refuse(key, value, "a number")
        return value

    def count(self, node: dict[str, Any], key: str) -> Any:
        """``node[key]``: a number that is at least 0 (parameters, steps, seconds), or None
        where it is absent or null."""
        value = self.number(node, key)
        if value is not None and not value >= 0:
            raise self.refuse(key, value, "a number of at least 0")
        return value

    def metric(self, value: Any, metric: str, where: str) -> Any:
        """``value`` of ``metric``: a number, and one the metric takes where it is declared
        (an error is at least 0); NaN is one (nothing was scored)."""
        if not _is_number(value):
            raise self.refuse(where, value, "a number")
        try:
            info = metric_info(metric)
        except KeyError:  # a metric this package does not declare: its range is not known
            return value
        if not info.can_be(value):
            span = (
                f"from {info.lowest:g} to {info.highest:g}"
                if math.isfinite(info.highest)
                else f"of at least {info.lowest:g}"
            )
            raise self.refuse(where, value, f"a number {span}, as {info.label} is")
        return value

    def numbers(self, node: Any, where: str) -> dict[str, Any]:
        """metric -> its value, a number it takes."""
        values = self.mapping(node, where)
        return {m: self.metric(v, m, f"{where}.{m}") for m, v in values.items()}

    def overall(self, test: dict[str, Any]) -> dict[str, Any]:
        """``test.overall``'s means (:meth:`means`), which hold one metric or more of those
        a table shows: without one, a run would be a row of empty cells, or, alone, no
        table at all."""
        means = self.means(test.get("overall"), "test.overall")
        if not any(name in means for name in metric_names()):
            raise self.refused(
                f"test.overall holds no metric compare knows (it holds "
                f"{', '.join(means) or 'none'}; compare knows {', '.join(metric_names())})"
            )
        return means

    def breakdown(self, test: dict[str, Any], where: str) -> dict[str, Any]:
        """The means of ``test`` (``where``) by forecast step, point group and channel:
        :class:`Run`'s ``per_step``, ``groups`` and ``channels``; {} for a part it lacks."""
        groups = self.mapping(test.get("groups", {}), f"{where}.groups")
        channels = self.mapping(test.get("per_channel", {}), f"{where}.per_channel")
        return {
            "per_step": self.means(test.get("per_step", {}), f"{where}.per_step", per_step=True),
            "groups": {
                name: self.means(
                    self.mapping(res, f"{where}.groups.{name}").get("overall"),
                    f"{where}.groups.{name}.overall",
                )
                for name, res in groups.items()
            },
            "channels": {
                name: self.means(res, f"{where}.per_channel.{name}")
                for name, res in channels.items()
            },
        }

    def means(self, node: Any, where: str, per_step: bool = False) -> dict[str, Any]:
        """metric -> its ``mean``: a number, or with ``per_step`` a list of numbers."""
        means = {}
        for metric, stats in self.mapping(node, where).items():
            mean = stats.get("mean") if isinstance(stats, dict) else None
            at = f"{where}.{metric}.mean"
            if per_step and not isinstance(mean, list):
                raise self.refuse(at, mean, "a list of numbers")
            for step, value in enumerate(mean) if per_step else [(None, mean)]:
                self.metric(value, metric, at if step is None else f"{at}[{step}]")
            means[metric] = mean
        return means


def _is_number(value: Any) -> bool:
    """An int or float that is not a bool (NaN is a number: a metric with nothing to score)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _selection(
    results: dict[str, Any], config: dict[str, Any], results_of: _Results
) -> dict[str, Any]:
    """``val_monitor`` and ``val_score``: what train.py recorded of the tested checkpoint.

    Runs from before that record, which chose their checkpoint on ``val/mae``, have it as
    ``val/mae_best`` (the lowest validation MAE, that checkpoint's); others have none.
    """
    if selection := results_of.section(results, "selection"):
        return {
            "val_monitor": results_of.text(selection, "monitor", "selection.monitor"),
            "val_score": results_of.number(selection, "score"),
        }
    monitor = config.get("monitor")
    val = results_of.section(results, "val")
    score = results_of.number(val, f"{monitor}_best") if monitor == "val/mae" else None
    return {"val_monitor": monitor, "val_score": score} if score is not None else {}


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """The mapping a YAML file such as a run's ``config.yaml`` holds.

    Raises:
        CompareError: the file cannot be read, is not YAML, or holds no mapping; the
            message names it.
    """
    try:
        tree = yaml.load(_text(path), Loader=YAML_LOADER)
    except yaml.YAMLError as err:
        detail = " ".join(str(err).split())  # PyYAML's message spans lines
        raise CompareError(f"{path} is not valid YAML ({detail})") from None
    if not isinstance(tree, dict):
        held = "nothing" if tree is None else f"a {type(tree).__name__}"
        raise CompareError(f"{path} holds {held}, not a mapping of settings")
    return tree


def _run_config(path: Path) -> dict[str, Any]:
    """The settings in a run's (or an evaluation's) ``config.yaml`` at ``path``.

    Raises:
        UnreadableConfig: the file cannot be read (:func:`read_yaml_mapping`).
    """
    try:
        return read_yaml_mapping(path)
    except CompareError as err:
        raise UnreadableConfig(path, str(err)) from None


def _text(path: Path) -> str:
    """A file's text, any failure to read it as UTF-8 a :class:`CompareError`."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise CompareError(f"{path} is not UTF-8 text") from None
    except OSError as err:
        raise CompareError(f"cannot read {path}: {err.strerror or err}") from None


def _evaluation(
    results: dict[str, Any],
    config: dict[str, Any],
    tested: dict[str, Any] | None,
    results_of: _Results,
) -> str:
    """An evaluation's row label: ``eval <checkpoint> [while training] <overrides>``.

    The checkpoint tested (:func:`_tested_label`), ``while training`` where the run's
    training had not ended (``run_still_training``: its weights so far, not its result),
    and the overrides that change a setting of the tested run (``tested``, its flattened
    config; :func:`_changes_setting`: not ``torch_threads=1``), so that the re-tests of a
    sweep's seeds with one command share a row, whichever step each seed's best was at.
    """
    recorded = results_of.text(results, "checkpoint", "checkpoint") or "?"
    if Path(recorded).is_absolute():  # older evaluations recorded a file inside the run so
        recorded = in_run(recorded, Path(results["run_dir"]))
    overrides = [
        o for o in results_of.texts(results, "overrides") if _changes_setting(o, config, tested)
    ]
    during = ["while training"] if results.get("run_still_training") is True else []
    return " ".join(["eval", _tested_label(config.get("ckpt"), recorded), *during, *overrides])


def _tested_config(
    results: dict[str, Any], results_of: _Results, path: Path
) -> dict[str, Any] | None:
    """The flattened config of the run an evaluation tested, where one of its overrides
    sets ``data.holdout_points`` (whether that changed anything depends on the run's own
    value; other overrides are judged without it, so their runs' configs go unread). None
    where it names none, or the run's ``config.yaml`` (at its recorded folder, else the one
    the evaluation lies in, ``<run>/eval/<time>/``) cannot be read."""
    names_points = any(
        o.split("=", 1)[0].lstrip("+~") == HOLDOUT_POINTS_KEY
        for o in results_of.texts(results, "overrides")
    )
    runs = _tested_run_dirs(results, path)
    found = next((run / CONFIG_FILE for run in runs if (run / CONFIG_FILE).is_file()), None)
    if not names_points or found is None or config_cut_short(found):
        return None
    try:
        tree = read_yaml_mapping(found)
    except CompareError:  # named where its run is compared: skipped, with no row
        return None
    return flatten(current_form(tree))


def _selection_restated(config: dict[str, Any], tested: dict[str, Any] | None) -> dict[str, Any]:
    """``{data.holdout_points: the tested run's}`` for an evaluation whose override named
    the run's own held-out points (``config``'s value is not null; ``tested``, the run's
    config, :func:`_tested_config`): a run that drew 3 is no other setting, nor data set,
    for a re-test that listed those 3. Empty where it named none, or the run's config is
    not known or held nothing out."""
    if config.get(HOLDOUT_POINTS_KEY) is None or tested is None:
        return {}
    if tested.get(HOLDOUT_POINTS_KEY) is None:  # eval.py refuses to hold points out of it
        return {}
    return {HOLDOUT_POINTS_KEY: holdout_set(tested[HOLDOUT_POINTS_KEY])}


def _tested_label(chosen: Any, recorded: str) -> str:
    """The checkpoint an evaluation tested, as ``chosen`` (its ``ckpt``) and the file
    ``recorded`` (relative to the run where it lies inside it) say: ``last`` for the run's
    ``last.ckpt`` however it was named (``ckpt=last``, ``last.ckpt``, its path; also the
    ``best`` of a run that never validated, which is that file), ``best`` for ``ckpt=best``,
    else the file's name. A file outside the tested run (another run's weights) is named by
    its whole path: its name alone (``last.ckpt``) would read as the run's own."""
    if recorded == f"{CHECKPOINT_DIR}/{LAST_CHECKPOINT}":
        return "last"
    if chosen in CHOSEN_CHECKPOINTS:
        return chosen
    return recorded if Path(recorded).is_absolute() else Path(recorded).name


def _changes_setting(override: str, config: dict[str, Any], tested: dict[str, Any] | None) -> bool:
    """Whether an evaluation's ``override`` may change what it tested: one of a setting
    (:func:`is_setting`), but not a ``data.holdout_points`` that restates the tested run's
    (``tested``, its flattened config; None where it is not known). One that holds points
    out restates them always, as eval.py takes it only where it names the run's own (it
    refuses any other selection): ``[p7,p1]`` of a run that held out ``p1`` and ``p7``
    changes nothing. ``null`` scores every point alike: a change for a run that held
    points out, none for one that held nothing out (nor, as ``data.holdout_points`` was
    added with null, for one from before it)."""
    key = override.split("=", 1)[0].lstrip("+~")
    restated = key == HOLDOUT_POINTS_KEY and (
        config.get(key) is not None or (tested is not None and tested.get(key) is None)
    )
    return is_setting(key) and not restated


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config -> ``{"model.k": 3, ...}``; lists stay values."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
