"""``compare --wandb``: the seed-aggregated table as one offline W&B run, read back from the
run file that ``wandb sync`` would upload (tests/wandb_reader.py), so nothing is mocked; and
the Hydra callback that runs the comparison when a multirun ends."""

from __future__ import annotations

import io
import json
import logging
import math
import subprocess
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from cloudlstm.assembly.config import describe_run
from cloudlstm.cli.compare.command import main
from cloudlstm.cli.compare.hydra_callback import CompareSweep
from cloudlstm.compare import Stat, compare, find_runs
from cloudlstm.compare.formats import cell_text
from cloudlstm.compare.wandb_run import _init_args
from tests.conftest import PYTHON, ROOT, TINY, compose_train, subprocess_env
from tests.test_compare import (
    NO_SMAE_CELLS,
    NO_SMAE_CURVE,
    PNG_MAGIC,
    with_metric,
    write_run,
    write_runs_without_smae_steps,
)
from tests.test_compare_html import markdown_rows
from tests.wandb_reader import finished_run

GROUP = "sweep-2026-01-01_12-00-00"


def join_group(run: Path, group: str) -> None:
    """Record the W&B group in metrics.json, as train.py does."""
    path = run / "metrics.json"
    results = json.loads(path.read_text())
    results["run"]["group"] = group
    path.write_text(json.dumps(results))


@pytest.fixture(scope="module", autouse=True)
def fresh_wandb_afterwards():
    """W&B keeps one service and its settings per process: shut them down after this
    module, so that the runs of later tests start as a new process's would."""
    yield
    import wandb

    wandb.teardown()


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """compare --wandb on k=3 over three seeds, k=6 over one and an lstm on airq, all of
    one sweep: the markdown it printed, its stderr, and the run folder and file read back."""
    root = tmp_path_factory.mktemp("wandb") / "sweep"
    runs = {f"k3_{seed}": dict(mae=mae, seed=seed) for seed, mae in enumerate((1.0, 2.0, 4.0))}
    runs |= {"k6": dict(mae=0.5, k=6), "airq": dict(mae=7.0, model="lstm", data="airq")}
    for name, kwargs in runs.items():
        write_run(root / name, kwargs.pop("mae"), **kwargs)
        join_group(root / name, GROUP)
    # the outcome of a hyperparameter search over these runs, as the Optuna sweeper writes it
    search = {"best_value": 0.5, "best_params": {"model.k": 6}, "best_trial": 3}
    search["param_importance"] = {"model.k": 0.75, "optimizer.lr": 0.25}
    (root / "optimization_results.yaml").write_text(yaml.safe_dump(search))
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as env, redirect_stdout(out), redirect_stderr(err):
        env.delenv("WANDB_MODE", raising=False)  # offline is the default
        env.delenv("WANDB_DIR", raising=False)  # the run goes into the sweep folder
        code = main([str(root), "--wandb"])
    assert code == 0, err.getvalue()
    run_file, run = finished_run(root)
    lines = err.getvalue().splitlines()
    return markdown_rows(out.getvalue()), lines, run_file.parent, run


def test_one_offline_run_named_after_the_sweep_in_its_group(logged):
    _, err, folder, run = logged
    assert err[-1] == f"wrote W&B run {folder}; publish it with: wandb sync {folder}"
    assert folder.name.startswith("offline-run-")
    assert run.name == "compare-sweep" and run.group == GROUP
    assert set(run.tags) == {"compare", "synthetic", "airq"}
    assert run.config["runs"] == 5 and run.config["settings"] == 3


