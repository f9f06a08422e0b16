"""``compare --html``: the comparison as one self-contained web page.

The plain tests read the file; the ``browser`` ones open it in headless Chromium with no
network (tests/browser.py) and check that the tables and every Plotly figure rendered,
that the page logged no error and fetched nothing, and take a screenshot. They skip
where no Chromium is installed (.ci/run installs Debian's).
"""

from __future__ import annotations

import math
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pytest
from matplotlib.figure import Figure

from cloudlstm.compare import find_runs
from cloudlstm.compare.groups import group_runs
from cloudlstm.compare.html import _bar_figure, _horizon_figure, _number
from cloudlstm.compare.plots import _name as png_name
from cloudlstm.compare.style import close_range as _close_range
from tests.browser import Chromium, find_chromium
from tests.test_compare import (
    NO_SMAE_CELLS,
    NO_SMAE_CURVE,
    PNG_MAGIC,
    run_main,
    with_metric,
    write_run,
    write_runs_without_smae_steps,
)

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "docs" / "results" / "beijing_gpu_s23"  # 12 models x 3 seeds, no maps


def write_maps(run: Path, colour: str) -> None:
    """A stand-in for the forecast maps report.figures draws into ``figures/``."""
    fig = Figure(figsize=(3, 2), dpi=50)
    fig.add_subplot().imshow(np.linspace(0, 1, 64).reshape(8, 8), cmap=colour)
    (run / "figures").mkdir()
    fig.savefig(run / "figures" / "forecast_maps.png")


@pytest.fixture
def sweep(tmp_path) -> Path:
    """Two data sets; on synthetic, k=3 over three seeds, k=6 over one, persistence over two;
    maps in every synthetic run but one (the best, k=6)."""
    root = tmp_path / "sweep"
    for seed, mae in enumerate((1.0, 2.0, 4.0)):
        write_run(root / f"k3_{seed}", mae, seed=seed)
    write_run(root / "k6", 0.5, k=6)
    for seed, mae in enumerate((3.0, 3.2)):
        write_run(root / f"persistence_{seed}", mae, model="persistence", seed=seed)
    for name in ("k3_0", "k3_1", "k3_2", "persistence_0", "persistence_1"):
        write_maps(root / name, "viridis" if name == "k3_0" else "magma")
    write_run(root / "lstm_airq", 7.0, model="lstm", data="airq")
    write_run(root / "cloudlstm_airq", 6.0, data="airq")
    return root


class Tables(HTMLParser):
    """The page's tables by id: rows of cell texts, bold cells as markdown writes them."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.hrefs: list[str] = []
        self.images: list[str] = []
        self.scripts: list[dict[str, str | None]] = []
        self._table: list[list[str]] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(attrs.get("id", ""), [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "strong" and self._cell is not None:
            self._cell.append("**")
        elif tag == "a":
            self.hrefs.append(attrs["href"])
        elif tag == "img":
            self.images.append(attrs["src"])
        elif tag == "script":
            self.scripts.append(attrs)

    def handle_endtag(self, tag):
        if tag == "strong" and self._cell is not None:
            self._cell.append("**")
        elif tag in ("td", "th") and self._cell is not None:
            self._table[-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def parse(path: Path) -> Tables:
    tables = Tables()
    tables.feed(path.read_text(encoding="utf-8"))
    return tables


def markdown_rows(markdown: str) -> list[list[str]]:
    """The header and rows of compare's markdown table (the separator line dropped)."""
    lines = markdown.strip().splitlines()
    return [line[2:-2].split(" | ") for i, line in enumerate(lines) if i != 1]


def write_page(capsys, dirs: list[Path], path: Path, *args: str) -> list[list[str]]:
    """Run ``compare DIRS --html PATH``; the markdown table it printed."""
    code, out, err = run_main(capsys, *dirs, "--html", path, *args)
    assert code == 0 and err[-1] == f"wrote {path}", err
    return markdown_rows(out)


