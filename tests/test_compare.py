"""The comparison tool (cli.compare) on run directories written by the tests themselves."""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import subprocess_env
from omegaconf import OmegaConf

from cloudlstm.cli.compare.command import main
from cloudlstm.compare import (
    CompareError,
    compare,
    find_runs,
    to_latex,
    to_markdown,
    write_csv,
)
from cloudlstm.compare.formats import significant
from cloudlstm.compare.groups import code_summary, group_runs
from cloudlstm.compare.table import build_table
from cloudlstm.engine.declared_metrics import metric_info
from cloudlstm.rundir.layout import config_text

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def taken(metric: str, value: float) -> float:
    """``value`` within the values ``metric`` takes (an error is at least 0, SSIM at most 1)."""
    info = metric_info(metric)
    return min(max(value, info.lowest), info.highest)


def write_run(
    path: Path,
    mae: float,
    *,
    model: str = "cloudlstm",
    data: str = "synthetic",
    seed: int = 0,
    k: int = 3,
    cell: str = "lstm",
    train_s: float = 10.0,
    config: bool = True,
    model_keys: dict | None = None,
    smae: bool = True,
    channels: dict[str, float] | None = None,
    code: list[dict] | None = None,
    machines: list[dict] | None = None,
    settings_changed: list[dict] | None = None,
    digest: str | None = None,
) -> None:
    """A run dir as train.py leaves it. PSNR and SSIM fall as MAE rises, so that the best
    row is the same for every metric, whether the best is the lowest or the highest.

    ``smae=False`` writes a metrics.json of before the scale-free MAE (``mae / 10`` here);
    ``channels`` maps channel names to their MAE (none by default); ``code`` and ``machines``
    the ``code`` and ``machine`` of each process that trained it (metrics.json's
    ``provenance``; neither: a run from before); ``settings_changed`` the changes
    allow_changes took as it trained; ``digest`` the hash of its data's readings (none: a
    run from before it was recorded)."""
    path.mkdir(parents=True)
    overall = {"mae": mae, "rmse": 2 * mae, "psnr": 40 - mae, "ssim": 1 - mae / 100}
    if smae:
        overall["smae"] = mae / 10
    results = {
        "run": {"model": model, "data": data, "tags": [model, data, f"k={k}"]},
        "num_params": 100 * k,
        "epochs": 2,
        "train_time_s": train_s,
        "test": {
            "overall": {m: {"mean": v, "std": 0.5} for m, v in overall.items()},
            "per_step": {
                m: {"mean": [taken(m, v - 0.1), v, taken(m, v + 0.1)], "std": [0.5] * 3}
                for m, v in overall.items()
            },
            "per_channel": {
                name: {"mae": {"mean": v, "std": 0.5}, "smae": {"mean": v / 10, "std": 0.05}}
                for name, v in (channels or {}).items()
            },
        },
    }
    if code is not None or machines is not None:
        processes = [{"from_step": 0} for _ in range(max(len(code or ()), len(machines or ())))]
        for process, c in zip(processes, code or (), strict=False):
            process["code"] = c
        for process, m in zip(processes, machines or (), strict=False):
            process["machine"] = m
        results["provenance"] = processes
    if settings_changed is not None:
        results["settings_changed"] = settings_changed
    if digest is not None:
        results["data"] = {"name": data, "values_digest": digest}
    (path / "metrics.json").write_text(json.dumps(results))
    if config:
        cfg = {
            "seed": seed,
            "model": {
                "_target_": f"cloudlstm.models.{model}",
                "k": k,
                "cell": cell,
                **(model_keys or {}),
            },
            "module": {"output_dir": str(path)},  # differs per run: never a group key
            "paths": {"output_dir": str(path)},
            "trainer": {"max_epochs": 2},
        }
        (path / "config.yaml").write_text(yaml.safe_dump(cfg))


def columns(table) -> dict:
    return {c.name: c.cells for c in table}


def run_main(capsys, *argv) -> tuple[int, str, list[str]]:
    """main's exit code, stdout and stderr lines."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


@pytest.fixture
def seeds(tmp_path) -> Path:
    """k=3 over three seeds (MAE 1, 2, 4) and k=6 with one seed (MAE 0.5)."""
    for seed, mae in enumerate((1.0, 2.0, 4.0)):
        write_run(tmp_path / "sweep" / str(seed), mae, seed=seed, train_s=10.0 * (seed + 1))
    write_run(tmp_path / "sweep" / "3", 0.5, k=6)
    return tmp_path / "sweep"


def test_a_run_under_two_of_the_folders_given_counts_once(seeds):
    # outputs/ and a sweep in it, a folder twice, a run's folder and its metrics.json
    roots = [seeds.parent, seeds, seeds / "0", seeds / "0" / "metrics.json", seeds]
    runs = find_runs(roots)
    assert sorted(run.path.name for run in runs) == ["0", "1", "2", "3"]
    assert columns(compare(runs))["n"] == [1, 3]


def test_a_copied_or_rerun_seed_counts_once_with_a_warning(seeds, capsys):
    """A run folder copied beside the sweep made n=4 of three seeds (a copy: std 0). The
    runs hold a quarter of their points out, drawn with ``data.holdout_seed``."""

    def held_out(run: str, seed: int) -> None:
        config = seeds / run / "config.yaml"
        draw = f"data:\n  holdout_points: 0.25\n  holdout_seed: {seed}\n"
        config.write_text(config.read_text() + draw)

    for seed in (0, 1, 2):
        held_out(str(seed), seed)
    shutil.copytree(seeds / "0", seeds / "0_copy")
    write_run(seeds / "9_rerun", 1.5, seed=2)  # seed 2 again, other results
    write_run(seeds / "7", 3.0, seed=7)  # a seed of its own: a fourth sample
    write_run(seeds / "8", 2.0, seed=1)  # seed 1 again, another draw of held-out points
    for run, seed in (("9_rerun", 2), ("7", 7), ("8", 5)):
        held_out(run, seed)
    code, out, err = run_main(capsys, seeds, "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["model.k"], r["n"]) for r in rows] == [("6", "1"), ("3", "5")]
    assert float(rows[1]["mae_mean"]) == pytest.approx((1 + 2 + 4 + 3 + 2) / 5)
    assert err == [
        "compare: warning: 0_copy has the settings and seed (0) of 0: a copy or a rerun, one "
        "sample, so it is left out, not counted as another seed (1 more such run(s) left "
        "out); remove it, or give it a seed of its own"
    ]


def test_best_cells_and_figures_are_chosen_within_the_runs_readings(tmp_path):
    """Two files under one data name (data=points), told apart by the readings' hash: each
    has its best row and its own figures; the 7 of one file was bold against the 22 of the
    other, and both were drawn in one figure."""
    from cloudlstm.compare.plots import plot

    write_run(tmp_path / "a0", 7.0, seed=0, digest="aaaa1111ffff")
    write_run(tmp_path / "a1", 9.0, seed=0, model="lstm", digest="aaaa1111ffff")
    write_run(tmp_path / "b0", 22.0, seed=0, digest="bbbb2222ffff")
    groups = group_runs(find_runs([tmp_path]))
    assert sorted(g.data for g in groups) == [
        "synthetic (aaaa1111)",
        "synthetic (aaaa1111)",
        "synthetic (bbbb2222)",
    ]
    rows = to_markdown(compare(find_runs([tmp_path]))).splitlines()[2:]
    bold = sorted(row.split(" | ")[0].strip("| ") for row in rows if "**7" in row or "**22" in row)
    assert bold == ["cloudlstm", "cloudlstm"] and not any("**9" in row for row in rows)
    names = sorted(p.name for p in plot(groups, "mae", tmp_path / "figures"))
    assert names == [
        "mae_bar_synthetic_aaaa1111.png",
        "mae_bar_synthetic_bbbb2222.png",
        "mae_horizon_synthetic_aaaa1111.png",
        "mae_horizon_synthetic_bbbb2222.png",
    ]


def test_a_repeat_under_another_folder_is_named_with_its_folder(tmp_path, capsys):
    """The same seed under two folders given: "0 has the settings and seed (0) of 0" named
    neither; each is named as found."""
    write_run(tmp_path / "a" / "0", 1.0, seed=0)
    write_run(tmp_path / "b" / "0", 2.0, seed=0)
    code, _, err = run_main(capsys, tmp_path / "a", tmp_path / "b")
    assert code == 0 and len(err) == 1
    assert err[0].startswith(
        f"compare: warning: {tmp_path / 'b' / '0'} has the settings and seed (0) of "
        f"{tmp_path / 'a' / '0'}: a copy or a rerun"
    )


def test_runs_on_other_readings_are_rows_of_their_own_never_seeds_of_one(tmp_path, capsys):
    """Two cities' files under two roots (data.source.root is no setting) were averaged as
    seeds of one row, 14 ± 10 of MAEs 7 and 22; with one seed, one was left out as a copy.
    A run from before the readings' hash was recorded shares any run's data."""
    write_run(tmp_path / "a0", 7.0, seed=0, digest="aaaa")
    write_run(tmp_path / "a1", 8.0, seed=1, digest="aaaa")
    write_run(tmp_path / "b0", 22.0, seed=0, digest="bbbb")  # seed 0 again, other readings
    write_run(tmp_path / "old", 9.0, seed=2)
    code, out, err = run_main(capsys, tmp_path, "--format", "csv")
    assert code == 0 and err == []
    rows = list(csv.DictReader(io.StringIO(out)))
    got = sorted((r["data.values_digest"], r["n"], float(r["mae_mean"])) for r in rows)
    assert got == [("", "1", 9.0), ("aaaa", "2", 7.5), ("bbbb", "1", 22.0)]
    shutil.rmtree(tmp_path / "b0")
    code, out, _ = run_main(capsys, tmp_path, "--format", "csv")  # one data set: one row
    (row,) = csv.DictReader(io.StringIO(out))
    assert row["n"] == "3" and "data.values_digest" not in row


def test_quantile_levels_written_another_way_are_one_setting(tmp_path, capsys):
    """[0.1,0.5,0.9] and [0.9,0.5,0.1] (the module sorts them) were two rows of n = 1."""
    for seed, levels in enumerate(([0.1, 0.5, 0.9], [0.9, 0.5, 0.1], 0.5, [0.5])):
        write_run(tmp_path / str(seed), 1.0 + seed, seed=seed)
        config = tmp_path / str(seed) / "config.yaml"
        cfg = yaml.safe_load(config.read_text())
        cfg["module"]["quantiles"] = levels
        config.write_text(yaml.safe_dump(cfg))
    code, out, _ = run_main(capsys, tmp_path, "--format", "csv")
    assert code == 0
    rows = sorted((r["module.quantiles"], r["n"]) for r in csv.DictReader(io.StringIO(out)))
    assert rows == [("[0.1, 0.5, 0.9]", "2"), ("[0.5]", "2")]


def test_scores_of_the_levels_mark_no_best_row_across_other_levels(tmp_path, capsys):
    """[0.001,0.5,0.999] scored the same forecast 13 % better on CRPS than [0.1,0.5,0.9]
    and was bolded the best; coverage and MAE still rank."""
    for name, levels, crps in (("wide", [0.1, 0.5, 0.9], 3.6), ("edges", [0.001, 0.5, 0.999], 3.1)):
        write_run(tmp_path / name, 1.0, k=len(name))
        metrics = json.loads((tmp_path / name / "metrics.json").read_text())
        metrics["test"]["overall"]["crps"] = {"mean": crps, "std": 0.1}
        (tmp_path / name / "metrics.json").write_text(json.dumps(metrics))
        config = yaml.safe_load((tmp_path / name / "config.yaml").read_text())
        config["module"]["quantiles"] = levels
        (tmp_path / name / "config.yaml").write_text(yaml.safe_dump(config))
    table = compare(find_runs([tmp_path]), metrics=["crps", "mae"])
    assert [c.better for c in table if c.name in ("crps", "mae")] == [None, "min"]
    code, _, err = run_main(capsys, tmp_path, "--metrics", "crps", "mae")
    assert code == 0
    assert err == [
        "compare: crps and pinball mark no best row: the rows forecast other levels "
        "(module.quantiles [0.001, 0.5, 0.999], [0.1, 0.5, 0.9]), and a score of the levels "
        "rates one forecast better under levels nearer 0 and 1; compare them on the coverage "
        "and width of one interval."
    ]
    shutil.rmtree(tmp_path / "edges")
    (crps,) = compare(find_runs([tmp_path]), metrics=["crps"])[-1:]
    assert crps.name == "crps" and crps.better == "min"


def test_debug_runs_are_left_out_with_a_note(seeds, capsys):
    """A debug=fdr run (one batch) was a row like any result, its callbacks: null a column
    for every callback setting."""
    write_run(seeds / "fdr", 0.1, model="linear")
    config = seeds / "fdr" / "config.yaml"
    config.write_text(config.read_text() + "task_name: debug\ncallbacks: null\n")
    code, out, err = run_main(capsys, seeds, "--format", "csv")
    assert code == 0 and "linear" not in out and "callbacks" not in out
    assert err == [
        "compare: left out 1 run(s) of debug=... (task_name debug: a batch or a few, no "
        "result); --include-debug shows them"
    ]
    code, out, _ = run_main(capsys, seeds, "--format", "csv", "--include-debug")
    assert code == 0 and "linear" in out


def test_seeds_aggregate_to_mean_and_sample_std(seeds):
    table = columns(compare(find_runs([seeds])))
    # seed and the per-run output dirs differ too, but only k splits the rows
    assert list(table)[:4] == ["model", "data", "model.k", "n"]
    assert table["model.k"] == ["6", "3"]  # best MAE first
    assert table["n"] == [1, 3]
    single, three = table["mae"]
    assert three.mean == pytest.approx(7 / 3)
    assert three.std == pytest.approx(statistics.stdev([1.0, 2.0, 4.0]))  # ddof=1
    assert three.std == pytest.approx(math.sqrt(7 / 3))
    assert single.mean == 0.5 and math.isnan(single.std)
    assert table["psnr"][1].mean == pytest.approx(40 - 7 / 3)
    assert table["train_s"] == [10.0, 20.0] and table["params"] == [600.0, 300.0]


def test_linked_run_folders_are_followed_once_without_looping(seeds, tmp_path, capsys):
    """Links to runs gathered in a folder were not followed: "no metrics.json with test
    results"."""
    gathered = tmp_path / "gathered"
    gathered.mkdir()
    (gathered / "best").symlink_to(seeds / "3")
    (gathered / "again").symlink_to(seeds / "3")  # one run by two links: counted once
    (gathered / "sweep").symlink_to(seeds)  # a link to a folder of runs
    (gathered / "loop").symlink_to(gathered)  # a link to a folder above it ends
    (seeds / "4").mkdir()
    (seeds / "4" / "train.log").write_text("step 100\n")  # still training, through a link
    runs = find_runs([gathered])
    assert sorted(run.path.resolve().name for run in runs) == ["0", "1", "2", "3"]
    code, out, err = run_main(capsys, gathered, "--format", "csv")
    assert code == 0
    assert [r["n"] for r in csv.DictReader(io.StringIO(out))] == ["1", "3"]
    assert err == [
        "compare: 1 run(s) without test results (training, stopped, failed, or test=false) "
        "have no row: sweep/4"
    ]


