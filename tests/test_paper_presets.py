"""The paper presets (conf/experiment/paper/): their job lists, configs and ``scale=cpu`` form.

Jobs are expanded from ``hydra.sweeper.params`` as Hydra's basic sweeper does and composed
one by one; nothing is generated at paper size (City 1 alone would take ~20 GB).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import PYTHON, ROOT, compose_train, subprocess_env
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from cloudlstm.assembly.config import describe_run
from cloudlstm.compare import flatten
from cloudlstm.compare.paper import TABLES, load_table, paper_dataset, paper_model

# preset: (jobs, the paper table its runs are compared with; None: a figure, J = that)
PRESETS = {
    "airq": (108, "metric2"),
    "airq_long": (60, 72),
    "mobile": (108, "metric"),
    "mobile_long": (60, 36),
    "seasonal": (96, "seasonal"),
    "outliers": (48, "in_and_out"),
    "k_sweep": (18, "metric2"),
    "cells": (18, "metric2"),
    "attention": (12, "metric2"),
    "knn": (84, "metric3"),
}
CPU_JOBS = {"knn": 48}  # K up to 9 on the stand-in's 16 stations; the others keep theirs


def sweep_jobs(tmp_path: Path, *overrides: str) -> list[list[str]]:
    """The override lists of the jobs ``python train.py <overrides>`` launches."""
    cfg = compose_train(tmp_path, list(overrides))
    args = [f"{key}={value}" for key, value in cfg.hydra.sweeper.params.items()]
    parsed = OverridesParser.create().parse_overrides([*args, *overrides])
    return BasicSweeper.split_arguments(parsed, None)[0]


def distinct(jobs: list[list[str]]) -> list[list[str]]:
    """One job per combination of swept values but seeds and data sets (which change only a
    value of the composed config), plus one job per data set."""
    chosen, combos, data_sets = [], set(), set()
    for job in jobs:
        data_set = tuple(
            o for o in job if o.startswith(("data.source.cluster=", "data.source.city="))
        )
        combo = tuple(o for o in job if o not in data_set and not o.startswith("seed="))
        if combo not in combos or data_set not in data_sets:
            chosen.append(job)
            combos.add(combo)
            data_sets.add(data_set)
    return chosen


def keys(cfg: DictConfig) -> dict:
    """The flattened job config as compare reads it from a run's config.yaml."""
    return flatten(OmegaConf.to_container(cfg, resolve=False))


@pytest.mark.parametrize("name", PRESETS)
def test_preset_jobs_compose_and_match_their_paper_table(tmp_path, name):
    count, table = PRESETS[name]
    jobs = sweep_jobs(tmp_path, f"experiment=paper/{name}")
    assert len(jobs) == count and len({tuple(job) for job in jobs}) == count
    assert sorted({job[0] for job in jobs}) == ["seed=0", "seed=1", "seed=2"]
    models, datasets = set(), set()
    for job in distinct(jobs):
        cfg = compose_train(tmp_path, job)
        assert cfg.trainer.max_epochs == 100 and cfg.callbacks.early_stopping.patience == 10
        assert cfg.data.batch_size == 32 and "paper" in cfg.tags
        models.add(paper_model(keys(cfg)))
        datasets.add(paper_dataset(keys(cfg)))
        steps = (cfg.data.input_steps, cfg.data.output_steps)
        if isinstance(table, str):  # its runs meet the table's conditions (cloudlstm.compare.paper)
            assert steps == TABLES[table].steps
            assert (cfg.data.num_points is not None) == TABLES[table].subset
        else:
            assert steps[1] == table
    if isinstance(table, str):
        published = {row.model for row in load_table(table)}
        assert models - {None} <= published  # None: persistence, not in the paper
        assert datasets == {row.dataset for row in load_table(table)}
        if name in ("airq", "mobile", "seasonal", "outliers"):
            assert models - {None} == published
        if name == "knn":  # its CloudLSTM row comes from experiment=paper/airq
            assert published - models == {"CloudLSTM (K=3)"}


