"""Comparison table of finished runs: ``python -m cloudlstm.cli.compare <dir> [<dir> ...]``.

Finds every ``metrics.json`` under the given directories (a multirun folder, ``outputs/``,
single run dirs), and prints one row per run: model, data, parameters, epochs, training time
and the test metrics as ``mean ± std`` across test instances (the paper's tables), sorted by
data set, then MAE. ``--format csv`` writes plain numbers instead of markdown.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

from cloudlstm.metrics import METRICS

COLUMNS = ("model", "data", "params", "epochs", "train_s", *METRICS)


def find_runs(roots: list[Path]) -> list[dict[str, Any]]:
    """One row per ``metrics.json`` with test results under ``roots``."""
    rows = []
    for root in roots:
        if not root.exists():
            raise FileNotFoundError(f"compare: {root} does not exist.")
        paths = [root] if root.is_file() else sorted(root.rglob("metrics.json"))
        for path in paths:
            rows.extend(_row(path))
    rows.sort(key=lambda r: (r["data"], r["mae"][0]))
    return rows


def _row(path: Path) -> list[dict[str, Any]]:
    results = json.loads(path.read_text())
    test = results.get("test")
    if not test:
        return []
    run = results.get("run", {})
    settings = [t for t in run.get("tags", []) if "=" in t]  # k=9, cell=lstm, ...
    row = {
        "model": " ".join([run.get("model", path.parent.name), *settings]),
        "data": run.get("data", results.get("data", {}).get("name", "?")),
        "params": results.get("num_params"),
        "epochs": results.get("epochs"),
        "train_s": results.get("train_time_s"),
        "run_dir": str(path.parent),
    }
    for name in METRICS:
        stats = test["overall"][name]
        row[name] = (stats["mean"], stats["std"])
    return [row]


def to_markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
    ]
    for row in rows:
        cells = [
            row["model"],
            row["data"],
            f"{row['params']:,}" if row["params"] is not None else "",
            "" if row["epochs"] is None else str(row["epochs"]),
            "" if row["train_s"] is None else f"{row['train_s']:.0f}",
        ]
        cells += [f"{row[m][0]:.3g} ± {row[m][1]:.2g}" for m in METRICS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_csv(rows: list[dict[str, Any]], out) -> None:
    writer = csv.writer(out)
    header = [*COLUMNS[:5], *(f"{m}_{s}" for m in METRICS for s in ("mean", "std")), "run_dir"]
    writer.writerow(header)
    for row in rows:
        metrics = [v for m in METRICS for v in row[m]]
        writer.writerow([row[c] for c in COLUMNS[:5]] + metrics + [row["run_dir"]])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="run or multirun directories")
    parser.add_argument("--format", choices=("markdown", "csv"), default="markdown")
    args = parser.parse_args(argv)
    rows = find_runs(args.dirs)
    if not rows:
        print(f"compare: no metrics.json with test results under {args.dirs}", file=sys.stderr)
        return 1
    if args.format == "csv":
        write_csv(rows, sys.stdout)
    else:
        print(to_markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