def test_runs_without_results_are_named_beside_the_table(seeds, capsys):
    """A sweep in progress: the table's n is one short where a seed still trains, which the
    note says, with which run; an evaluation's folder and a finished run are not in it."""
    for finished in (seeds / "0", seeds / "1"):
        (finished / "train.log").write_text("trained\n")
        (finished / "eval" / "2026-11-30_10-00-00-000000").mkdir(parents=True)
        (finished / "eval" / "2026-11-30_10-00-00-000000" / "train.log").write_text("")
    for pending in ("4", "5"):
        (seeds / pending).mkdir()
        (seeds / pending / "train.log").write_text("step 100\n")
    (seeds / "5" / "metrics.json").write_text(json.dumps({"num_params": 3}))  # test=false
    code, out, err = run_main(capsys, seeds)
    assert code == 0 and len(out.splitlines()) == 4
    assert err == [
        "compare: 2 run(s) without test results (training, stopped, failed, or test=false) "
        "have no row: 4, 5"
    ]
    # a folder given inside another given one: each run named once, as each row counts once
    code, out, err = run_main(capsys, seeds, seeds / "4")
    assert err == [
        "compare: 2 run(s) without test results (training, stopped, failed, or test=false) "
        "have no row: 4, 5"
    ]


def test_a_row_of_runs_from_different_code_is_noted(tmp_path, capsys):
    """Seeds trained by two commits, or a run continued by another, pool into one row as
    before (the code is no setting), and a note names the row and the versions."""
    commit_a = {"version": "0.1.0", "commit": "a" * 40, "changed": False}
    commit_b = {"version": "0.1.0", "commit": "b" * 40, "changed": False}
    changed = {**commit_a, "changed": True}
    write_run(tmp_path / "k3" / "0", 1.0, seed=0, code=[commit_a])
    write_run(tmp_path / "k3" / "1", 2.0, seed=1, code=[commit_a, commit_b])
    write_run(tmp_path / "k6" / "0", 1.0, k=6, code=[commit_a])
    write_run(tmp_path / "k6" / "1", 2.0, k=6, seed=1)  # before provenance: no version
    code, out, err = run_main(capsys, tmp_path)
    assert code == 0 and len(out.splitlines()) == 4  # two rows
    assert err == [
        "compare: 1 row(s) come from more than one version of the code, or from code with "
        "uncommitted changes: cloudlstm k=3 (aaaaaaa, bbbbbbb). Each run's metrics.json "
        "names its code under provenance."
    ]

    write_run(tmp_path / "k6" / "2", 3.0, k=6, seed=2, code=[changed])
    write_run(tmp_path / "k9" / "0", 3.0, k=9, code=[{"commit": None, "version": "0.2.0"}])
    _, _, err = run_main(capsys, tmp_path)
    assert "cloudlstm k=6 (aaaaaaa, aaaaaaa+changes)" in err[0]
    assert "k=9" not in err[0]  # one installed version
    assert err[0].startswith("compare: 2 row(s)")
    # the page, which travels without the run folders, names them all
    assert code_summary(group_runs(find_runs([tmp_path]))) == (
        "aaaaaaa (3 runs), bbbbbbb (1 run), aaaaaaa+changes (1 run), cloudlstm 0.2.0 (1 run); "
        "1 run does not record it"
    )
    page = tmp_path / "page.html"
    assert main([str(tmp_path), "--html", str(page)]) == 0
    assert '<p class="note">Code: aaaaaaa (3 runs), bbbbbbb (1 run)' in page.read_text()


H200 = {"device": "cuda:0", "gpu": "NVIDIA H200", "cpu": "AMD EPYC", "cpus": 16}
EPYC = {"device": "cpu", "cpu": "AMD EPYC", "cpus": 2}
XEON = {"device": "cpu", "cpu": "Intel(R) Xeon(R) Processor", "cpus": 2}


def test_a_row_of_runs_from_different_machines_is_noted(tmp_path, capsys):
    """Seeds trained on a GPU and on a CPU (or on two CPU models) pool into one row, as the
    machine is no setting, but their time columns average two speeds: a note names the row
    and the machines, with the runs on each. A run resumed on another machine counts on
    both; a row on one machine, or runs from before provenance, make no note."""
    write_run(tmp_path / "k3" / "0", 1.0, seed=0, train_s=9000.0, machines=[EPYC])
    write_run(tmp_path / "k3" / "1", 2.0, seed=1, train_s=100.0, machines=[H200])
    write_run(tmp_path / "k3" / "2", 2.0, seed=2, train_s=100.0, machines=[H200])
    write_run(tmp_path / "k6" / "0", 1.0, k=6, machines=[EPYC, EPYC])
    write_run(tmp_path / "k6" / "1", 2.0, k=6, seed=1)  # before provenance
    code, out, err = run_main(capsys, tmp_path)
    assert code == 0 and len(out.splitlines()) == 4  # two rows: the machine splits none
    assert err == [
        "compare: 1 row(s) pool runs trained on different machines, so their times "
        "(train_s, s_per_1k_steps) mix those machines' speeds: cloudlstm k=3 (CPU AMD EPYC: "
        "1 run, NVIDIA H200: 2 runs). Each run's metrics.json names its machine under "
        "provenance."
    ]
    write_run(tmp_path / "k6" / "2", 3.0, k=6, seed=2, machines=[XEON, EPYC])  # resumed
    _, _, err = run_main(capsys, tmp_path)
    assert err[0].startswith("compare: 2 row(s) pool runs trained on different machines")
    assert "cloudlstm k=6 (CPU AMD EPYC: 2 runs, CPU Intel(R) Xeon(R) Processor: 1 run)" in err[0]
    page = tmp_path / "page.html"  # the page, which travels without the runs, says it too
    assert main([str(tmp_path), "--html", str(page)]) == 0
    assert '<p class="note">2 row(s) pool runs trained on different machines' in page.read_text()