def test_paper_settings_of_the_presets(tmp_path):
    def job(name: str, *overrides: str) -> DictConfig:
        return compose_train(tmp_path, [f"experiment=paper/{name}", *overrides])

    airq = job("airq", "data=airq", "data.source.cluster=B", "model=cloudlstm_k3")
    assert airq.data.source._target_.endswith("UrbanAirSource") and airq.data.outliers == "dbscan"
    assert (airq.model.k, airq.model.hidden_channels, airq.model.num_layers) == (3, 36, 2)
    mobile = job("mobile", "data=mobile", "data.source.city=city1")
    source = mobile.data.source
    assert (source.num_antennas, source.num_days, source.num_services) == (None, 85, 38)
    seasonal = job("seasonal", "data=mobile", "data.seasonal=true")
    assert seasonal.data.num_points == 100 and seasonal.data.source.city == "city1"
    moved = job("outliers", "data=airq", "data.outlier_shift=0.5")
    assert (moved.data.num_points, moved.data.outlier_count, moved.data.outliers) == (50, 10, None)
    # a job's name and group, as train.py gives them to the loggers
    with read_write(airq.hydra), open_dict(airq.hydra):
        airq.hydra.mode = "MULTIRUN"
        airq.hydra.sweep.dir = str(tmp_path / "multiruns" / "2026-01-02" / "03-04-05")
    HydraConfig.instance().set_config(airq)
    run = describe_run(airq)
    assert run["name"] == "cloudlstm_k3-airq-clusterB-s42"
    assert run["group"] == "paper/airq-sweep-2026-01-02_03-04-05"
    HydraConfig.instance().set_config(mobile)
    assert describe_run(mobile)["name"] == "cloudlstm-mobile-city1-s42"


@pytest.mark.parametrize("name", PRESETS)
def test_cpu_form_shrinks_the_preset(tmp_path, name):
    jobs = sweep_jobs(tmp_path, f"experiment=paper/{name}", "scale=cpu")
    assert len(jobs) == CPU_JOBS.get(name, PRESETS[name][0])
    cfg = compose_train(tmp_path, jobs[-1])
    assert cfg.trainer.accelerator == "cpu" and cfg.trainer.max_epochs == 2
    assert (cfg.trainer.limit_train_batches, cfg.data.batch_size) == (3, 4)
    assert list(cfg.logger) == ["csv"] and not cfg.report.figures
    data, source = cfg.data, cfg.data.source
    if "cluster" in source:  # the synthetic stand-in of Urban Air
        assert source._target_ == "cloudlstm.data.sources.stand_in.SyntheticClusters"
        assert source.clusters[source.cluster].num_points <= 27 and source.num_channels == 6
    else:
        assert source.num_antennas <= 40 and source.num_days <= 14 and source.num_services == 6
    # M, J and whether points are a subset stay, so compare --paper still finds the rows
    paper = compose_train(tmp_path, sweep_jobs(tmp_path, f"experiment=paper/{name}")[-1]).data
    assert (data.input_steps, data.output_steps) == (paper.input_steps, paper.output_steps)
    assert (data.num_points is None) == (paper.num_points is None)


@pytest.mark.slow
@pytest.mark.parametrize("form", [[], ["scale=cpu"]])
def test_every_job_of_every_preset_composes(tmp_path, form):
    for name in PRESETS:
        for job in sweep_jobs(tmp_path, f"experiment=paper/{name}", *form):
            cfg = compose_train(tmp_path, job)
            assert cfg.model._target_ and cfg.data._target_, job


