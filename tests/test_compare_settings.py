"""compare groups runs by settings, not by where, how or under which name they ran; and
leaves eval.py's re-tests of a run out unless asked."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
import yaml

from cloudlstm.compare import compare, find_runs
from cloudlstm.compare.groups import group_runs
from tests.test_compare import run_main, write_run

PUBLISHED = Path(__file__).resolve().parents[1] / "docs" / "results" / "beijing_gpu_s23"
# the metrics its runs report (they predate smae and mape: no empty column of them)
METRIC_COLUMNS = ["mae", "rmse", "psnr", "ssim"]


def columns(table) -> dict:
    return {c.name: c.cells for c in table}


def config_as_today(run: Path, seed: int, machine: str, recipe: str = "strong") -> None:
    """A config.yaml with what train.py writes today that is not a setting: the machine's
    data root and cache, the W&B logger's per-run keys, threads, the console."""
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg.update(
        {
            "task_name": "train",
            "seed": seed,
            "tags": [f"seed{seed}"],
            "print_config": seed % 2 == 0,
            "torch_threads": seed + 1,
            "keep_freed_memory": "auto" if seed else True,
            "recipe_name": recipe,
            "data": {
                "root": f"/home/{machine}/beijing",
                "source": {"cache_dir": f"/scratch/{machine}/cache"},
                "num_workers": seed,
                # checks a finished run passed; runs from before them have none
                **({"max_abs_z": 10000} if seed else {}),
            },
            **({"module": {"diverge_factor": 10}} if seed else {}),
            "logger": {
                "wandb": {
                    "save_dir": str(run),
                    "name": f"cloudlstm-s{seed}",
                    "id": f"id{seed}",
                    "group": f"sweep-{machine}",
                    "tags": [f"seed={seed}"],
                    "offline": bool(seed % 2),
                }
            },
            "trainer": {**cfg["trainer"], "enable_progress_bar": bool(seed % 2)},
            "callbacks": {
                "step_checkpoint": {"every_n_train_steps": 1000 * (seed + 1)},
                # runs from before the SIGTERM checkpoint, the final checkpoint, the moved
                # run's checkpoints and the progress lines in train.log have none
                **(
                    {
                        "sigterm_checkpoint": {"filename": "last"},
                        "final_checkpoint": {"filename": "last"},
                        "moved_run": {"_target_": "cloudlstm.rundir.moved_run.FollowMovedRun"},
                        "progress_log": {"_target_": "cloudlstm.engine.progress_log.ProgressLog"},
                    }
                    if seed
                    else {}
                ),
            },
        }
    )
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))


def evaluation_of(run: Path, mae: float, model: str = "cloudlstm") -> Path:
    """eval.py's folder inside ``run``: metrics.json with ``run_dir`` and a config.yaml that
    adds ``run``, ``ckpt`` and ``task_name: eval`` to the run's; ``model`` the run's."""
    folder = run / "eval" / "2026-01-01_00-00-00-000000"
    write_run(folder, mae, model=model)
    results = json.loads((folder / "metrics.json").read_text())
    results.update(run_dir=str(run), checkpoint=str(run / "checkpoints" / "best.ckpt"))
    results["overrides"] = ["data.num_points=100"]
    (folder / "metrics.json").write_text(json.dumps(results))
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg.update(task_name="eval", run=str(run), ckpt="best", logger=None)
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg))
    return folder


@pytest.fixture
def sweep(tmp_path) -> Path:
    """Three seeds of one setting, run on two machines, one of them evaluated again."""
    for seed, mae in enumerate((1.0, 2.0, 4.0)):
        run = tmp_path / "sweep" / str(seed)
        write_run(run, mae, seed=seed)
        config_as_today(run, seed, machine="a" if seed else "b")
    evaluation_of(tmp_path / "sweep" / "0", 9.0)
    return tmp_path / "sweep"


def test_published_sweep_is_one_row_per_model_with_few_columns(capsys):
    code, out, err = run_main(capsys, PUBLISHED)
    header, _, *rows = out.splitlines()
    assert code == 0 and err == [] and len(rows) == 12
    names = [c.strip() for c in header.strip("|").split("|")]
    assert names == ["model", "data", "n", "params", "epochs", "train_s", *METRIC_COLUMNS]


def test_paths_loggers_and_execution_keys_split_no_rows(sweep, capsys):
    table = columns(compare(find_runs([sweep])))
    assert table["n"] == [3]
    assert list(table)[:3] == ["model", "data", "n"]  # no key of config.yaml became a column
    code, out, err = run_main(capsys, sweep)
    assert code == 0 and len(out.splitlines()) == 3
    assert err == [
        "compare: left out 1 evaluation(s) of eval.py (re-tests of runs); "
        "--include-evals shows them"
    ]


