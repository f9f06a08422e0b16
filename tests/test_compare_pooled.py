"""``compare --pooled``: the test metrics pooled over every forecast value of a run."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from cloudlstm.compare import find_runs
from cloudlstm.compare.groups import group_runs
from cloudlstm.compare.table import build_table
from tests.test_compare import run_main, write_run


def with_pooled(run: Path, pooled: object) -> None:
    """Give the run's metrics.json ``test.pooled``."""
    path = run / "metrics.json"
    results = json.loads(path.read_text())
    results["test"]["pooled"] = pooled
    path.write_text(json.dumps(results))


def test_the_columns_are_the_mean_and_std_over_seeds_and_empty_for_older_runs(tmp_path):
    """Three seeds of a model with pooled RMSEs 4, 5 and 9; one run from before metrics.json
    recorded them: its cells are empty, not another number."""
    for seed, rmse in enumerate((4.0, 5.0, 9.0)):
        run = tmp_path / f"stgcn{seed}"
        write_run(run, 2.0, model="stgcn", seed=seed)
        with_pooled(run, {"mae": 2.0, "rmse": rmse})
    write_run(tmp_path / "old", 3.0, model="lstm")
    table = build_table(group_runs(find_runs([tmp_path])), ["mae", "rmse"], pooled=True)
    cells = {c.name: c.cells for c in table}
    assert list(cells)[-4:] == ["mae", "rmse", "pooled/mae", "pooled/rmse"]
    rows = dict(zip(cells["model"], cells["pooled/rmse"], strict=True))
    assert rows["stgcn"].mean == 6.0
    assert rows["stgcn"].std == pytest.approx(statistics.stdev([4.0, 5.0, 9.0]))
    assert rows["lstm"] is None
    # the pooled RMSE is not the mean of the windows' RMSEs (write_run: 2 x MAE = 4)
    assert dict(zip(cells["model"], cells["rmse"], strict=True))["stgcn"].mean == 4.0


def test_the_option_prints_the_columns_with_the_best_bold(tmp_path, capsys):
    for name, rmse in (("linear", 7.5), ("stgcn", 6.25)):
        write_run(tmp_path / name, 1.0, model=name)
        with_pooled(tmp_path / name, {"mae": 1.0, "rmse": rmse})
    code, out, _ = run_main(capsys, tmp_path, "--metrics", "mae", "--pooled")
    assert code == 0
    header = [c.strip() for c in out.splitlines()[0].split("|")]
    assert header[-3:-1] == ["pooled/mae", "pooled/rmse"]
    rows = {line.split("|")[1].strip(): line for line in out.splitlines()[2:]}
    assert "**6.250**" in rows["stgcn"] and "**7.5" not in rows["linear"]


def test_without_pooled_metrics_or_with_a_damaged_record_the_option_is_one_line(tmp_path, capsys):
    write_run(tmp_path / "old", 1.0)
    code, _, err = run_main(capsys, tmp_path, "--pooled")
    assert code == 2
    assert err == ["compare: no run records pooled test metrics (test.pooled in metrics.json)"]
    with_pooled(tmp_path / "old", {"rmse": "n/a"})
    code, _, err = run_main(capsys, tmp_path, "--pooled")
    assert code == 2 and len(err) == 1
    assert err[0].startswith(f"compare: {tmp_path / 'old' / 'metrics.json'}: test.pooled.rmse")


def test_a_row_whose_runs_only_partly_have_pooled_metrics_is_named(tmp_path, capsys):
    """Seed 1 from before metrics.json recorded test.pooled: the row's pooled cells were
    empty, as if no seed had them, without a word."""
    for seed in (0, 1):
        write_run(tmp_path / f"stgcn{seed}", 2.0, model="stgcn", seed=seed)
    with_pooled(tmp_path / "stgcn0", {"mae": 2.0, "rmse": 4.0})
    code, out, err = run_main(capsys, tmp_path, "--metrics", "mae", "--pooled")
    assert code == 0 and out.splitlines()[2].endswith("|  |  |")
    assert err == [
        f"compare: pooled/{name} is empty in 1 row(s) whose runs do not all report it (a "
        f"metrics.json from before it): stgcn (synthetic); lacking it: {tmp_path / 'stgcn1'}"
        for name in ("mae", "rmse")
    ]
