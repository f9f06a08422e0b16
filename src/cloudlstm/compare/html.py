"""The comparison as one self-contained web page (``--html PATH``).

One HTML file that needs no network: per data set the table (the markdown table's rows and
columns, sortable by clicking a header), the horizon curves with ± std bands over seeds
and a dashed persistence reference, the bar chart with std error bars, the runs with links
to their ``config.yaml`` and ``metrics.json``, and the forecast maps of the best and the
worst run. The figures are Plotly figures whose JavaScript is inlined once in the page's
head, so the page works offline (and from an e-mail attachment).
"""

from __future__ import annotations

import base64
import html
import math
import os
import re
import textwrap
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from cloudlstm.compare.cells import Column, Stat
from cloudlstm.compare.formats import cell_text, significant
from cloudlstm.compare.groups import Group, changes_note, code_summary, levels_note, machine_note
from cloudlstm.compare.runs import CompareError, Run
from cloudlstm.compare.style import REFERENCE, close_range, is_reference, label_lines
from cloudlstm.compare.table import best_rows, better_of, data_sets, from_best, ranked
from cloudlstm.errors import replacing, why_not_written
from cloudlstm.rundir.layout import CONFIG_FILE, FIGURES_DIR, METRICS_FILE
from cloudlstm.viz._common import COLOURS, REFERENCE_COLOUR

MAPS = Path(FIGURES_DIR) / "forecast_maps.png"  # written by report.figures.draw_figures
# the colours of the --plot figures (no two alike; the grey is the reference's); past them,
# lines are dotted, then dash-dotted ("dash" is the reference's)
LINES = ("solid", "dot", "dashdot")
PLOT_CONFIG = {"displaylogo": False, "responsive": True}


def write_html(
    groups: Sequence[Group],
    table: Sequence[Column],
    path: Path,
    *,
    rank_metric: str,
    curve_metric: str,
    sources: Sequence[Path],
) -> Path:
    """Write the page for ``groups`` and their ``table`` (rows ranked by ``rank_metric``,
    as :func:`cloudlstm.compare.table.build_table` orders them) to ``path``.

    ``curve_metric`` is the metric of the horizon curves and bars (``--horizon-metric``);
    ``sources`` are the folders given on the command line, named in the page's header.

    Raises:
        CompareError: ``path`` cannot be written.
    """
    path = Path(path)
    if path.is_dir():  # checked first: the page would be built only to fail at the rename
        raise CompareError(
            f"cannot write {path}: it is a folder; give a file path such as {path / 'compare.html'}"
        )
    _check_not_an_input(path, groups, sources)
    rows = ranked(groups, rank_metric)  # the table's row order
    datasets = list(dict.fromkeys(g.data for g in rows))
    sections = [
        _section(data, rows, table, rank_metric, curve_metric, path.parent) for data in datasets
    ]
    page = _page(sections, datasets, rows, sources)
    try:
        with replacing(path) as part:
            part.write_text(page, encoding="utf-8")
    except OSError as err:
        reason = why_not_written(path.parent, err)
        raise CompareError(f"cannot write {path}: {reason}; give a path you can write") from None
    return path


def _check_not_an_input(path: Path, groups: Sequence[Group], sources: Sequence[Path]) -> None:
    """Refuse a ``path`` that is a file of the runs compared: one under a folder given or a
    run's folder (its ``metrics.json``, ``config.yaml``, a checkpoint, a sweep's
    ``multirun.yaml``), which the page would replace, losing the run's record. An earlier
    page there (``.html``, as the multirun's ``compare.html``) is written over."""
    if not path.is_file() or path.suffix.lower() in (".html", ".htm"):
        return
    target = path.resolve()
    folders = [Path(s).resolve() for s in sources]
    folders += [run.path.resolve() for group in groups for run in group.runs]
    if any(target == folder or target.is_relative_to(folder) for folder in folders):
        raise CompareError(
            f"cannot write {path}: it is a file of the runs compared, which the page would "
            f"replace; give the page a name of its own, such as {path.parent / 'compare.html'}"
        )