def test_tables_hold_the_markdown_rows_and_values(logged):
    (header, *rows), _, folder, run = logged
    metrics = ["mae", "rmse", "psnr", "ssim", "smae"]
    seen = []
    for data in ("synthetic", "airq"):
        table = json.loads((folder / "files" / run.summary[f"{data}/table/path"]).read_text())
        columns = table["columns"]
        for values in table["data"]:
            row = dict(zip(columns, values, strict=True))
            # the markdown cell of each metric, rebuilt from the logged mean and std
            cells = [
                cell_text(
                    Stat(row[f"{m}_mean"], math.nan if (s := row[f"{m}_std"]) is None else s), " ± "
                )
                for m in metrics
            ]
            seen.append([row["model"], row["data"], str(row["n"]), *cells])
    expected = [
        [r[header.index(c)].strip("*") for c in ("model", "data", "n", *metrics)] for r in rows
    ]
    assert sorted(seen) == sorted(expected)
    assert ["cloudlstm", "synthetic", "3", "2.3 ± 1.5"] in [row[:4] for row in seen]


def test_horizon_line_plot_images_and_best_setting(logged):
    _, _, folder, run = logged
    for data in ("synthetic", "airq"):
        plot = run.config[f"_wandb/visualize/{data}/mae_vs_horizon"]["panel_config"]
        assert plot["panelDefId"] == "wandb/lineseries/v0"
        assert plot["stringSettings"]["xname"] == "forecast step"
        for name in ("horizon_plot", "bar_chart"):
            png = folder / "files" / run.summary[f"{data}/{name}/path"]
            assert png.read_bytes()[:8] == PNG_MAGIC
    curves = json.loads(
        (folder / "files" / run.summary["synthetic/mae_vs_horizon_table/path"]).read_text()
    )
    assert len(curves["data"]) == 2 * 3  # two settings, three steps each
    assert run.summary["synthetic/best"] == "cloudlstm k=6"
    assert run.summary["synthetic/best_mae"] == 0.5


def test_rows_without_the_curves_metric_have_no_line_and_are_named(tmp_path, monkeypatch):
    """Such a row failed the whole W&B run (exit 2) where the table alone showed its cells
    empty: the line plot has the rows with per-step values, and stderr names the others."""
    root = tmp_path / "sweep"
    write_runs_without_smae_steps(root)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_DIR", raising=False)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(root), "--horizon-metric", "smae", "--wandb"])
    lines = err.getvalue().splitlines()
    assert code == 0, lines
    assert lines[:2] == [NO_SMAE_CELLS, NO_SMAE_CURVE] and lines[-1].startswith("wrote W&B run ")
    run_file, run = finished_run(root)
    folder = run_file.parent
    curves = json.loads(
        (folder / "files" / run.summary["synthetic/smae_vs_horizon_table/path"]).read_text()
    )
    assert len(curves["data"]) == 3  # the cloudlstm row's three steps
    assert "airq/smae_vs_horizon_table" not in run.summary  # no row of airq has a line
    for name in ("horizon_plot", "bar_chart"):
        png = folder / "files" / run.summary[f"airq/{name}/path"]
        assert png.read_bytes()[:8] == PNG_MAGIC


def test_the_best_setting_is_the_best_scored_one_and_none_where_none_scores(tmp_path, monkeypatch):
    """A NaN mean (nothing scored) is neither less nor more than a number: ranked among
    them, it left them out of order, and the best setting named was another."""
    root = tmp_path / "sweep"
    for model, mae in (("a", math.nan), ("b", 2.0), ("c", 1.0), ("d", 3.0)):
        write_run(root / model, 1.0, model=model)
        with_metric(root / model, "mae", mae)
    write_run(root / "airq", 1.0, data="airq")  # its only row scores nothing: no best
    with_metric(root / "airq", "mae", math.nan)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_DIR", raising=False)
    with redirect_stdout(io.StringIO()), redirect_stderr(err := io.StringIO()):
        code = main([str(root), "--wandb"])
    assert code == 0, err.getvalue()
    _, run = finished_run(root)
    assert (run.summary["synthetic/best"], run.summary["synthetic/best_mae"]) == ("c", 1.0)
    assert "airq/best" not in run.summary and "airq/best_mae" not in run.summary


def test_no_group_for_runs_of_several_sweeps(tmp_path):
    write_run(tmp_path / "a", 1.0)
    write_run(tmp_path / "b", 2.0, seed=1)
    join_group(tmp_path / "a", GROUP)
    runs = find_runs([tmp_path])
    assert _init_args(runs, [tmp_path], ["synthetic"], compare(runs))["group"] is None