def test_bold_follows_each_metrics_declared_best_in_the_table_and_the_page(tmp_path, capsys):
    """The lowest MAE, the highest PSNR and SSIM, and the 80 % coverage nearest 0.8 (no
    end of it is best: it was never bold, and the rows ranked by it lowest first); a ratio
    of it to a baseline's has no nominal value, so none is bold. No declared metric is
    signed, with its best at 0."""
    runs = tmp_path / "runs"
    # model, MAE, 80 % coverage: the lowest MAE is not the coverage nearest 0.8
    for model, mae, coverage in (("a", 1.0, 0.95), ("b", 2.0, 0.83), ("c", 3.0, 0.6)):
        write_run(runs / model, mae, model=model)
        with_metric(runs / model, "coverage80", coverage)
    asked = ("--metrics", "coverage80", "mae", "psnr", "ssim")
    header, *rows = write_page(capsys, [runs], tmp_path / "report.html", *asked)
    shown = [header.index(m) for m in ("model", "coverage80", "mae", "psnr", "ssim")]
    assert [[row[i] for i in shown] for row in rows] == [  # nearest 0.8 first
        ["b", "**0.8300**", "2.000", "38.00", "0.9800"],
        ["a", "0.9500", "**1.000**", "**39.00**", "**0.9900**"],
        ["c", "0.6000", "3.000", "37.00", "0.9700"],
    ]
    assert parse(tmp_path / "report.html").tables["table-synthetic"][1:] == rows
    code, out, _ = run_main(capsys, runs, *asked, "--relative-to", "c")
    header, *rows = markdown_rows(out)
    coverage, mae = header.index("coverage80"), header.index("mae")
    assert code == 0 and [row[coverage] for row in rows] == ["1.000", "1.383", "1.583"]
    assert [row[mae] for row in rows] == ["1.000", "0.6667", "**0.3333**"]


def test_every_markdown_row_and_value_is_in_the_page(sweep, tmp_path, capsys):
    page = tmp_path / "page" / "report.html"  # a folder that does not exist yet
    header, *rows = write_page(capsys, [sweep], page)
    tables = parse(page).tables
    by_data = {"synthetic": tables["table-synthetic"], "airq": tables["table-airq"]}
    for table in by_data.values():
        assert table[0] == header  # the same columns, in the same order
    # the same cells, bold where markdown is, each data set in its own table
    for data, table in by_data.items():
        assert table[1:] == [row for row in rows if row[1] == data]
    assert sum(len(t) - 1 for t in by_data.values()) == len(rows) == 5
    assert "2.3 ± 1.5" in {cell for row in by_data["synthetic"] for cell in row}


def test_plotly_is_inlined_and_nothing_is_fetched(sweep, tmp_path, capsys):
    page = tmp_path / "report.html"
    write_page(capsys, [sweep], page)
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]+src=", text)  # no CDN script
    assert "<link" not in text  # nor style sheets
    assert len(text) > 1_000_000 and "plotly.js v" in text  # the library itself
    figures = re.findall(r'<div id="((?:horizon|bars)-[\w-]+)" class="plotly-graph-div"', text)
    assert sorted(figures) == ["bars-airq", "bars-synthetic", "horizon-airq", "horizon-synthetic"]


def test_run_links_are_relative_to_the_page(sweep, tmp_path, capsys):
    page = tmp_path / "out" / "report.html"
    write_page(capsys, [sweep], page)
    links = [h for h in parse(page).hrefs if not h.startswith("#")]
    assert len(links) == 2 * 8  # config.yaml and metrics.json of each run
    for href in links:
        assert not href.startswith(("/", "file:")), href
        assert (page.parent / unquote(href)).resolve().is_file(), href
    assert "../sweep/k6/config.yaml" in links


def test_maps_of_the_best_and_worst_run_with_maps(sweep, tmp_path, capsys):
    page = tmp_path / "report.html"
    write_page(capsys, [sweep], page)
    images = parse(page).images
    assert len(images) == 2 and all(i.startswith("data:image/png;base64,") for i in images)
    text = page.read_text(encoding="utf-8")
    # k=6 (MAE 0.5) has no maps: the best with maps is k=3's seed 0, the worst k=3's seed 2
    assert "best (of the 5 runs with maps): cloudlstm k=3, seed 0, MAE 1<br>" in text
    assert "worst (of the 5 runs with maps): cloudlstm k=3, seed 2, MAE 4<br>" in text
    assert "No run has figures/forecast_maps.png" in text  # airq's runs have none


