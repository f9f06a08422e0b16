"""The README and docs/*.md: no development-history words, a short README, working links."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]

HISTORY = re.compile(
    r"\bstop \d+\b|\bissue \d+\b|the issue's|\blent\b|development session|\bsession\b",
    re.IGNORECASE,
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def _prose_lines(text):
    """Lines outside fenced code blocks."""
    inside = False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            inside = not inside
            continue
        if not inside:
            yield line


def slug(heading):
    """GitHub's anchor of a heading: lowercase, punctuation but '-' dropped, spaces to '-'."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    found = set()
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            found.add(slug(m.group(1)))
    return found


def ids(paths):
    return [str(p.relative_to(ROOT)) for p in paths]


@pytest.mark.parametrize("path", DOCS, ids=ids(DOCS))
def test_no_development_history(path):
    hits = [
        f"{i}: {line.strip()}"
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert not hits, "development-history words:\n" + "\n".join(hits)


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines (at most 300)"


@pytest.mark.parametrize("path", DOCS, ids=ids(DOCS))
def test_relative_links_resolve(path):
    broken = []
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue  # http:, https:, mailto:
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            if not dest.exists():
                broken.append(f"{target}: no file {file_part}")
                continue
            if anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
                broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, "broken links:\n" + "\n".join(broken)


CODE_PATH = re.compile(r"`((?:[\w.-]+/)+[\w.-]+\.py)`")
#: where a module path named in the docs may start
CODE_ROOTS = [ROOT, ROOT / "src" / "cloudlstm", ROOT / "src"]


@pytest.mark.parametrize("path", DOCS, ids=ids(DOCS))
def test_module_paths_named_exist(path):
    """A source path the docs name (`data/cache.py`, `benchmarks/bench_step.py`) is there:
    a module that moved leaves no stale name behind."""
    text = path.read_text(encoding="utf-8")
    stale = sorted(
        {p for p in CODE_PATH.findall(text) if not any((r / p).exists() for r in CODE_ROOTS)}
    )
    assert not stale, "no such file: " + ", ".join(stale)


def test_slug_rule():
    assert slug("Reproducing the paper's tables") == "reproducing-the-papers-tables"
    assert slug("How `--paper` matches runs to the paper's rows") == (
        "how---paper-matches-runs-to-the-papers-rows"
    )
    assert slug("W&B") == "wb"


def _cells(row: str) -> int:
    """The cells of a Markdown table row; ``\\|`` and pipes inside code spans are text."""
    text = re.sub(r"`[^`]*`", "code", row.replace("\\|", ""))
    return len(text.strip().strip("|").split("|"))


@pytest.mark.parametrize("path", DOCS, ids=ids(DOCS))
def test_every_table_row_has_its_headers_cells(path):
    """A row pasted into the wrong table (another table's columns) shows here."""
    wrong, header = [], None
    lines = list(_prose_lines(path.read_text(encoding="utf-8")))
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            header = None
        elif header is None and i + 1 < len(lines) and re.match(r"^\|[-:| ]+\|$", lines[i + 1]):
            header = _cells(line)
        elif header is not None and _cells(line) != header:
            wrong.append(f"{line[:80]}: {_cells(line)} cells, the header {header}")
    assert not wrong, "rows unlike their table:\n" + "\n".join(wrong)