def _section(
    data: str,
    rows: Sequence[Group],
    table: Sequence[Column],
    rank_metric: str,
    curve_metric: str,
    base: Path,
) -> str:
    """One data set: table, horizon curves, bars, runs and forecast maps."""
    members = [g for g in rows if g.data == data]
    indices = [i for i, g in enumerate(rows) if g.data == data]
    slug = _slug(data)
    horizon = _horizon_figure(members, curve_metric, data)
    bars = _bar_figure(members, curve_metric, data)
    return "\n".join(
        [
            f'<section id="data-{slug}">',
            f"<h2>{html.escape(data)}</h2>",
            _table_html(table, indices, f"table-{slug}"),
            '<div class="figures">',
            _figure_html(horizon, f"horizon-{slug}"),
            _figure_html(bars, f"bars-{slug}"),
            "</div>",
            f"<h3>Forecast maps: best and worst run by {rank_metric.upper()}</h3>",
            _maps_html(members, rank_metric),
            f"<h3>Runs ({sum(len(g.runs) for g in members)})</h3>",
            _runs_html(members, rank_metric, base, f"runs-{slug}"),
            "</section>",
        ]
    )


def _slug(text: str) -> str:
    """An HTML id made of ``text``: data set names may hold dots or spaces."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", text)


# --- tables --------------------------------------------------------------------------------


def _table_html(table: Sequence[Column], indices: Sequence[int], table_id: str) -> str:
    """The rows ``indices`` of the table, cells as markdown shows them, best ones bold."""
    data = data_sets(table)
    best = [best_rows(column, data) for column in table]
    head = "".join(_th(c.name) for c in table)
    body = []
    for i in indices:
        cells = "".join(
            _td(cell_text(c.cells[i], " ± "), _sort_key(c.cells[i]), i in b)
            for c, b in zip(table, best, strict=True)
        )
        body.append(f"<tr>{cells}</tr>")
    return _sortable(table_id, head, body)


def _runs_html(groups: Sequence[Group], metric: str, base: Path, table_id: str) -> str:
    """Every run of ``groups``: its setting, seed, ``metric`` and links to its files."""
    head = "".join(_th(name) for name in ("setting", "seed", metric, "run")) + "<th>files</th>"
    body = []
    for group in groups:
        for run in group.runs:
            value = run.overall.get(metric)
            links = " · ".join(
                f'<a href="{_href(run.path / name, base)}">{name}</a>'
                for name in (CONFIG_FILE, METRICS_FILE)
                if (run.path / name).is_file()
            )
            body.append(
                "<tr>"
                + _td(group.label, group.label)
                + _td(run.value("seed"), _number(run.keys.get("seed")))
                + _td("" if value is None else significant(value), _number(value))
                + _td(str(run.path), str(run.path))
                + f"<td>{links}</td></tr>"
            )
    return _sortable(table_id, head, body)


def _sortable(table_id: str, head: str, body: Sequence[str]) -> str:
    return (
        f'<table class="sortable" id="{table_id}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _th(name: str) -> str:
    """A header cell that sorts its column when clicked (or on Enter, for keyboards)."""
    return f'<th tabindex="0" title="sort">{html.escape(name)}</th>'


def _td(text: str, key: str, bold: bool = False) -> str:
    shown = f"<strong>{html.escape(text)}</strong>" if bold else html.escape(text)
    return f'<td data-sort="{html.escape(key)}">{shown}</td>'


def _sort_key(cell: Any) -> str:
    """What a column sorts by: the mean of a ``mean ± std`` cell, numbers, text."""
    if isinstance(cell, Stat):
        return _number(cell.mean)
    if isinstance(cell, str):
        return cell
    return _number(cell)


def _number(value: Any) -> str:
    """A number for ``data-sort`` as JavaScript's ``Number()`` reads it ("Infinity", not
    Python's "inf", for the PSNR of an exact forecast); "" (sorted last) for missing values
    and NaN."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return ""
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def _href(target: Path, base: Path) -> str:
    """A link to ``target``: relative to the page's folder, so that the page and the runs
    can move together; a file URI where no relative path exists (another drive)."""
    try:
        relative = os.path.relpath(target.resolve(), base.resolve())
    except ValueError:
        return target.resolve().as_uri()
    return quote(Path(relative).as_posix())


# --- figures -------------------------------------------------------------------------------


def _figure_html(fig: go.Figure, div_id: str) -> str:
    # plotly.js is inlined once in the page's head; each figure brings only its data
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=PLOT_CONFIG)