def test_a_run_whose_metric_is_nan_is_neither_best_nor_worst(tmp_path, capsys):
    """NaN is neither less nor more than a number: sorted among the runs, it left them
    out of order, and the best run's maps were another's."""
    for model, mae in (("a", math.nan), ("b", 2.0), ("c", 1.0), ("d", 3.0)):
        write_run(tmp_path / "runs" / model, 1.0, model=model)
        with_metric(tmp_path / "runs" / model, "mae", mae)
        write_maps(tmp_path / "runs" / model, "magma")
    write_run(tmp_path / "runs" / "airq", 1.0, data="airq")  # its only run scores nothing
    with_metric(tmp_path / "runs" / "airq", "mae", math.nan)
    write_maps(tmp_path / "runs" / "airq", "magma")
    page = tmp_path / "report.html"
    write_page(capsys, [tmp_path / "runs"], page)
    text = page.read_text(encoding="utf-8")
    assert "best: c, seed 0, MAE 1<br>" in text and "worst: d, seed 0, MAE 3<br>" in text
    assert "No run with figures/forecast_maps.png scores MAE (NaN)." in text
    assert "MAE nan" not in text


def test_bars_start_near_close_values():
    # 90 to 109.8 and 15% of that span on either side
    assert _close_range([94.5, 108.9], [4.5, 0.9]) == pytest.approx((87.03, 112.77))
    assert _close_range([0.5, 2.3], [0.0, 1.5]) is None  # far apart: from 0
    assert _close_range([None, 3.0], [0.0, 0.0]) == pytest.approx((2.85, 3.15))


@pytest.mark.parametrize("bad", ["file", "folder"])
def test_unwritable_page_is_one_line_and_exit_2(sweep, tmp_path, capsys, bad):
    (tmp_path / "file").write_text("")
    (tmp_path / "folder").mkdir()
    path = tmp_path / bad / "report.html" if bad == "file" else tmp_path / bad
    code, out, err = run_main(capsys, sweep, "--html", path)
    assert code == 2 and out == "" and len(err) == 1
    assert err[0].startswith(f"compare: cannot write {path}: ")
    if bad == "file":
        assert err[0].endswith(
            f": {tmp_path / 'file'} is a file, not a folder; give a path you can write"
        )
    else:  # the fix was not said: "Is a directory"
        assert err[0].endswith(
            f": it is a folder; give a file path such as {tmp_path / 'folder' / 'compare.html'}"
        )


@pytest.mark.parametrize("name", ["k3_0/config.yaml", "k3_0/metrics.json", "notes.txt"])
def test_a_page_over_a_file_of_the_runs_is_refused_and_leaves_it(sweep, capsys, name):
    """A run's config.yaml or metrics.json, or a file in a folder given, given as --html:
    replaced by the page, the run's record would be lost."""
    (sweep / "notes.txt").write_text("seeds 0-2\n")
    path = sweep / name
    before = path.read_bytes()
    code, out, err = run_main(capsys, sweep, "--html", path)
    assert code == 2 and out == ""
    assert err == [
        f"compare: cannot write {path}: it is a file of the runs compared, which the page "
        f"would replace; give the page a name of its own, such as {path.parent / 'compare.html'}"
    ]
    assert path.read_bytes() == before
    # an earlier page among the runs, as a multirun's compare.html, is written over
    page = sweep / "compare.html"
    page.write_text("old page")
    write_page(capsys, [sweep], page)
    assert page.read_text() != "old page"


def test_rows_without_the_curves_metric_have_no_curve_and_are_named(tmp_path, capsys):
    """Such a row failed the whole page (exit 2) where the table alone showed its cells
    empty: it is left out of the horizon figure, which names it, as stderr does."""
    write_runs_without_smae_steps(tmp_path / "runs")
    page = tmp_path / "report.html"
    code, out, err = run_main(capsys, tmp_path / "runs", "--horizon-metric", "smae", "--html", page)
    assert code == 0 and out.startswith("| model |")
    assert err == [NO_SMAE_CELLS, NO_SMAE_CURVE, f"wrote {page}"]
    text = page.read_text(encoding="utf-8")
    for data in ("synthetic", "airq"):
        assert f'id="horizon-{data}"' in text
    assert text.count("no curve, without per-step smae results: lstm (n=1)") == 2


