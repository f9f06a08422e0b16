"""The README and docs/*.md: no development-history words, a short README, working links,
and commands that work as written: every train.py command composes, every compare of the
committed results runs."""

import functools
import re
import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from cloudlstm.assembly.known_keys import check_known_keys
from cloudlstm.cli.compare.command import main as compare_main
from cloudlstm.cli.model_keys import applicable_jobs

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


# ------------------------------------------------------------------ the docs' commands

SHELL = ("bash", "sh", "shell")
#: an inline code span that is a command: optional VAR=value words, then a program
INLINE_COMMAND = re.compile(r"(?:\S+=\S+ )*(?:python3? |make |bash |torchrun |srun )")
#: a placeholder word of a command (`run=<run dir>`, `model=...`), left out of it
PLACEHOLDER = re.compile(r"<|\.\.\.")


def _joined(lines: list[str]) -> Iterator[str]:
    """The commands of a shell block: comments dropped, ``\\``-continued lines joined."""
    command = ""
    for line in lines:
        line = "" if line.lstrip().startswith("#") else re.sub(r"\s+#.*$", "", line)
        if line.endswith("\\"):
            command += line[:-1] + " "
            continue
        command = (command + line).strip()
        if command:
            yield command
        command = ""


def doc_commands(path: Path) -> Iterator[str]:
    """Every command of a document: each of its ```bash blocks' commands and each inline
    code span that runs a program (`python train.py model=<name>`)."""
    text = path.read_text(encoding="utf-8")
    for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if lang in SHELL:
            yield from _joined(body.splitlines())
    for line in _prose_lines(text):
        for span in re.findall(r"`([^`]+)`", line):
            if INLINE_COMMAND.match(span):
                yield span


def _words(command: str) -> list[str]:
    """A command's words as the shell splits them, an optional ``[part]`` taken, and
    ``{a,b}`` of a path expanded as bash does (not in an override's value)."""
    command = re.sub(r"(?<=\s)\[([^\]'\"]*)\]", r"\1", command)
    words = []
    for word in shlex.split(command):
        braces = "=" not in word and re.fullmatch(r"(.*)\{([^{}]*,[^{}]*)\}(.*)", word)
        parts = braces.group(2).split(",") if braces else [None]
        words += [word if p is None else braces.group(1) + p + braces.group(3) for p in parts]
    return words


def train_overrides(command: str) -> list[str] | None:
    """The overrides a command gives ``train.py`` (``python train.py``, ``srun``,
    ``torchrun ... train.py``, ``make train ARGS="..."``), its placeholders left out; None
    for a command of another program."""
    words = _words(command)
    if words[:2] == ["make", "train"]:
        args = [w.removeprefix("ARGS=") for w in words if w.startswith("ARGS=")]
        words = ["train.py", *shlex.split(args[0] if args else "")]
    if "train.py" not in words:
        return None
    given = words[words.index("train.py") + 1 :]
    return [w for w in given if w not in ("-m", "--multirun") and not PLACEHOLDER.search(w)]


def sweep_jobs(overrides: list[str]) -> Iterator[list[str]]:
    """The jobs that try every value of a sweep once: the first values of all of them, then
    each further value of each sweep with the others at their first (not of ``seed``,
    whose values compose alike)."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    values = [
        list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.input_line] for o in parsed
    ]
    values = [
        v[:1] if o.get_key_element() == "seed" else v for o, v in zip(parsed, values, strict=True)
    ]
    keys = [o.get_key_element() if o.is_sweep_override() else None for o in parsed]

    def job(i: int | None = None, value: str | None = None) -> list[str]:
        words = [f"{k}={v[0]}" if k else v[0] for k, v in zip(keys, values, strict=True)]
        if i is not None:
            words[i] = f"{keys[i]}={value}"
        return words

    yield job()
    for i, vs in enumerate(values):
        for value in vs[1:]:
            yield job(i, value)


TRAIN_COMMANDS = [
    (f"{p.relative_to(ROOT)}: {c}", o)
    for p in DOCS
    for c in doc_commands(p)
    if (o := train_overrides(c)) is not None
]


def composed(overrides: Sequence[str]) -> DictConfig:
    """train.py's config for ``overrides``, with its Hydra node (a copy: one composed
    before, for another command's job, is taken from the cache)."""
    return _composed(tuple(overrides)).copy()


@functools.cache
def _composed(overrides: tuple[str, ...]) -> DictConfig:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("train", overrides=overrides, return_hydra_config=True)


def model_settings(overrides: Sequence[str]) -> tuple[str, set[str]]:
    """The model a job chooses and its settings, as the sweeper reads them."""
    cfg = composed(overrides)
    return str(cfg.hydra.runtime.choices.get("model")), set(cfg.get("model") or {})


