"""compare tells runs tested on other windows of one data apart: their rows are other data
sets (no best cell across them, a column on every row), and --relative-to pairs runs on
the same data sets."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudlstm.cli.train import train
from cloudlstm.compare import find_runs
from cloudlstm.compare.groups import group_runs
from tests.conftest import TINY, compose_train
from tests.test_compare import run_main, write_run


def with_settings(run: Path, **settings: Any) -> Path:
    """``run``'s config.yaml with the dotted ``settings`` (``data__test_fraction`` for
    ``data.test_fraction``) set, as train.py writes them given on its command line."""
    config = run / "config.yaml"
    cfg = yaml.safe_load(config.read_text())
    for dotted, value in settings.items():
        *nodes, last = dotted.split("__")
        node = cfg
        for name in nodes:
            node = node.setdefault(name, {})
        node[last] = value
    config.write_text(yaml.safe_dump(cfg))
    return run


def bold_rows(out: str) -> list[str]:
    """The first cell of each markdown row whose MAE is bold."""
    rows = [row.strip("|").split(" | ") for row in out.splitlines()[2:]]
    header = [name.strip() for name in out.splitlines()[0].strip("|").split("|")]
    mae = header.index("mae")
    return [row[0].strip() for row in rows if row[mae].strip().startswith("**")]


@pytest.fixture
def split(tmp_path) -> Path:
    """Persistence on the default split (its test part the last 20 %), seeds 0 and 1; an
    LSTM on it too; an MLP tested on the last 40 % (data.test_fraction=0.4)."""
    for seed in (0, 1):
        write_run(tmp_path / f"persistence{seed}", 9.0, model="persistence", seed=seed)
        with_settings(tmp_path / f"persistence{seed}", data__test_fraction=0.2)
    write_run(tmp_path / "lstm", 6.0, model="lstm")
    with_settings(tmp_path / "lstm", data__test_fraction=0.2)
    write_run(tmp_path / "mlp", 3.0, model="mlp")
    with_settings(tmp_path / "mlp", data__test_fraction=0.4)
    return tmp_path


def test_runs_tested_on_other_windows_are_data_sets_of_their_own(split, capsys):
    """The MLP's 3.0 on the last 40 % was bold against the 6.0 of the LSTM on the last
    20 %, with no column saying that their tests differed: data.test_fraction differs
    within no model."""
    code, out, _ = run_main(capsys, split, "--metrics", "mae")
    assert code == 0
    assert sorted(bold_rows(out)) == ["lstm", "mlp"]  # the best of each data set
    code, out, _ = run_main(capsys, split, "--metrics", "mae", "--format", "csv")
    rows = {row["model"]: row["data.test_fraction"] for row in csv.DictReader(io.StringIO(out))}
    assert rows == {"mlp": "0.4", "lstm": "0.2", "persistence": "0.2"}
    groups = group_runs(find_runs([split]))
    assert {g.keys["model"]: g.data for g in groups} == {
        "mlp": "synthetic test_fraction=0.4",
        "lstm": "synthetic test_fraction=0.2",
        "persistence": "synthetic test_fraction=0.2",
    }


def test_relative_to_pairs_runs_on_the_data_sets_the_table_tells_apart(split, capsys):
    """The MLP has no persistence run on its windows: left out, as its row is a data set
    of its own; the LSTM's is over persistence's."""
    code, out, err = run_main(
        capsys, split, "--metrics", "mae", "--format", "csv", "--relative-to", "persistence"
    )
    assert code == 0
    rows = {row["model"]: float(row["mae_mean"]) for row in csv.DictReader(io.StringIO(out))}
    assert rows == {"lstm": pytest.approx(6 / 9), "persistence": 1.0}
    assert any(f"left out: {split / 'mlp'}" in line for line in err)


def test_a_baseline_that_read_other_inputs_is_on_the_same_data_set(split, capsys):
    """An LSTM reading 24 steps back and a linear model with time features are scored on
    the windows persistence is: one data set, and over persistence's runs (they were left
    out, every data.* setting paired)."""
    write_run(tmp := split / "lstm24", 5.0, model="lstm")
    with_settings(tmp, data__test_fraction=0.2, data__input_steps=24, data__batch_size=8)
    write_run(tmp := split / "linear", 7.0, model="linear")
    with_settings(tmp, data__test_fraction=0.2, data__time_features=["hour"])
    groups = group_runs(find_runs([split]))
    assert len({g.data for g in groups if g.keys["model"] != "mlp"}) == 1
    code, out, _ = run_main(
        capsys, split, "--metrics", "mae", "--format", "csv", "--relative-to", "persistence"
    )
    assert code == 0
    rows = {
        (row["model"], row["data.input_steps"]): float(row["mae_mean"])
        for row in csv.DictReader(io.StringIO(out))
    }
    assert rows[("lstm", "24")] == pytest.approx(5 / 9)
    assert rows[("linear", "")] == pytest.approx(7 / 9)


@pytest.mark.parametrize(
    ("settings", "other_data_set"),
    [
        ({"data__test_fraction": 0.3}, True),
        ({"data__split_times": {"val": "2020-01-02", "test": "2020-01-03"}}, True),
        ({"data__output_steps": 6}, True),
        ({"data__stride": 2}, True),
        ({"data__num_points": 10}, True),
        ({"data__holdout_points": 3}, True),
        ({"data__score_filled": True}, True),
        ({"data__source__num_channels": 2}, True),
        ({"trainer__limit_test_batches": 3}, True),
        ({"data__input_steps": 24}, False),
        ({"data__seasonal": True}, False),
        ({"data__val_fraction": 0.3}, False),
        ({"data__split_times": {"val": "2020-01-02", "test": "2020-01-04"}}, False),
        ({"data__batch_size": 8}, False),  # every test window is scored whatever the batch
        ({"data__time_features": ["hour"]}, False),
        ({"data__source__covariates": ["TEMP"]}, False),
        ({"data__subset_seed": 3}, False),  # draws no subset without data.num_points
        ({"data__holdout_history": False}, False),  # holds no point out without its points
        ({"trainer__limit_test_batches": 1.0}, False),
    ],
)
def test_which_settings_make_another_data_set(tmp_path, settings, other_data_set):
    """A model tested with one setting changed, beside another model on the defaults (the
    split given by times where ``data.split_times`` is: a test part of another start, or
    only another validation start)."""
    defaults = {
        "data__test_fraction": 0.2,
        "data__output_steps": 12,
        "trainer__limit_test_batches": 1.0,
    }
    base = {"data__split_times": {"val": "2020-01-01", "test": "2020-01-04"}}
    for name, model, changed in (("a", "lstm", {}), ("b", "mlp", settings)):
        write_run(tmp_path / name, 1.0, model=model)
        times = base if "data__split_times" in settings else {}
        with_settings(tmp_path / name, **{**defaults, **times, **changed})
    data_sets = {g.data for g in group_runs(find_runs([tmp_path]))}
    assert len(data_sets) == (2 if other_data_set else 1)


@pytest.mark.parametrize(
    ("limit", "data_sets"),
    [
        (3, {"lstm": "synthetic", "mlp": "synthetic processes=2"}),
        (0.5, {"lstm": "synthetic", "mlp": "synthetic processes=2"}),
        (1.0, {"lstm": "synthetic", "mlp": "synthetic"}),
    ],
)
def test_a_test_limit_counted_in_each_process_tells_their_number_apart(tmp_path, limit, data_sets):
    """Lightning applies trainer.limit_test_batches in each DDP process: 3 batches in each
    of 2 score up to twice a one-process run's windows, and a share is rounded down in
    each (docs/cluster.md), yet the runs were one data set. A test of every window is the
    same in any number of processes."""
    for name, model, processes in (("a", "lstm", 1), ("b", "mlp", 2)):
        write_run(tmp_path / name, 1.0, model=model, machines=[{"processes": processes}])
        with_settings(tmp_path / name, trainer__limit_test_batches=limit)
    groups = group_runs(find_runs([tmp_path]))
    assert {g.keys["model"]: g.data for g in groups} == data_sets


def test_runs_of_one_model_in_other_numbers_of_processes_are_no_seeds_of_one_row(tmp_path, capsys):
    """Two seeds of a model with limit_test_batches=3, one tested in 4 DDP processes (2
    devices on each of 2 nodes), were averaged in one row by --by model; the processes are
    read from the config where metrics.json does not record them (a list of devices: its
    length, times the nodes)."""
    for seed, (devices, nodes) in enumerate(((1, 1), ([0, 1], 2))):
        write_run(tmp_path / str(seed), 1.0 + seed, seed=seed)
        with_settings(
            tmp_path / str(seed),
            trainer__limit_test_batches=3,
            trainer__devices=devices,
            trainer__num_nodes=nodes,
        )
    code, out, _ = run_main(capsys, tmp_path, "--by", "model", "--metrics", "mae")
    assert code == 0
    header, _, *rows = out.splitlines()
    assert "| processes |" in header
    assert [row.split(" | ")[2] for row in rows] == ["1", "4"]
    assert sorted(bold_rows(out)) == ["cloudlstm", "cloudlstm"]  # the best of each


@pytest.fixture(scope="module")
def tested_run(tmp_path_factory) -> tuple[Path, int]:
    """A tiny run tested in one process with trainer.limit_test_batches=10, above its test
    batches: every test window scored. Its directory, and its test windows."""
    tmp_path = tmp_path_factory.mktemp("tested")
    cfg = compose_train(tmp_path, [*TINY, "trainer.limit_test_batches=10", "logger=none"])
    results = train(cfg)
    assert results["test"]["num_instances"] == results["data"]["windows"]["test"]
    return Path(cfg.paths.output_dir), results["test"]["num_instances"]


def copy_of(
    run: Path,
    to: Path,
    seed: int,
    processes: int,
    limit: int | None = None,
    windows: int | None = None,
) -> Path:
    """``run`` copied to ``to``, its files edited as a test of the same checkpoint in
    ``processes`` processes (``provenance``'s last) would have written them, with
    trainer.limit_test_batches ``limit`` and ``windows`` test windows scored
    (``test.num_instances``, left out where None: as not recorded) where given."""
    shutil.copytree(run, to)
    results = json.loads((to / "metrics.json").read_text())
    results["provenance"][-1]["machine"]["processes"] = processes
    if windows is None:
        del results["test"]["num_instances"]
    else:
        results["test"]["num_instances"] = windows
    (to / "metrics.json").write_text(json.dumps(results))
    settings = (
        {"seed": seed} if limit is None else {"seed": seed, "trainer__limit_test_batches": limit}
    )
    return with_settings(to, **settings)


def test_runs_that_scored_the_same_windows_in_other_numbers_of_processes_are_one_data_set(
    tested_run, tmp_path
):
    """limit_test_batches=10 is above the batches of each process, one or two: both tests
    scored every window, yet the run tested in 2 processes was another data set
    (``processes=2``). With 3 batches, one process scores 24 windows and two (2 batches
    each) all of them, as the limit of 10 did: data sets named by the windows
    (``test.num_instances``), not by the limits; those of every window are a test of all
    of them, as one without a limit."""
    run, every = tested_run
    copy_of(run, tmp_path / "one", 0, processes=1, windows=every)
    copy_of(run, tmp_path / "two", 1, processes=2, windows=every)
    copy_of(run, tmp_path / "one_of_3", 0, processes=1, limit=3, windows=24)
    copy_of(run, tmp_path / "two_of_3", 1, processes=2, limit=3, windows=every)
    groups = group_runs(find_runs([tmp_path]), by=["model"])
    assert sorted((g.data, len(g.runs)) for g in groups) == [
        ("synthetic", 3),
        ("synthetic windows=24", 1),
    ]


def test_runs_that_scored_the_same_windows_in_batches_of_other_sizes_are_one_data_set(
    tested_run, tmp_path
):
    """3 test batches of 8 windows and 6 of 4 score the same first 24 windows, yet the
    limit and the batch size, which the windows scored (``test.num_instances``) say more
    exactly, made them two data sets. A test of a share of its batches is told apart
    from them by its limit, and one of every window by the windows."""
    run, every = tested_run
    for name, seed, limit, batch_size in (("of_8", 0, 3, 8), ("of_4", 1, 6, 4)):
        copy_of(run, tmp_path / name, seed, processes=1, limit=limit, windows=24)
        with_settings(tmp_path / name, data__batch_size=batch_size)
    groups = group_runs(find_runs([tmp_path]), by=["model"])
    assert [(g.data, len(g.runs)) for g in groups] == [("synthetic", 2)]
    copy_of(run, tmp_path / "share", 2, processes=1, limit=0.5, windows=24)
    copy_of(run, tmp_path / "every", 3, processes=1, windows=every)
    groups = group_runs(find_runs([tmp_path]), by=["model"])
    assert sorted((g.data, len(g.runs)) for g in groups) == [
        ("synthetic", 1),
        ("synthetic batch_size=8 limit_test_batches=0.5", 1),
        ("synthetic windows=24", 2),
    ]


def test_a_limited_test_of_every_window_shares_the_data_set_of_an_unlimited_one(
    tested_run, tmp_path, capsys
):
    """limit_test_batches=10 is above the test's batches: it scored every window of the test
    part (``test.num_instances`` = ``data.windows.test``), as a test without a limit does,
    yet stood apart from one, labelled ``windows=N``. A run that records no window count of
    its test part keeps its limit's data set."""
    run, every = tested_run
    copy_of(run, tmp_path / "limited", 0, processes=1, windows=every)
    copy_of(run, tmp_path / "unlimited", 1, processes=1, limit=1.0, windows=every)
    groups = group_runs(find_runs([tmp_path]), by=["model"])
    assert [(g.data, len(g.runs), g.data_keys) for g in groups] == [("synthetic", 2, ())]
    code, out, _ = run_main(
        capsys, tmp_path, "--metrics", "mae", "--by", "model", "--format", "csv"
    )
    assert code == 0
    assert [(row["data"], row["n"]) for row in csv.DictReader(io.StringIO(out))] == [
        ("synthetic", "2")
    ]
    # a share of the batches (other windows) tells the limit apart: both stay one row
    copy_of(run, tmp_path / "share", 2, processes=1, limit=0.5, windows=every // 2)
    groups = group_runs(find_runs([tmp_path]), by=["model"])
    assert sorted((g.data, len(g.runs)) for g in groups) == [
        ("synthetic", 2),
        ("synthetic limit_test_batches=0.5", 1),
    ]
    shutil.rmtree(tmp_path / "share")
    results = json.loads((tmp_path / "limited" / "metrics.json").read_text())
    del results["data"]["windows"]  # as a run from before the data summary counted them
    (tmp_path / "limited" / "metrics.json").write_text(json.dumps(results))
    groups = group_runs(find_runs([tmp_path]), by=["model"])
    assert sorted(g.data for g in groups) == ["synthetic", f"synthetic windows={every}"]


def test_a_run_that_records_no_windows_is_told_by_its_processes(tested_run, tmp_path):
    """A run that does not record the windows it scored (no ``test.num_instances``) counts
    its processes, as before; so does a test of a share of its batches, which each process
    rounds down on its own (as many windows may be other ones)."""
    run, every = tested_run
    copy_of(run, tmp_path / "one", 0, processes=1)
    copy_of(run, tmp_path / "two", 1, processes=2)
    groups = group_runs(find_runs([tmp_path]), by=["model"])
    assert sorted(g.data for g in groups) == ["synthetic", "synthetic processes=2"]
    for name in ("one", "two"):
        shutil.rmtree(tmp_path / name)
    copy_of(run, tmp_path / "one", 0, processes=1, limit=0.5, windows=every // 2)
    copy_of(run, tmp_path / "two", 1, processes=2, limit=0.5, windows=every // 2)
    groups = group_runs(find_runs([tmp_path]), by=["model"])
    assert sorted(g.data for g in groups) == ["synthetic", "synthetic processes=2"]


def test_a_config_whose_devices_lightning_refuses_is_one_line_naming_it(tmp_path, capsys):
    """Where the processes of a limited test are read from a run's config, a
    ``trainer.devices`` that names no device (0, which no Trainer ran with: a hand-edited
    file) was taken for "not known", and the run for one process's."""
    write_run(tmp_path / "a", 1.0)
    with_settings(tmp_path / "a", trainer__limit_test_batches=3, trainer__devices=0)
    code, out, err = run_main(capsys, tmp_path, "--metrics", "mae")
    assert (code, out) == (2, "")
    assert err == [
        f"compare: {tmp_path / 'a' / 'config.yaml'}: trainer.devices=0: no device to run on, a "
        "value Lightning refuses: this is no config of a run train.py trained (mend it, or move "
        "the run out of the folder)"
    ]


def test_a_config_whose_number_of_nodes_lightning_refuses_is_one_line_naming_it(tmp_path, capsys):
    """A ``trainer.num_nodes`` of 0 (a hand-edited file) made the processes of a limited
    test "not known", and the run one process's."""
    write_run(tmp_path / "a", 1.0)
    with_settings(tmp_path / "a", trainer__limit_test_batches=3, trainer__num_nodes=0)
    code, out, err = run_main(capsys, tmp_path, "--metrics", "mae")
    assert (code, out) == (2, "")
    assert err == [
        f"compare: {tmp_path / 'a' / 'config.yaml'}: trainer.num_nodes=0: no node to run on, "
        "a value Lightning refuses: this is no config of a run train.py trained (mend it, or "
        "move the run out of the folder)"
    ]


def test_a_held_out_or_subset_draw_tells_data_sets_apart_only_where_it_draws(tmp_path):
    """data.subset_seed draws the subset of data.num_points: two seeds of it are two data
    sets, and the runs without a subset a third, named by the setting that acts."""
    for name, model, settings in (
        ("a", "lstm", {"data__num_points": 10, "data__subset_seed": 0}),
        ("b", "mlp", {"data__num_points": 10, "data__subset_seed": 1}),
        ("c", "linear", {"data__subset_seed": 1}),
    ):
        write_run(tmp_path / name, 1.0, model=model)
        with_settings(tmp_path / name, **settings)
    groups = group_runs(find_runs([tmp_path]))
    assert sorted(g.data for g in groups) == [
        "synthetic",
        "synthetic num_points=10 subset_seed=0",
        "synthetic num_points=10 subset_seed=1",
    ]


def test_other_readings_of_two_models_are_two_data_sets(tmp_path, capsys):
    """Each model ran on one city's file under one data name: the hash differed within no
    model, so the two were one data set, 7 bold against 22 with no column of the hash."""
    write_run(tmp_path / "a", 7.0, model="lstm", digest="aaaa1111ffff")
    write_run(tmp_path / "b", 22.0, model="mlp", digest="bbbb2222ffff")
    code, out, _ = run_main(capsys, tmp_path, "--metrics", "mae")
    assert code == 0 and sorted(bold_rows(out)) == ["lstm", "mlp"]
    assert "data.values_digest" in out.splitlines()[0]
    groups = group_runs(find_runs([tmp_path]))
    assert sorted(g.data for g in groups) == ["synthetic (aaaa1111)", "synthetic (bbbb2222)"]


def test_data_sets_sort_numbers_by_size(tmp_path, capsys):
    """One section per forecast length, J=3 before J=12 (as text, 12 came first), whatever
    their MAEs (here lowest at J=12)."""
    for steps in (12, 3, 6):
        write_run(tmp_path / str(steps), 100 / steps, model="lstm")
        with_settings(tmp_path / str(steps), data__output_steps=steps)
    code, out, _ = run_main(capsys, tmp_path, "--metrics", "mae", "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [row["data.output_steps"] for row in rows] == ["3", "6", "12"]


def forecasting(run: Path, steps: int) -> Path:
    """``run`` as one of J=``steps``: its config's ``data.output_steps`` and a value of
    MAE at each of its steps (step h's: its first step's plus h - 1; the other metrics'
    steps, its last step's)."""
    results = json.loads((run / "metrics.json").read_text())
    for name, values in results["test"]["per_step"].items():
        first, last = values["mean"][0], values["mean"][-1]
        values["mean"] = [first + h if name == "mae" else last for h in range(steps)]
        values["std"] = [0.5] * steps
    (run / "metrics.json").write_text(json.dumps(results))
    return with_settings(run, data__output_steps=steps)


def test_a_horizon_beyond_some_rows_forecast_is_empty_in_those_rows(tmp_path, capsys):
    """Runs of J=3 and J=6 side by side: --horizons 2,5 shows step 5 of the J=6 runs, an
    empty cell in the J=3 row; only a step beyond every run's J is refused."""
    for seed in (0, 1):
        write_run(tmp_path / f"j6_{seed}", 2.0 + seed, seed=seed)
        forecasting(tmp_path / f"j6_{seed}", 6)
    write_run(tmp_path / "j3", 1.0)
    forecasting(tmp_path / "j3", 3)
    code, out, err = run_main(
        capsys, tmp_path, "--metrics", "mae", "--horizons", "2,5", "--format", "csv"
    )
    assert code == 0 and err == []
    rows = {row["data.output_steps"]: row for row in csv.DictReader(io.StringIO(out))}
    assert rows["3"]["mae@2_mean"] == "1.9" and rows["3"]["mae@5_mean"] == ""
    assert float(rows["6"]["mae@5_mean"]) == pytest.approx(2.4 + 4)
    code, out, err = run_main(capsys, tmp_path, "--horizons", "7")
    assert code == 2 and out == ""
    assert err == [
        "compare: horizon 7 is beyond the forecast length of every run (J=3, 6); "
        "horizons count 1..J"
    ]


def test_runs_that_differ_only_in_a_limit_that_scored_the_same_windows_are_one_row(
    tested_run, tmp_path, capsys
):
    """Without --by, a whole-number test limit that differs between two runs of one model
    was a setting of its own, which split them into two rows of one data set: 3 and 4
    batches that scored the same 24 windows (the 4th batch without an observed target), or
    a limit above the test's batches and none (every window). They are one row of 2
    seeds; of one seed, one run counted twice, as copies are. Runs that scored other
    windows stay apart."""
    run, every = tested_run
    copy_of(run, tmp_path / "of_3", 0, processes=1, limit=3, windows=24)
    copy_of(run, tmp_path / "of_4", 1, processes=1, limit=4, windows=24)
    assert [(g.data, len(g.runs)) for g in group_runs(find_runs([tmp_path]))] == [("synthetic", 2)]
    copy_of(run, tmp_path / "above", 2, processes=1, windows=every)  # the limit of 10
    copy_of(run, tmp_path / "none", 3, processes=1, limit=1.0, windows=every)
    copy_of(run, tmp_path / "of_2", 4, processes=1, limit=2, windows=16)
    groups = group_runs(find_runs([tmp_path]))
    assert sorted((g.data, len(g.runs)) for g in groups) == [
        ("synthetic", 2),
        ("synthetic windows=16", 1),
        ("synthetic windows=24", 2),
    ]
    shutil.rmtree(tmp_path / "of_2")
    with_settings(tmp_path / "of_4", seed=0)
    with_settings(tmp_path / "none", seed=2)
    code, out, err = run_main(capsys, tmp_path, "--metrics", "mae", "--format", "csv")
    assert code == 0
    assert [(row["windows"], row["n"]) for row in csv.DictReader(io.StringIO(out))] == [
        ("", "1"),
        ("24", "1"),
    ]
    assert err[0] == (
        "compare: warning: none has the settings and seed (2) of above: a copy or a rerun, "
        "one sample, so it is left out, not counted as another seed (1 more such run(s) "
        "left out); remove it, or give it a seed of its own"
    )
