"""``compare --val``: the validation score each run chose its tested checkpoint by."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from cloudlstm.compare import find_runs
from cloudlstm.compare.groups import group_runs
from cloudlstm.compare.table import build_table
from tests.test_compare import run_main, write_run


def with_results(run: Path, monitor: str | None = None, **results) -> None:
    """Add ``results`` to the run's metrics.json, and ``monitor`` to its config.yaml."""
    path = run / "metrics.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | results))
    if monitor is not None:
        config = run / "config.yaml"
        config.write_text(config.read_text() + f"monitor: {monitor}\n")


def selected(score: float, monitor: str = "val/mae") -> dict:
    return {"selection": {"monitor": monitor, "score": score}}


def val_column(root: Path) -> dict[str, object]:
    table = build_table(group_runs(find_runs([root])), ["mae"], validation=True)
    cells = {c.name: c.cells for c in table}
    return dict(zip(cells["model"], cells["val/mae"], strict=True))


def test_the_column_is_the_mean_and_std_over_seeds_and_empty_without_training(tmp_path):
    for seed, score in enumerate((3.0, 5.0, 7.0)):
        run = tmp_path / f"cloud{seed}"
        write_run(run, 1.0, seed=seed)
        with_results(run, **selected(score))
    write_run(tmp_path / "persistence", 2.0, model="persistence")  # nothing to choose from
    column = val_column(tmp_path)
    assert column["cloudlstm"].mean == 5.0
    assert column["cloudlstm"].std == pytest.approx(statistics.stdev([3.0, 5.0, 7.0]))
    assert column["persistence"] is None


def test_runs_from_before_the_record_use_their_lowest_validation_mae(tmp_path):
    """Runs that chose on val/mae recorded its lowest value, the tested checkpoint's; a run
    that chose on another metric recorded nothing of that checkpoint: an empty cell."""
    write_run(tmp_path / "old", 1.0)
    with_results(tmp_path / "old", "val/mae", val={"val/mae": 9.0, "val/mae_best": 4.0})
    write_run(tmp_path / "paper", 1.0, model="lstm")
    with_results(tmp_path / "paper", "val/loss", val={"val/loss": 0.1, "val/mae_best": 4.0})
    column = val_column(tmp_path)
    assert column["cloudlstm"].mean == 4.0
    assert column["lstm"] is None


def test_the_best_validation_score_is_bold_by_its_direction(tmp_path, capsys):
    """Lower is better for val/mae: the bold cell is the least, whatever the test says."""
    write_run(tmp_path / "a", 1.0, model="linear")
    with_results(tmp_path / "a", **selected(88.0))
    write_run(tmp_path / "b", 2.0, model="stgcn")
    with_results(tmp_path / "b", **selected(50.0))
    code, out, _ = run_main(capsys, tmp_path, "--metrics", "mae", "--val")
    assert code == 0
    rows = {line.split("|")[1].strip(): line for line in out.splitlines()[2:]}
    assert "**88" not in rows["linear"] and "**1" in rows["linear"]
    assert "**50" in rows["stgcn"]


@pytest.mark.parametrize(("monitor", "best"), [("val/loss", 0.2), ("val/ssim", 0.9)])
def test_the_column_follows_the_monitors_direction(tmp_path, monitor, best):
    """A loss (no declared metric) is best least, SSIM best greatest, as checkpointing read
    them."""
    for i, score in enumerate((0.2, 0.9)):
        write_run(tmp_path / str(i), 1.0, model=f"m{i}")
        with_results(tmp_path / str(i), **selected(score, monitor))
    table = build_table(group_runs(find_runs([tmp_path])), ["mae"], validation=True)
    column = next(c for c in table if c.name == monitor)
    assert {"min": min, "max": max}[column.better](c.mean for c in column.cells) == best


@pytest.mark.parametrize(
    ("results", "message"),
    [
        (
            [selected(1.0), selected(2.0, "val/rmse")],
            "compare: the runs chose their checkpoints on different metrics (val/mae, val/rmse)",
        ),
        ([{}, {}], "compare: no run records the validation score of its tested checkpoint"),
    ],
)
def test_scores_that_cannot_share_a_column_are_one_line(tmp_path, capsys, results, message):
    for i, extra in enumerate(results):
        write_run(tmp_path / str(i), 1.0, seed=i, model=f"m{i}")
        with_results(tmp_path / str(i), **extra)
    code, out, err = run_main(capsys, tmp_path, "--val")
    assert code == 2 and out == ""
    assert len(err) == 1 and err[0].startswith(message)