def test_a_row_of_runs_whose_settings_changed_as_they_trained_is_noted(tmp_path, capsys):
    """A run resumed with allow_changes has the settings it ended with in its config.yaml,
    and so sits in their row: a note names the row, the run and each change it took, in the
    console, the paper tables' notes and the page. None for runs that changed nothing."""
    lr = {"key": "optimizer.lr", "old": 0.001, "new": 0.01, "resumed_from": "last.ckpt"}
    write_run(tmp_path / "k3" / "0", 1.0, seed=0, settings_changed=[lr])
    write_run(tmp_path / "k3" / "1", 2.0, seed=1, settings_changed=[])
    write_run(tmp_path / "k6" / "0", 1.0, k=6)  # from before the record
    code, out, err = run_main(capsys, tmp_path)
    assert code == 0 and len(out.splitlines()) == 4  # two rows
    assert err == [
        "compare: 1 row(s) hold runs whose settings changed while they trained "
        "(allow_changes), so the row names the settings they ended with: cloudlstm k=3 "
        "(0: optimizer.lr 0.001 -> 0.01). Each run's metrics.json lists them under "
        "settings_changed."
    ]
    page = tmp_path / "page.html"
    assert main([str(tmp_path), "--html", str(page)]) == 0
    assert '<p class="note">1 row(s) hold runs whose settings changed' in page.read_text()
    write_run(tmp_path / "k3" / "0b", 2.0, seed=9, settings_changed=[{"old": 1}, "a"])
    assert "0b" not in run_main(capsys, tmp_path)[2][0]  # entries of another shape: none


def test_execution_options_split_no_rows(tmp_path):
    """model.checkpointing / model.compile change how a run computed, not what: runs that
    differ only there (and in the seed) are one setting."""
    write_run(tmp_path / "0", 1.0, seed=0, model_keys={"checkpointing": True, "compile": False})
    write_run(tmp_path / "1", 2.0, seed=1, model_keys={"checkpointing": False, "compile": True})
    table = columns(compare(find_runs([tmp_path])))
    assert table["n"] == [2]
    assert "model.checkpointing" not in table and "model.compile" not in table


def test_execution_options_name_no_run():
    from cloudlstm.assembly.config import _name_token

    assert _name_token("model.checkpointing=true") == ""
    assert _name_token("model.compile=true") == ""
    assert _name_token("model.k=3") == "k3"  # settings still do


def test_markdown_cells_round_to_the_std(seeds):
    rows = to_markdown(compare(find_runs([seeds]))).splitlines()
    assert rows[0] == (
        "| model | data | model.k | n | params | epochs | train_s | mae | rmse | psnr | ssim "
        "| smae |"
    )
    assert rows[2].startswith("| cloudlstm | synthetic | 6 | 1 | 600 | 2 | 10 | **0.5000** |")
    assert rows[3].startswith("| cloudlstm | synthetic | 3 | 3 | 300 | 2 | 20 | 2.3 ± 1.5 |")


@pytest.mark.parametrize(
    "maes",
    [
        (100.93894990464587, 100.93894990464589, 100.93894990464587),  # float64 order
        (100.93894, 100.93895, 100.93894),  # float32 sums over other point orders
    ],
)
def test_round_off_spread_prints_as_one_value(tmp_path, maes):
    """A deterministic model's seeds give equal means up to summation order: no 9- or
    17-digit std; a spread of one part in 10,000 is a spread."""
    for seed, mae in enumerate(maes):
        write_run(tmp_path / str(seed), mae, model="persistence", seed=seed)
    row = to_markdown(compare(find_runs([tmp_path]))).splitlines()[2]
    assert "| **100.9** | **201.9** |" in row  # mae, rmse
    write_run(tmp_path / "3", 100.95, model="persistence", seed=3)
    row = to_markdown(compare(find_runs([tmp_path]))).splitlines()[2]
    assert "| **100.9417 ± 0.0055** |" in row


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (3.84, "3.840"),  # :.4g's 3.84 sat beside a column's 3.769
        (14540.4, "14540"),  # and its 1.454e+04
        (9.99996, "10.00"),
        (0.00099996, "0.001000"),
        (-2.5, "-2.500"),
        (0.0, "0"),
        (float("nan"), "nan"),
    ],
)
def test_one_value_prints_four_significant_digits_in_fixed_point(value, text):
    assert significant(value) == text


def test_group_by_several_keys(tmp_path, capsys):
    for k in (3, 6):
        for cell in ("lstm", "gru"):
            for seed in (0, 1):
                write_run(tmp_path / f"{k}{cell}{seed}", k + seed, k=k, cell=cell, seed=seed)
    table = columns(compare(find_runs([tmp_path]), by=["model.k", "model.cell"]))
    assert list(table)[:4] == ["model.k", "model.cell", "data", "n"]  # data is always added
    assert sorted(zip(table["model.k"], table["model.cell"], strict=True)) == [
        ("3", "gru"),
        ("3", "lstm"),
        ("6", "gru"),
        ("6", "lstm"),
    ]
    assert table["n"] == [2, 2, 2, 2]
    assert [s.mean for s in table["mae"]] == [3.5, 3.5, 6.5, 6.5]
    # merging the cells is allowed, with a warning naming what a row mixes
    code, out, err = run_main(capsys, tmp_path, "--by", "model.k")
    assert code == 0 and out.count("\n") == 4
    assert err == [
        "compare: warning: runs in one row differ in model.cell; add them to --by to split the rows"
    ]


def test_horizon_columns(seeds, capsys):
    table = columns(compare(find_runs([seeds]), horizons=[1, 3]))
    assert list(table)[-2:] == ["mae@1", "mae@3"]
    assert table["mae@1"][1].mean == pytest.approx(7 / 3 - 0.1)
    assert table["mae@3"][1].mean == pytest.approx(7 / 3 + 0.1)
    assert table["mae@3"][1].std == pytest.approx(math.sqrt(7 / 3))
    rmse = columns(compare(find_runs([seeds]), horizons=[2], horizon_metric="rmse"))
    assert rmse["rmse@2"][0].mean == 1.0
    code, out, err = run_main(capsys, seeds, "--horizons", "1,6")
    assert code == 2 and out == "" and len(err) == 1
    assert err == [
        "compare: horizon 6 is beyond the forecast length J=3 of every run; horizons count 1..J"
    ]
    for bad in ("0", "1,x"):
        code, _, err = run_main(capsys, seeds, "--horizons", bad)
        assert code == 2 and len(err) == 1 and err[0].startswith("compare: argument --horizons")


def test_best_cell_is_bold_per_data_set(tmp_path):
    write_run(tmp_path / "a", 3.0, model="lstm", data="beijing")
    write_run(tmp_path / "b", 5.0, model="cloudlstm", data="beijing")
    write_run(tmp_path / "c", 9.0, model="lstm", data="synthetic")
    write_run(tmp_path / "d", 7.0, model="cloudlstm", data="synthetic")
    rows = to_markdown(compare(find_runs([tmp_path]))).splitlines()[2:]
    cells = [row.split(" | ") for row in rows]
    assert [(c[0], c[1]) for c in cells] == [
        ("| lstm", "beijing"),
        ("| cloudlstm", "beijing"),
        ("| cloudlstm", "synthetic"),  # sorted by data set, then best MAE first
        ("| lstm", "synthetic"),
    ]
    metrics = [c[6:] for c in cells]  # mae, rmse, psnr, ssim (highest best), smae
    assert metrics[0] == ["**3.000**", "**6.000**", "**37.00**", "**0.9700**", "**0.3000** |"]
    assert metrics[2] == ["**7.000**", "**14.00**", "**33.00**", "**0.9300**", "**0.7000** |"]
    assert not any("**" in cell for row in (metrics[1], metrics[3]) for cell in row)


def test_latex_output(tmp_path):
    write_run(tmp_path / "a", 1.0, data="synthetic_moving", seed=0)
    write_run(tmp_path / "b", 2.0, data="synthetic_moving", seed=1)
    write_run(tmp_path / "c", 4.0, model="pointlstm", data="synthetic_moving")
    lines = to_latex(compare(find_runs([tmp_path]), metrics=["mae"])).splitlines()
    assert lines[:2] == [r"\begin{tabular}{llrrrrr}", r"\hline"]
    assert lines[2] == r"model & data & n & params & epochs & train\_s & mae \\"
    assert lines[4] == (
        r"cloudlstm & synthetic\_moving & 2 & 300 & 2 & 10 & \textbf{1.50 $\pm$ 0.71} \\"
    )
    assert lines[5] == r"pointlstm & synthetic\_moving & 1 & 300 & 2 & 10 & 4.000 \\"
    assert lines[-2:] == [r"\hline", r"\end{tabular}"]


def test_latex_output_escapes_every_special_character(tmp_path):
    """A channel named with each of LaTeX's ten special characters: each printed as itself;
    an unescaped $ opened math mode, and the table did not compile."""
    name = "a&b%c$d#e_f{g}h~i^j\\k"
    write_run(tmp_path / "a", 1.0, channels={name: 2.0})
    header = to_latex(compare(find_runs([tmp_path]), metrics=["mae"], channels=[name]))
    assert header.splitlines()[2].endswith(
        r"mae[a\&b\%c\$d\#e\_f\{g\}h\textasciitilde{}i\textasciicircum{}j\textbackslash{}k] \\"
    )


