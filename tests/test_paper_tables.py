"""docs/paper/*.csv hold the numbers of the paper's tables, as printed in its LaTeX source."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAPER_DIR = ROOT / "docs" / "paper"
TEX = ROOT.parent / "shared" / "paper" / "cloudlstm_aaai21.tex"
RESULT_TABLES = ("metric", "metric2", "metric3", "outlier", "in_and_out", "seasonal")
CELL = re.compile(r"([\d.]+)\$\\pm\$([\d.]+)")


def read(name: str) -> list[dict[str, str]]:
    with (PAPER_DIR / f"{name}.csv").open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def tex() -> str:
    if not TEX.is_file():
        pytest.skip(f"the paper's source is not at {TEX}")
    return TEX.read_text()


def table_rows(tex: str, label: str) -> list[str]:
    """The data rows (lines with a mean ± std) of the table labelled ``tab:<label>``."""
    at = tex.index(rf"\label{{tab:{label}}}")
    body = tex[tex.index(r"\begin{tabular}", at) : tex.index(r"\end{table", at)]
    return [line for line in body.splitlines() if CELL.search(line)]


@pytest.mark.parametrize("name", RESULT_TABLES)
def test_every_number_is_the_papers_in_reading_order(tex, name):
    """The CSV lists the cells row by row, left to right, as the LaTeX table does."""
    printed = [cell for row in table_rows(tex, name) for cell in CELL.findall(row)]
    ours = [(rec["mean"], rec["std"]) for rec in read(name)]
    assert ours == printed
    assert {rec["table"] for rec in read(name)} == {name}


def label(row: str) -> str:
    r"""A LaTeX row's first cell without markup: ``CloudLSTM ($\mathcal{K}=3$)`` ->
    ``CloudLSTM (K=3)``; "" for the continuation of a multirow cell."""
    first = row.split("&")[0]
    first = re.sub(r"\\begin\{tabular\}\[c\]\{@\{\}c@\{\}\}|\\end\{tabular\}|\\\\", " ", first)
    first = re.sub(r"\\multirow\{\d\}\{\*\}\{(\w+)\}", r"\1", first)
    first = re.sub(r"\(\$\\mathcal\{K\}=(\d+)\$\)", r"(K=\1)", first)
    return " ".join(first.split())


@pytest.mark.parametrize("name", RESULT_TABLES)
def test_model_names_follow_the_rows(tex, name):
    """Each LaTeX row's model is the model of its CSV rows."""
    models: list[str] = []
    for row in table_rows(tex, name):
        models.append(label(row) or models[-1])  # a multirow cell: the row above's
    if name == "in_and_out":  # its caption gives CloudLSTM's K
        models = [m.replace("CloudLSTM", "CloudLSTM (K=9)") for m in models]
    per_row = len(read(name)) // len(models)
    assert [rec["model"] for rec in read(name)][::per_row] == models


# Cells read by eye from the LaTeX tables: the CSV columns are labelled right.
HAND_READ = [  # table, data set, model, settings, metric, mean, std
    ("metric", "City 2", "STGCN", {}, "rmse", "8.68", "2.27"),
    ("metric", "City 1", "CloudGRU (K=9)", {}, "ssim", "0.39", "0.10"),
    ("metric2", "Cluster A", "CloudLSTM (K=3)", {}, "mae", "20.84", "7.88"),
    ("metric2", "Cluster B", "CloudLSTM (K=6)", {}, "rmse", "13.20", "2.79"),
    ("metric3", "Cluster B", "LSTM (K=100)", {}, "psnr", "33.97", "2.22"),
    ("outlier", "Cluster B", "DefCNN", {}, "rmse", "33.06", "4.26"),
    (
        "in_and_out",
        "Cluster B",
        "PointLSTM",
        {"d": "5", "group": "outliers"},
        "rmse",
        "29.35",
        "13.67",
    ),
    (
        "in_and_out",
        "Cluster A",
        "CloudLSTM (K=9)",
        {"d": "0.5", "group": "inliers"},
        "mae",
        "22.75",
        "7.29",
    ),
    (
        "seasonal",
        "City 1",
        "Attention CloudLSTM (K=9)",
        {"seasonal": "true"},
        "mae",
        "3.22",
        "1.55",
    ),
    ("seasonal", "City 1", "MLP", {"seasonal": "false"}, "rmse", "10.30", "2.52"),
]


@pytest.mark.parametrize(
    ("name", "dataset", "model", "settings", "metric", "mean", "std"), HAND_READ
)
def test_hand_read_cells(name, dataset, model, settings, metric, mean, std):
    labels = {"dataset": dataset, "model": model, "metric": metric, **settings}
    (rec,) = [r for r in read(name) if all(r[k] == v for k, v in labels.items())]
    assert (rec["mean"], rec["std"]) == (mean, std)


def test_model_table_names_our_configs(tex):
    at = tex.index(r"\label{tab:model}")
    body = tex[tex.index(r"\textbf{Model}", at) : tex.index(r"\end{tabular}", at)]
    printed = [label(line) for line in body.splitlines()[1:] if "&" in line]
    assert [rec["model"] for rec in read("model")] == printed
    for rec in read("model"):
        assert (ROOT / "conf" / "model" / f"{rec['ours']}.yaml").is_file(), rec