def test_a_sweep_over_models_is_one_group_and_its_comparison_joins_it(tmp_path):
    """``-m model=cloudlstm,persistence``: each model's jobs were a group of their own, so
    the sweep was two groups and its comparison run joined neither."""
    for job, model in enumerate(("cloudlstm", "persistence")):
        cfg = compose_train(tmp_path, [f"model={model}"])
        with read_write(cfg.hydra), open_dict(cfg.hydra):
            cfg.hydra.mode = "MULTIRUN"
            cfg.hydra.sweep.dir = str(tmp_path / "multiruns" / "2026-01-01" / "12-00-00")
        HydraConfig.instance().set_config(cfg)
        assert describe_run(cfg)["group"] == GROUP
        write_run(tmp_path / "sweep" / str(job), 1.0 + job, model=model)
        join_group(tmp_path / "sweep" / str(job), GROUP)
    runs = find_runs([tmp_path / "sweep"])
    assert _init_args(runs, [tmp_path / "sweep"], ["synthetic"], compare(runs))["group"] == GROUP


# --- the Hydra callback: the comparison when a multirun ends --------------------------------


def run_sweep(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    """``train.py -m model.k=2,3`` of one tiny epoch each into ``tmp_path/sweep``, with
    ``extra`` overrides."""
    cmd = [
        *PYTHON,
        "train.py",
        "-m",
        "model.k=2,3",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"paths.data_dir={tmp_path / 'data'}",
        *[a for a in TINY if not a.startswith(("trainer.max_epochs", "model.k="))],
        "trainer.max_epochs=1",
        "torch_threads=1",
        "report.figures=false",
        *extra,
    ]
    env = subprocess_env()
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_a_multirun_ends_with_its_comparison(tmp_path):
    """A real two-job sweep logging to W&B: the table printed, one W&B run beside the jobs'
    in their group, and the page where ``html`` asks for it."""
    sweep = tmp_path / "sweep"
    proc = run_sweep(tmp_path, "logger=wandb", "hydra.callbacks.compare.html=compare.html")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| cloudlstm | synthetic | 2 | 1 |" in proc.stdout
    assert f"wrote {sweep / 'compare.html'}" in proc.stderr
    _, run = finished_run(sweep)
    group = json.loads((sweep / "0" / "metrics.json").read_text())["run"]["group"]
    assert run.name == "compare-sweep" and run.group == group
    assert run.summary["synthetic/table/nrows"] == 2


def test_a_sweep_started_again_compares_around_a_damaged_run(tmp_path):
    """A sweep run again in its folder, one finished job's metrics.json damaged in between:
    that job fails, the other is not redone, and the comparison at the end names the damaged
    file on one line and compares the other job (it failed, naming the file, before)."""
    first = run_sweep(tmp_path, "logger=csv")
    assert first.returncode == 0, first.stderr[-3000:]
    damaged = tmp_path / "sweep" / "0" / "metrics.json"
    damaged.write_text("{")
    again = run_sweep(tmp_path, "logger=csv")
    output = again.stdout + again.stderr
    assert "comparison failed" not in output
    rows = [line for line in again.stdout.splitlines() if line.startswith("| cloudlstm |")]
    assert len(rows) == 1 and rows[0].startswith("| cloudlstm | synthetic | 1 |")
    skipped = [line for line in output.splitlines() if "compare: skipped (no row):" in line]
    assert len(skipped) == 1 and f"{damaged} is damaged" in skipped[0], output[-3000:]
    # the job was refused for its file, not its settings: the closing line says no more
    assert "Each job was refused as given" in output and "settings were refused" not in output


def callback_config(sweep: Path, logger: str = "wandb") -> DictConfig:
    """What Hydra hands on_multirun_end, as far as the callback reads it."""
    return OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}, "logger": {logger: {}}})


def test_callback_is_registered_for_every_sweep(tmp_path):
    cfg = compose_train(tmp_path, TINY)
    assert cfg.hydra.callbacks.compare._target_ == f"{CompareSweep.__module__}.CompareSweep"
    assert cfg.hydra.callbacks.compare.wandb == "auto" and cfg.hydra.callbacks.compare.html is None


