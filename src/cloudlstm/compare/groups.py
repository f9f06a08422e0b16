"""Grouping runs into table rows: by chosen keys, or by every key that differs but seeds."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np

from cloudlstm.compare import datasets
from cloudlstm.compare.cells import Stat
from cloudlstm.compare.runs import NO_CONFIG_KEY, QUANTILES_KEY, RUN_KEYS, CompareError, Run
from cloudlstm.compare.settings import VALUES_DIGEST_KEY, WINDOWS_KEY, is_setting, other_data
from cloudlstm.engine.quantile_metrics import is_quantile_metric

# Hint of an unknown --by key: at most this many names.
MAX_NAMES = 10


@dataclass(frozen=True)
class Group:
    """Runs sharing the values of the grouping keys: one table row."""

    keys: dict[str, str]
    runs: list[Run]
    # the keys its label names: those that tell it from the other groups of its model and
    # data (:func:`_told_apart`)
    told_apart_by: frozenset[str]
    # the settings (and the readings' hash) that tell the data sets of its data's name
    # apart (:func:`cloudlstm.compare.datasets.told_apart`); its runs share them
    data_keys: tuple[str, ...] = ()

    @property
    def data(self) -> str:
        """Its data set (:func:`cloudlstm.compare.datasets.label`): what best cells, figures
        and sections are chosen within. Runs on two cities' files under one ``data=points``
        (``points (1a2b3c4d)``), or tested on other windows of one file (``milan
        split_times.test=2013-12-09``), are two data sets: neither is "best" against the
        other, nor drawn in one figure with it."""
        return datasets.label(self.runs[0], self.data_keys)

    @property
    def data_order(self) -> tuple:
        """Where its data set comes among those of the table (:func:`datasets.order`)."""
        return datasets.order(self.runs[0], self.data_keys)

    @property
    def label(self) -> str:
        """Short legend text: the model and the values that tell this group from the
        other groups of its model, e.g. ``cloudlstm k=3``; not data."""
        parts = [
            value if key in RUN_KEYS else f"{key.rsplit('.', 1)[-1]}={value}"
            for key, value in self.keys.items()
            if key != "data"
            and value  # a key the group's model lacks says nothing
            and (key in RUN_KEYS or key in self.told_apart_by)
        ]
        return " ".join(parts) or self.data

    def metric(self, name: str) -> Stat | None:
        """The overall metric over the runs; None (an empty cell) if a run lacks it, as
        metrics.json written before ``smae`` existed do."""
        if any(name not in run.overall for run in self.runs):
            return None
        return Stat.over([run.overall[name] for run in self.runs])

    def channel(self, channel: str, name: str) -> Stat | None:
        """The metric of one channel over the runs; None if a run lacks it (another data
        set's channels, or ``smae`` in an older metrics.json)."""
        values = [run.channels.get(channel, {}).get(name) for run in self.runs]
        return None if None in values else Stat.over(values)

    def at_horizon(self, name: str, horizon: int) -> Stat | None:
        """The metric at forecast step ``horizon`` (1 = first) over the runs; None if a run
        has no per-step values of it (``smae`` in an older metrics.json) or forecasts fewer
        steps (a row of J=3 beside rows of J=12: :func:`check_horizons` refuses a step no
        run forecasts)."""
        if any(not run.per_step.get(name) for run in self.runs):
            return None
        if any(horizon > len(run.steps(name)) for run in self.runs):
            return None
        return Stat.over([run.steps(name)[horizon - 1] for run in self.runs])

    def has_curve(self, name: str) -> bool:
        """Whether every run has per-step values of the metric: those the horizon figures
        draw, and :meth:`at_horizon` averages (a quantile metric of a point forecast's run,
        or ``smae`` in an older metrics.json, has none)."""
        return all(run.per_step.get(name) for run in self.runs)

    def curve(self, name: str) -> list[Stat]:
        """The metric at every forecast step 1..J (J: the shortest forecast in the group);
        :meth:`has_curve` says whether it has one."""
        horizon = min(len(run.steps(name)) for run in self.runs)
        return [self.at_horizon(name, h) for h in range(1, horizon + 1)]

    def mean_of(self, attr: str) -> float | None:
        """Mean of a run attribute over the runs that have it (untrained models lack epochs)."""
        values = [getattr(run, attr) for run in self.runs if getattr(run, attr) is not None]
        return float(np.mean(values)) if values else None


def check_horizons(groups: Sequence[Group], metric: str, horizons: Sequence[int]) -> None:
    """Refuse a forecast step (``--horizons``) beyond the forecast length J of every run
    with per-step values of ``metric``: its column would be empty in every row. Rows of a
    shorter forecast than another row's have an empty cell at the steps beyond theirs.

    Raises:
        CompareError: naming the step and the runs' forecast lengths.
    """
    lengths = sorted(
        {len(run.steps(metric)) for g in groups for run in g.runs if run.per_step.get(metric)}
    )
    if not lengths:  # no run has the metric per step: its cells are empty, as without steps
        return
    if beyond := [h for h in horizons if h > lengths[-1]]:
        lengths_text = ", ".join(map(str, lengths))
        which = (
            f"J={lengths_text} of every run"
            if len(lengths) == 1
            else f"of every run (J={lengths_text})"
        )
        raise CompareError(
            f"horizon {beyond[0]} is beyond the forecast length {which}; horizons count 1..J"
        )


def partly_reported(
    groups: Sequence[Group], metrics: Sequence[str], pooled: bool = False
) -> list[str]:
    """A line for each metric of ``metrics`` that some runs of a row report and others do
    not (``mape`` or ``smae`` beside a metrics.json from before it): the row's cell is
    empty (:meth:`Group.metric`), as if none of its seeds had it, and the line names the
    rows and the runs that lack it (the first three). With ``pooled``, the same for the
    ``pooled/<metric>`` columns (``test.pooled``, which older metrics.json files lack)."""
    lines = [_partly(groups, metric, lambda run: run.overall) for metric in metrics]
    if pooled:
        names = sorted({name for g in groups for run in g.runs for name in run.pooled})
        lines += [_partly(groups, f"pooled/{n}", lambda run: run.pooled, n) for n in names]
    return [line for line in lines if line is not None]


def _partly(
    groups: Sequence[Group],
    column: str,
    reported: Callable[[Run], Collection[str]],
    metric: str | None = None,
) -> str | None:
    """The line of :func:`partly_reported` on the column ``column``, whose ``metric`` (by
    default its name) a run reports where it is among ``reported(run)``; None where every
    row's runs all report it or none do."""
    metric = metric or column
    partial = [
        g for g in groups if 0 < sum(metric in reported(run) for run in g.runs) < len(g.runs)
    ]
    if not partial:
        return None
    lacking = [str(run.path) for g in partial for run in g.runs if metric not in reported(run)]
    shown = ", ".join(lacking[:3]) + (" ..." if len(lacking) > 3 else "")
    return (
        f"{column} is empty in {len(partial)} row(s) whose runs do not all report it "
        f"(a metrics.json from before it): {_row_names(partial)}; lacking it: {shown}"
    )


def of_point_forecasts(groups: Sequence[Group], metrics: Sequence[str]) -> str | None:
    """The line on the rows of point forecasts where the table shows quantile metrics
    (``crps``, ``coverage80``) among ``metrics``: their runs report none, as they were
    trained without ``module.quantiles``, so those cells are empty (a row whose runs report
    them in part has :func:`partly_reported`'s line). None where no quantile metric is
    shown, or no row is of point forecasts."""
    asked = [metric for metric in dict.fromkeys(metrics) if is_quantile_metric(metric)]
    point = [g for g in groups if _of_point_forecasts(g)]
    if not asked or not point:
        return None
    are = "is" if len(asked) == 1 else "are"
    return (
        f"{', '.join(asked)} {are} empty in {len(point)} row(s) of point forecasts, whose runs "
        f"were trained without module.quantiles: {_row_names(point)}"
    )


def not_reported(groups: Sequence[Group], metrics: Sequence[str]) -> str | None:
    """The line on the rows none of whose runs reports a metric of ``metrics`` that the
    table shows (``smae`` from runs before it, an interval ``coverage50`` of levels without
    it), naming each such metric and its rows: their cells are empty. The rows of point
    forecasts under a quantile metric are left to :func:`of_point_forecasts`' line, and
    rows that report a metric in part to :func:`partly_reported`'s. None where no row lacks
    a metric so."""
    parts = []
    for metric in dict.fromkeys(metrics):
        lacking = [g for g in groups if not any(metric in run.overall for run in g.runs)]
        if is_quantile_metric(metric):  # rows of point forecasts: of_point_forecasts' line
            lacking = [g for g in lacking if not _of_point_forecasts(g)]
        if lacking:  # a metric no run reports: the rows, all of them, go without naming
            rows = "every row" if len(lacking) == len(groups) else _row_names(lacking)
            parts.append(f"{metric} in {rows}")
    if not parts:
        return None
    return f"cells empty where no run of the row reports the metric: {'; '.join(parts)}"


def _of_point_forecasts(group: Group) -> bool:
    """Whether the runs of ``group`` report no quantile metric: they forecast points."""
    return not any(is_quantile_metric(metric) for run in group.runs for metric in run.overall)


def _row_names(groups: Sequence[Group]) -> str:
    """The rows of ``groups`` as the notes name them: label and data set."""
    return ", ".join(f"{g.label} ({g.data})" for g in groups)


def without_curves(groups: Sequence[Group], metric: str) -> str | None:
    """The line on the rows that the horizon figures of ``metric`` leave out, having no
    per-step values of it (:meth:`Group.has_curve`); None where every row has them.

    Raises:
        CompareError: no row has them: every figure would be empty; the message names the
            per-step metrics the runs have, which ``--horizon-metric`` takes.
    """
    missing = [group for group in groups if not group.has_curve(metric)]
    if not missing:
        return None
    if len(missing) == len(groups):
        runs = [run for group in groups for run in group.runs]
        shared = [m for m in runs[0].per_step if all(run.per_step.get(m) for run in runs)]
        fix = (
            f"give --horizon-metric one they have ({', '.join(shared)})"
            if shared
            else "leave out --plot, --html and --wandb, which draw them"
        )
        raise CompareError(
            f"no run has per-step {metric} results to draw against the forecast step; {fix}"
        )
    labels = ", ".join(f"{group.label} ({group.data})" for group in missing)
    return (
        f"no {metric} curve against the forecast step for {len(missing)} row(s) without "
        f"per-step {metric} results: {labels}"
    )


def group_runs(runs: Sequence[Run], by: Sequence[str] | None = None) -> list[Group]:
    """Groups of ``runs`` by the keys ``by`` (plus data and the settings that tell its data
    sets apart), or by :func:`default_keys`."""
    keys = default_keys(runs) if by is None else _checked_keys(runs, by)
    data_keys = datasets.told_apart(runs)
    # a key there only for the data sets splits rows as it tells them apart: 3 test batches
    # of 8 and 6 of 4 are one data set of 24 windows, and one row of --by model
    own = _varying_in_pairs(runs) if by is None else set(by)
    data_only = set(datasets.all_told_apart(runs)) - own
    parts = _partition(runs, keys, data_only, as_settings=by is None)
    rows = [dict(zip(keys, values, strict=True)) for values in parts]
    return [
        Group(row, members, told, tuple(data_keys[row["data"]]))
        for row, members, told in zip(rows, parts.values(), _told_apart(rows), strict=True)
    ]


def _told_apart(rows: list[dict[str, str]]) -> list[frozenset[str]]:
    """For each group's key values, the keys whose values differ between the groups of its
    model and data: a key that splits one model's runs (two commits' class paths, say) is
    a key of every group, but names nothing in the label of a model whose runs share it."""

    def model_and_data(row: dict[str, str]) -> tuple[str, ...]:
        return tuple(row.get(k, "") for k in RUN_KEYS)

    seen: dict[tuple[str, ...], dict[str, set[str]]] = {}
    for row in rows:
        values = seen.setdefault(model_and_data(row), {})
        for key, value in row.items():
            values.setdefault(key, set()).add(value)
    return [
        frozenset(k for k, v in seen[model_and_data(row)].items() if len(v) > 1) for row in rows
    ]


def one_run_per_seed(runs: Sequence[Run]) -> tuple[list[Run], list[tuple[Run, Run]]]:
    """``runs`` with each (settings, seed) once, and the ``(left out, kept)`` pairs.

    Two runs of the same settings (:func:`is_setting`) and the same seed (and draw of
    held-out points, :meth:`~cloudlstm.compare.runs.Run.sample`) are one sample
    counted twice: a copied run folder, or a rerun. Counted as two seeds they would make
    ``n`` one too many and the spread too small (0 for a copy). So are two of eval.py's
    re-tests of one training run (its settings and seed) with the same checkpoint and
    overrides (their :data:`~cloudlstm.compare.runs.EVALUATION_KEY`, a setting): the same
    command run twice. Settings compare as rows do (:func:`datasets.setting_value`): tests
    limited to other numbers of batches that scored the same windows are one sample. The
    first by path is kept. Runs without a ``config.yaml`` or a seed
    are left as they are.
    """
    kept: list[Run] = []
    first: dict[tuple[tuple[str, str], ...], Run] = {}
    repeats: list[tuple[Run, Run]] = []
    for run in sorted(runs, key=lambda r: str(r.path)):
        if not run.has_config or not run.value("seed"):
            kept.append(run)
            continue
        settings = (k for k in run.keys if is_setting(k) and k != VALUES_DIGEST_KEY)
        key = tuple(sorted((k, datasets.setting_value(run, k)) for k in settings))
        # the windows scored, which tell a limited test's samples apart in the limit's place
        key += ((WINDOWS_KEY, datasets.row_value(run, WINDOWS_KEY)), *run.sample())
        earlier = first.get(key)
        if earlier is not None and not other_data(
            run.value(VALUES_DIGEST_KEY), earlier.value(VALUES_DIGEST_KEY)
        ):
            repeats.append((run, earlier))
        else:
            first.setdefault(key, run)
            kept.append(run)
    order = {id(run): i for i, run in enumerate(runs)}
    return sorted(kept, key=lambda r: order[id(r)]), repeats


def default_keys(runs: Sequence[Run]) -> list[str]:
    """model, data, the settings that tell data sets of one data apart
    (:func:`datasets.told_apart`: shown on every row, also where each model ran on one data
    set), and every config key that still differs within a (model, data) pair."""
    return [*RUN_KEYS, *sorted(set(datasets.all_told_apart(runs)) | _varying_in_pairs(runs))]


def _varying_in_pairs(runs: Sequence[Run]) -> set[str]:
    """The config keys that differ within a (model, data) pair of ``runs``
    (:func:`varying_keys`), and :data:`NO_CONFIG_KEY` where some of a pair lack a config."""
    varying: set[str] = set()
    for members in _partition(runs, RUN_KEYS).values():
        varying.update(varying_keys(members))
        if len({run.has_config for run in members}) > 1:
            varying.add(NO_CONFIG_KEY)
    return varying


def varying_keys(runs: Sequence[Run]) -> list[str]:
    """Settings (:func:`is_setting`) whose values differ between ``runs``; those with a
    ``config.yaml`` decide where there are any (a run without one would make every setting
    differ; its unknown settings keep it in a row of its own)."""
    known = [run for run in runs if run.has_config] or list(runs)
    keys = set().union(*(run.keys for run in known))
    return sorted(key for key in keys if is_setting(key) and _differs(key, known))


def _differs(key: str, runs: Sequence[Run]) -> bool:
    """Whether ``key`` has two values among ``runs`` (as settings,
    :func:`datasets.setting_value`: a test limit that scored the same windows as another is
    none); the data's digest only where two runs that recorded one differ (a run from
    before it was recorded shares any run's data)."""
    values = {datasets.setting_value(run, key) for run in runs}
    if key == VALUES_DIGEST_KEY:
        values.discard("")
    return len(values) > 1


def mixed_keys(groups: Sequence[Group]) -> list[str]:
    """Keys that differ between the runs inside one group (what an explicit --by merged)."""
    return sorted(set().union(*(varying_keys(g.runs) for g in groups)))


def code_note(rows: Sequence[tuple[str, Sequence[Run]]], shown: int = 3) -> str | None:
    """A note where a row, given as its label and its runs, pools runs trained by different
    code (other commits, or changes not committed), or one run was continued by other code:
    its numbers may mix versions. None where every row's runs ran one version, or no run
    records it (older runs)."""
    mixed = []
    for label, runs in rows:
        versions = list(dict.fromkeys(c for run in runs for c in run.code))
        if len(versions) > 1 or any(c.endswith("+changes") for c in versions):
            mixed.append(f"{label} ({', '.join(versions)})")
    return _rows_note(
        mixed,
        shown,
        "come from more than one version of the code, or from code with uncommitted changes",
        "names its code under provenance",
    )


def machine_note(rows: Sequence[tuple[str, Sequence[Run]]], shown: int = 3) -> str | None:
    """A note where a row, given as its label and its runs, pools runs trained on different
    machines (a GPU and a CPU, or two models of either): the settings and the arithmetic are
    the same, but its time columns average those machines' speeds. None where every row's
    runs trained on one machine, or no run records it (older runs)."""
    mixed = []
    for label, runs in rows:
        counts: dict[str, int] = {}
        for run in runs:
            for machine in run.machines:
                counts[machine] = counts.get(machine, 0) + 1
        if len(counts) > 1:
            mixed.append(f"{label} ({', '.join(f'{m}: {_runs(n)}' for m, n in counts.items())})")
    return _rows_note(
        mixed,
        shown,
        "pool runs trained on different machines, so their times (train_s, s_per_1k_steps) "
        "mix those machines' speeds",
        "names its machine under provenance",
    )


def changes_note(rows: Sequence[tuple[str, Sequence[Run]]], shown: int = 3) -> str | None:
    """A note where a row, given as its label and its runs, holds runs whose settings changed
    while they trained (``allow_changes`` on a resume): its settings are the ones they ended
    with. None where no run changed its settings (or no run records it: older runs)."""
    changed = []
    for label, runs in rows:
        taken = [
            f"{run.path.name}: {', '.join(run.settings_changed)}"
            for run in runs
            if run.settings_changed
        ]
        if taken:
            changed.append(f"{label} ({'; '.join(taken)})")
    return _rows_note(
        changed,
        shown,
        "hold runs whose settings changed while they trained (allow_changes), so the row "
        "names the settings they ended with",
        "lists them under settings_changed",
    )


# Scores of quantile forecasts that weigh each level by where it lies: one forecast scores
# better under levels written nearer 0 and 1 ([0.001,0.5,0.999] against [0.1,0.5,0.9]),
# so rows of other levels are not ranked by them.
LEVEL_SCORES = ("crps", "pinball")


def level_sets(groups: Sequence[Group]) -> list[str]:
    """The ``module.quantiles`` of the runs of ``groups`` that report a level score, each
    once."""
    return list(
        dict.fromkeys(
            run.value(QUANTILES_KEY)
            for group in groups
            for run in group.runs
            if any(score in run.overall for score in LEVEL_SCORES)
        )
    )


def levels_note(groups: Sequence[Group]) -> str | None:
    """A note where rows of other ``module.quantiles`` report CRPS or pinball loss, which
    no best row then marks; None otherwise."""
    levels = level_sets(groups)
    if len(levels) < 2:
        return None
    return (
        f"{' and '.join(LEVEL_SCORES)} mark no best row: the rows forecast other levels "
        f"(module.quantiles {', '.join(levels)}), and a score of the levels rates one "
        "forecast better under levels nearer 0 and 1; compare them on the coverage and "
        "width of one interval."
    )


def row_notes(rows: Sequence[tuple[str, Sequence[Run]]]) -> list[str]:
    """The notes on rows, given as their labels and runs, that pool other code or machines,
    or hold runs whose settings changed (:func:`code_note`, :func:`machine_note`,
    :func:`changes_note`)."""
    notes = (code_note(rows), machine_note(rows), changes_note(rows))
    return [note for note in notes if note]


def _rows_note(mixed: Sequence[str], shown: int, what: str, where: str) -> str | None:
    """``"<n> row(s) <what>: <the first shown rows> and <k> more. Each run's metrics.json
    <where>."``, or None where no row is ``mixed``."""
    if not mixed:
        return None
    more = f" and {len(mixed) - shown} more" if len(mixed) > shown else ""
    return (
        f"{len(mixed)} row(s) {what}: {'; '.join(mixed[:shown])}{more}. Each run's "
        f"metrics.json {where}."
    )


def code_summary(groups: Sequence[Group]) -> str | None:
    """Which code the runs came from, with how many runs each (a run continued by other
    code counts for each), for a page that travels without the run folders:
    ``"8fa04ce (6 runs), a3a3cf5+changes (1 run); 2 runs do not record it"``. None where no
    run records it."""
    runs = [run for group in groups for run in group.runs]
    counts: dict[str, int] = {}
    for run in runs:
        for version in dict.fromkeys(run.code):
            counts[version] = counts.get(version, 0) + 1
    if not counts:
        return None
    parts = ", ".join(f"{v} ({_runs(n)})" for v, n in counts.items())
    unknown = sum(not run.code for run in runs)
    if unknown:
        parts += f"; {_runs(unknown)} {'does' if unknown == 1 else 'do'} not record it"
    return parts


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def _checked_keys(runs: Sequence[Run], by: Sequence[str]) -> list[str]:
    valid = set().union(*(run.keys for run in runs))
    for key in by:
        if key not in valid:
            raise CompareError(f"unknown --by key {key!r}; {_key_hint(key, runs, valid)}")
    data = [key for key in ("data", *datasets.all_told_apart(runs)) if key not in by]
    return [*by, *data]


def _key_hint(key: str, runs: Sequence[Run], valid: set[str]) -> str:
    """The closest names to a mistyped key, else the settings that differ between the
    runs (which are what --by splits): at most :data:`MAX_NAMES` of them."""
    close = difflib.get_close_matches(key, sorted(valid), n=3)
    if close:
        return f"did you mean {' or '.join(close)}?"
    names = list(dict.fromkeys([*RUN_KEYS, *varying_keys(runs)]))
    shown = ", ".join(names[:MAX_NAMES]) + (", ..." if len(names) > MAX_NAMES else "")
    return (
        f"keys that differ between these runs: {shown} (any dotted key of a run's "
        "config.yaml is valid)"
    )


def _partition(
    runs: Sequence[Run],
    keys: Sequence[str],
    data_only: Collection[str] = (),
    as_settings: bool = False,
) -> dict[tuple[str, ...], list[Run]]:
    """``runs`` by their values of ``keys``; of those in ``data_only``, which are there to
    tell data sets apart, the values that tell them (:func:`datasets.row_value`); of the
    others, with ``as_settings`` (the keys found to differ, not those --by names), their
    values as settings compare them (:func:`datasets.setting_value`)."""
    parts: dict[tuple[str, ...], list[Run]] = {}
    for run in runs:
        values = (_part_value(run, k, data_only, as_settings) for k in keys)
        parts.setdefault(tuple(values), []).append(run)
    return parts


def _part_value(run: Run, key: str, data_only: Collection[str], as_settings: bool) -> str:
    """``run``'s value of ``key`` as :func:`_partition` splits runs by it."""
    if key in data_only:
        return datasets.row_value(run, key)
    return datasets.setting_value(run, key) if as_settings else run.value(key)