def test_the_recipe_is_a_setting(sweep):
    run = sweep / "3"
    write_run(run, 0.5, seed=3)
    config_as_today(run, 3, machine="a", recipe="paper")
    table = columns(compare(find_runs([sweep])))
    assert table["recipe_name"] == ["paper", "strong"] and table["n"] == [1, 3]


def test_evaluations_are_rows_of_their_own_when_asked(sweep, capsys):
    runs = find_runs([sweep], include_evals=True)
    table = columns(compare(runs))
    assert table["n"] == [3, 1]  # the re-test is not a fourth seed (rows: best MAE first)
    assert table["evaluation"] == ["", "eval best data.num_points=100"]
    code, out, err = run_main(capsys, sweep, "--include-evals")
    assert code == 0 and err == [] and len(out.splitlines()) == 4


def test_an_evaluation_of_a_run_still_training_is_labelled_so(sweep):
    """eval.py of a run whose training had not ended tests its weights so far: its row
    read as a re-test of the run's result."""
    folder = sweep / "0" / "eval" / "2026-01-01_00-00-00-000000"
    results = json.loads((folder / "metrics.json").read_text())
    (folder / "metrics.json").write_text(json.dumps({**results, "run_still_training": True}))
    table = columns(compare(find_runs([sweep], include_evals=True)))
    assert table["evaluation"] == ["", "eval best while training data.num_points=100"]


def test_an_evaluation_while_training_takes_the_model_and_data_of_the_ended_training(sweep, capsys):
    """eval.py of a run still training records no ``run`` (the training had written no
    metrics.json yet): once the training ended, its row is of the run's model and data,
    not ``?``, a data set of its own, where it was best alone and --relative-to found no
    baseline."""
    write_run(sweep / "lstm", 3.0, model="lstm")
    folder = sweep / "0" / "eval" / "2026-01-01_00-00-00-000000"
    results = json.loads((folder / "metrics.json").read_text())
    results.update(run=None, run_still_training=True)
    (folder / "metrics.json").write_text(json.dumps(results))
    table = columns(compare(find_runs([sweep], include_evals=True)))
    assert table["model"] == ["cloudlstm", "lstm", "cloudlstm"]
    assert table["data"] == ["synthetic"] * 3
    code, out, err = run_main(capsys, sweep, "--include-evals", "--relative-to", "lstm")
    assert code == 0 and len(out.splitlines()) == 5, err


def test_the_baseline_is_its_training_run_never_a_re_test_of_it(tmp_path, capsys):
    """An evaluation of an lstm run sorts before that run's own metrics.json: every row was
    over the re-test's numbers, the lstm row off 1 and the re-test's row at 1."""
    for seed in (0, 1):
        write_run(tmp_path / "lstm" / str(seed), 2.0 + seed, model="lstm", seed=seed)
        write_run(tmp_path / "cloud" / str(seed), 1.0, seed=seed)
    evaluation_of(tmp_path / "lstm" / "0", 2.5, model="lstm")
    args = ["--relative-to", "lstm", "--include-evals", "--metrics", "mae", "--format", "csv"]
    code, out, _ = run_main(capsys, tmp_path, *args)
    assert code == 0
    rows = {(r["model"], r["evaluation"]): r for r in csv.DictReader(io.StringIO(out))}
    assert float(rows["lstm", ""]["mae_mean"]) == 1.0
    assert float(rows["lstm", "eval best data.num_points=100"]["mae_mean"]) == 1.25
    assert float(rows["cloudlstm", ""]["mae_mean"]) == pytest.approx((1 / 2 + 1 / 3) / 2)
    code, _, err = run_main(capsys, tmp_path / "lstm" / "0" / "eval", tmp_path / "cloud", *args)
    assert code == 2 and err == [
        "compare: --relative-to lstm: its runs here are evaluations (eval.py's re-tests) only; "
        "give the folders of its training runs too"
    ]


