"""Our runs next to the paper's published tables: ``python -m cloudlstm.cli.compare --paper``.

The paper's tables are tidy CSVs in ``docs/paper/`` (one row per data set, model, setting
and metric). A run is matched to a paper row by:

* data set: ``data.source.cluster=A`` -> "Cluster A" (``data=airq``, or the synthetic
  stand-in of ``scale=cpu``, which keeps the key), ``data.source.city=city1`` -> "City 1"
  (``data=mobile``'s generator: a run of a file, ``data.source.path``, is no paper city,
  though its config keeps the generator's ``city``); runs saved before the ``source`` node
  have ``data.cluster`` and ``data.city``, read too;
* model: its class and settings, not its config name, so ``model=cloudlstm_k3`` and
  ``model=cloudlstm model.k=3`` are both "CloudLSTM (K=3)" (:func:`paper_model`);
* the table's settings: the paper's M and J (``data.input_steps``, ``data.output_steps``);
  ``d`` = ``data.outlier_shift``, ``seasonal`` = ``data.seasonal``, and otherwise neither;
  a point subset (``data.num_points``) for the tables on one (tab:seasonal, 100 antennas;
  tab:in_and_out, 50 stations), the whole data set for the others;
* ``group`` (inliers / outliers): the run's ``test.groups`` results instead of its overall
  ones (tab:outlier needs ``data.outliers=dbscan``, as ``experiment=paper/airq`` sets).

Other settings (width, epochs, ...) are not compared: runs of one row that differ in them
are named in a warning. Our cells are mean ± std over seeds, the paper's mean ± std across
test instances; ``diff`` is our mean minus the paper's, and relative to it.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudlstm.compare.cells import Column, Diff, Stat
from cloudlstm.compare.groups import row_notes, varying_keys
from cloudlstm.compare.runs import CompareError, Run
from cloudlstm.engine.declared_metrics import metric_names
from cloudlstm.paths import paper_dir as _paper_dir

PAPER_DIR = _paper_dir()  # the checkout's docs/paper, or the wheel's copy
SETTINGS = ("d", "group", "seasonal")  # setting columns a paper table may have


@dataclass(frozen=True)
class Table:
    """What the paper's runs of one table had in common."""

    steps: tuple[int, int]  # M, J
    subset: bool  # on a random subset of the points (data.num_points)


TABLES = {
    "metric": Table((6, 6), subset=False),  # mobile traffic, City 1 and 2
    "metric2": Table((12, 12), subset=False),  # air quality, Cluster A and B
    "metric3": Table((12, 12), subset=False),  # K-nearest-neighbour MLPs and LSTMs
    "outlier": Table((12, 12), subset=False),  # air quality, DBSCAN outliers
    "in_and_out": Table((12, 12), subset=True),  # 50 stations, 10 moved by d
    "seasonal": Table((6, 6), subset=True),  # 100 antennas of City 1, with/without a week
}

# Model classes (the last part of ``model._target_``) named as in the paper's tables.
PLAIN_NAMES = {
    "MLP": "MLP",
    "CNN2D": "CNN",
    "CNN3D": "3D-CNN",
    "DefCNN": "DefCNN",
    "PointCNN": "PointCNN",
    "CloudCNN": "CloudCNN",
    "SeqLSTM": "LSTM",
    "ConvLSTM": "ConvLSTM",
    "PredRNNpp": "PredRNN++",
    "STGCN": "STGCN",
    "PointLSTM": "PointLSTM",
}
KNN_NAMES = {"KNNMLP": "MLP", "KNNLSTM": "LSTM"}  # "MLP (K=3)": the simple baselines
CELL_NAMES = {"lstm": "CloudLSTM", "gru": "CloudGRU", "rnn": "CloudRNN"}


def paper_model(keys: dict[str, Any]) -> str | None:
    """The paper's name of a run's model (flattened config keys), None if it has none."""
    cls = str(keys.get("model._target_", "")).rsplit(".", 1)[-1]
    k = keys.get("model.k")
    if cls == "CloudSeq2Seq" and keys.get("model.cell") in CELL_NAMES:
        name = CELL_NAMES[keys["model.cell"]]
        return f"{'Attention ' if keys.get('model.attention') else ''}{name} (K={k})"
    if cls in KNN_NAMES:
        return f"{KNN_NAMES[cls]} (K={k})"
    return PLAIN_NAMES.get(cls)


def paper_dataset(keys: dict[str, Any]) -> str | None:
    """The paper's data set: ``data.source.cluster=A`` -> "Cluster A",
    ``data.source.city=city1`` -> "City 1", else None.

    A run that read a file (``data.source.path``) has no paper city: ``data=mobile`` saves
    its generator's ``city`` in every run's config, its file's too, where no generator ran.
    """
    cluster = _source_key(keys, "cluster")
    if cluster is not None:
        return f"Cluster {cluster}"
    if _source_key(keys, "path") is not None:
        return None
    city = str(_source_key(keys, "city") or "")
    return f"City {city.removeprefix('city')}" if city.startswith("city") else None


def _source_key(keys: dict[str, Any], name: str) -> Any:
    """A data source's key: ``data.source.<name>``, or ``data.<name>`` in a run saved before
    the source's arguments moved into ``data.source``; None if neither is set."""
    value = keys.get(f"data.source.{name}")
    return keys.get(f"data.{name}") if value is None else value