def test_callback_without_runs_or_with_a_broken_one_does_not_fail_the_sweep(
    tmp_path, capsys, caplog
):
    caplog.set_level(logging.INFO)
    callback = CompareSweep(html="compare.html")
    callback.on_multirun_end(callback_config(tmp_path / "never-made"))
    (tmp_path / "failed").mkdir()  # a job that died before testing
    (tmp_path / "failed" / "metrics.json").write_text(json.dumps({"run": {}}))
    callback.on_multirun_end(callback_config(tmp_path))
    assert [r.getMessage() for r in caplog.records] == [
        f"compare: no finished runs under {tmp_path / 'never-made'} to compare",
        f"compare: no finished runs under {tmp_path} to compare",
    ]
    (tmp_path / "failed" / "metrics.json").write_text("{")  # damaged since it was written
    caplog.clear()
    callback.on_multirun_end(callback_config(tmp_path))
    skipped, nothing = caplog.records
    assert skipped.levelname == "WARNING"
    assert skipped.getMessage().startswith(
        f"compare: skipped (no row): {tmp_path / 'failed' / 'metrics.json'} is damaged"
    )
    assert nothing.getMessage() == f"compare: no finished runs under {tmp_path} to compare"
    assert not (tmp_path / "wandb").exists() and not (tmp_path / "compare.html").exists()
    assert capsys.readouterr().out == ""


def test_callback_logs_to_wandb_only_where_the_jobs_do(tmp_path, capsys):
    write_run(tmp_path / "0", 1.0)
    CompareSweep().on_multirun_end(callback_config(tmp_path, logger="csv"))
    assert capsys.readouterr().out.startswith("| model |")
    assert not (tmp_path / "wandb").exists()


def test_a_searchs_best_trial_and_parameter_importance(logged):
    _, _, folder, run = logged
    assert run.summary["search/best_value"] == 0.5 and run.summary["search/best_trial"] == 3
    assert run.summary["search/best_params"] == {"model.k": 6}
    table = json.loads((folder / "files" / run.summary["search/param_importance/path"]).read_text())
    assert table["columns"] == ["parameter", "importance"]
    assert table["data"] == [["model.k", 0.75], ["optimizer.lr", 0.25]]


def test_each_study_of_a_folder_is_logged_under_its_name(tmp_path, monkeypatch):
    """A second study in the same sweep folder writes ``optimization_results_<study>.yaml``:
    the comparison logged only the default study's file and left the other out."""
    root = tmp_path / "sweep"
    write_run(root / "0", 1.0)
    for name, value in (("hparams_search", 0.5), ("other", 0.25)):
        found = {"study_name": name, "best_value": value, "best_trial": 1}
        found["param_importance"] = {"model.k": 1.0}
        file = "optimization_results" + ("" if name == "hparams_search" else f"_{name}")
        (root / f"{file}.yaml").write_text(yaml.safe_dump(found))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_DIR", raising=False)
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        assert main([str(root), "--wandb"]) == 0
    _, run = finished_run(root)
    assert run.summary["search/hparams_search/best_value"] == 0.5
    assert run.summary["search/other/best_value"] == 0.25
    assert "search/other/param_importance/path" in run.summary


def test_an_online_comparison_without_an_api_key_is_one_line(tmp_path):
    write_run(tmp_path / "sweep" / "k3", 1.0)
    plain = {k: v for k, v in subprocess_env().items() if not k.startswith("WANDB_")}
    done = subprocess.run(
        [*PYTHON, "-m", "cloudlstm.cli.compare", str(tmp_path / "sweep"), "--wandb"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**plain, "HOME": str(tmp_path), "WANDB_CONFIG_DIR": str(tmp_path / "wandb_config"),
             "WANDB_MODE": "online", "WANDB_SILENT": "true"},
    )  # fmt: skip
    assert done.returncode != 0 and "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if "W&B" in line]
    assert len(lines) == 1 and "W&B could not start the run: No API key configured" in lines[0]