def test_csv_output(seeds):
    out = io.StringIO()
    write_csv(compare(find_runs([seeds]), horizons=[2]), out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert list(rows[0])[:9] == [
        "model",
        "data",
        "model.k",
        "n",
        "params",
        "epochs",
        "train_s",
        "mae_mean",
        "mae_std",
    ]
    assert list(rows[0])[-2:] == ["mae@2_mean", "mae@2_std"]
    assert rows[0]["n"] == "1" and rows[0]["mae_mean"] == "0.5" and rows[0]["mae_std"] == ""
    assert rows[1]["params"] == "300" and rows[1]["train_s"] == "20"
    assert float(rows[1]["mae_std"]) == pytest.approx(statistics.stdev([1.0, 2.0, 4.0]))
    assert float(rows[1]["mae@2_mean"]) == pytest.approx(7 / 3)


def test_plot_writes_pngs(seeds, tmp_path, capsys):
    from matplotlib.image import imread

    code, out, err = run_main(capsys, seeds, "--plot", tmp_path / "figs")
    assert code == 0 and out.startswith("| model |")
    paths = [tmp_path / "figs" / f"mae_{kind}_synthetic.png" for kind in ("horizon", "bar")]
    assert err == [f"wrote {p}" for p in paths]
    for path in paths:
        assert path.read_bytes()[:8] == PNG_MAGIC
        height, width, _ = imread(path).shape
        assert height > 100 and width > 100


def write_runs_without_smae_steps(root: Path) -> None:
    """Rows without per-step sMAE, as older runs are (or point forecasts beside quantile
    ones for coverage80): cloudlstm on synthetic has it, lstm on synthetic and on airq not."""
    for seed, mae in enumerate((1.0, 2.0)):
        write_run(root / f"new_{seed}", mae, seed=seed)
    write_run(root / "old", 3.0, model="lstm", smae=False)
    write_run(root / "old_airq", 3.0, model="lstm", data="airq", smae=False)


NO_SMAE_CURVE = (
    "compare: no smae curve against the forecast step for 2 row(s) without per-step smae "
    "results: lstm (synthetic), lstm (airq)"
)
# their table's note on the same rows: their smae cells are empty
NO_SMAE_CELLS = (
    "compare: cells empty where no run of the row reports the metric: smae in lstm "
    "(synthetic), lstm (airq)"
)


def test_plot_leaves_out_rows_without_the_curves_metric_and_names_them(tmp_path, capsys):
    """Such a row failed the whole command (no figure, exit 2) where the table alone showed
    its cells empty."""
    write_runs_without_smae_steps(tmp_path / "runs")
    figs = tmp_path / "figs"
    code, out, err = run_main(
        capsys, tmp_path / "runs", "--horizons", "1", "--horizon-metric", "smae", "--plot", figs
    )
    assert code == 0 and out.startswith("| model |")
    paths = [
        figs / f"smae_{kind}_{data}.png"
        for data in ("airq", "synthetic")
        for kind in ("horizon", "bar")
    ]
    assert err == [NO_SMAE_CELLS, NO_SMAE_CURVE, *(f"wrote {p}" for p in paths)]
    for path in paths:  # airq's horizon figure says that no row has a curve
        assert path.read_bytes()[:8] == PNG_MAGIC


def test_a_curve_metric_no_row_has_per_step_is_one_line_naming_the_fix(tmp_path, capsys):
    write_runs_without_smae_steps(tmp_path / "runs")
    figs = tmp_path / "figs"
    code, out, err = run_main(
        capsys, tmp_path / "runs" / "old", "--horizon-metric", "smae", "--plot", figs
    )
    assert (code, out) == (2, "") and not figs.exists()
    assert err == [
        "compare: no run has per-step smae results to draw against the forecast step; give "
        "--horizon-metric one they have (mae, rmse, psnr, ssim)"
    ]


def test_a_table_starts_without_torch_or_matplotlib(seeds):
    """The table of ``python -m cloudlstm.cli.compare`` imports neither torch (the metric
    declarations need none) nor matplotlib (only ``--plot`` does): they were nine tenths of
    its time. A fresh interpreter, as a user's shell starts it."""
    check = (
        "import runpy, sys; sys.argv = ['compare', sys.argv[1]]\n"
        "try: runpy.run_module('cloudlstm.cli.compare', run_name='__main__')\n"
        "except SystemExit as end: assert end.code in (0, None), end.code\n"
        "heavy = sorted({'torch', 'torchmetrics', 'lightning', 'matplotlib'} & set(sys.modules))\n"
        "print('heavy:', heavy)"
    )
    done = subprocess.run(
        [sys.executable, "-c", check, str(seeds)],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "| model |" in done.stdout and done.stdout.splitlines()[-1] == "heavy: []"


def test_unknown_key_names_the_closest_keys_only(seeds, capsys):
    code, out, err = run_main(capsys, seeds, "--by", "model.kk")
    assert code == 2 and out == "" and len(err) == 1
    assert err[0].startswith("compare: unknown --by key 'model.kk'; did you mean model.k")
    assert "seed" not in err[0] and len(err[0]) < 200  # not every key of config.yaml
    # nothing close: the settings that differ between the runs, at most ten of them
    code, out, err = run_main(capsys, seeds, "--by", "zzz")
    assert code == 2 and out == "" and len(err) == 1
    names = err[0].split("differ between these runs: ")[1].split(" (")[0].split(", ")
    assert names == ["model", "data", "model.k"]


def test_folders_after_by_are_one_line_naming_the_way_out(seeds, capsys):
    """``--by`` takes every word after it: ``compare --by model DIR`` took DIR as a key and
    argparse said only that dirs were required."""
    code, out, err = run_main(capsys, "--by", "model", seeds)
    assert (code, out) == (2, "") and err == [
        f"compare: no run folder given: --by takes every word after it as a key (here model "
        f"{seeds}); give the folders before --by (compare DIR --by model), or end its keys "
        "with -- (compare --by model -- DIR)"
    ]
    code, out, _ = run_main(capsys, "--by", "model", "--", seeds)
    assert code == 0 and out.splitlines()[0].startswith("| model | data | n |")
    code, _, err = run_main(capsys, "--format", "csv")
    assert code == 2 and err == ["compare: the following arguments are required: dirs"]
    # --metrics checks each word against its metrics: the folder was an invalid choice
    code, out, err = run_main(capsys, "--metrics", "mae", seeds)
    assert (code, out) == (2, "") and err == [
        f"compare: --metrics took the folder {seeds} for a metric: give the folders before "
        "--metrics (compare DIR --metrics mae), or end its metrics with -- (compare "
        "--metrics mae -- DIR)"
    ]
    code, _, err = run_main(capsys, seeds, "--metrics", "mea")
    assert code == 2 and err[0].startswith("compare: argument --metrics: invalid choice: 'mea'")


def test_a_folder_by_took_after_other_folders_is_one_line_naming_the_way_out(tmp_path, capsys):
    """``compare A --by model B`` took B for a key: an unknown key's error, naming keys;
    and the way out it names now works with A before the option (argparse had said
    "unrecognized arguments" of ``compare A --by model -- B``)."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_run(a / "0", 1.0)
    write_run(b / "1", 2.0, seed=1)
    debug = a / "debug" / "config.yaml"  # a note on stderr, were it printed before the error
    write_run(debug.parent, 0.1, model="linear")
    debug.write_text(debug.read_text() + "task_name: debug\n")
    for taken, what in ((b, "folder"), (b / "1" / "metrics.json", "file")):
        code, out, err = run_main(capsys, a, "--by", "model", taken)
        assert (code, out) == (2, "") and err == [
            f"compare: --by took the {what} {taken} for a key: give the folders before --by "
            "(compare DIR --by model), or end its keys with -- (compare --by model -- DIR)"
        ]
    for argv in (
        ("--format", "csv", a, "--by", "model", "--", b),
        ("--format", "csv", a, "--metrics", "mae", "--", b),
        (a, "--format", "csv", b),  # folders on both sides of an option
    ):
        code, out, err = run_main(capsys, *argv)
        assert code == 0, err
        assert [row["n"] for row in csv.DictReader(io.StringIO(out))] == ["2"]  # a's and b's


def test_user_errors_are_one_line_and_exit_2(tmp_path, capsys):
    code, out, err = run_main(capsys, tmp_path / "missing")
    assert (code, out, err) == (2, "", [f"compare: {tmp_path / 'missing'} does not exist"])
    (tmp_path / "failed").mkdir()
    (tmp_path / "failed" / "metrics.json").write_text(json.dumps({"run": {}}))  # no test
    code, out, err = run_main(capsys, tmp_path)
    assert (code, out, err) == (
        2,
        "",
        [f"compare: no metrics.json with test results under {tmp_path}"],
    )
    code, _, err = run_main(capsys, tmp_path, "--format", "html")
    assert code == 2 and len(err) == 1 and err[0].startswith("compare: argument --format")


def test_a_file_that_is_no_metrics_json_is_refused_as_such(seeds, capsys):
    """A file given among the runs (the README beside them) is no run whose results are
    damaged: the line says what to give, and does not ask for the file to be deleted."""
    notes = seeds / "notes.md"
    notes.write_text("# the seeds\n")
    code, out, err = run_main(capsys, seeds, notes)
    assert (code, out) == (2, "")
    assert err == [
        f"compare: {notes} is no run's metrics.json: give run or multirun directories (or "
        "outputs/), or the metrics.json of runs"
    ]
    one = next(seeds.rglob("metrics.json"))
    code, out, _ = run_main(capsys, one)  # a run's own file is read
    assert code == 0 and out


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"model: [unclosed\n", "{} is not valid YAML (while parsing a flow sequence"),
        (b"", "{} holds nothing, not a mapping of settings:"),
        (b"- 1\n- 2\n", "{} holds a list, not a mapping of settings:"),
        (b"\xff\xfe model: x", "{} is not UTF-8 text:"),
        (None, "cannot read {}: Is a directory:"),
    ],
    ids=["bad-yaml", "empty-config", "list-config", "not-utf8-config", "folder"],
)
@pytest.mark.parametrize("evaluation", [False, True], ids=["run", "evaluation"])
def test_a_config_that_cannot_be_read_is_skipped_naming_it(
    tmp_path, capsys, content, problem, evaluation
):
    """A damaged config.yaml of one run (or of an eval.py re-test) stopped the whole table
    with status 2, where a damaged metrics.json is skipped: it is skipped the same way, one
    line naming it and the way out, and the others are compared (status 0); the library's
    find_runs refuses it still where it is given no list to collect it in."""
    for name, mae in (("a", 1.0), ("c", 3.0), ("b", 2.0)):
        write_run(tmp_path / "runs" / name, mae, seed=ord(name))
        (tmp_path / "runs" / name / "train.log").write_text("")
    damaged = tmp_path / "runs" / "b"
    if evaluation:
        damaged = damaged / "eval" / "2026-12-01_10-00-00-000000"
        write_run(damaged, 9.0, seed=ord("b"))
        results = json.loads((damaged / "metrics.json").read_text())
        results.update(run_dir=str(tmp_path / "runs" / "b"), checkpoint="checkpoints/last.ckpt")
        (damaged / "metrics.json").write_text(json.dumps(results))
    path = damaged / "config.yaml"
    if content is None:
        path.unlink()
        path.mkdir()
    else:
        path.write_bytes(content)
    code, out, err = run_main(capsys, tmp_path / "runs", "--include-evals")
    assert code == 0 and len(err) == 1, err
    assert err[0].startswith(f"compare: skipped (no row): {problem.format(path)}"), err[0]
    assert err[0].endswith(": restore it from a copy, or move its folder out of those compared")
    ns = [line.split("|")[3].strip() for line in out.splitlines()[2:]]
    assert ns == (["3"] if evaluation else ["2"]), out  # the others, one row of their seeds
    with pytest.raises(CompareError, match="restore it from a copy"):
        find_runs([tmp_path / "runs"], include_evals=True)


def test_a_retest_naming_held_out_points_of_a_run_whose_config_is_damaged_is_compared(
    tmp_path, capsys
):
    """An eval.py re-test that names the held-out points reads its run's config.yaml to tell
    whether they are the run's own: one that cannot be read left the re-test unread, the
    table stopped (status 2). The run is skipped naming the file, and the re-test compared
    as one of a run whose settings are not known (its override a change)."""
    run = tmp_path / "runs" / "a"
    write_run(run, 1.0)
    folder = run / "eval" / "2026-12-01_10-00-00-000000"
    write_run(folder, 9.0)
    results = json.loads((folder / "metrics.json").read_text())
    overrides = ["data.holdout_points=[p1]"]
    results.update(run_dir=str(run), checkpoint="checkpoints/last.ckpt", overrides=overrides)
    (folder / "metrics.json").write_text(json.dumps(results))
    (run / "config.yaml").write_text("model: [unclosed\n")
    code, out, err = run_main(capsys, tmp_path / "runs", "--include-evals", "--format", "csv")
    assert code == 0 and len(err) == 1, err
    assert err[0].startswith(f"compare: skipped (no row): {run / 'config.yaml'} is not valid")
    (row,) = csv.DictReader(io.StringIO(out))
    assert float(row["mae_mean"]) == 9.0, row  # the re-test's
    skipped: list = []
    (retest,) = find_runs([tmp_path / "runs"], include_evals=True, skipped=skipped)
    assert retest.value("evaluation") == "eval last data.holdout_points=[p1]"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b'{"test": {"overall', "is damaged (not valid JSON: Unterminated"),
        (b"[1, 2]", "is damaged (a JSON list, not a run's results), so its "),
        (b"\xff{}", "is damaged (not valid JSON: 'utf-8' codec can't decode"),
        (None, "is a folder, where a run's results file belongs: move it away."),
    ],
    ids=["cut-short", "list-json", "not-utf8", "folder"],
)
def test_a_metrics_json_that_cannot_be_read_is_skipped_naming_it(
    tmp_path, capsys, content, problem
):
    """One damaged metrics.json among the runs (a copy cut short) stopped the whole table:
    it is skipped with one line naming it and the way out, as the other notes on what has
    no row are, and the others are compared (exit status 0, as for those). A folder in its
    place was listed as a run "without test results (training, stopped, failed...)"."""
    for name, mae in (("a", 1.0), ("c", 3.0), ("b", 2.0)):
        write_run(tmp_path / "runs" / name, mae, seed=ord(name))
        (tmp_path / "runs" / name / "train.log").write_text("")
    path = tmp_path / "runs" / "b" / "metrics.json"
    if content is None:
        path.unlink()
        path.mkdir()
    else:
        path.write_bytes(content)
    code, out, err = run_main(capsys, tmp_path / "runs")
    assert code == 0 and len(err) == 1, err
    assert err[0].startswith(f"compare: skipped (no row): {path} {problem}"), err[0]
    assert "| 2 |" in out.splitlines()[2], out  # the two others, one row of two seeds
    code, out, err = run_main(capsys, path)  # nothing else to compare: the error says so
    assert (code, out) == (2, "") and err[-1].startswith("compare: no metrics.json with test")


def test_a_damaged_evaluation_is_skipped_saying_to_evaluate_again(tmp_path, capsys):
    """An eval.py re-test's metrics.json cut short: its line said to train the run again,
    where evaluating it again writes the file anew."""
    write_run(tmp_path / "runs" / "a", 1.0)
    path = tmp_path / "runs" / "a" / "eval" / "2026-12-01_10-00-00-000000" / "metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"run_dir": ')
    code, out, err = run_main(capsys, tmp_path / "runs")
    assert code == 0 and out and len(err) == 1
    assert err[0] == (
        f"compare: skipped (no row): {path} is damaged (not valid JSON: Expecting value: "
        "line 1 column 13 (char 12)), so its test results cannot be read: restore it from a "
        "copy, or delete its folder and evaluate the run again, python eval.py "
        f"run={tmp_path / 'runs' / 'a'} with that evaluation's overrides."
    )


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("test.overall.mae.mean", "abc", "test.overall.mae.mean is 'abc', not a number"),
        ("test.overall.mae", {"median": 1}, "test.overall.mae.mean is None, not a number"),
        ("test.overall.mae", True, "test.overall.mae.mean is None, not a number"),
        ("test.overall", [1], "test.overall is [1], not a mapping"),
        ("test", "yes", "test is 'yes', not a mapping"),
        ("test.per_step.mae.mean", [1, "x"], "test.per_step.mae.mean[1] is 'x', not a number"),
        ("test.per_step.mae.mean", 1.0, "test.per_step.mae.mean is 1.0, not a list of numbers"),
        ("train_time_s", "12", "train_time_s is '12', not a number"),
        ("num_params", True, "num_params is True, not a number"),
        # values no run writes: an error below 0, an SSIM above 1, a count below 0
        ("test.overall.mae.mean", -3.0,
         "test.overall.mae.mean is -3.0, not a number of at least 0, as MAE is"),
        ("test.per_step.ssim.mean", [0.9, 1.5, 0.8],
         "test.per_step.ssim.mean[1] is 1.5, not a number from -1 to 1, as SSIM is"),
        ("test.pooled", {"rmse": -1.0},
         "test.pooled.rmse is -1.0, not a number of at least 0, as RMSE is"),
        ("num_params", -1, "num_params is -1, not a number of at least 0"),
        # the windows a test scored, which tell a limited test's data set
        ("test.num_instances", -1, "test.num_instances is -1, not a count of 0 or more"),
        ("test.num_instances", 24.5, "test.num_instances is 24.5, not a count of 0 or more"),
        ("cost", {"train_s_per_1k_steps": -5.0},
         "train_s_per_1k_steps is -5.0, not a number of at least 0"),
    ],
)  # fmt: skip
def test_a_metrics_json_of_another_shape_is_one_line_naming_the_part(
    tmp_path, capsys, key, value, problem
):
    """A hand-edited file, or another tool's metrics.json among the runs, was a KeyError or
    a TypeError from deep in the table."""
    write_run(tmp_path / "runs" / "a", 1.0)
    write_run(tmp_path / "runs" / "b", 2.0)
    path = tmp_path / "runs" / "b" / "metrics.json"
    results = json.loads(path.read_text())
    *parents, last = key.split(".")
    node = results
    for part in parents:
        node = node[part]
    node[last] = value
    path.write_text(json.dumps(results))
    code, out, err = run_main(capsys, tmp_path / "runs")
    assert code == 2 and out == "" and len(err) == 1
    assert err[0] == (
        f"compare: {path}: {problem}: this file is not a run's results as train.py and eval.py "
        "write them (move it out of the folder)"
    ), err[0]


@pytest.mark.parametrize(
    ("parts", "problem"),
    [
        ({"run": "mlp"}, "run is 'mlp', not a mapping"),
        ({"run": {"model": ["mlp"]}}, "run.model is ['mlp'], not a string"),
        ({"run": {"group": 3}}, "run.group is 3, not a string"),
        ({"cost": [1]}, "cost is [1], not a mapping"),
        ({"data": "synthetic"}, "data is 'synthetic', not a mapping"),
        ({"data": {"values_digest": 5}}, "data.values_digest is 5, not a string"),
        ({"selection": {"monitor": 1, "score": 0.5}}, "selection.monitor is 1, not a string"),
        # the processes of the last process, the one that tested
        ({"provenance": [{}, {"machine": {"processes": "2"}}]},
         "provenance[1].machine.processes is '2', not a count of 1 or more"),
        ({"provenance": [{"machine": {"processes": 0}}]},
         "provenance[0].machine.processes is 0, not a count of 1 or more"),
        ({"test": []}, "test is [], not a mapping"),
        # eval.py's re-test of a run: the run it tested, the checkpoint and the overrides
        ({"run_dir": "/x", "overrides": [5]}, "overrides[0] is 5, not a string"),
        ({"run_dir": "/x", "overrides": "a=1"}, "overrides is 'a=1', not a list of strings"),
        ({"run_dir": "/x", "checkpoint": 3}, "checkpoint is 3, not a string"),
        ({"run_dir": 5}, "run_dir is 5, not a string"),
        ({"test": {"overall": {"loss": {"mean": 1}}}},
         "test.overall holds no metric compare knows (it holds loss; compare knows mae, rmse, "
         "mape, psnr, ssim, smae)"),
        ({"test": {"overall": {}}},
         "test.overall holds no metric compare knows (it holds none; compare knows mae, rmse, "
         "mape, psnr, ssim, smae)"),
    ],
)  # fmt: skip
def test_a_metrics_json_section_of_another_shape_is_one_line_naming_it(
    tmp_path, capsys, parts, problem
):
    """Each part compare reads is checked for its type: a run given as a string, a list for
    the cost, an override that is a number were an AttributeError, and results without a
    metric the table shows an IndexError, from deep in the table."""
    write_run(tmp_path / "runs" / "a", 1.0)
    write_run(tmp_path / "runs" / "b", 2.0)
    path = tmp_path / "runs" / "b" / "metrics.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | parts))
    for runs in ([tmp_path / "runs"], [path]):  # among others, and alone
        code, out, err = run_main(capsys, *runs, "--include-evals")
        assert code == 2 and out == "" and len(err) == 1
        assert err[0] == (
            f"compare: {path}: {problem}: this file is not a run's results as train.py and "
            "eval.py write them (move it out of the folder)"
        ), err[0]


@pytest.mark.parametrize(
    ("uncalibrated", "problem"),
    [
        ("x", "test.uncalibrated is 'x', not a mapping"),
        ({"overall": [1]}, "test.uncalibrated.overall is [1], not a mapping"),
        ({"overall": {"crps": {"mean": "a"}}},
         "test.uncalibrated.overall.crps.mean is 'a', not a number"),
        ({"overall": {}, "per_channel": {"a": 5}},
         "test.uncalibrated.per_channel.a is 5, not a mapping"),
    ],
)  # fmt: skip
def test_uncalibrated_results_of_another_shape_are_one_line_naming_the_part(
    tmp_path, capsys, uncalibrated, problem
):
    """--uncalibrated read test.uncalibrated unchecked: a TypeError or an AttributeError, or
    a text where a number belongs taken into the table."""
    write_run(tmp_path / "runs" / "a", 1.0)
    path = tmp_path / "runs" / "a" / "metrics.json"
    results = json.loads(path.read_text())
    results["test"]["uncalibrated"] = uncalibrated
    path.write_text(json.dumps(results))
    code, out, err = run_main(capsys, tmp_path / "runs", "--uncalibrated")
    assert code == 2 and out == "" and len(err) == 1
    assert err[0] == (
        f"compare: {path}: {problem}: this file is not a run's results as train.py and eval.py "
        "write them (move it out of the folder)"
    ), err[0]


def test_uncalibrated_without_a_calibrated_run_is_one_line(tmp_path, capsys):
    """--uncalibrated on runs none of which was calibrated printed their table as it is,
    passed off as the forecast before calibration; one calibrated run among them is read."""
    write_run(tmp_path / "runs" / "a", 1.0)
    code, out, err = run_main(capsys, tmp_path / "runs", "--uncalibrated")
    assert code == 2 and out == ""
    assert err == [
        "compare: --uncalibrated: no run was calibrated (module.calibrate=conformal), so "
        "their forecasts have no other metrics before calibration: leave out --uncalibrated"
    ]
    write_run(tmp_path / "runs" / "b", 2.0, model="linear")
    path = tmp_path / "runs" / "b" / "metrics.json"
    results = json.loads(path.read_text())
    results["test"]["uncalibrated"] = {"overall": {"mae": {"mean": 2.0}}}
    path.write_text(json.dumps(results))
    code, out, err = run_main(capsys, tmp_path / "runs", "--uncalibrated")
    assert code == 0 and "linear" in out and err == []


def test_a_group_metric_no_run_scored_by_group_reports_is_one_line(tmp_path, capsys):
    """Quantile runs without held-out points beside a point run with them: the
    held_out/coverage80 and trained/coverage80 columns were empty in every row, unsaid."""
    write_run(tmp_path / "runs" / "q", 1.0, model="linear")
    path = tmp_path / "runs" / "q" / "metrics.json"
    results = json.loads(path.read_text())
    results["test"]["overall"]["coverage80"] = {"mean": 0.8}
    path.write_text(json.dumps(results))
    write_run(tmp_path / "runs" / "h", 2.0)
    path = tmp_path / "runs" / "h" / "metrics.json"
    results = json.loads(path.read_text())
    scores = {"overall": {"mae": {"mean": 2.0}}}
    results["test"]["groups"] = {"held_out": scores, "trained": scores}
    path.write_text(json.dumps(results))
    code, out, err = run_main(capsys, tmp_path / "runs", "--group-metric", "coverage80")
    assert code == 2 and out == ""
    assert err == [
        "compare: --group-metric coverage80: no run scored by point group (held_out, trained) "
        "reports coverage80, so its group columns would be empty: give a metric they report "
        "(e.g. --group-metric mae), or compare runs trained with both data.holdout_points and "
        "module.quantiles"
    ]
    code, out, err = run_main(capsys, tmp_path / "runs", "--group-metric", "mae")
    assert code == 0 and "held_out/mae" in out


def test_an_infinite_metric_of_one_seed_is_an_infinite_mean_without_warnings(
    tmp_path, capsys, recwarn
):
    """A diverged seed's error is infinite: the mean is, and its spread is not shown; numpy's
    "invalid value" warning of that spread reached the user's terminal."""
    for seed, mae in enumerate([1.0, 3.0, 2.0]):
        write_run(tmp_path / "runs" / f"s{seed}", mae, seed=seed)
    path = tmp_path / "runs" / "s1" / "metrics.json"
    results = json.loads(path.read_text())
    results["test"]["overall"]["mae"]["mean"] = "Infinity"  # as metrics.json writes it
    results["test"]["per_step"]["mae"]["mean"] = ["Infinity"] * 3
    path.write_text(json.dumps(results))
    code, out, err = run_main(
        capsys, tmp_path / "runs", "--metrics", "mae", "--plot", str(tmp_path / "plots")
    )
    assert code == 0 and [w for w in err if "Warning" in w] == [] and len(recwarn) == 0
    (row,) = [line for line in out.splitlines() if line.startswith("| cloudlstm")]
    assert row.split("|")[-2].strip(" *") == "inf"  # the mean, without a spread


def test_a_nan_metric_is_a_number_and_stays_in_the_table(tmp_path, capsys):
    write_run(tmp_path / "runs" / "a", 1.0)
    path = tmp_path / "runs" / "a" / "metrics.json"
    results = json.loads(path.read_text())
    results["test"]["overall"]["mae"]["mean"] = math.nan  # a metric with nothing to score
    path.write_text(json.dumps(results))
    code, out, err = run_main(capsys, tmp_path / "runs", "--metrics", "mae", "rmse")
    assert code == 0 and err == [] and "nan" in out.lower()


def with_metric(run: Path, metric: str, mean: float) -> None:
    """Set ``metric``'s overall mean in ``run``'s metrics.json (NaN: nothing was scored)."""
    path = run / "metrics.json"
    results = json.loads(path.read_text())
    results["test"]["overall"][metric] = {"mean": mean, "std": 0.0}
    path.write_text(json.dumps(results))


@pytest.fixture
def nan_mape(tmp_path) -> Path:
    """Models a, b, c; mape NaN (nothing scored) in a's runs, 10 in b's, 5 in c's."""
    for model, mape in (("a", math.nan), ("b", 10.0), ("c", 5.0)):
        for seed in (0, 1):
            write_run(tmp_path / "runs" / f"{model}{seed}", 1.0, model=model, seed=seed)
            with_metric(tmp_path / "runs" / f"{model}{seed}", "mape", mape)
    return tmp_path / "runs"


def test_a_nan_mean_ranks_last_and_is_never_best(nan_mape, capsys):
    """NaN is neither less nor more than a number: sorted among the means it left the rows
    out of order, and as the first value of ``min`` it was the best, so none was bold."""
    code, out, _ = run_main(capsys, nan_mape, "--metrics", "mape")
    assert code == 0
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| ")][1:]
    assert [(row[0].strip("| "), row[-1].strip(" |")) for row in rows] == [
        ("c", "**5.000**"),
        ("b", "10.00"),
        ("a", "nan"),
    ]
    code, out, _ = run_main(capsys, nan_mape, "--metrics", "mae", "mape", "--format", "latex")
    assert code == 0 and r"\textbf{5.000}" in out and r"\textbf{nan}" not in out


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--horizons", "1,2,1"], "argument --horizons: step 1 given twice in '1,2,1'"),
        (["--channels", "a,b,a"], "argument --channels: channel a given twice in 'a,b,a'"),
        (["--groups", "x,x"], "argument --groups: point group x given twice in 'x,x'"),
        (["--metrics", "mae", "ssim", "mae"], "argument --metrics: metric mae given twice in"),
        (["--by", "model", "model"], "argument --by: key model given twice in 'model model'"),
    ],
    ids=["horizons", "channels", "groups", "metrics", "by"],
)
def test_a_repeated_column_is_one_line(seeds, capsys, option, message):
    code, out, err = run_main(capsys, seeds, *option)
    assert (code, out, len(err)) == (2, "", 1)
    assert err[0].startswith(f"compare: {message}"), err[0]


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--by", "model.k", "--by", "seed"], "--by given twice: give it once with all its values"),
        (["--metrics", "mae", "--metrics", "rmse"], "--metrics given twice: give it once with"),
        (["--horizons", "1", "--horizons", "2"], "--horizons given twice: give it once"),
        (["--format", "csv", "--format", "latex"], "--format given twice: give it once"),
        (["--val", "--val"], "--val given twice: give it once"),
        (["--form", "csv", "--format=latex"], "--format given twice: give it once"),
    ],
    ids=["by", "metrics", "horizons", "format", "flag", "abbreviated"],
)
def test_an_option_given_twice_is_one_line(seeds, capsys, option, message):
    """argparse keeps an option's last value: ``--by model.k --by seed`` grouped by seed
    alone, without a word."""
    code, out, err = run_main(capsys, seeds, *option)
    assert (code, out, len(err)) == (2, "", 1)
    assert err[0].startswith(f"compare: argument {message}"), err[0]