def write_long_labels(root: Path) -> None:
    """Four rows of two seeds whose labels name two long settings each, as a sweep over
    data and trainer keys does, and persistence."""
    for points in (12, 24):
        for epochs in (3, 6):
            for seed in (0, 1):
                keys = {"num_points_limit_train_batches": points, "max_epochs_of_training": epochs}
                mae = 1 + points / 10 + epochs / 5 + seed / 10
                write_run(root / f"{points}_{epochs}_{seed}", mae, seed=seed, model_keys=keys)
    for seed in (0, 1):
        write_run(root / f"p{seed}", 3.0 + seed / 10, model="persistence", seed=seed)


def test_long_labels_are_on_the_lines_of_the_png_figures(tmp_path):
    """The legend names and the bars' labels were one line each: a legend as wide as the
    longest label narrowed the curves, and labels under the bars squashed them to a strip."""
    write_long_labels(tmp_path)
    groups = group_runs(find_runs([tmp_path]))
    assert max(len(g.label) for g in groups) > 60
    curves = _horizon_figure(groups, "mae", "synthetic").data
    legend = [t.name for t in curves if t.showlegend is not False]  # not the bands
    bars = list(_bar_figure(groups, "mae", "synthetic").data[0].x)
    for names in (legend, bars):
        # Plotly breaks lines at <br> only
        assert sorted(n.replace("<br>", "\n") for n in names) == sorted(map(png_name, groups))
    assert any("<br>" in name for name in legend)


# --- in a browser ---------------------------------------------------------------------------

CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (.ci/run installs it: apt-get install chromium)"
)

# How many table rows and rendered Plotly figures the page shows, per element id.
DOM_FACTS = """({
  rows: Object.fromEntries(Array.from(document.querySelectorAll("table.sortable"))
    .map((t) => [t.id, t.tBodies[0].rows.length])),
  plots: Object.fromEntries(Array.from(document.querySelectorAll(".plotly-graph-div"))
    .map((d) => [d.id, d.querySelectorAll(".main-svg").length])),
  traces: Object.fromEntries(Array.from(document.querySelectorAll(".plotly-graph-div"))
    .map((d) => [d.id, d.querySelectorAll(".trace").length])),
})"""


# The stroke dashes Plotly drew for the line of one model in the Beijing horizon figure.
DASHES = """(() => {
  const div = document.getElementById("horizon-beijing");
  const i = div.data.findIndex((trace) => (trace.name || "").startsWith("MODEL ("));
  const trace = div.querySelectorAll(".scatterlayer .trace")[i];
  return trace.querySelector("path.js-line").style.strokeDasharray;
})()"""


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    browser = Chromium(CHROMIUM, tmp_path_factory.mktemp("chromium-profile"))
    yield browser
    browser.close()


def open_page(chromium: Chromium, page: Path) -> dict:
    """Load the page; assert it logged no error and fetched nothing; its DOM facts."""
    load = chromium.load(page.as_uri())
    assert load.errors == []
    assert [url for url in load.requests if not url.startswith(("file:", "data:"))] == []
    return chromium.evaluate(DOM_FACTS)


def assert_screenshot(chromium: Chromium, path: Path) -> np.ndarray:
    """A PNG of the page that is not blank: dark text and coloured lines on white."""
    from matplotlib.image import imread

    chromium.screenshot(path)
    assert path.read_bytes()[:8] == PNG_MAGIC
    image = imread(path)[..., :3]
    assert image.shape[0] > 1000 and image.shape[1] == 1400
    assert image.std() > 0.05  # not one colour
    coloured = (image.max(axis=2) - image.min(axis=2)) > 0.3
    assert coloured.mean() > 0.002  # curves and bars, not only black text
    return image