def _horizon_figure(groups: Sequence[Group], metric: str, data: str) -> go.Figure:
    """The metric at each forecast step, one line per group with a ± std band over seeds;
    the persistence forecast dashed, as the line to beat."""
    fig, longest = go.Figure(), 0
    for group, (colour, dash) in zip(groups, _styles(groups), strict=True):
        if not group.has_curve(metric):  # named below the axes instead
            continue
        curve = group.curve(metric)
        steps = list(range(1, len(curve) + 1))
        longest = max(longest, len(steps))
        means = [s.mean for s in curve]
        stds = [s.std for s in curve]
        name = _name(group)
        if len(group.runs) > 1 and not all(math.isnan(s) or s == 0 for s in stds):
            fig.add_trace(_band(steps, means, stds, colour, name))
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=means,
                name=name,
                legendgroup=name,
                mode="lines+markers",
                marker={"size": 5},
                line={"color": colour, "dash": dash, "width": 2},
                customdata=[0.0 if math.isnan(s) else s for s in stds],
                hovertemplate=f"{name}<br>step %{{x}}: %{{y:.4g}} "
                "± %{customdata:.2g}<extra></extra>",
            )
        )
    fig.update_layout(
        title=f"{data}: {metric.upper()} against forecast step (± std over seeds)",
        xaxis_title="forecast step",
        yaxis_title=metric.upper(),
        height=480,
        # a line and its band form a legend group: no gap between groups, or a dozen
        # settings overflow the legend
        legend={"font": {"size": 11}, "tracegroupgap": 0},
        template="plotly_white",
        hovermode="closest",
    )
    fig.update_xaxes(dtick=1 if longest <= 24 else None)  # whole steps
    if missing := [g for g in groups if not g.has_curve(metric)]:
        _note_missing(fig, missing, metric)
    return fig


def _name(group: Group) -> str:
    """A row's name in a legend or under its bar: its label on the lines of the PNG
    figures' (:func:`~cloudlstm.compare.style.label_lines`), which Plotly breaks at <br>
    (it wraps none: a long label narrowed the curves and squashed the bars), and its runs."""
    lines = [html.escape(line, quote=False) for line in label_lines(group.label)]
    return f"{'<br>'.join(lines)} (n={len(group.runs)})"


def _note_missing(fig: go.Figure, groups: Sequence[Group], metric: str) -> None:
    """Name below the axes the rows that have no curve: the page travels without the
    command's output, and a row absent from the figure would look forgotten."""
    names = ", ".join(f"{g.label} (n={len(g.runs)})" for g in groups)
    # Plotly does not wrap an annotation's text: lines of the figure's width
    lines = textwrap.wrap(f"no curve, without per-step {metric} results: {names}", 90)
    fig.add_annotation(
        text="<br>".join(map(html.escape, lines)),
        xref="paper",
        yref="paper",
        x=0,
        y=0,
        yshift=-55,  # below the tick labels and the axis title
        xanchor="left",
        yanchor="top",
        showarrow=False,
        font={"size": 11, "color": "#555"},
    )
    fig.update_layout(height=480 + 16 * len(lines), margin={"b": 80 + 16 * len(lines)})


def _band(
    steps: Sequence[int], means: Sequence[float], stds: Sequence[float], colour: str, name: str
) -> go.Scatter:
    """A filled ± std band, toggled with its line (same legend group)."""
    upper = [m + s for m, s in zip(means, stds, strict=True)]
    lower = [m - s for m, s in zip(means, stds, strict=True)]
    return go.Scatter(
        x=[*steps, *reversed(steps)],
        y=[*upper, *reversed(lower)],
        mode="lines",  # Plotly's default for few points adds markers at the corners
        fill="toself",
        fillcolor=_transparent(colour, 0.15),
        line={"width": 0},
        legendgroup=name,
        showlegend=False,
        hoverinfo="skip",
    )