def test_plot_into_a_file_or_an_unwritable_place_is_one_line_before_any_table(
    seeds, tmp_path, capsys
):
    afile = tmp_path / "figures"
    afile.write_text("not a folder")
    code, out, err = run_main(capsys, seeds, "--plot", afile)
    assert (code, out) == (2, "")
    assert err == [f"compare: --plot {afile} is a file; --plot takes a folder for the figures"]
    below_a_file = afile / "inside"
    code, out, err = run_main(capsys, seeds, "--plot", below_a_file)
    assert (code, out) == (2, "")
    assert err == [
        f"compare: cannot make the folder {below_a_file}: Not a directory; give a folder you "
        "can write"
    ]


def test_runs_without_config_and_metrics_files_as_arguments(tmp_path):
    write_run(tmp_path / "a", 2.0, config=False)
    write_run(tmp_path / "b", 1.0, model="lstm", config=False)
    table = columns(compare(find_runs([tmp_path / "a" / "metrics.json", tmp_path / "b"])))
    assert table["model"] == ["lstm", "cloudlstm"] and table["n"] == [1, 1]


def test_a_run_without_config_is_a_row_of_its_own_among_runs_with_one(seeds, capsys):
    """Its settings are unknown: they made every setting of the others a column, and it is
    no seed of any of their rows."""
    write_run(seeds / "copied", 3.0, config=False)
    code, out, err = run_main(capsys, seeds, "--metrics", "mae")
    assert code == 0
    assert err == [
        "compare: 1 run(s) without config.yaml (or with one cut short), whose settings are "
        f"unknown: each is a row of its own ({seeds / 'copied'})"
    ]
    header, _, *rows = out.splitlines()
    assert header.startswith("| model | data | config.yaml | model.k | n |")
    assert sorted(row.split(" | ")[2:5] for row in rows) == [
        ["", "3", "3"], ["", "6", "1"], ["absent", "", "1"]
    ]  # fmt: skip