def test_a_folder_of_left_out_runs_only_says_so_in_one_line(tmp_path, capsys):
    """Only debug runs, or only re-tests: a note that they were left out, then "no
    metrics.json with test results" as if none had been found."""
    for seed in (0, 1):
        write_run(tmp_path / "debug" / str(seed), 1.0, seed=seed)
        config = tmp_path / "debug" / str(seed) / "config.yaml"
        config.write_text(config.read_text() + "task_name: debug\n")
    code, out, err = run_main(capsys, tmp_path / "debug")
    assert (code, out) == (2, "") and err == [
        f"compare: no run to compare under {tmp_path / 'debug'}: left out 2 run(s) of "
        "debug=... (task_name debug: a batch or a few, no result); --include-debug shows them"
    ]
    evaluation_of(tmp_path / "debug" / "0", 2.0)
    code, out, err = run_main(capsys, tmp_path / "debug" / "0" / "eval")
    assert (code, out) == (2, "") and err == [
        f"compare: no run to compare under {tmp_path / 'debug' / '0' / 'eval'}: left out 1 "
        "evaluation(s) of eval.py (re-tests of runs); --include-evals shows them"
    ]
    code, out, err = run_main(capsys, tmp_path / "debug")
    assert (code, out) == (2, "") and err == [
        f"compare: no run to compare under {tmp_path / 'debug'}: left out 1 evaluation(s) of "
        "eval.py (re-tests of runs) and 2 run(s) of debug=... (task_name debug: a batch or a "
        "few, no result); --include-evals and --include-debug show them"
    ]
    assert run_main(capsys, tmp_path / "debug", "--include-evals")[0] == 0


def test_the_seeds_re_tests_by_one_command_share_a_row(sweep):
    """Each seed's best checkpoint is a file of its own step and the command ran with its
    own threads: the re-tests are still the seeds of one evaluation."""
    for seed, step in ((1, 4000), (2, 2500)):
        run = sweep / str(seed)
        folder = evaluation_of(run, 9.0 + seed)
        results = json.loads((folder / "metrics.json").read_text())
        results["checkpoint"] = f"checkpoints/epoch_003-step_{step:06d}.ckpt"
        results["overrides"] += ["torch_threads=1"]
        (folder / "metrics.json").write_text(json.dumps(results))
    table = columns(compare(find_runs([sweep], include_evals=True)))
    assert table["n"] == [3, 3]
    assert table["evaluation"] == ["", "eval best data.num_points=100"]


def test_a_run_re_tested_twice_alike_is_one_sample_with_a_warning(sweep, capsys):
    """eval.py run=<seed 0> run twice: the evaluation row had n=2 and std 0 from one seed.
    A re-test of another seed, or with other overrides, is another sample or row."""
    first = sweep / "0" / "eval" / "2026-01-01_00-00-00-000000"  # the fixture's
    shutil.copytree(first, sweep / "0" / "eval" / "2026-01-02_00-00-00-000000")
    evaluation_of(sweep / "1", 11.0)
    other = sweep / "2" / "eval" / "2026-01-01_00-00-00-000000"
    shutil.copytree(first, other)  # seed 0's re-test, copied to seed 2's run: still seed 0's
    results = json.loads((other / "metrics.json").read_text())
    results["overrides"] = ["data.num_points=50"]
    (other / "metrics.json").write_text(json.dumps(results))
    args = ["--include-evals", "--metrics", "mae", "--format", "csv"]
    code, out, err = run_main(capsys, sweep, *args)
    assert code == 0
    rows = {row["evaluation"]: row for row in csv.DictReader(io.StringIO(out))}
    retests = rows["eval best data.num_points=100"]
    assert retests["n"] == "2" and float(retests["mae_mean"]) == 10.0  # seeds 0 and 1
    assert rows["eval best data.num_points=50"]["n"] == "1"
    assert err == [
        "compare: warning: 0/eval/2026-01-02_00-00-00-000000 re-tests the run and seed (0) "
        "that 0/eval/2026-01-01_00-00-00-000000 re-tested, with the same checkpoint and "
        "overrides (eval best data.num_points=100): one sample, so it is left out, not "
        "counted as another seed; remove one of them"
    ]


def test_labels_name_only_what_tells_a_models_groups_apart(tmp_path):
    """Runs of two commits: cloudlstm's class path moved between them, convlstm's runs are
    all of the later commit. The path is a grouping key for every model, but only
    cloudlstm's labels need it; convlstm's label is its name."""
    moved = {"_target_": "cloudlstm.models.old.CloudLSTM"}
    write_run(tmp_path / "a0", 1.0, seed=0, model_keys=moved)
    write_run(tmp_path / "a1", 2.0, seed=1)
    for seed in (0, 1):
        write_run(tmp_path / f"c{seed}", 3.0, model="convlstm", seed=seed)
    labels = sorted(g.label for g in group_runs(find_runs([tmp_path])))
    assert labels == [
        "cloudlstm _target_=cloudlstm.models.cloudlstm",
        "cloudlstm _target_=cloudlstm.models.old.CloudLSTM",
        "convlstm",
    ]