def train_py(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [*PYTHON, "train.py", *args, f"paths.data_dir={tmp_path / 'data'}"]
    env = subprocess_env()
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def compare_paper(capsys, sweep: Path) -> list[str]:
    from cloudlstm.cli.compare.command import main

    assert main([str(sweep), "--paper", "metric2", "--metrics", "mae"]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.slow  # a paper preset trained at its CPU scale and compared: about 12 s
def test_cpu_form_of_a_preset_runs_to_a_paper_table(tmp_path, capsys):
    """Two jobs of experiment=paper/attention scale=cpu (one seed, one cluster, one epoch)."""
    sweep = tmp_path / "sweep"
    proc = train_py(
        tmp_path,
        "experiment=paper/attention",
        "scale=cpu",
        "seed=0",
        "data.source.cluster=B",
        "trainer.max_epochs=1",
        f"hydra.sweep.dir={sweep}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = {json.loads(p.read_text())["run"]["name"] for p in sweep.glob("*/metrics.json")}
    assert names == {
        "cloudlstm-synthetic-clusterB-s0",
        "attention_cloudlstm-synthetic-clusterB-s0",
    }
    lines = compare_paper(capsys, sweep)
    assert lines[2].startswith("| Cluster B | CloudLSTM (K=9) | 1 | ")
    assert lines[3].startswith("| Cluster B | Attention CloudLSTM (K=9) | 1 | ")
    assert " | 9.73 ± 2.84 | " in lines[2]  # the paper's MAE of CloudLSTM on cluster B


@pytest.mark.slow
def test_whole_cpu_form_of_a_preset_runs_to_a_paper_table(tmp_path, capsys):
    """experiment=paper/attention scale=cpu as it is: 12 jobs (~2 minutes on 2 cores)."""
    sweep = tmp_path / "sweep"
    proc = train_py(tmp_path, "experiment=paper/attention", "scale=cpu", f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = [json.loads(p.read_text())["run"] for p in sweep.glob("*/metrics.json")]
    assert len(runs) == 12 and {run["group"] for run in runs} == {
        f"paper/attention-sweep-{sweep.parent.name}_{sweep.name}"
    }
    lines = compare_paper(capsys, sweep)[2:]
    assert [line.split(" | ")[:3] for line in lines] == [
        ["| Cluster A", "CloudLSTM (K=9)", "3"],
        ["| Cluster A", "Attention CloudLSTM (K=9)", "3"],
        ["| Cluster B", "CloudLSTM (K=9)", "3"],
        ["| Cluster B", "Attention CloudLSTM (K=9)", "3"],
    ]


def test_beijing_results_preset(tmp_path):
    """experiment=beijing (docs/results.md): every model of the results table x seeds 0-2
    under the default recipe, each job in a directory of its own model and seed, so the
    same command run again resumes or skips each job."""
    jobs = sweep_jobs(tmp_path, "experiment=beijing")
    assert len(jobs) == 48 and len({tuple(job) for job in jobs}) == 48
    assert jobs[0][0] == "seed=0" and jobs[15][0] == "seed=0"  # one seed of every model first
    directories, models = set(), set()
    for job in jobs:
        cfg = compose_train(tmp_path, job)
        assert cfg.recipe_name == "strong" and cfg.trainer.max_steps == 5000
        assert cfg.data.batch_size == 32 and cfg.data.stride == 1
        assert cfg.data.source._target_.endswith("BeijingSource")
        assert (cfg.data.input_steps, cfg.data.output_steps) == (12, 12)
        sweep = OmegaConf.to_container(cfg.hydra.sweep, resolve=True)
        assert sweep["dir"].endswith("beijing/strong")
        directories.add(sweep["subdir"])
        models.add(cfg.hydra.runtime.choices.model)
    assert len(directories) == 48 and "cloudgru_k3/seed_2" in directories
    assert len(models) == 16 and {"persistence", "linear", "stid", "convlstm"} <= models
    assert {"dcrnn", "graph_wavenet", "agcrn", "staeformer"} <= models
    paper = compose_train(tmp_path, [*jobs[0], "experiment=beijing", "recipe=paper"])
    assert paper.recipe_name == "paper" and paper.trainer.max_epochs == 100
    assert OmegaConf.to_container(paper.hydra.sweep, resolve=True)["dir"].endswith("beijing/paper")