def test_a_run_whose_config_is_cut_short_is_a_row_of_its_own(seeds, capsys):
    """What is left of it may still read as YAML: its missing settings were taken as unset,
    and it was a seed of another row."""
    write_run(seeds / "cut", 3.0)
    config = seeds / "cut" / "config.yaml"
    whole = config_text(OmegaConf.create(yaml.safe_load(config.read_text())))
    config.write_text(whole[: whole.index("paths:")])  # still YAML, its model there
    code, out, err = run_main(capsys, seeds, "--metrics", "mae")
    assert code == 0 and "1 run(s) without config.yaml (or with one cut short)" in err[0]
    header, _, *rows = out.splitlines()
    assert header.startswith("| model | data | config.yaml | model.k | n |")
    assert ["cut short", "", "1"] in [row.split(" | ")[2:5] for row in rows]


def test_scale_free_mae_column_and_older_files(tmp_path, capsys):
    """smae aggregates like the other metrics; runs written before it show an empty cell."""
    for seed, mae in enumerate((1.0, 2.0, 4.0)):
        write_run(tmp_path / "new" / str(seed), mae, seed=seed)
    write_run(tmp_path / "old", 3.0, model="lstm", smae=False)
    write_run(tmp_path / "mixed" / "0", 5.0, model="stgcn", seed=0)
    write_run(tmp_path / "mixed" / "1", 6.0, model="stgcn", seed=1, smae=False)
    table = columns(compare(find_runs([tmp_path]), horizons=[3], horizon_metric="smae"))
    assert table["model"] == ["cloudlstm", "lstm", "stgcn"]
    new, old, mixed = table["smae"]
    assert new.mean == pytest.approx(7 / 30)
    assert new.std == pytest.approx(statistics.stdev([0.1, 0.2, 0.4]))
    assert old is None and mixed is None  # not a mean over part of the row's runs
    assert table["smae@3"][0].mean == pytest.approx(7 / 30 + 0.1)
    assert table["smae@3"][1:] == [None, None]
    # ranked on smae: rows without it last; the empty cells are never bold
    assert columns(compare(find_runs([tmp_path]), metrics=["smae"]))["model"][0] == "cloudlstm"
    code, out, err = run_main(capsys, tmp_path, "--metrics", "mae", "smae")
    rows = out.splitlines()
    assert code == 0 and rows[0].endswith("| mae | smae |")
    # the stgcn row's empty cell, though seed 0 has smae, is named with the run lacking it;
    # the lstm row's, none of whose runs has it, on a line of its own (it had no word)
    assert err == [
        "compare: smae is empty in 1 row(s) whose runs do not all report it (a metrics.json "
        f"from before it): stgcn (synthetic); lacking it: {tmp_path / 'mixed' / '1'}",
        "compare: cells empty where no run of the row reports the metric: smae in lstm (synthetic)",
    ]
    assert rows[2].endswith("| **2.3 ± 1.5** | **0.23 ± 0.15** |")
    assert rows[3].endswith("| 3.000 |  |")
    out = io.StringIO()
    write_csv(compare(find_runs([tmp_path / "old"]), metrics=["mae", "smae"]), out)
    header, row = csv.reader(io.StringIO(out.getvalue()))
    assert header[-4:] == ["mae_mean", "mae_std", "smae_mean", "smae_std"]
    assert row[-4:] == ["3.0", "", "", ""]