def _bar_figure(groups: Sequence[Group], metric: str, data: str) -> go.Figure:
    """The overall metric per group with ± std error bars; the y-axis starts near the
    values, not at 0, when they are close (otherwise all bars look alike)."""
    stats = [g.metric(metric) or Stat(math.nan, math.nan) for g in groups]
    means = [None if math.isnan(s.mean) else s.mean for s in stats]
    stds = [0.0 if math.isnan(s.std) else s.std for s in stats]
    colours = [colour for colour, _ in _styles(groups)]
    fig = go.Figure(
        go.Bar(
            x=[_name(g) for g in groups],
            y=means,
            error_y={"type": "data", "array": stds, "visible": True},
            marker_color=colours,
            hovertemplate="%{x}<br>%{y:.4g} ± %{error_y.array:.2g}<extra></extra>",
        )
    )
    reference = [s.mean for g, s in zip(groups, stats, strict=True) if is_reference(g)]
    if reference and not math.isnan(reference[0]):
        fig.add_hline(
            y=reference[0],
            line_dash="dash",
            line_color=REFERENCE_COLOUR,
            annotation_text=REFERENCE,
            annotation_position="top left",
            annotation_bgcolor="rgba(255, 255, 255, 0.8)",
        )
    fig.update_layout(
        title=f"{data}: {metric.upper()} (± std over seeds)",
        yaxis_title=metric.upper(),
        height=480,
        template="plotly_white",
        showlegend=False,
    )
    if span := close_range(means, stds):
        fig.update_yaxes(range=span)
        # said in the title: bars cut off at the bottom exaggerate the differences
        fig.update_layout(title=f"{data}: {metric.upper()} (± std over seeds; y-axis not from 0)")
    return fig


