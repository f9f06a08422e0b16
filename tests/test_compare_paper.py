"""``compare --paper``: runs written as train.py writes them, next to docs/paper/*.csv."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml
from conftest import compose_train
from omegaconf import OmegaConf

from cloudlstm.cli.compare.command import main
from cloudlstm.compare import CompareError, find_runs, flatten
from cloudlstm.compare.paper import load_table, paper_model, paper_table

CLOUD = "cloudlstm.models.CloudSeq2Seq"


def write_run(
    path: Path,
    mae: float,
    *,
    name: str = "cloudlstm",
    model: dict | None = None,
    data: dict | None = None,
    seed: int = 0,
    groups: dict[str, float] | None = None,
    code: list[dict] | None = None,
    machine: dict | None = None,
) -> None:
    """A run dir with the keys the paper's rows are matched by (cluster A, M = J = 12);
    ``code``: that of each process that trained it (metrics.json's ``provenance``), each on
    ``machine`` where given."""
    path.mkdir(parents=True)
    overall = {"mae": mae, "rmse": 2 * mae, "psnr": 30.0, "ssim": 0.5}
    test = {"overall": {m: {"mean": v, "std": 1.0} for m, v in overall.items()}}
    if groups:
        test["groups"] = {g: {"overall": {"mae": {"mean": v}}} for g, v in groups.items()}
    results = {"run": {"model": name, "data": "airq"}, "test": test}
    if code is not None:
        on = {"machine": machine} if machine else {}
        results["provenance"] = [{"from_step": 0, "code": c, **on} for c in code]
    (path / "metrics.json").write_text(json.dumps(results))
    cfg = {
        "seed": seed,
        "model": model or {"_target_": CLOUD, "k": 9, "cell": "lstm", "attention": False},
        "data": {"cluster": "A", "input_steps": 12, "output_steps": 12, **(data or {})},
        "paths": {"output_dir": str(path)},
    }
    (path / "config.yaml").write_text(yaml.safe_dump(cfg))


def columns(table) -> dict:
    return {c.name: c.cells for c in table}


def test_rows_match_by_data_set_model_settings_and_steps(tmp_path):
    k3 = {"_target_": CLOUD, "k": 3, "cell": "lstm", "attention": False}
    write_run(tmp_path / "a0", 20.0, name="cloudlstm_k3", model=k3)
    write_run(tmp_path / "a1", 22.0, name="cloudlstm_k3", model=k3, seed=1)
    attention = {"_target_": CLOUD, "k": 9, "cell": "lstm", "attention": True}
    write_run(tmp_path / "b", 10.0, model=attention, data={"cluster": "B"})
    write_run(tmp_path / "p", 5.0, name="persistence", model={"_target_": "x.Persistence"})
    write_run(tmp_path / "long", 5.0, data={"output_steps": 72})  # J = 72: no table row
    write_run(tmp_path / "moved", 5.0, data={"num_points": 50, "outlier_shift": 1.0})
    table, notes = paper_table(find_runs([tmp_path]), "metric2", ["mae", "rmse"])
    cols = columns(table)
    assert list(cols) == [
        *("data", "model", "n"),
        *("mae", "paper_mae", "diff_mae", "rmse", "paper_rmse", "diff_rmse"),
    ]
    assert cols["data"] == ["Cluster A", "Cluster B"]  # the paper's order
    assert cols["model"] == ["CloudLSTM (K=3)", "Attention CloudLSTM (K=9)"]
    assert cols["n"] == [2, 1]
    ours, paper, diff = cols["mae"][0], cols["paper_mae"][0], cols["diff_mae"][0]
    assert (ours.mean, ours.std) == pytest.approx((21.0, 2**0.5))  # over seeds
    assert (paper.mean, paper.std) == (20.84, 7.88)  # tab:metric2, as printed
    assert diff.value == pytest.approx(21.0 - 20.84)
    assert diff.relative == pytest.approx(0.16 / 20.84)
    assert cols["paper_rmse"][1].mean == 13.41
    assert notes[0] == "32 of the 34 rows of table metric2 have no runs"
    assert notes[1] == (
        "3 runs match no row of table metric2: cloudlstm (airq), persistence (airq)"
    )


def test_group_and_setting_columns(tmp_path):
    pointlstm = {"_target_": "cloudlstm.models.pointlstm.PointLSTM", "k": 9}
    for d in (0, 0.5):
        data = {"num_points": 50, "outlier_shift": d}
        groups = {"inliers": 30.0 + d, "outliers": 40.0 + d}
        write_run(
            tmp_path / f"p{d}", 1.0, name="pointlstm", model=pointlstm, data=data, groups=groups
        )
    table, _ = paper_table(find_runs([tmp_path]), "in_and_out", ["mae"])
    cols = columns(table)
    assert list(cols)[:5] == ["data", "model", "d", "group", "n"]
    assert list(zip(cols["d"], cols["group"], strict=True)) == [
        ("0", "inliers"),
        ("0", "outliers"),
        ("0.5", "inliers"),
        ("0.5", "outliers"),
    ]
    assert [s.mean for s in cols["mae"]] == [30.0, 40.0, 30.5, 40.5]  # the groups' results
    assert [s.mean for s in cols["paper_mae"]] == [40.72, 40.06, 38.45, 39.18]


def test_seasonal_rows_and_cities(tmp_path):
    data = {"cluster": None, "city": "city1", "input_steps": 6, "output_steps": 6}
    for seasonal in (False, True):
        write_run(
            tmp_path / str(seasonal), 4.0, data={**data, "num_points": 100, "seasonal": seasonal}
        )
    write_run(tmp_path / "all", 4.0, data={**data, "seasonal": False})  # all antennas
    table, notes = paper_table(find_runs([tmp_path]), "seasonal", ["mae"])
    cols = columns(table)
    assert cols["data"] == ["City 1", "City 1"] and cols["seasonal"] == ["false", "true"]
    assert [s.mean for s in cols["paper_mae"]] == [3.69, 3.40]  # CloudLSTM (K=9)
    assert "1 runs match no row" in notes[1]
    full, _ = paper_table(find_runs([tmp_path / "all"]), "metric", ["mae"])
    assert columns(full)["paper_mae"][0].mean == 3.72


def test_runs_name_their_data_set_in_data_source_or_as_older_runs_did(tmp_path):
    """Today's runs have data.source.cluster / data.source.city; runs saved before the
    source node, data.cluster / data.city: both match the same rows."""
    write_run(tmp_path / "old", 20.0)  # data.cluster=A
    write_run(tmp_path / "new", 22.0, data={"cluster": None, "source": {"cluster": "A"}})
    table, _ = paper_table(find_runs([tmp_path]), "metric2", ["mae"])
    assert columns(table)["data"] == ["Cluster A"] and columns(table)["n"] == [2]
    mobile = {"cluster": None, "input_steps": 6, "output_steps": 6}
    write_run(tmp_path / "city_old", 4.0, data={**mobile, "city": "city2"})
    write_run(tmp_path / "city_new", 5.0, data={**mobile, "source": {"city": "city2"}})
    runs = find_runs([tmp_path / "city_old", tmp_path / "city_new"])
    table, _ = paper_table(runs, "metric", ["mae"])
    assert columns(table)["data"] == ["City 2"] and columns(table)["n"] == [2]


def test_a_run_of_a_file_is_no_paper_city(tmp_path, capsys):
    """data=mobile saves its generator's city (city1) in a file's run too: such a run was
    "City 1" next to the paper's City 1, on data that is not the paper's."""
    cfg = compose_train(tmp_path, ["data=mobile", "data.source.path=/data/traffic.csv"])
    source = OmegaConf.to_container(cfg.data.source)
    assert source["city"] == "city1"  # the config as a file's run saves it
    steps = {"cluster": None, "input_steps": 6, "output_steps": 6}
    write_run(tmp_path / "runs/file", 4.0, data={**steps, "source": source})
    assert main([str(tmp_path / "runs"), "--paper", "metric", "--metrics", "mae"]) == 2
    assert capsys.readouterr().err.startswith(
        "compare: no run matches a row of the paper's table metric"
    )
    write_run(tmp_path / "runs/generated", 5.0, data={**steps, "source": {"city": "city1"}})
    table, notes = paper_table(find_runs([tmp_path / "runs"]), "metric", ["mae"])
    assert columns(table)["data"] == ["City 1"] and columns(table)["n"] == [1]
    assert notes[1] == "1 runs match no row of table metric: cloudlstm (airq)"


def test_every_paper_model_has_a_config_of_ours(tmp_path):
    """docs/paper/model.csv's configs are named, once composed, as the results tables do."""
    with (Path(__file__).parents[1] / "docs/paper/model.csv").open(newline="") as f:
        ours = [rec["ours"] for rec in csv.DictReader(f)]
    names = set()
    for name in ours:
        cfg = compose_train(tmp_path, [f"model={name}"])
        names.add(paper_model(flatten(OmegaConf.to_container(cfg.model), "model.")))
    assert names == {row.model for row in load_table("metric2")}
    knn = compose_train(tmp_path, ["model=knn_mlp", "model.k=25"]).model
    assert paper_model({"model._target_": knn._target_, "model.k": knn.k}) == "MLP (K=25)"


def test_a_row_of_runs_from_different_code_or_machines_is_noted(tmp_path):
    """As in the ordinary table: a paper row whose runs came from two commits, or trained
    on two machines, is named."""
    commit_a = {"version": "0.1.0", "commit": "a" * 40, "changed": False}
    commit_b = {**commit_a, "commit": "b" * 40}
    cpu, gpu = {"device": "cpu", "cpu": "AMD EPYC"}, {"device": "cuda:0", "gpu": "NVIDIA H200"}
    write_run(tmp_path / "a0", 20.0, code=[commit_a], machine=cpu)
    write_run(tmp_path / "a1", 22.0, seed=1, code=[commit_b], machine=gpu)
    write_run(tmp_path / "b", 10.0, data={"cluster": "B"}, code=[commit_a], machine=cpu)
    _, notes = paper_table(find_runs([tmp_path]), "metric2", ["mae"])
    assert notes[-2:] == [
        "1 row(s) come from more than one version of the code, or from code with "
        "uncommitted changes: CloudLSTM (K=9), Cluster A (aaaaaaa, bbbbbbb). Each run's "
        "metrics.json names its code under provenance.",
        "1 row(s) pool runs trained on different machines, so their times (train_s, "
        "s_per_1k_steps) mix those machines' speeds: CloudLSTM (K=9), Cluster A (CPU AMD "
        "EPYC: 1 run, NVIDIA H200: 1 run). Each run's metrics.json names its machine under "
        "provenance.",
    ]


def test_command_line(tmp_path, capsys):
    write_run(tmp_path / "a", 20.0)
    assert main([str(tmp_path), "--paper", "metric2", "--metrics", "mae"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "| data | model | n | mae | paper_mae | diff_mae |"
    assert (
        out.splitlines()[2]
        == "| Cluster A | CloudLSTM (K=9) | 1 | 20.00 | 21.72 ± 7.83 | -1.72 (-7.9%) |"
    )
    assert err == "compare: 33 of the 34 rows of table metric2 have no runs\n"
    assert main([str(tmp_path), "--paper", "metric2", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows[0]["paper_mae_mean"] == "21.72" and rows[0]["paper_mae_std"] == "7.83"
    assert float(rows[0]["diff_mae"]) == pytest.approx(-1.72)
    for argv, message in (
        (["--paper", "metric2", "--by", "model"], "compare: --paper takes no --by"),
        (["--paper", "metric2", "--val"], "compare: --paper takes no --by"),
        (["--paper", "metric9"], "compare: argument --paper: invalid choice"),
        (["--paper", "metric"], "compare: no run matches a row of the paper's table metric"),
    ):
        assert main([str(tmp_path), *argv]) == 2
        assert capsys.readouterr().err.startswith(message)


def test_a_metric_the_table_lacks_is_one_line_naming_its_metrics(tmp_path, capsys):
    """--paper metric2 --metrics mape printed a table with no metric column, and
    --metrics mae mape left out mape, without a word."""
    write_run(tmp_path / "a", 20.0)
    for asked in (["mape"], ["mae", "mape", "smae"]):
        assert main([str(tmp_path), "--paper", "metric2", "--metrics", *asked]) == 2
        out, err = capsys.readouterr()
        lacking = ", ".join(m for m in asked if m != "mae")
        assert out == "" and err == (
            f"compare: the paper's table metric2 has mae, rmse, psnr, ssim; not {lacking}: "
            "ask for its metrics (--metrics mae rmse psnr ssim), or leave out --paper for "
            "ours\n"
        )
    assert main([str(tmp_path), "--paper", "in_and_out", "--metrics", "psnr"]) == 2
    assert capsys.readouterr().err.startswith(
        "compare: the paper's table in_and_out has mae, rmse; not psnr: "
    )
    # no --metrics: every metric of the table, none of ours it lacks (mape, smae)
    table, _ = paper_table(find_runs([tmp_path]), "metric2")
    assert [c.name for c in table if c.name.startswith("paper_")] == [
        "paper_mae",
        "paper_rmse",
        "paper_psnr",
        "paper_ssim",
    ]


def test_a_paper_table_missing_from_disk_says_where_it_was_looked_for(tmp_path):
    """A folder without the table: the valid name is not called unknown."""
    with pytest.raises(CompareError, match=r"'metric2' is not at .*lacks the tables of docs"):
        load_table("metric2", paper_dir=tmp_path)
    with pytest.raises(CompareError, match="no paper table 'metric9'; valid: metric, "):
        load_table("metric9")
