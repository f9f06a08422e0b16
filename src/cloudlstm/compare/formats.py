"""The table as text: markdown, LaTeX and CSV."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from cloudlstm.compare.cells import Column, Diff, Stat
from cloudlstm.compare.table import best_rows, data_sets

ROUND_OFF = 1e-6  # a std below this fraction of the mean: float32 round-off (eps 6e-8)


def cell_text(cell: Any, pm: str, escape: Callable[[str], str] = str) -> str:
    """A cell for markdown, LaTeX or HTML: ``mean ± std`` (mean alone for one run), 1,234.5."""
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
    # Equal values summed in another order differ in the last bits (a deterministic model's
    # seeds, whose metrics are float32 sums over other point orders): such a std is
    # round-off, not spread, and would print 9 to 17 decimals.
    if math.isnan(stat.std) or stat.std <= ROUND_OFF * abs(stat.mean):
        return significant(stat.mean)
    decimals = max(0, 1 - math.floor(math.log10(stat.std)))
    return f"{stat.mean:.{decimals}f}{pm}{stat.std:.{decimals}f}"


def significant(value: float, digits: int = 4) -> str:
    """``value`` to ``digits`` significant digits in fixed point, trailing zeros kept: 3.840,
    not ``:.4g``'s 3.84 beside a column's 3.769, nor its 1.454e+04 for 14,540."""
    if not math.isfinite(value) or value == 0:
        return f"{value:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    # rounding up may add a digit (9.9996 -> 10.000): keep the count of significant digits
    if decimals and len(text.lstrip("-").replace(".", "").lstrip("0")) > digits:
        text = f"{value:.{decimals - 1}f}"
    return text


def _grid(
    columns: Sequence[Column],
    pm: str,
    bold: Callable[[str], str],
    escape: Callable[[str], str] = str,
) -> list[list[str]]:
    """Header and rows of formatted text, the best cells passed through ``bold``."""
    data = data_sets(columns)
    cells = [[cell_text(cell, pm, escape) for cell in column.cells] for column in columns]
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


# LaTeX's special characters in text (a channel named "o3^~{x}", a path with "$"), each as
# the command that prints it; one pass, so that no replacement is replaced again
_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def _latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(char, char) for char in text)


def plain_table(
    columns: Sequence[Column], missing: Any = None
) -> tuple[list[str], list[list[Any]]]:
    """Header and rows of plain numbers (CSV, W&B tables): a column of mean ± std becomes
    ``<name>_mean`` and ``<name>_std``; ``missing`` stands for absent values (a metric the
    row's runs lack, a single run's std)."""
    # a metric column splits even when all its cells are empty, so the header stays the same
    split = [
        column.better is not None or any(isinstance(cell, Stat) for cell in column.cells)
        for column in columns
    ]
    header: list[str] = []
    for column, two in zip(columns, split, strict=True):
        header += [f"{column.name}_mean", f"{column.name}_std"] if two else [column.name]
    rows: list[list[Any]] = [[] for _ in columns[0].cells]
    for column, two in zip(columns, split, strict=True):
        for row, cell in zip(rows, column.cells, strict=True):
            if two:  # None: a metric the row's runs lack
                row += [missing] * 2 if cell is None else [cell.mean, _plain(cell.std, missing)]
            else:
                row.append(_plain(cell, missing))
    return header, rows


def write_csv(columns: Sequence[Column], out: TextIO) -> None:
    """Plain numbers (:func:`plain_table`), empty where a value is missing."""
    header, rows = plain_table(columns, missing="")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerows([header, *rows])


def _plain(value: Any, missing: Any) -> Any:
    """``missing`` for missing values and a single run's std; whole means without ``.0``."""
    if isinstance(value, Diff):
        return value.value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    return int(value) if isinstance(value, float) and value.is_integer() else value