def test_published_results_table_without_smae(capsys):
    """docs/results holds metrics.json of before smae: they still table, with empty cells."""
    results = Path(__file__).resolve().parents[1] / "docs" / "results" / "beijing_gpu_s23"
    if not results.is_dir():
        pytest.skip(f"no published results at {results}")
    code, out, err = run_main(capsys, results, "--metrics", "mae", "smae", "--channels", "CO")
    rows = [row.split(" | ") for row in out.splitlines()]
    assert code == 0 and rows[0][-3:] == ["mae", "smae", "mae[CO] |"]
    assert err == [
        "compare: cells empty where no run of the row reports the metric: smae in every row"
    ]
    assert all(row[-2] == "" and row[-1] != " |" for row in rows[2:])


def test_channel_columns(tmp_path, capsys):
    """--channels: the --channel-metric of each named channel, empty where a data set has
    no such channel; a channel no run has is one error line naming the valid ones."""
    for seed, co in enumerate((10.0, 20.0)):
        channels = {"PM2.5": 5.0, "CO": co}
        write_run(tmp_path / str(seed), 1.0, seed=seed, data="beijing", channels=channels)
    write_run(tmp_path / "syn", 1.0, data="synthetic", channels={"ch0": 1.0})
    table = columns(compare(find_runs([tmp_path]), channels=["CO", "PM2.5"]))
    assert list(table)[-2:] == ["mae[CO]", "mae[PM2.5]"]
    assert table["data"] == ["beijing", "synthetic"]
    assert table["mae[CO]"][0].mean == 15.0
    assert table["mae[CO]"][0].std == pytest.approx(statistics.stdev([10.0, 20.0]))
    assert table["mae[PM2.5]"][0].mean == 5.0 and table["mae[CO]"][1] is None
    code, out, err = run_main(
        capsys, tmp_path, "--metrics", "mae", "--channels", "CO", "--channel-metric", "smae"
    )
    assert code == 0 and err == []
    assert out.splitlines()[0].endswith("| mae | smae[CO] |")
    assert out.splitlines()[2].endswith("| **1.50 ± 0.71** |")  # CO: 1 and 2 std units
    code, out, err = run_main(capsys, tmp_path, "--channels", "CO,NO3")
    assert (code, out) == (2, "")
    assert err == ["compare: no run has channel(s) NO3; channels: CO, PM2.5, ch0"]
    code, _, err = run_main(capsys, tmp_path, "--channels", "CO,")
    assert code == 2 and len(err) == 1 and err[0].startswith("compare: argument --channels")


def test_step_budget_runs_show_their_steps_and_cost_per_1000_steps(tmp_path):
    """Runs that record optimiser steps and their cost get those columns (means over seeds);
    tables of older runs, which record neither, keep their columns."""
    for seed, (steps, cost) in enumerate(((5000, 2.0), (3000, 4.0))):
        run = tmp_path / "new" / f"s{seed}"
        write_run(run, 1.0, seed=seed)
        results = json.loads((run / "metrics.json").read_text())
        results |= {"steps": steps, "cost": {"train_s_per_1k_steps": cost}}
        (run / "metrics.json").write_text(json.dumps(results))
    write_run(tmp_path / "old" / "s0", 2.0, model="lstm")
    table = {c.name: c for c in build_table(group_runs(find_runs([tmp_path])), ["mae"])}
    assert table["steps"].cells == [4000.0, None]
    assert table["s_per_1k_steps"].cells == [3.0, None]
    only_old = {c.name for c in build_table(group_runs(find_runs([tmp_path / "old"])), ["mae"])}
    assert "steps" not in only_old and "s_per_1k_steps" not in only_old


def test_relative_to_a_baseline_divides_each_seed_by_its_own(tmp_path, capsys):
    """Seed by seed, then mean ± std of the ratios: persistence's MAE 2 and 8 on seeds 0 and
    1 (two draws, one hard), CloudLSTM's 1 and 4: 0.5 on both, where the ratio of the means
    would say 0.5 too but the std of the raw MAEs mixed the draws' difficulty in."""
    for seed, (ours, base) in enumerate([(1.0, 2.0), (4.0, 8.0)]):
        write_run(tmp_path / "cloud" / str(seed), ours, seed=seed)
        write_run(tmp_path / "persist" / str(seed), base, seed=seed, model="persistence")
    write_run(tmp_path / "cloud" / "2", 3.0, seed=2)  # no persistence run of seed 2
    code, out, err = run_main(
        capsys, tmp_path, "--metrics", "mae", "rmse", "--horizons", "1,3", "--format", "csv",
        "--relative-to", "persistence",
    )  # fmt: skip
    assert code == 0
    rows = {row["model"]: row for row in csv.DictReader(io.StringIO(out))}
    assert float(rows["cloudlstm"]["mae_mean"]) == pytest.approx(0.5)
    assert float(rows["cloudlstm"]["mae_std"]) == pytest.approx(0.0)
    assert float(rows["cloudlstm"]["rmse_mean"]) == pytest.approx(0.5)
    # per step: (v - 0.1) / (b - 0.1) at step 1, (v + 0.1) / (b + 0.1) at step 3
    step1 = statistics.mean([0.9 / 1.9, 3.9 / 7.9])
    assert float(rows["cloudlstm"]["mae@1_mean"]) == pytest.approx(step1)
    assert float(rows["cloudlstm"]["mae@3_mean"]) == pytest.approx(
        statistics.mean([1.1 / 2.1, 4.1 / 8.1])
    )
    assert rows["cloudlstm"]["n"] == "2" and float(rows["persistence"]["mae_mean"]) == 1.0
    assert any("1 run(s) without a persistence run of the same data and seed" in e for e in err)
    assert any("every metric is over persistence's" in e for e in err)


def test_relative_to_a_baseline_from_before_the_readings_hash_pairs_with_a_run_that_has_one(
    tmp_path, capsys
):
    """A baseline run from before metrics.json recorded the readings' hash shares any run's
    data in the table; --relative-to left a newer run that recorded one out as unpaired.
    Runs with two different hashes are still not paired."""
    write_run(tmp_path / "persist", 2.0, model="persistence")
    write_run(tmp_path / "cloud" / "0", 1.0, digest="a1e921e14a838f43")
    write_run(tmp_path / "cloud" / "1", 3.0, seed=1)
    code, out, err = run_main(
        capsys, tmp_path, "--metrics", "mae", "--format", "csv", "--relative-to", "persistence"
    )
    assert code == 0, err
    rows = {row["model"]: row for row in csv.DictReader(io.StringIO(out))}
    assert rows["cloudlstm"]["n"] == "2"
    assert float(rows["cloudlstm"]["mae_mean"]) == pytest.approx(1.0)  # 0.5 and 1.5
    shutil.rmtree(tmp_path / "persist")
    write_run(tmp_path / "persist", 2.0, model="persistence", digest="0000000000000000")
    code, out, err = run_main(
        capsys, tmp_path, "--metrics", "mae", "--format", "csv", "--relative-to", "persistence"
    )
    assert any("1 run(s) without a persistence run" in e for e in err)