@pytest.mark.browser
@needs_chromium
def test_page_renders_in_chromium(sweep, tmp_path, capsys, chromium):
    page = tmp_path / "report.html"
    write_page(capsys, [sweep], page)
    facts = open_page(chromium, page)
    assert facts["rows"] == {
        "table-airq": 2,
        "runs-airq": 2,
        "table-synthetic": 3,
        "runs-synthetic": 6,
    }
    assert set(facts["plots"]) == {
        "horizon-airq",
        "bars-airq",
        "horizon-synthetic",
        "bars-synthetic",
    }
    assert all(count >= 1 for count in facts["plots"].values()), facts["plots"]
    assert all(count >= 1 for count in facts["traces"].values()), facts["traces"]
    assert chromium.evaluate("document.querySelectorAll('.maps img').length") == 2
    assert chromium.evaluate(
        "Array.from(document.querySelectorAll('.maps img')).every((i) => i.naturalWidth > 0)"
    )
    assert_screenshot(chromium, tmp_path / "report.png")


@pytest.mark.browser
@needs_chromium
def test_published_results_page_sorts_by_a_clicked_header(tmp_path, capsys, chromium):
    page = tmp_path / "beijing.html"
    header, *rows = write_page(capsys, [PUBLISHED], page)
    facts = open_page(chromium, page)
    assert facts["rows"] == {"table-beijing": len(rows), "runs-beijing": 3 * len(rows)}
    assert facts["plots"].keys() == {"horizon-beijing", "bars-beijing"}
    assert all(count >= 1 for count in facts["plots"].values())
    # a dozen lines and bands; the persistence reference dashed, the best model solid
    assert facts["traces"]["horizon-beijing"] >= len(rows)
    assert chromium.evaluate(DASHES.replace("MODEL", "persistence")) not in ("", None)
    assert chromium.evaluate(DASHES.replace("MODEL", rows[0][0])) in ("", None)
    mae = header.index("mae")
    column = f"document.querySelectorAll('#table-beijing th')[{mae}]"
    first_model = "document.querySelector('#table-beijing tbody tr').cells[0].textContent"
    chromium.evaluate(f"{column}.click()")  # ascending: the best MAE first, as printed
    assert chromium.evaluate(first_model) == rows[0][0]
    chromium.evaluate(f"{column}.click()")  # descending: the worst first
    assert chromium.evaluate(first_model) == rows[-1][0]
    params = header.index("params")
    chromium.evaluate(f"document.querySelectorAll('#table-beijing th')[{params}].click()")
    assert chromium.evaluate(first_model) == "persistence"  # 0 parameters
    assert_screenshot(chromium, tmp_path / "beijing.png")


# Each figure's plot area and whole size, in pixels.
PLOT_AREAS = """Object.fromEntries(Array.from(document.querySelectorAll(".plotly-graph-div"))
  .map((d) => [d.id, [d._fullLayout._size.w, d._fullLayout._size.h,
                      d._fullLayout.width, d._fullLayout.height]]))"""


@pytest.mark.browser
@needs_chromium
def test_long_labels_leave_the_figures_room(tmp_path, capsys, chromium):
    """Unwrapped, the legend took four fifths of the horizon figure's width and the bars'
    labels left the bars a twelfth of their figure."""
    write_long_labels(tmp_path / "runs")
    page = tmp_path / "report.html"
    write_page(capsys, [tmp_path / "runs"], page)
    open_page(chromium, page)
    areas = chromium.evaluate(PLOT_AREAS)
    width, _, figure_width, _ = areas["horizon-synthetic"]
    assert width > 0.4 * figure_width, areas
    width, height, figure_width, figure_height = areas["bars-synthetic"]
    assert width * height > 0.2 * figure_width * figure_height, areas
    assert_screenshot(chromium, tmp_path / "long_labels.png")


def test_sort_keys_are_numbers_javascript_reads():
    """An infinite PSNR (an exact forecast) sorts as a number: JavaScript's Number() reads
    "Infinity", not Python's "inf", which would make its whole column sort as text."""
    assert [_number(v) for v in (1.5, 3, math.inf, -math.inf)] == [
        "1.5",
        "3",
        "Infinity",
        "-Infinity",
    ]
    assert _number(math.nan) == _number(None) == _number(True) == ""