def compose_jobs(overrides: list[str]) -> None:
    """Compose train.py's config for each job of a command and check its keys, as a job
    does before it reads the data (what ``--cfg job`` shows, and the keys nothing reads);
    a sweep's jobs as the sweeper makes them, without the model settings a job's model
    lacks (``model=cloudlstm,lstm model.k=3``)."""
    for job in applicable_jobs(list(sweep_jobs(overrides)), model_settings).jobs:
        cfg = composed(job)
        HydraConfig.instance().set_config(cfg)
        check_known_keys(cfg)


#: a sweep of more jobs than this composes for many seconds
MANY_JOBS = 6


def _train_params() -> list:
    """TRAIN_COMMANDS as parameters, the long sweeps marked slow."""
    return [
        pytest.param(o, id=i[:120], marks=[pytest.mark.slow] * (_jobs(o) > MANY_JOBS))
        for i, o in TRAIN_COMMANDS
    ]


def _jobs(overrides: list[str]) -> int:
    return len(list(sweep_jobs(overrides)))


@pytest.mark.parametrize("overrides", _train_params())
def test_every_train_command_of_the_docs_composes(overrides):
    """Each `python train.py ...` of the docs (the campaigns of results.md too, which
    train for hours) names groups, presets and keys that exist, in every value of its
    sweeps: composed, not trained."""
    compose_jobs(overrides)


def test_the_train_commands_are_found():
    """The extraction sees the docs' commands: a block's continued lines, inline spans, a
    sweep, `make train ARGS=...`."""
    found = {i.split(": ", 1)[1] for i, _ in TRAIN_COMMANDS}
    assert len(TRAIN_COMMANDS) >= 50
    assert any(c.startswith("torchrun ") for c in found)
    assert any(c.startswith("make train ARGS=") for c in found)
    block = ["# a comment", "python train.py -m a=1 \\", "    b=2,3  # c"]
    (command,) = _joined(block)
    assert _words(command) == ["python", "train.py", "-m", "a=1", "b=2,3"]
    assert _words("compare d/{a,b} [--x]") == ["compare", "d/a", "d/b", "--x"]
    assert train_overrides("python train.py -m a=1 b=2,3 run=<dir> model=...") == ["a=1", "b=2,3"]
    assert list(sweep_jobs(["a=1,2", "b=3,4"])) == [["a=1", "b=3"], ["a=2", "b=3"], ["a=1", "b=4"]]


def test_a_broken_train_command_is_caught():
    """An override the configs lack, or a sweep value that is no preset, fails to compose."""
    for overrides in (["module.calibrat=conformal"], ["model=cloudlstm,stgcnn"]):
        with pytest.raises(Exception, match="calibrat|stgcnn"):
            compose_jobs(overrides)


RESULTS = "docs/results/"
#: options that write a file (their value: where) or a W&B run
WRITES = ("--plot", "--html")


def compare_args(command: str) -> list[str] | None:
    """The arguments of a `python -m cloudlstm.cli.compare` command on the committed
    results (``docs/results/...``), its globs expanded; None for any other command."""
    words = _words(command)
    if "cloudlstm.cli.compare" not in words:
        return None
    args = words[words.index("cloudlstm.cli.compare") + 1 :]
    if not args or not args[0].startswith(RESULTS) or any("$" in a for a in args):
        return None
    expanded = []
    for arg in args:
        matches = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(arg)) if "*" in arg else []
        expanded += matches or [arg]
    return expanded


def writing_to(args: list[str], folder: Path) -> list[str]:
    """``args`` with the figures and the page written in ``folder`` (the committed ones
    stay as they are), and without ``--wandb``, which would write a W&B run."""
    out = []
    for arg in args:
        if out and out[-1] in WRITES:
            arg = str(folder / Path(arg).name)
        if arg != "--wandb":
            out.append(arg)
    return out


COMPARE_COMMANDS = [
    (f"{p.relative_to(ROOT)}: {c}", a)
    for p in DOCS
    for c in doc_commands(p)
    if (a := compare_args(c)) is not None
]


@pytest.mark.parametrize(
    "args",
    [
        # drawing figures takes seconds a command
        pytest.param(a, id=i[:120], marks=[pytest.mark.slow] * any(w in a for w in WRITES))
        for i, a in COMPARE_COMMANDS
    ],
)
def test_every_compare_of_the_committed_results_runs(args, tmp_path, monkeypatch, capsys):
    """Each `python -m cloudlstm.cli.compare docs/results/...` of the docs runs on the
    committed runs and prints its table."""
    monkeypatch.chdir(ROOT)
    code = compare_main(writing_to(args, tmp_path))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "| model |" in out


def test_the_compare_commands_are_found_and_a_broken_one_fails(tmp_path, monkeypatch, capsys):
    assert len(COMPARE_COMMANDS) >= 20
    assert any("--plot" in a for _, a in COMPARE_COMMANDS)
    assert writing_to(["d", "--plot", "d", "--wandb"], tmp_path) == [
        "d",
        "--plot",
        str(tmp_path / "d"),
    ]
    monkeypatch.chdir(ROOT)
    assert compare_main([RESULTS + "beijing_strong", "--metrics", "maee"]) == 2
    assert compare_main([RESULTS + "beijing_stron"]) == 2
