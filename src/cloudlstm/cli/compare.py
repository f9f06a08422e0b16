"""Comparison tables of finished runs: ``python -m cloudlstm.cli.compare <dir> [<dir> ...]``.

Finds every ``metrics.json`` with test results under the given paths (a multirun folder,
several of them, single run dirs, or all of ``outputs/``), groups the runs, and prints one
row per group, no W&B needed::

    python -m cloudlstm.cli.compare outputs/multiruns/<date>/<time> \\
        --by model.k model.cell --horizons 1,6,12 --format latex --plot figures/

Grouping (``--by KEY ...``): ``model`` and ``data`` are the names train.py records in
``metrics.json``; any other key is a dotted key of the run's resolved ``config.yaml``
(``model.k``, ``trainer.max_epochs``, ...). ``data`` is always added, since metrics of two
data sets do not average. Without ``--by``, runs are grouped by ``model`` and ``data`` and
split further by every config key that still differs inside such a group, except ``seed``,
the directory keys (``*dir``, ``*dirpath``, ``paths.*``: they differ per run) and the
derived ``data_info.*``. So the seeds of one setting form one row and different settings
never mix; with ``--by`` a warning names the keys that differ inside a row.

Each metric cell is ``mean ± std`` over the runs (seeds) of a row: the mean and the sample
standard deviation (ddof=1) of each run's overall test mean; a single run shows its mean
alone. The std across test instances within a run, which metrics.json also holds, is not
shown. ``n`` is the number of runs; ``params``, ``epochs`` and ``train_s`` are means over
them. ``--horizons 1,6,12`` adds the ``--horizon-metric`` (MAE by default) at those
forecast steps (1 = first), aggregated the same way. The best cell of each metric column
is bold (lowest MAE/RMSE, highest PSNR/SSIM), compared within each data set. Rows are
sorted by data set, then best first on the first metric.

``--paper TABLE`` prints the runs next to the paper's values of that table
(``docs/paper/<TABLE>.csv``) with the difference; :mod:`cloudlstm.cli.paper` says how runs
are matched to the paper's rows.

``--format markdown|csv|latex``; ``--plot DIR`` writes, per data set, the horizon metric
against the forecast step (one line per row, a band of ± one std over seeds) and a bar
chart of its overall value with std error bars, and prints their paths to stderr (stdout
keeps only the table, for redirection). User errors print one ``compare: ...`` line to
stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import csv
import difflib
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import yaml

from cloudlstm.metrics import METRICS
from cloudlstm.viz import plot_horizon_curve
from cloudlstm.viz._common import new_figure, save_png

HIGHER_IS_BETTER = {"mae": False, "rmse": False, "psnr": True, "ssim": True}
RUN_KEYS = ("model", "data")  # recorded by train.py in metrics.json["run"]


class CompareError(Exception):
    """A user error (missing directory, no runs, unknown key, bad horizon)."""


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

    def value(self, key: str) -> str:
        """The key's value as text; "" where this run's config lacks it."""
        return str(self.keys[key]) if key in self.keys else ""

    def steps(self, metric: str) -> list[float]:
        if not self.per_step.get(metric):
            raise CompareError(f"{self.path} has no per-step {metric} results")
        return self.per_step[metric]


@dataclass(frozen=True)
class Stat:
    """Mean and sample std (ddof=1, NaN for one run) over the runs of a group.

    ``decimals`` fixes how it is shown (a published value); None rounds both to the std's
    second significant digit.
    """

    mean: float
    std: float
    decimals: int | None = None

    @classmethod
    def over(cls, values: Sequence[float]) -> Stat:
        arr = np.asarray(values, dtype=float)
        return cls(float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else math.nan)


@dataclass(frozen=True)
class Diff:
    """A mean minus a reference value (the paper's), shown with its relative size."""

    value: float
    reference: float

    @property
    def relative(self) -> float:
        return self.value / self.reference if self.reference else math.nan


@dataclass(frozen=True)
class Group:
    """Runs sharing the values of the grouping keys: one table row."""

    keys: dict[str, str]
    runs: list[Run]

    @property
    def data(self) -> str:
        return self.keys["data"]

    @property
    def label(self) -> str:
        """Short legend text: the key values other than data, e.g. ``cloudlstm k=3``."""
        parts = [
            value if key in RUN_KEYS else f"{key.rsplit('.', 1)[-1]}={value}"
            for key, value in self.keys.items()
            if key != "data" and value  # a key the group's model lacks says nothing
        ]
        return " ".join(parts) or self.data

    def metric(self, name: str) -> Stat:
        return Stat.over([run.overall[name] for run in self.runs])

    def at_horizon(self, name: str, horizon: int) -> Stat:
        values = []
        for run in self.runs:
            steps = run.steps(name)
            if not 1 <= horizon <= len(steps):
                raise CompareError(
                    f"horizon {horizon} is beyond the forecast length J={len(steps)} of "
                    f"{run.path} (horizons count 1..J)"
                )
            values.append(steps[horizon - 1])
        return Stat.over(values)

    def curve(self, name: str) -> list[Stat]:
        """The metric at every forecast step 1..J (J: the shortest forecast in the group)."""
        horizon = min(len(run.steps(name)) for run in self.runs)
        return [self.at_horizon(name, h) for h in range(1, horizon + 1)]

    def mean_of(self, attr: str) -> float | None:
        """Mean of a run attribute over the runs that have it (untrained models lack epochs)."""
        values = [getattr(run, attr) for run in self.runs if getattr(run, attr) is not None]
        return float(np.mean(values)) if values else None


@dataclass(frozen=True)
class Column:
    """One table column; ``better`` ("min"/"max") marks metric columns whose best is bold."""

    name: str
    cells: list[Any]  # str, int, float, None or Stat
    better: str | None = None


# -- finding runs -------------------------------------------------------------------------


def find_runs(roots: Sequence[Path]) -> list[Run]:
    """Every run with test results under ``roots`` (directories or metrics.json files)."""
    runs = []
    for root in map(Path, roots):
        if not root.exists():
            raise CompareError(f"{root} does not exist")
        paths = [root] if root.is_file() else sorted(root.rglob("metrics.json"))
        runs.extend(run for path in paths if (run := load_run(path)) is not None)
    return runs


def load_run(path: Path) -> Run | None:
    """The run of one ``metrics.json``; None if it has no test results (e.g. a failed run)."""
    try:
        results = json.loads(path.read_text())
    except json.JSONDecodeError as err:  # e.g. a file being written by a running job
        raise CompareError(f"{path} is not valid JSON ({err})") from None
    test = results.get("test")
    if not test:
        return None
    info = results.get("run", {})
    config_path = path.parent / "config.yaml"
    config = flatten(yaml.safe_load(config_path.read_text())) if config_path.exists() else {}
    return Run(
        path=path.parent,
        keys={"model": info.get("model", "?"), "data": info.get("data", "?"), **config},
        params=results.get("num_params"),
        epochs=results.get("epochs"),
        train_s=results.get("train_time_s"),
        overall={m: stats["mean"] for m, stats in test["overall"].items()},
        per_step={m: stats["mean"] for m, stats in test.get("per_step", {}).items()},
        groups={
            group: {m: stats["mean"] for m, stats in res["overall"].items()}
            for group, res in test.get("groups", {}).items()
        },
    )


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config -> ``{"model.k": 3, ...}``; lists stay values."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


# -- grouping -----------------------------------------------------------------------------


def group_runs(runs: Sequence[Run], by: Sequence[str] | None = None) -> list[Group]:
    """Groups of ``runs`` by the keys ``by`` (plus data), or by :func:`default_keys`."""
    keys = default_keys(runs) if by is None else _checked_keys(runs, by)
    return [
        Group(dict(zip(keys, values, strict=True)), members)
        for values, members in _partition(runs, keys).items()
    ]


def default_keys(runs: Sequence[Run]) -> list[str]:
    """model, data, and every config key that still differs within a (model, data) pair."""
    extra = set()
    for members in _partition(runs, RUN_KEYS).values():
        extra.update(varying_keys(members))
    return [*RUN_KEYS, *sorted(extra)]


def varying_keys(runs: Sequence[Run]) -> list[str]:
    """Keys whose values differ between ``runs``, but for seeds, paths and derived values."""
    keys = set().union(*(run.keys for run in runs))
    return sorted(
        key for key in keys if not _per_run_key(key) and len({run.value(key) for run in runs}) > 1
    )


def mixed_keys(groups: Sequence[Group]) -> list[str]:
    """Keys that differ between the runs inside one group (what an explicit --by merged)."""
    return sorted(set().union(*(varying_keys(g.runs) for g in groups)))


def _per_run_key(key: str) -> bool:
    """True for keys that may differ between the runs of one setting."""
    last = key.rsplit(".", 1)[-1]
    return (
        key == "seed"  # seeds are what the mean ± std is over
        or key.startswith(("paths.", "data_info."))  # per-run paths; derived from data.*
        or last.endswith(("dir", "dirpath"))  # output and checkpoint folders of each run
    )


def _checked_keys(runs: Sequence[Run], by: Sequence[str]) -> list[str]:
    valid = set().union(*(run.keys for run in runs))
    for key in by:
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise CompareError(
                f"unknown --by key {key!r}{hint}; valid keys: {', '.join(sorted(valid))}"
            )
    return list(by) if "data" in by else [*by, "data"]


def _partition(runs: Sequence[Run], keys: Sequence[str]) -> dict[tuple[str, ...], list[Run]]:
    parts: dict[tuple[str, ...], list[Run]] = {}
    for run in runs:
        parts.setdefault(tuple(run.value(k) for k in keys), []).append(run)
    return parts


# -- the table ----------------------------------------------------------------------------


def build_table(
    groups: Sequence[Group],
    metrics: Sequence[str] = METRICS,
    horizons: Sequence[int] = (),
    horizon_metric: str = "mae",
) -> list[Column]:
    """Columns: group keys, n, params, epochs, train_s, metrics, horizon metric at each step.

    Rows are sorted by data set, then best first on the first metric.
    """
    rows = ranked(groups, metrics[0])
    columns = [Column(key, [g.keys[key] for g in rows]) for key in rows[0].keys]
    columns.append(Column("n", [len(g.runs) for g in rows]))
    columns += [Column(a, [g.mean_of(a) for g in rows]) for a in ("params", "epochs", "train_s")]
    columns += [Column(m, [g.metric(m) for g in rows], _better(m)) for m in metrics]
    columns += [
        Column(
            f"{horizon_metric}@{h}",
            [g.at_horizon(horizon_metric, h) for g in rows],
            _better(horizon_metric),
        )
        for h in horizons
    ]
    return columns


def compare(
    runs: Sequence[Run],
    by: Sequence[str] | None = None,
    metrics: Sequence[str] = METRICS,
    horizons: Sequence[int] = (),
    horizon_metric: str = "mae",
) -> list[Column]:
    """Group ``runs`` (see :func:`group_runs`) and build their table."""
    return build_table(group_runs(runs, by), metrics, horizons, horizon_metric)


def ranked(groups: Sequence[Group], metric: str) -> list[Group]:
    """``groups`` sorted by data set, then best first on ``metric``."""
    sign = -1 if HIGHER_IS_BETTER[metric] else 1
    return sorted(groups, key=lambda g: (g.data, sign * g.metric(metric).mean))


def _better(metric: str) -> str:
    return "max" if HIGHER_IS_BETTER[metric] else "min"


def best_rows(column: Column, data: Sequence[str]) -> set[int]:
    """Rows holding the best mean of a metric column within their data set (ties: all)."""
    if column.better is None:
        return set()
    pick = max if column.better == "max" else min
    cells = list(zip(column.cells, data, strict=True))
    best = {d: pick(c.mean for c, dd in cells if dd == d) for d in set(data)}
    return {i for i, (c, d) in enumerate(cells) if c.mean == best[d]}


def _text(cell: Any, pm: str, escape: Callable[[str], str]) -> str:
    """A cell for markdown or LaTeX: ``mean ± std`` (mean alone for one run), 1,234.5."""
    if isinstance(cell, str):
        return escape(cell)
    if isinstance(cell, Stat):
        return _mean_std(cell, pm)
    if isinstance(cell, Diff):
        return escape(f"{cell.value:+.2f} ({cell.relative:+.1%})")
    if isinstance(cell, float):
        return f"{cell:,.0f}" if cell.is_integer() else f"{cell:,.1f}"
    return "" if cell is None else f"{cell:,}"


def _mean_std(stat: Stat, pm: str) -> str:
    """Both rounded to the std's second significant digit: 16.44, 1.62 -> ``16.4 ± 1.6``."""
    if stat.decimals is not None:
        return f"{stat.mean:.{stat.decimals}f}{pm}{stat.std:.{stat.decimals}f}"
    if math.isnan(stat.std) or stat.std == 0:
        return f"{stat.mean:.4g}"
    decimals = max(0, 1 - math.floor(math.log10(stat.std)))
    return f"{stat.mean:.{decimals}f}{pm}{stat.std:.{decimals}f}"


def _grid(
    columns: Sequence[Column],
    pm: str,
    bold: Callable[[str], str],
    escape: Callable[[str], str] = str,
) -> list[list[str]]:
    """Header and rows of formatted text, the best cells passed through ``bold``."""
    data = next(c.cells for c in columns if c.name == "data")
    cells = [[_text(cell, pm, escape) for cell in column.cells] for column in columns]
    for j, column in enumerate(columns):
        for i in best_rows(column, data):
            cells[j][i] = bold(cells[j][i])
    return [[escape(c.name) for c in columns], *map(list, zip(*cells, strict=True))]


def to_markdown(columns: Sequence[Column]) -> str:
    header, *rows = _grid(columns, " ± ", lambda s: f"**{s}**")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def to_latex(columns: Sequence[Column]) -> str:
    """A ``tabular`` (text columns left, numbers right) with the best cells in ``\\textbf``."""
    header, *rows = _grid(columns, r" $\pm$ ", lambda s: rf"\textbf{{{s}}}", _latex_escape)
    align = "".join("l" if isinstance(c.cells[0], str) else "r" for c in columns)
    body = [" & ".join(header) + r" \\", r"\hline"]
    body += [" & ".join(row) + r" \\" for row in rows]
    return "\n".join(
        [rf"\begin{{tabular}}{{{align}}}", r"\hline", *body, r"\hline", r"\end{tabular}"]
    )


def _latex_escape(text: str) -> str:
    return text.replace("&", r"\&").replace("%", r"\%").replace("#", r"\#").replace("_", r"\_")


def write_csv(columns: Sequence[Column], out: TextIO) -> None:
    """Plain numbers; a column of mean ± std becomes ``<name>_mean`` and ``<name>_std``."""
    split = [any(isinstance(cell, Stat) for cell in column.cells) for column in columns]
    header: list[str] = []
    for column, two in zip(columns, split, strict=True):
        header += [f"{column.name}_mean", f"{column.name}_std"] if two else [column.name]
    rows: list[list[Any]] = [[] for _ in columns[0].cells]
    for column, two in zip(columns, split, strict=True):
        for row, cell in zip(rows, column.cells, strict=True):
            row += [cell.mean, _csv(cell.std)] if two else [_csv(cell)]
    writer = csv.writer(out, lineterminator="\n")
    writer.writerows([header, *rows])


def _csv(value: Any) -> Any:
    """Empty for missing values and a single run's std; whole means without ``.0``."""
    if isinstance(value, Diff):
        return value.value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# -- figures ------------------------------------------------------------------------------


def plot(groups: Sequence[Group], metric: str, out_dir: Path) -> list[Path]:
    """Per data set: ``<metric>_horizon_<data>.png`` and ``<metric>_bar_<data>.png``."""
    paths = []
    for data in sorted({g.data for g in groups}):
        members = [g for g in ranked(groups, metric) if g.data == data]
        paths.append(_plot_horizons(members, metric, out_dir / f"{metric}_horizon_{data}.png"))
        paths.append(_plot_bars(members, metric, out_dir / f"{metric}_bar_{data}.png"))
    return paths


def _plot_horizons(groups: Sequence[Group], metric: str, path: Path) -> Path:
    """The metric at each forecast step, one line per group, a ± std band over seeds."""
    curves = {f"{g.label} (n={len(g.runs)})": (g, g.curve(metric)) for g in groups}
    means = {name: [s.mean for s in curve] for name, (_, curve) in curves.items()}
    stds = {name: [s.std for s in curve] for name, (g, curve) in curves.items() if len(g.runs) > 1}
    return plot_horizon_curve(means, std=stds, path=path, metric=metric)


def _plot_bars(groups: Sequence[Group], metric: str, path: Path) -> Path:
    """The overall metric per group, error bars of ± std over seeds."""
    stats = [g.metric(metric) for g in groups]
    fig = new_figure(max(4.0, 1.0 + 0.8 * len(groups)), 4)
    ax = fig.add_subplot()
    x = np.arange(len(groups))
    ax.bar(x, [s.mean for s in stats], yerr=[s.std for s in stats], capsize=4)  # NaN: no bar
    ax.set_xticks(x, [g.label for g in groups], rotation=30, ha="right")
    ax.set(ylabel=metric.upper(), title=groups[0].data)
    return save_png(fig, path)


# -- command line -------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """Usage errors become one ``compare: ...`` line too, like the other user errors."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CompareError(message)


def _horizons(text: str) -> list[int]:
    try:
        horizons = [int(h) for h in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected steps like 1,6,12; got {text!r}") from None
    if min(horizons) < 1:
        raise argparse.ArgumentTypeError(f"forecast steps count from 1; got {text!r}")
    return horizons


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m cloudlstm.cli.compare",
        description=__doc__.split("\n\n")[0],
        epilog="See the module docstring or README (Comparing runs) for the statistics.",
    )
    add = parser.add_argument
    add("dirs", nargs="+", type=Path, help="run or multirun directories, or outputs/")
    add(
        "--by",
        nargs="+",
        metavar="KEY",
        help="group keys: model, data, config keys (model.k); put the dirs first",
    )
    add("--metrics", nargs="+", choices=METRICS, default=list(METRICS), help="metric columns")
    add("--horizons", type=_horizons, default=[], help="forecast steps for columns, e.g. 1,6,12")
    add("--horizon-metric", choices=METRICS, default="mae", help="metric of --horizons, --plot")
    add("--format", choices=("markdown", "csv", "latex"), default="markdown")
    add("--plot", type=Path, metavar="DIR", help="write PNG figures to DIR")
    from cloudlstm.cli.paper import TABLES  # paper builds on this module: imported late

    add("--paper", choices=list(TABLES), help="the runs next to this table of the paper")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _run(_parser().parse_args(argv))
    except CompareError as err:
        print(f"compare: {err}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    runs = find_runs(args.dirs)
    if not runs:
        where = " ".join(map(str, args.dirs))
        raise CompareError(f"no metrics.json with test results under {where}")
    if args.paper:
        return _run_paper(runs, args)
    groups = group_runs(runs, args.by)
    if mixed := mixed_keys(groups):
        print(
            f"compare: warning: runs in one row differ in {', '.join(mixed)}; "
            "add them to --by to split the rows",
            file=sys.stderr,
        )
    _print_table(build_table(groups, args.metrics, args.horizons, args.horizon_metric), args.format)
    for path in plot(groups, args.horizon_metric, args.plot) if args.plot else []:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _run_paper(runs: Sequence[Run], args: argparse.Namespace) -> int:
    """``--paper``: the runs next to a table of the paper, rows matched as paper.py says."""
    if args.by or args.horizons or args.plot:
        raise CompareError("--paper takes no --by, --horizons or --plot")
    from cloudlstm.cli.paper import paper_table

    table, notes = paper_table(runs, args.paper, args.metrics)
    for note in notes:
        print(f"compare: {note}", file=sys.stderr)
    _print_table(table, args.format)
    return 0


def _print_table(table: Sequence[Column], fmt: str) -> None:
    if fmt == "csv":
        write_csv(table, sys.stdout)
    else:
        print(to_latex(table) if fmt == "latex" else to_markdown(table))


if __name__ == "__main__":
    # run the imported module, not __main__: cli.paper builds cells from its classes
    from cloudlstm.cli.compare import main as imported_main

    raise SystemExit(imported_main())