@dataclass(frozen=True)
class Row:
    """One row of a paper table: its labels and, per metric, the published mean ± std."""

    dataset: str
    model: str
    settings: dict[str, str]  # of SETTINGS, those the table has
    published: dict[str, Stat]

    def matches(self, run: Run, table: Table) -> bool:
        keys = run.keys
        shift, seasonal = keys.get("data.outlier_shift"), bool(keys.get("data.seasonal"))
        return (
            paper_dataset(keys) == self.dataset
            and paper_model(keys) == self.model
            and (keys.get("data.input_steps"), keys.get("data.output_steps")) == table.steps
            and (keys.get("data.num_points") is not None) == table.subset
            and _same(shift, self.settings.get("d"))
            and seasonal == (self.settings.get("seasonal") == "true")
            and (self.settings.get("group") is None or self.settings["group"] in run.groups)
        )

    def value(self, run: Run, metric: str) -> float:
        group = self.settings.get("group")
        return (run.groups[group] if group else run.overall)[metric]


def _same(ours: Any, theirs: str | None) -> bool:
    """Our ``data.outlier_shift`` against the paper's ``d`` (both None when not set)."""
    return ours is None if theirs is None else ours is not None and float(ours) == float(theirs)


def load_table(name: str, paper_dir: Path = PAPER_DIR) -> list[Row]:
    """The rows of ``docs/paper/<name>.csv``, in the paper's order."""
    path = paper_dir / f"{name}.csv"
    if name not in TABLES:
        raise CompareError(f"no paper table {name!r}; valid: {', '.join(TABLES)}")
    if not path.is_file():  # a wheel built from a checkout without its links
        raise CompareError(
            f"the paper's table {name!r} is not at {path}: this installation lacks the "
            "tables of docs/paper/; reinstall the package, or run it from a checkout"
        )
    rows: dict[tuple, Row] = {}
    with path.open(newline="") as f:
        for rec in csv.DictReader(f):
            settings = {key: rec[key] for key in SETTINGS if key in rec}
            label = (rec["dataset"], rec["model"], *settings.values())
            row = rows.setdefault(label, Row(rec["dataset"], rec["model"], settings, {}))
            # shown as the paper prints them: two decimals
            row.published[rec["metric"]] = Stat(float(rec["mean"]), float(rec["std"]), 2)
    return list(rows.values())


def paper_table(
    runs: Sequence[Run],
    name: str,
    metrics: Sequence[str] | None = None,
    paper_dir: Path = PAPER_DIR,
) -> tuple[list[Column], list[str]]:
    """Columns of our runs next to paper table ``name``, and notes for stderr.

    Rows are the paper's rows that have runs, by data set, then in the paper's order; the
    columns are the data set, model, the table's settings, ``n`` (runs), then per metric
    ours (mean ± std over seeds), the paper's and the difference. The notes count the paper
    rows without runs, name the runs that match no row, and warn where one row's runs differ
    in other keys. ``metrics`` None: every metric of the table, in our metrics' order.

    Raises:
        CompareError: a metric the table lacks, or no run matching a row.
    """
    table, rows = TABLES[name], load_table(name, paper_dir)
    metrics = _table_metrics(rows, name, metrics)
    pairs = [(row, [run for run in runs if row.matches(run, table)]) for row in rows]
    datasets = list(dict.fromkeys(row.dataset for row in rows))
    # one data set after the other, as the paper's column blocks; the paper's row order
    found = sorted(
        ((row, members) for row, members in pairs if members),
        key=lambda pair: datasets.index(pair[0].dataset),
    )
    if not found:
        raise CompareError(
            f"no run matches a row of the paper's table {name}: rows match by data set, model, "
            "M, J and the table's settings (README, Reproducing the paper's tables)"
        )
    columns = [
        Column("data", [row.dataset for row, _ in found]),
        Column("model", [row.model for row, _ in found]),
        *(Column(key, [row.settings[key] for row, _ in found]) for key in rows[0].settings),
        Column("n", [len(members) for _, members in found]),
    ]
    for metric in metrics:
        ours = [Stat.over([row.value(run, metric) for run in members]) for row, members in found]
        paper = [row.published[metric] for row, _ in found]
        diffs = [Diff(o.mean - p.mean, p.mean) for o, p in zip(ours, paper, strict=True)]
        columns += [
            Column(metric, ours),
            Column(f"paper_{metric}", paper),
            Column(f"diff_{metric}", diffs),
        ]
    return columns, _notes(runs, pairs, name)


def _table_metrics(rows: Sequence[Row], name: str, asked: Sequence[str] | None) -> list[str]:
    """The metrics asked for (None: every metric of the table, in our metrics' order).

    Raises:
        CompareError: one the paper's table lacks: its columns would be left out without
            a word.
    """
    published = list(dict.fromkeys(metric for row in rows for metric in row.published))
    if asked is None:
        return [m for m in metric_names() if m in published]
    if lacking := [m for m in asked if m not in published]:
        has = ", ".join(published)
        raise CompareError(
            f"the paper's table {name} has {has}; not {', '.join(lacking)}: ask for its "
            f"metrics (--metrics {' '.join(published)}), or leave out --paper for ours"
        )
    return list(asked)


def _notes(runs: Sequence[Run], pairs: Sequence[tuple[Row, list[Run]]], name: str) -> list[str]:
    used = {id(run) for _, members in pairs for run in members}
    notes = []
    if missing := sum(not members for _, members in pairs):
        notes.append(f"{missing} of the {len(pairs)} rows of table {name} have no runs")
    if unmatched := [run for run in runs if id(run) not in used]:
        names = sorted({f"{run.value('model')} ({run.value('data')})" for run in unmatched})
        notes.append(f"{len(unmatched)} runs match no row of table {name}: {', '.join(names)}")
    for row, members in pairs:
        if mixed := varying_keys(members):
            where = f"{row.model}, {row.dataset}"
            notes.append(f"warning: the runs of {where} differ in {', '.join(mixed)}")
    rows = [(f"{row.model}, {row.dataset}", members) for row, members in pairs]
    notes.extend(row_notes(rows))
    return notes
