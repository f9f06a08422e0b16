"""The command line: arguments, ``main(argv) -> int``, and the table or figures it prints."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from cloudlstm.cli.ctrl_c import ctrl_c_is_a_stop
from cloudlstm.cli.invoked import command
from cloudlstm.cli.pipes import reader_may_leave
from cloudlstm.compare.cells import Column
from cloudlstm.compare.formats import to_latex, to_markdown, write_csv
from cloudlstm.compare.groups import (
    LEVEL_SCORES,
    Group,
    group_runs,
    levels_note,
    mixed_keys,
    not_reported,
    of_point_forecasts,
    one_run_per_seed,
    partly_reported,
    row_notes,
    without_curves,
)
from cloudlstm.compare.paper import TABLES, paper_table
from cloudlstm.compare.relative import relative_runs
from cloudlstm.compare.runs import (
    EVALUATION_KEY,
    CompareError,
    Run,
    find_runs,
    runs_without_results,
)
from cloudlstm.compare.table import build_table, default_point_groups, reported_metrics
from cloudlstm.engine.declared_metrics import metric_names
from cloudlstm.engine.quantile_metrics import is_quantile_metric, quantile_metric_names
from cloudlstm.errors import UserError
from cloudlstm.rundir.layout import DEBUG_TASK, HYDRA_FILE, METRICS_FILE


class _Parser(argparse.ArgumentParser):
    """Usage errors become one ``compare: ...`` line too, like the other user errors, and an
    option given twice is one: argparse keeps its last value without a word, so ``--by
    model.k --by seed`` would group by seed alone."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.given: set[str] = set()  # the options met on this command line
        self.by: list[str] = []  # --by's values, to tell what it took when no folder is left
        for name in (None, "store", "store_true"):
            self.register("action", name, _given_once(self._registry_get("action", name)))

    def parse_known_intermixed_args(self, *args: Any, **kwargs: Any) -> Any:
        # here, not in parse_known_args, which this calls twice (Python < 3.13): the second
        # call, of the folders alone, would forget what --by took
        self.given, self.by = set(), []
        return super().parse_known_intermixed_args(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        if message.endswith("required: dirs") and self.by:
            raise CompareError(_by_took_the_dirs(self.by))
        took = re.fullmatch(r"argument --metrics: invalid choice: '(.*?)' \(.*", message)
        if took and (what := _run_path(took[1])):  # --metrics mae DIR: DIR read as a metric
            raise CompareError(_took_a_run_path("--metrics", took[1], what, "metric", "mae"))
        raise CompareError(message)


def _run_path(word: str) -> str | None:
    """What ``word`` names of what compare reads: "folder", "file" (a run's metrics.json),
    or None."""
    path = Path(word)
    if path.is_dir():
        return "folder"
    return "file" if path.name == METRICS_FILE and path.is_file() else None


def _took_a_run_path(option: str, word: str, what: str, kind: str, example: str) -> str:
    """The error of ``compare DIR1 --by model DIR2``: ``option`` (``--by``, ``--metrics``)
    takes every word after it, and took ``word``, a ``what`` (folder) to compare, for a
    ``kind`` (key); ``example`` is a value of it."""
    return (
        f"{option} took the {what} {word} for a {kind}: give the folders before {option} "
        f"(compare DIR {option} {example}), or end its {kind}s with -- (compare {option} "
        f"{example} -- DIR)"
    )


def _check_by_keys(runs: Sequence[Run], by: Sequence[str] | None) -> None:
    """Refuse a folder (or a run's metrics.json) that ``--by`` took for a key: the unknown
    key's error named the keys, not the folder's way out."""
    keys = set().union(*(run.keys for run in runs))
    for word in by or ():
        if word not in keys and (what := _run_path(word)):
            raise CompareError(_took_a_run_path("--by", word, what, "key", "model"))


def _by_took_the_dirs(by: Sequence[str]) -> str:
    """The error of ``compare --by model DIR``: ``--by`` takes every word after it, the
    folders too, and argparse found none to compare."""
    return (
        f"no run folder given: --by takes every word after it as a key (here {' '.join(by)}); "
        "give the folders before --by (compare DIR --by model), or end its keys with -- "
        "(compare --by model -- DIR)"
    )


def _given_once(action: type[argparse.Action]) -> type[argparse.Action]:
    """``action`` that refuses its option a second time on one command line."""

    class GivenOnce(action):  # type: ignore[misc, valid-type]
        def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001
            if self.option_strings:
                if self.dest in parser.given:
                    values_once = " with all its values" if self.nargs == "+" else ""
                    parser.error(
                        f"argument {self.option_strings[0]} given twice: give it once{values_once}"
                    )
                parser.given.add(self.dest)
                if self.dest == "by":
                    parser.by = list(values)
            super().__call__(parser, namespace, values, option_string)

    return GivenOnce


def _horizons(text: str) -> list[int]:
    try:
        horizons = [int(h) for h in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected steps like 1,6,12; got {text!r}") from None
    if min(horizons) < 1:
        raise argparse.ArgumentTypeError(f"forecast steps count from 1; got {text!r}")
    _check_once(horizons, "step", text)
    return horizons


def _check_once(items: Sequence, kind: str, text: str) -> None:
    """``items`` read from ``text`` name each thing once (a repeat would repeat a column)."""
    if repeated := sorted({str(item) for item in items if items.count(item) > 1}):
        raise argparse.ArgumentTypeError(f"{kind} {', '.join(repeated)} given twice in {text!r}")


def _check_lists(args: argparse.Namespace) -> None:
    """``--metrics`` and ``--by`` name each metric or key once."""
    for option, kind, values in (("--metrics", "metric", args.metrics), ("--by", "key", args.by)):
        try:
            _check_once(values or [], kind, " ".join(values or []))
        except argparse.ArgumentTypeError as err:
            raise CompareError(f"argument {option}: {err}") from None


def _channels(text: str) -> list[str]:
    channels = [c.strip() for c in text.split(",")]
    if not all(channels):
        raise argparse.ArgumentTypeError(f"expected channel names like PM2.5,CO; got {text!r}")
    _check_once(channels, "channel", text)
    return channels


def _point_groups(text: str) -> list[str]:
    groups = [g.strip() for g in text.split(",")]
    if not all(groups):
        raise argparse.ArgumentTypeError(
            f"expected point groups like held_out,trained; got {text!r}"
        )
    _check_once(groups, "point group", text)
    return groups


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=command("compare"),
        description=sys.modules[__package__].__doc__.split("\n\n")[0],  # the package's
        epilog="See the docstring of cloudlstm.compare or README (Comparing runs) for the "
        "statistics.",
    )
    add = parser.add_argument
    metrics = metric_names()
    # a quantile forecast's metrics (crps, coverage80, ...) on request: --metrics crps ...
    choices = (*metrics, *quantile_metric_names())
    add("dirs", nargs="+", type=Path, help="run or multirun directories, or outputs/")
    add(
        "--by",
        nargs="+",
        metavar="KEY",
        help="group keys: model, data, config keys (model.k); put the dirs first",
    )
    add(
        "--metrics",
        nargs="+",
        choices=choices,
        default=None,
        help="metric columns, the first ranks the rows (smae: scale-free MAE; quantile "
        "forecasts: crps, pinball, coverage80, width80, ...)",
    )
    add("--horizons", type=_horizons, default=[], help="forecast steps for columns, e.g. 1,6,12")
    add("--horizon-metric", choices=choices, default="mae", help="metric of --horizons, --plot")
    add("--channels", type=_channels, default=[], help="channels for columns, e.g. PM2.5,CO")
    add("--channel-metric", choices=choices, default="mae", help="metric of --channels")
    add(
        "--groups",
        type=_point_groups,
        help="point groups for columns, e.g. held_out,trained (default: those of "
        "data.holdout_points where runs have them)",
    )
    add("--group-metric", choices=choices, default="mae", help="metric of --groups")
    add("--format", choices=("markdown", "csv", "latex"), default="markdown")
    add("--plot", type=Path, metavar="DIR", help="write PNG figures to DIR")
    add("--html", type=Path, metavar="PATH", help="write the comparison as one web page")
    add("--wandb", action="store_true", help="log the comparison as one W&B run (offline)")
    add("--paper", choices=list(TABLES), help="the runs next to this table of the paper")
    add(
        "--uncalibrated",
        action="store_true",
        help="quantile metrics before the conformal calibration (module.calibrate=conformal)",
    )
    add(
        "--val",
        action="store_true",
        help="also the validation score each run chose its checkpoint by (val/mae)",
    )
    add(
        "--pooled",
        action="store_true",
        help="also the test metrics pooled over every forecast value (pooled/rmse: the "
        "RMSE of all squared errors, as DCRNN and T-GCN report it)",
    )
    add(
        "--relative-to",
        metavar="MODEL",
        help="every metric over this model's (e.g. persistence) on the same data and seed: "
        "mean ± std of the ratios",
    )
    add(
        "--include-evals",
        action="store_true",
        help="also eval.py's re-tests of runs (<run>/eval/<time>/), as rows of their own",
    )
    add(
        "--include-debug",
        action="store_true",
        help="also the runs of debug=... (task_name debug): checks that the code runs, on a "
        "batch or a few, not results",
    )
    return parser


@reader_may_leave()  # `compare ... | head`
@ctrl_c_is_a_stop()
def program() -> NoReturn:
    """``cloudlstm-compare`` and ``python -m cloudlstm.cli.compare``: :func:`main` on the
    command line, its status the program's."""
    raise SystemExit(main())


def main(argv: Sequence[str] | None = None) -> int:
    try:
        # folders may come after options too: compare DIR1 --horizons 1 DIR2
        return _run(_parser().parse_intermixed_args(argv))
    except (CompareError, UserError) as err:  # UserError: a figure or a page finding no room
        print(f"compare: {err}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    _check_lists(args)
    runs = _find_runs(args.dirs, args.include_evals, args.include_debug, args.by)
    _check_quantile_metrics(runs, args)
    if args.uncalibrated:
        from cloudlstm.compare.calibration import all_before_calibration

        runs = all_before_calibration(runs)
    if args.relative_to:
        if args.paper:
            raise CompareError("--relative-to and --paper: the paper's tables are not relative")
        if drawn := [f"--{o}" for o in ("plot", "html", "wandb") if getattr(args, o)]:
            raise CompareError(
                f"--relative-to makes tables only, and {' '.join(drawn)} would label ratios as "
                "the metrics: draw the figures without --relative-to"
            )
        had_val = any(run.val_score is not None for run in runs)
        runs = _over_baseline(runs, args.relative_to)
        if args.val and had_val and all(run.val_score is None for run in runs):
            raise CompareError(
                f"--val with --relative-to {args.relative_to}: its runs record no validation "
                "score to go by (persistence chooses no checkpoint); leave out --val, or go by "
                "a model that trains"
            )
    if args.paper:
        return _run_paper(runs, args)
    groups = group_runs(runs, args.by)
    # by default every declared metric that a run reports
    args.metrics = args.metrics or reported_metrics(groups)
    if mixed := mixed_keys(groups):
        print(
            f"compare: warning: runs in one row differ in {', '.join(mixed)}; "
            "add them to --by to split the rows",
            file=sys.stderr,
        )
    rows = [(group.label, group.runs) for group in groups]
    lacking = not_reported(groups, args.metrics)  # None, or the rows without a metric
    notes = [*row_notes(rows), *partly_reported(groups, args.metrics, args.pooled), lacking]
    for note in filter(None, notes):
        print(f"compare: {note}", file=sys.stderr)
    shown = {*args.metrics, args.horizon_metric if args.horizons else None}
    if shown & set(LEVEL_SCORES) and (note := levels_note(groups)):
        print(f"compare: {note}", file=sys.stderr)
    table = build_table(
        groups,
        args.metrics,
        args.horizons,
        args.horizon_metric,
        args.channels,
        args.channel_metric,
        args.groups,
        args.group_metric,
        args.val,
        args.pooled,
        relative=bool(args.relative_to),
    )
    # the outputs with horizon figures: a metric no row has per step is an error before any
    # output, naming the fix; rows without it are named once the paths are checked
    drawn = args.html or args.plot or args.wandb
    no_curves = without_curves(groups, args.horizon_metric) if drawn else None
    # the page and the figures' folder first: a path they cannot be written to is an error
    # before any output
    page = _write_html(groups, table, args) if args.html else None
    if args.plot:
        _make_folder(args.plot)
    # after every check that may refuse the command (the table's, the paths'): an error is
    # its one line
    for note in (of_point_forecasts(groups, _metrics_shown(groups, args)), no_curves):
        if note:
            print(f"compare: {note}", file=sys.stderr)
    _print_table(table, args.format)
    if page:
        print(f"wrote {page}", file=sys.stderr)
    if args.plot:
        # imported here: matplotlib takes most of a table's start, and only --plot needs it
        from cloudlstm.compare.plots import plot

        for path in plot(groups, args.horizon_metric, args.plot):
            print(f"wrote {path}", file=sys.stderr)
    if args.wandb:
        folder = _log_to_wandb(groups, table, args)
        print(f"wrote W&B run {folder}; publish it with: wandb sync {folder}", file=sys.stderr)
    return 0


def _metrics_shown(groups: Sequence[Group], args: argparse.Namespace) -> list[str]:
    """The metrics of the table's columns: ``--metrics``, and the metric of the columns by
    forecast step, channel and point group, where it has them."""
    point_groups = default_point_groups(groups) if args.groups is None else args.groups
    by_part = (
        (args.horizons, args.horizon_metric),
        (args.channels, args.channel_metric),
        (point_groups, args.group_metric),
    )
    return [*args.metrics, *(metric for parts, metric in by_part if parts)]


def _over_baseline(runs: list[Run], baseline: str) -> list[Run]:
    """The runs relative to ``baseline``'s (:mod:`cloudlstm.compare.relative`), with a note
    on stderr of what the cells are and of the runs left out for want of a baseline run."""
    relative, unpaired = relative_runs(runs, baseline)
    if unpaired:
        shown = ", ".join(str(run.path) for run in unpaired[:3])
        more = f" and {len(unpaired) - 3} more" if len(unpaired) > 3 else ""
        print(
            f"compare: {len(unpaired)} run(s) without a {baseline} run of the same data and "
            f"seed are left out: {shown}{more}",
            file=sys.stderr,
        )
    if not relative:
        raise CompareError(f"--relative-to {baseline}: no run has a {baseline} run to go by")
    # a metric the baseline scores 0, or lacks, has no ratio: with none left, no column is
    if not any(name in run.overall for run in relative for name in metric_names()):
        raise CompareError(
            f"--relative-to {baseline}: no metric is left to show, as its runs score each "
            "metric 0 (a ratio to 0 is none) or lack it; compare without --relative-to"
        )
    print(
        f"compare: every metric is over {baseline}'s on the same data and seed, or its one "
        "run on those data (an error below 1 is lower than its)",
        file=sys.stderr,
    )
    return relative


def _make_folder(folder: Path) -> None:
    """Create ``folder`` (``--plot``) and its parents, any failure a :class:`CompareError`."""
    if folder.exists() and not folder.is_dir():
        raise CompareError(f"--plot {folder} is a file; --plot takes a folder for the figures")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CompareError(
            f"cannot make the folder {folder}: {err.strerror or err}; give a folder you can write"
        ) from None


def _check_quantile_metrics(runs: Sequence[Run], args: argparse.Namespace) -> None:
    """Refuse a quantile forecast's metric (``crps``) that no run reports, whichever option
    asks for it (``--metrics``, ``--horizon-metric``, ``--channel-metric`` or
    ``--group-metric``): its column would be empty in every row, without a word."""
    asked = [*(args.metrics or ()), args.horizon_metric, args.channel_metric, args.group_metric]
    reported = dict.fromkeys(metric for run in runs for metric in run.overall)  # in order
    missing = [m for m in dict.fromkeys(asked) if is_quantile_metric(m) and m not in reported]
    if not missing:
        return
    if have := [m for m in reported if is_quantile_metric(m)]:  # other levels' intervals
        raise CompareError(
            f"no run has {', '.join(missing)} results: the runs' quantile forecasts report "
            f"{', '.join(have)} (their module.quantiles set the intervals)"
        )
    raise CompareError(
        f"no run has {', '.join(missing)} results: they are scores of quantile forecasts, "
        "which runs trained with module.quantiles=[...] report"
    )


def _find_runs(
    dirs: Sequence[Path], include_evals: bool, include_debug: bool, by: Sequence[str] | None
) -> list[Run]:
    """The runs under ``dirs``; a note on stderr of the evaluations and debug runs left
    out, or where they were all there was, the one error that says so. A folder that
    ``by`` (``--by``) took for a key is an error before any note."""
    skipped: list[tuple[Path, str]] = []  # damaged metrics.json: named, the others compared
    found = find_runs(dirs, include_evals=True, skipped=skipped)
    _check_by_keys(found, by)
    for _, line in skipped:  # like the other notes on what has no row: the status stays 0
        print(f"compare: skipped (no row): {line}", file=sys.stderr)
    runs, left_out = _without_evals_and_debug(found, include_evals, include_debug)
    # all found left out: one error says so, as "no results" after a note would mislead
    for text, option in left_out if runs else ():
        print(f"compare: left out {text}; {option} shows them", file=sys.stderr)
    if pending := runs_without_results(dirs, found, [path for path, _ in skipped]):
        print(f"compare: {_no_row(pending, dirs)}", file=sys.stderr)
    if left_out and not runs:
        raise CompareError(_all_left_out(dirs, left_out))
    if unknown := [run.path for run in runs if not run.has_config]:
        shown = ", ".join(map(str, unknown[:3])) + (" ..." if len(unknown) > 3 else "")
        print(
            f"compare: {len(unknown)} run(s) without config.yaml (or with one cut short), "
            "whose settings are unknown: "
            f"each is a row of its own ({shown})",
            file=sys.stderr,
        )
    if unnamed := [run for run in runs if run.names_unknown]:
        print(f"compare: {_unnamed_text(unnamed, dirs)}", file=sys.stderr)
    if not runs:
        where = " ".join(map(str, dirs))
        raise CompareError(f"no metrics.json with test results under {where}")
    runs, repeats = one_run_per_seed(runs)
    retests = [pair for pair in repeats if pair[0].evaluated_run]
    if copies := [pair for pair in repeats if not pair[0].evaluated_run]:
        print(f"compare: warning: {_repeats_text(copies, dirs)}", file=sys.stderr)
    if retests:
        print(f"compare: warning: {_retests_text(retests, dirs)}", file=sys.stderr)
    return runs


def _unnamed_text(unnamed: Sequence[Run], dirs: Sequence[Path]) -> str:
    """The note on runs whose model and data are ``?``: neither their ``metrics.json``
    nor their run's Hydra record names them (:attr:`Run.names_unknown` says why, here the
    first run's)."""
    first = unnamed[0]
    more = f" ({len(unnamed) - 1} more such run(s))" if len(unnamed) > 1 else ""
    return (
        f"{len(unnamed)} run(s) have model and data ?, as neither their metrics.json (run) nor "
        f"their run's {HYDRA_FILE} (hydra.runtime.choices) names them: "
        f"{_relative(first.path, dirs)}: {first.names_unknown}{more}"
    )


def _all_left_out(dirs: Sequence[Path], left_out: Sequence[tuple[str, str]]) -> str:
    """The error where every run found was an evaluation or a debug run left out."""
    what = " and ".join(text for text, _ in left_out)
    options = " and ".join(option for _, option in left_out)
    shows = "shows them" if len(left_out) == 1 else "show them"
    where = " ".join(map(str, dirs))
    return f"no run to compare under {where}: left out {what}; {options} {shows}"


def _without_evals_and_debug(
    found: Sequence[Run], include_evals: bool, include_debug: bool
) -> tuple[list[Run], list[tuple[str, str]]]:
    """``found`` less the evaluations and debug runs not asked for, and what was left out:
    ``(what, the option that shows it)`` for each kind."""
    runs = [run for run in found if include_evals or not run.evaluated_run]
    left_out = []
    if skipped := len(found) - len(runs):
        left_out.append(
            (f"{skipped} evaluation(s) of eval.py (re-tests of runs)", "--include-evals")
        )
    debug = [run for run in runs if run.value("task_name") == DEBUG_TASK]
    if debug and not include_debug:
        runs = [run for run in runs if run.value("task_name") != DEBUG_TASK]
        left_out.append(
            (
                f"{len(debug)} run(s) of debug=... (task_name {DEBUG_TASK}: a batch or a few, "
                "no result)",
                "--include-debug",
            )
        )
    return runs, left_out


def _repeats_text(repeats: Sequence[tuple[Run, Run]], dirs: Sequence[Path]) -> str:
    """The warning on runs left out as repeats of another run's settings and seed."""
    left, kept = repeats[0]
    more = f" ({len(repeats) - 1} more such run(s) left out)" if len(repeats) > 1 else ""
    return (
        f"{_relative(left.path, dirs)} has the settings and seed ({left.value('seed')}) of "
        f"{_relative(kept.path, dirs)}: a copy or a rerun, one sample, so it is left out, "
        f"not counted as another seed{more}; remove it, or give it a seed of its own"
    )


def _retests_text(repeats: Sequence[tuple[Run, Run]], dirs: Sequence[Path]) -> str:
    """The warning on eval.py re-tests left out as repeats of another re-test of the same
    training run, checkpoint and overrides."""
    left, kept = repeats[0]
    more = f" ({len(repeats) - 1} more such re-test(s) left out)" if len(repeats) > 1 else ""
    return (
        f"{_relative(left.path, dirs)} re-tests the run and seed ({left.value('seed')}) that "
        f"{_relative(kept.path, dirs)} re-tested, with the same checkpoint and overrides "
        f"({left.value(EVALUATION_KEY)}): one sample, so it is left out, not counted as "
        f"another seed{more}; remove one of them"
    )


def _no_row(pending: Sequence[Path], dirs: Sequence[Path], shown: int = 5) -> str:
    """The note on runs that have no row yet, so that a table of a sweep in progress (its
    ``n`` one short for a model) does not pass for the whole sweep."""
    names = [_relative(folder, dirs) for folder in pending]
    listed = ", ".join(names[:shown]) + (
        f" and {len(names) - shown} more" if len(names) > shown else ""
    )
    return (
        f"{len(names)} run(s) without test results (training, stopped, failed, or test=false) "
        f"have no row: {listed}"
    )


def _relative(folder: Path, dirs: Sequence[Path]) -> str:
    """A run's folder as notes name it: relative to the directory given where every other
    one given lies inside it; else as found (``a/0`` and ``b/0``, where ``0`` would name
    either)."""
    roots = {Path(os.path.abspath(d)) for d in dirs}
    outer = [r for r in roots if not any(r != o and r.is_relative_to(o) for o in roots)]
    found = Path(os.path.abspath(folder))
    if len(outer) == 1 and outer[0].is_dir() and found.is_relative_to(outer[0]):
        return found.relative_to(outer[0]).as_posix() if found != outer[0] else str(folder)
    return str(folder)


def _write_html(groups: Sequence[Group], table: Sequence[Column], args: argparse.Namespace) -> Path:
    # imported here: plotly takes a while to import, and only --html needs it
    from cloudlstm.compare.html import write_html

    return write_html(
        groups,
        table,
        args.html,
        rank_metric=args.metrics[0],
        curve_metric=args.horizon_metric,
        sources=args.dirs,
    )


def _log_to_wandb(
    groups: Sequence[Group], table: Sequence[Column], args: argparse.Namespace
) -> Path:
    # imported here: wandb takes seconds to import, and only --wandb needs it
    from cloudlstm.compare.wandb_run import log_to_wandb

    return log_to_wandb(
        groups,
        table,
        args.dirs,
        rank_metric=args.metrics[0],
        curve_metric=args.horizon_metric,
    )


def _run_paper(runs: Sequence[Run], args: argparse.Namespace) -> int:
    """``--paper``: the runs next to a table of the paper, rows matched as paper.py says."""
    table_options = (args.by, args.horizons, args.channels, args.groups, args.plot, args.html)
    if any(table_options) or args.wandb or args.val or args.pooled:
        raise CompareError(
            "--paper takes no --by, --horizons, --channels, --groups, --plot, --html, --wandb, "
            "--val or --pooled"
        )
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