def _styles(groups: Sequence[Group]) -> list[tuple[str, str]]:
    """Colour and line dash of each group, the same in both figures: the reference grey
    and dashed, the others in turn through the colours, then through them again dotted."""
    styles, i = [], 0
    for group in groups:
        if is_reference(group):
            styles.append((REFERENCE_COLOUR, "dash"))
            continue
        styles.append((COLOURS[i % len(COLOURS)], LINES[i // len(COLOURS) % len(LINES)]))
        i += 1
    return styles


def _transparent(colour: str, alpha: float) -> str:
    """``#rrggbb`` -> ``rgba(r, g, b, alpha)``."""
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r}, {g}, {b}, {alpha})"


# --- forecast maps -------------------------------------------------------------------------


def _maps_html(groups: Sequence[Group], metric: str) -> str:
    """The forecast maps of the best and the worst run by ``metric``, embedded as PNG.

    Runs trained with ``report.figures=false`` have none, so the best and worst are taken
    among the runs that have maps, and the caption says how many those are.
    """
    runs = [(g, r) for g in groups for r in g.runs if metric in r.overall]
    with_maps = [(g, r) for g, r in runs if (r.path / MAPS).is_file()]
    if not with_maps:
        return f'<p class="note">No run has {MAPS} (trained with report.figures=false).</p>'
    runs, with_maps = _scoring(runs, metric), _scoring(with_maps, metric)
    if not with_maps:
        return f'<p class="note">No run with {MAPS} scores {metric.upper()} (NaN).</p>'
    better = better_of(metric)
    better = "min" if better is None else better
    with_maps.sort(key=lambda pair: from_best(better, pair[1].overall[metric]))
    picks = [("best", *with_maps[0])]
    if len(with_maps) > 1:
        picks.append(("worst", *with_maps[-1]))
    note = "" if len(with_maps) == len(runs) else f" (of the {len(with_maps)} runs with maps)"
    return '<div class="maps">' + "".join(_map(*p, metric, note) for p in picks) + "</div>"


def _scoring(runs: Sequence[tuple[Group, Run]], metric: str) -> list[tuple[Group, Run]]:
    """The runs whose ``metric`` is not NaN (nothing scored): NaN is neither better nor
    worse than a number, and sorted among them leaves them out of order."""
    return [(g, r) for g, r in runs if not math.isnan(r.overall[metric])]


def _map(which: str, group: Group, run: Run, metric: str, note: str) -> str:
    image = base64.b64encode((run.path / MAPS).read_bytes()).decode("ascii")
    caption = (
        f"{which}{note}: {group.label}, seed {run.value('seed') or '?'}, "
        f"{metric.upper()} {run.overall[metric]:.4g}"
    )
    return (
        f'<figure class="{which}"><img alt="forecast maps, {which} run" '
        f'src="data:image/png;base64,{image}">'
        f"<figcaption>{html.escape(caption)}<br><code>{html.escape(str(run.path))}</code>"
        "</figcaption></figure>"
    )


# --- page ----------------------------------------------------------------------------------


def _page(
    sections: Sequence[str],
    datasets: Sequence[str],
    groups: Sequence[Group],
    sources: Sequence[Path],
) -> str:
    runs = sum(len(g.runs) for g in groups)
    where = ", ".join(str(s) for s in sources)
    contents = " · ".join(f'<a href="#data-{_slug(d)}">{html.escape(d)}</a>' for d in datasets)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>compare: {html.escape(where)}</title>
<style>{STYLE}</style>
<script>{get_plotlyjs()}</script>
</head>
<body>
<h1>Comparison of {runs} runs in {len(groups)} settings</h1>
<p class="note">From <code>{html.escape(where)}</code>, {datetime.now():%Y-%m-%d %H:%M}.
Cells are <em>mean ± std</em> over the runs (seeds) of a setting: sample std (ddof=1) of
each run's overall test mean; bold: the best of the data set. Click a header to sort.</p>
{_code_note(groups)}{_row_notes(groups)}<nav>{contents}</nav>
{"".join(sections)}
<script>{SORT_SCRIPT}{RESIZE_SCRIPT}</script>
</body>
</html>
"""


def _row_notes(groups: Sequence[Group]) -> str:
    """The rows whose runs trained on different machines (their times mix), or whose runs'
    settings changed while they trained, as notes."""
    rows = [(group.label, group.runs) for group in groups]
    notes = [note for note in (machine_note(rows), changes_note(rows), levels_note(groups)) if note]
    return "".join(f'<p class="note">{html.escape(note)}</p>\n' for note in notes)


def _code_note(groups: Sequence[Group]) -> str:
    """The code the runs came from (their metrics.json's ``provenance``), as a note."""
    summary = code_summary(groups)
    return "" if summary is None else f'<p class="note">Code: {html.escape(summary)}.</p>\n'


STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { border-bottom: 1px solid #ccc; margin-top: 1.5em; }
.note { color: #555; font-size: 0.9em; max-width: 60em; }
table.sortable { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1em; }
table.sortable th, table.sortable td { border: 1px solid #ddd; padding: 0.25em 0.6em; }
table.sortable td { text-align: right; white-space: nowrap; }
table.sortable td:first-child { text-align: left; }
table.sortable th { background: #f3f3f3; cursor: pointer; user-select: none; }
table.sortable th[aria-sort="ascending"]::after { content: " ▲"; }
table.sortable th[aria-sort="descending"]::after { content: " ▼"; }
table.sortable tbody tr:nth-child(even) { background: #fafafa; }
.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(36em, 1fr)); gap: 1em; }
.figures > div { min-width: 0; }
.maps { display: flex; flex-wrap: wrap; gap: 1em; }
.maps figure { margin: 0; flex: 1 1 30em; }
.maps img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.85em; color: #444; }
"""

# A figure is drawn as soon as its script is parsed, when the figures after it are not laid
# out yet (it would be as wide as the whole row, and overflow): resize them once all are.
RESIZE_SCRIPT = """
window.addEventListener("load", () => {
  document.querySelectorAll(".plotly-graph-div").forEach((div) => Plotly.Plots.resize(div));
});
"""

# Sorts a table's rows by the clicked column's data-sort values: as numbers when they all
# are (group keys such as model.k are text cells holding numbers), else as text; empty
# cells last in either direction.
SORT_SCRIPT = """
function sortTable(table, th) {
  const column = Array.from(th.parentNode.children).indexOf(th);
  const ascending = th.getAttribute("aria-sort") !== "ascending";
  table.querySelectorAll("th").forEach((h) => h.removeAttribute("aria-sort"));
  th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  const body = table.tBodies[0];
  const key = (row) => row.cells[column].dataset.sort;
  const numeric = Array.from(body.rows).every((r) => key(r) === "" || !isNaN(Number(key(r))));
  const rows = Array.from(body.rows).sort((a, b) => {
    const x = key(a), y = key(b);
    if (x === "" || y === "") return (x === "") - (y === "");
    const order = numeric ? Number(x) - Number(y) : x.localeCompare(y);
    return ascending ? order : -order;
  });
  rows.forEach((row) => body.appendChild(row));
}
document.querySelectorAll("table.sortable th").forEach((th) => {
  const table = th.closest("table");
  th.addEventListener("click", () => sortTable(table, th));
  th.addEventListener("keydown", (e) => { if (e.key === "Enter") sortTable(table, th); });
});
"""