def test_an_option_left_empty_is_the_runs_from_before_it(tmp_path):
    """A run from before ``data.source.covariates`` existed and a run with its empty
    default are seeds of one setting; a run with covariates is a row of its own."""
    write_run(tmp_path / "before", 1.0, seed=0)
    for seed, covariates in ((1, []), (2, None), (3, ["TEMP"])):
        write_run(tmp_path / str(seed), 2.0, seed=seed)
        cfg = yaml.safe_load((tmp_path / str(seed) / "config.yaml").read_text())
        cfg["data"] = {"source": {"covariates": covariates}}
        (tmp_path / str(seed) / "config.yaml").write_text(yaml.safe_dump(cfg))
    table = columns(compare(find_runs([tmp_path])))
    assert table["data.source.covariates"] == ["", "['TEMP']"] and table["n"] == [3, 1]


def test_the_units_a_run_recorded_split_no_rows(tmp_path):
    """data.source.units labels the data for eval.py's check and changes no number: runs
    from before it, runs at its null default and runs that name their units are seeds of
    one setting and one data set."""
    write_run(tmp_path / "before", 1.0, seed=0, digest="d")
    for seed, units in ((1, None), (2, {"value": "mph"})):
        write_run(tmp_path / str(seed), 2.0, seed=seed, digest="d")
        cfg = yaml.safe_load((tmp_path / str(seed) / "config.yaml").read_text())
        cfg["data"] = {"source": {"units": units}}
        (tmp_path / str(seed) / "config.yaml").write_text(yaml.safe_dump(cfg))
    table = columns(compare(find_runs([tmp_path])))
    assert table["n"] == [3]
    assert not [name for name in table if "units" in name]


def test_the_papers_coordinates_are_one_setting_however_written(tmp_path):
    """model.coordinates: runs from before it, at its null default and at ``absolute`` are
    seeds of the paper's DConv; ``relative`` is a row of its own."""
    write_run(tmp_path / "before", 1.0, seed=0)
    for seed, coordinates in ((1, None), (2, "absolute"), (3, "relative")):
        write_run(tmp_path / str(seed), 2.0, seed=seed)
        cfg = yaml.safe_load((tmp_path / str(seed) / "config.yaml").read_text())
        cfg["model"] = {**cfg.get("model", {}), "coordinates": coordinates}
        (tmp_path / str(seed) / "config.yaml").write_text(yaml.safe_dump(cfg))
    table = columns(compare(find_runs([tmp_path])))
    assert dict(zip(table["model.coordinates"], table["n"], strict=True)) == {"": 3, "relative": 1}


def test_a_setting_added_since_reads_as_what_runs_before_it_did(tmp_path):
    """Runs from before ``data.holdout_history`` and ``module.calibrate`` existed did what
    their defaults do: seeds of one setting with runs of today at those defaults; a run
    with another value of either is a row of its own."""
    forms = (
        {},
        {"data": {"holdout_history": True}, "module": {"calibrate": "none"}},
        {"data": {"holdout_history": True}, "module": {"calibrate": "conformal"}},
        {"data": {"holdout_history": False}, "module": {"calibrate": "none"}},
    )
    for seed, form in enumerate(forms):
        write_run(tmp_path / str(seed), 1.0 + seed, seed=seed)
        cfg = yaml.safe_load((tmp_path / str(seed) / "config.yaml").read_text())
        (tmp_path / str(seed) / "config.yaml").write_text(yaml.safe_dump({**cfg, **form}))
    table = columns(compare(find_runs([tmp_path])))
    rows = zip(table["module.calibrate"], table["data.holdout_history"], strict=True)
    assert dict(zip(rows, table["n"], strict=True)) == {
        ("none", "True"): 2,
        ("conformal", "True"): 1,
        ("none", "False"): 1,
    }


def test_runs_from_before_gradient_accumulation_are_seeds_of_runs_without_it(tmp_path):
    """``trainer.accumulate_grad_batches`` entered the trainer's defaults at 1: runs from
    before it pool with today's at 1, and one that accumulates is a row of its own."""
    for seed, trainer in enumerate(
        ({}, {"accumulate_grad_batches": 1}, {"accumulate_grad_batches": 4})
    ):
        write_run(tmp_path / str(seed), 1.0 + seed, seed=seed)
        cfg = yaml.safe_load((tmp_path / str(seed) / "config.yaml").read_text())
        cfg["trainer"].update(trainer)
        (tmp_path / str(seed) / "config.yaml").write_text(yaml.safe_dump(cfg))
    table = columns(compare(find_runs([tmp_path])))
    assert table["trainer.accumulate_grad_batches"] == ["1", "4"] and table["n"] == [2, 1]