def test_relative_to_a_model_no_run_has_is_one_line(seeds, capsys):
    code, _, err = run_main(capsys, seeds, "--relative-to", "persistence")
    assert code == 2
    assert err == [
        "compare: --relative-to persistence: no run of that model among the runs; their "
        "models: cloudlstm"
    ]
    code, _, err = run_main(capsys, seeds, "--relative-to", "cloudlstm", "--paper", "metric")
    assert code == 2 and err[-1].endswith("the paper's tables are not relative")
    code, _, err = run_main(capsys, seeds, "--relative-to", "cloudlstm", "--plot", seeds / "f")
    assert code == 2 and err[-1].endswith("draw the figures without --relative-to")
    assert not (seeds / "f").exists()


def test_a_baseline_scoring_every_metric_0_is_one_line(tmp_path, capsys):
    """No metric had a ratio left, so the table had no metric column: an IndexError."""
    write_run(tmp_path / "persistence", 0.0, model="persistence")
    write_run(tmp_path / "cloudlstm", 1.0)
    path = tmp_path / "persistence" / "metrics.json"
    results = json.loads(path.read_text())
    results["test"]["overall"] = {"mae": {"mean": 0.0, "std": 0.0}}  # its one metric, 0
    path.write_text(json.dumps(results))
    code, out, err = run_main(capsys, tmp_path, "--relative-to", "persistence")
    assert (code, out) == (2, "")
    assert err == [
        "compare: --relative-to persistence: no metric is left to show, as its runs score "
        "each metric 0 (a ratio to 0 is none) or lack it; compare without --relative-to"
    ]


def test_two_baseline_runs_of_one_data_and_seed_are_one_line(tmp_path, capsys):
    """An LSTM of 16 and one of 32 units, both seed 0: every row was divided by the one
    found first, without a word."""
    write_run(tmp_path / "cloud", 1.0)
    write_run(tmp_path / "lstm16", 2.0, model="lstm", model_keys={"hidden_size": 16})
    write_run(tmp_path / "lstm32", 4.0, model="lstm", model_keys={"hidden_size": 32})
    code, out, err = run_main(capsys, tmp_path, "--metrics", "mae", "--relative-to", "lstm")
    assert code == 2 and out == ""
    assert err == [
        f"compare: --relative-to lstm: two of its runs, {tmp_path / 'lstm16'} and "
        f"{tmp_path / 'lstm32'}, are of the same data and seed (seed 0), so which one the "
        "rows would be divided by is not known: give folders holding one of them"
    ]
    code, out, _ = run_main(
        capsys, tmp_path / "cloud", tmp_path / "lstm16", "--metrics", "mae", "--relative-to", "lstm"
    )
    assert code == 0


def test_a_baseline_run_once_for_its_data_is_every_seeds(tmp_path, capsys):
    """Persistence, which no seed changes, run for seed 0 only: each seed of the others is
    over that run."""
    write_run(tmp_path / "persist", 2.0, model="persistence")
    for seed, mae in enumerate((1.0, 3.0)):
        write_run(tmp_path / "cloud" / str(seed), mae, seed=seed)
    code, out, err = run_main(
        capsys, tmp_path, "--metrics", "mae", "--format", "csv", "--relative-to", "persistence"
    )
    assert code == 0 and not any("left out" in line for line in err)
    rows = {row["model"]: row for row in csv.DictReader(io.StringIO(out))}
    assert rows["cloudlstm"]["n"] == "2" and float(rows["cloudlstm"]["mae_mean"]) == 1.0
    assert float(rows["cloudlstm"]["mae_std"]) == pytest.approx(statistics.stdev([0.5, 1.5]))


def test_relative_validation_scores_are_over_the_baselines_where_it_has_one(tmp_path, capsys):
    for name, model, val in (
        ("a", "cloudlstm", 3.0),
        ("b", "linear", 4.0),
        ("c", "persistence", None),
    ):
        write_run(tmp_path / name, 1.0, model=model)
        if val is not None:
            metrics = json.loads((tmp_path / name / "metrics.json").read_text())
            metrics["selection"] = {"monitor": "val/mae", "score": val}
            (tmp_path / name / "metrics.json").write_text(json.dumps(metrics))
    args = ["--metrics", "mae", "--val", "--format", "csv", "--relative-to"]
    code, out, _ = run_main(capsys, tmp_path, *args, "linear")
    assert code == 0
    rows = {row["model"]: row for row in csv.DictReader(io.StringIO(out))}
    assert rows["cloudlstm"]["val/mae_mean"] == "0.75"
    code, _, err = run_main(capsys, tmp_path, *args, "persistence")  # chose no checkpoint
    assert code == 2 and err[-1].startswith(
        "compare: --val with --relative-to persistence: its runs record no validation score"
    )


# crps asked for by each option that takes a metric: columns of runs that score the channel
# CO and the point group inliers
CRPS_BY_EACH_OPTION = [
    ("--metrics", "mae", "crps"),
    ("--metrics", "mae", "--horizons", "1", "--horizon-metric", "crps"),
    ("--metrics", "mae", "--channels", "CO", "--channel-metric", "crps"),
    ("--metrics", "mae", "--groups", "inliers", "--group-metric", "crps"),
]


def write_point_forecasts_with_channels_and_groups(root: Path) -> None:
    """Two runs of point forecasts that score the channel CO and the point group inliers."""
    for seed in (0, 1):
        write_run(root / str(seed), 1.0, seed=seed, channels={"CO": 2.0})
        path = root / str(seed) / "metrics.json"
        metrics = json.loads(path.read_text())
        metrics["test"]["groups"] = {"inliers": {"overall": {"mae": {"mean": 0.5}}}}
        path.write_text(json.dumps(metrics))


@pytest.mark.parametrize("asked", CRPS_BY_EACH_OPTION)
def test_a_quantile_metric_no_run_reports_is_one_line(tmp_path, capsys, asked):
    """A quantile metric on runs of point forecasts printed an empty column in every row,
    where another option than --metrics asked for it."""
    write_point_forecasts_with_channels_and_groups(tmp_path)
    code, out, err = run_main(capsys, tmp_path, *asked)
    assert (code, out) == (2, "")
    assert err == [
        "compare: no run has crps results: they are scores of quantile forecasts, which runs "
        "trained with module.quantiles=[...] report"
    ]


@pytest.mark.parametrize("asked", CRPS_BY_EACH_OPTION)
def test_point_forecast_rows_beside_quantile_ones_say_why_their_cells_are_empty(
    tmp_path, capsys, asked
):
    """A quantile metric of a table with runs of both kinds: the rows of point forecasts
    had empty cells without a word, where the other notes name rows without a value."""
    write_point_forecasts_with_channels_and_groups(tmp_path / "point")
    write_run(tmp_path / "quantile", 1.0, model="lstm", channels={"CO": 2.0})
    path = tmp_path / "quantile" / "metrics.json"
    metrics = json.loads(path.read_text())
    test = metrics["test"]
    test["overall"]["crps"] = {"mean": 0.5, "std": 0.1}
    test["per_step"]["crps"] = {"mean": [0.4, 0.5, 0.6], "std": [0.1] * 3}
    test["per_channel"]["CO"]["crps"] = {"mean": 0.7, "std": 0.1}
    test["groups"] = {"inliers": {"overall": {"mae": {"mean": 0.5}, "crps": {"mean": 0.3}}}}
    path.write_text(json.dumps(metrics))
    code, out, err = run_main(capsys, tmp_path, *asked, "--format", "csv")
    assert code == 0
    assert err == [
        "compare: crps is empty in 1 row(s) of point forecasts, whose runs were trained "
        "without module.quantiles: cloudlstm (synthetic)"
    ]
    rows = {row["model"]: row for row in csv.DictReader(io.StringIO(out))}
    column = next(name for name in rows["lstm"] if name.startswith(("crps", "inliers/crps")))
    assert rows["lstm"][column] and not rows["cloudlstm"][column], rows


def test_rows_whose_runs_lack_a_shown_metric_are_one_line_naming_each(tmp_path, capsys):
    """A quantile row of levels without a 50 % interval beside one with it, a point row and
    a row from before smae: the cells of coverage50 and smae were empty without a word. The
    point row's crps and coverage50 keep the line of point forecasts, not a second one."""
    write_run(tmp_path / "point", 1.0)
    write_run(tmp_path / "old", 2.0, model="stgcn", smae=False)
    for name, intervals in (("lstm", (50, 80)), ("cnn", (80,))):
        write_run(tmp_path / name, 3.0, model=name)
        for metric in ("crps", *(f"coverage{level}" for level in intervals)):
            with_metric(tmp_path / name, metric, 0.5)
    code, _, err = run_main(capsys, tmp_path, "--metrics", "mae", "smae", "crps", "coverage50")
    assert code == 0
    assert err == [
        "compare: cells empty where no run of the row reports the metric: smae in stgcn "
        "(synthetic); coverage50 in cnn (synthetic)",
        "compare: crps, coverage50 are empty in 2 row(s) of point forecasts, whose runs were "
        "trained without module.quantiles: stgcn (synthetic), cloudlstm (synthetic)",
    ]


def test_an_interval_the_runs_levels_lack_is_one_line_naming_theirs(tmp_path, capsys):
    """Levels 0.1, 0.5, 0.9 give an 80 % interval and no 50 % one: its column was empty."""
    write_run(tmp_path / "q", 1.0)
    path = tmp_path / "q" / "metrics.json"
    metrics = json.loads(path.read_text())
    for name in ("crps", "pinball", "coverage80", "width80"):
        metrics["test"]["overall"][name] = {"mean": 0.5, "std": 0.1}
    path.write_text(json.dumps(metrics))
    code, out, err = run_main(capsys, tmp_path, "--metrics", "crps", "coverage50")
    assert (code, out) == (2, "")
    assert err == [
        "compare: no run has coverage50 results: the runs' quantile forecasts report crps, "
        "pinball, coverage80, width80 (their module.quantiles set the intervals)"
    ]
    code, out, _ = run_main(capsys, tmp_path, "--metrics", "crps", "coverage80")
    assert code == 0 and out.splitlines()[0].endswith("| crps | coverage80 |")