def test_runs_from_before_early_stoppings_check_setting_pool_with_todays(tmp_path):
    """``callbacks.early_stopping.check_on_train_epoch_end`` entered the callback's config
    at false: runs with early stopping from before it pool with today's; a run that checks
    at epochs' ends is a row of its own, and so is a run without early stopping, which
    does not read as having the setting."""
    stopping = {"_target_": "lightning.pytorch.callbacks.EarlyStopping", "patience": 5}
    forms = (
        {"early_stopping": stopping},
        {"early_stopping": {**stopping, "check_on_train_epoch_end": False}},
        {"early_stopping": {**stopping, "check_on_train_epoch_end": True}},
        {},
    )
    for seed, callbacks in enumerate(forms):
        write_run(tmp_path / str(seed), 1.0 + seed, seed=seed)
        cfg = yaml.safe_load((tmp_path / str(seed) / "config.yaml").read_text())
        (tmp_path / str(seed) / "config.yaml").write_text(
            yaml.safe_dump({**cfg, "callbacks": callbacks})
        )
    table = columns(compare(find_runs([tmp_path])))
    rows = zip(table["callbacks.early_stopping.check_on_train_epoch_end"], table["n"], strict=True)
    assert sorted(rows) == [("", 1), ("False", 2), ("True", 1)]


def test_a_config_of_an_older_form_is_read_in_todays(tmp_path):
    """A run from before classes moved (its training module in ``cloudlstm.lit``, Beijing's
    old datamodule holding its source's keys, model sizes copied from ``data_info``) and a
    run of today are seeds of one setting. One from before ``co_units`` loaded CO in µg/m³:
    a row of its own, as eval.py would rebuild it."""
    beijing = "cloudlstm.data.sources.beijing"
    today = {
        "module": {"_target_": "cloudlstm.engine.module.ForecastModule"},
        "data": {
            "_target_": "cloudlstm.data.pipeline.datamodule.PointCloudDataModule",
            "batch_size": 32,
            "source": {"_target_": f"{beijing}.BeijingSource", "root": "/r", "co_units": "mg/m3"},
        },
    }
    old = {
        "module": {"_target_": "cloudlstm.lit.ForecastModule"},
        "data": {
            "_target_": f"{beijing}.BeijingDataModule",
            "batch_size": 32,
            "root": "/r",
            "co_units": "mg/m3",
        },
        "data_info": {"num_channels": 6, "output_steps": 12},
    }
    older = {**old, "data": {k: v for k, v in old["data"].items() if k != "co_units"}}
    for seed, form in enumerate((today, old, older)):
        run = tmp_path / str(seed)
        write_run(run, 1.0 + seed, seed=seed)
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        cfg["module"].update(form["module"])
        cfg["data"] = form["data"]
        if form is not today:  # old configs filled the model's sizes from the data
            cfg["data_info"] = form["data_info"]
            cfg["model"].update(form["data_info"])
        (run / "config.yaml").write_text(yaml.safe_dump(cfg))

    table = columns(compare(find_runs([tmp_path])))
    assert table["data.source.co_units"] == ["mg/m3", "ug/m3"] and table["n"] == [2, 1]
    assert table["mae"][0].mean == 1.5
    assert [c for c in table if c.startswith(("model.", "module.", "data."))] == [
        "data.source.co_units"
    ]


def test_an_evaluation_of_another_runs_weights_is_named_by_their_path(sweep):
    """``eval.py run=<seed 0> ckpt=<seed 1's last.ckpt>``: the row says whose weights it
    tested, where the file's name alone would read as seed 0's own last checkpoint."""
    folder = evaluation_of(sweep / "1", 9.0)
    other = sweep / "2" / "checkpoints" / "last.ckpt"
    for name, change in (("metrics.json", {"checkpoint": str(other)}), ("config.yaml", None)):
        path = folder / name
        if change:
            path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
        else:
            cfg = yaml.safe_load(path.read_text())
            path.write_text(yaml.safe_dump({**cfg, "ckpt": str(other)}))
    table = columns(compare(find_runs([sweep], include_evals=True)))
    assert sorted(table["evaluation"])[1:] == [
        f"eval {other} data.num_points=100",
        "eval best data.num_points=100",
    ]
