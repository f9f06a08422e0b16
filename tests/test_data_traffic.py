"""data=metr_la and data=milan: their configs, the shared copies of the data, a road graph
through train.py's config to STGCN, and a saved run's graph."""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from conftest import ROOT, TINY, compose_train
from hydra.utils import instantiate
from omegaconf import OmegaConf

from cloudlstm.assembly.build import instantiate_datamodule
from cloudlstm.cli.train import train
from cloudlstm.errors import MissingFileError

SHARED = ROOT.parent / "shared" / "data"
METR_LA = SHARED / "metr_la_week"
MILAN = SHARED / "milan_telecom"
needs_metr_la = pytest.mark.skipif(
    not METR_LA.is_dir(), reason=f"the METR-LA week (Los-loop) copy is not at {METR_LA}"
)
needs_milan = pytest.mark.skipif(
    not MILAN.is_dir(), reason=f"the Milan mobile-traffic copy is not at {MILAN}"
)
# TINY's job without its synthetic-data and CloudLSTM keys
JOB = [o for o in TINY if not o.startswith(("data.source.", "model."))]
IDS = ["773869", "767541", "767542", "717447", "717446", "717445"]


def write_week(folder: Path, steps: int = 160) -> np.ndarray:
    """A Los-loop-like folder: ``los_speed.csv.gz`` (no time column), DCRNN's
    ``graph_sensor_locations.csv`` and ``adj_mx.pkl`` (a chain of sensors); the weights."""
    folder.mkdir(parents=True, exist_ok=True)
    t = np.arange(steps)[:, None]
    speed = 60 + 5 * np.sin(2 * np.pi * t / 48 + np.arange(len(IDS)))
    pd.DataFrame(speed, columns=IDS).to_csv(folder / "los_speed.csv.gz", index=False)
    places = pd.DataFrame({"index": range(len(IDS)), "sensor_id": IDS})
    places = places.assign(latitude=34 + 0.01 * np.arange(6), longitude=-118 - 0.02 * np.arange(6))
    places.to_csv(folder / "graph_sensor_locations.csv", index=False)
    weights = np.eye(len(IDS)) + 0.5 * np.eye(len(IDS), k=1)  # directed, with self-loops
    with (folder / "adj_mx.pkl").open("wb") as f:
        pickle.dump((IDS, {s: i for i, s in enumerate(IDS)}, weights), f, protocol=2)
    return weights


@pytest.mark.parametrize(
    ("name", "env", "folder"),
    [("metr_la", "CLOUDLSTM_METR_LA_ROOT", METR_LA), ("milan", "CLOUDLSTM_MILAN_ROOT", MILAN)],
)
def test_configs_default_to_the_shared_copies(name, env, folder, monkeypatch, tmp_path):
    monkeypatch.delenv(env, raising=False)
    cfg = compose_train(tmp_path, [f"data={name}"])
    assert Path(cfg.data.source.root).resolve() == folder.resolve()
    assert cfg.data.source._target_ == "cloudlstm.data.sources.wide_table.WideTableSource"
    assert cfg.data.source.graph is None
    # an .h5 of several tables names the one to read with it, as the refusal says
    assert compose_train(tmp_path, [f"data={name}", "data.source.key=a"]).data.source.key == "a"
    # so is a positions file's columns, set without a "+" as the refusal of unnamed ones says
    assert cfg.data.source.position_cols is None
    named = compose_train(tmp_path, [f"data={name}", "data.source.position_cols=[id,x,y]"])
    assert list(named.data.source.position_cols) == ["id", "x", "y"]
    assert list(cfg.data.valid_ranges.values()) == [[0, None]]  # no negative speed or traffic
    monkeypatch.setenv(env, "/somewhere/else")
    assert compose_train(tmp_path, [f"data={name}"]).data.source.root == "/somewhere/else"


@pytest.mark.parametrize(
    ("name", "where"), [("metr_la", r"github\.com/lehaifeng/T-GCN"), ("milan", r"dataverse")]
)
def test_absent_files_say_where_to_get_them(name, where, tmp_path):
    cfg = compose_train(tmp_path, [f"data={name}", f"data.source.root={tmp_path / 'nothing'}"])
    datamodule = instantiate_datamodule(cfg)
    with pytest.raises(MissingFileError, match=rf"data\.source\.root=.*{where}"):
        datamodule.prepare_data()


@needs_metr_la
def test_the_metr_la_week_as_shared(tmp_path):
    cfg = compose_train(tmp_path, ["data=metr_la", "data.source.graph=adj_mx.pkl"])
    datamodule = instantiate_datamodule(cfg)
    stream = datamodule.stream
    assert stream.values.shape == (2016, 207, 1) and stream.channel_names == ["speed"]
    ids = (METR_LA / "graph_sensor_ids.txt").read_text().strip().split(",")
    assert stream.point_ids == ids and stream.mask.all()  # the week has no 0 (no gap)
    assert stream.timestamps[0] == np.datetime64("2012-03-01T00:00")
    assert stream.timestamps[-1] == np.datetime64("2012-03-07T23:55")
    first = pd.read_csv(METR_LA / "los_speed.csv.gz", nrows=1).to_numpy()[0]
    np.testing.assert_allclose(stream.values[0, :, 0], first, rtol=1e-6)
    np.testing.assert_allclose(stream.coords[0], [-118.31829, 34.15497])  # (lon, lat)
    adjacency = np.array(datamodule.spec.adjacency)
    assert adjacency.shape == (207, 207) and np.all(np.diag(adjacency) == 1)
    # T-GCN's los_adj.csv is DCRNN's adj_mx made symmetric by the larger weight
    tgcn = instantiate(cfg.data.source, graph="los_adj.csv.gz")
    symmetric = np.maximum(adjacency, adjacency.T)
    np.testing.assert_allclose(tgcn.adjacency(stream.point_ids), symmetric, atol=1e-6)


@needs_milan
def test_the_milan_traffic_as_shared(tmp_path):
    stream = instantiate_datamodule(compose_train(tmp_path, ["data=milan"])).stream
    assert stream.values.shape == (1344, 100, 1) and stream.channel_names == ["traffic"]
    assert stream.metadata["step_minutes"] == 60.0 and stream.mask.all()
    assert stream.timestamps[0] == np.datetime64("2013-11-04T00:00")
    table = pd.read_csv(MILAN / "cellular_traffic.csv.gz", index_col=0)
    assert stream.point_ids == list(table.columns)
    np.testing.assert_allclose(stream.values[:, :, 0], table.to_numpy(), rtol=1e-6)
    places = pd.read_csv(MILAN / "cell_centroids.csv").set_index("cellId")
    expected = places.loc[[int(p) for p in stream.point_ids], ["lon", "lat"]].to_numpy()
    np.testing.assert_allclose(stream.coords, expected)


def test_a_road_graph_reaches_stgcn_through_train_py(tmp_path):
    weights = write_week(tmp_path / "week")
    base = [
        "data=metr_la",
        f"data.source.root={tmp_path / 'week'}",
        "data.source.graph=adj_mx.pkl",
        "data.input_steps=4",
        "data.output_steps=3",
        "logger=none",
        *JOB,
    ]
    cfg = compose_train(tmp_path, [*base, "model=stgcn", "model.hidden_channels=4"])
    results = train(cfg)
    assert results["data"]["num_points"] == len(IDS)
    assert math.isfinite(results["test"]["overall"]["mae"]["mean"])
    checkpoint = torch.load(
        next((tmp_path / "run" / "checkpoints").glob("last*.ckpt")), weights_only=False
    )
    assert checkpoint["data_spec"]["adjacency"] == weights.tolist()
    assert checkpoint["data_spec"]["fixed_points"].startswith("it convolves over the given graph")
    assert not [k for k in checkpoint["state_dict"] if "laplacian" in k]  # not a weight


@pytest.fixture(scope="module")
def road_run(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny STGCN run trained on the road graph ``adj_mx.pkl`` of :func:`write_week`: the
    run directory and the week's folder."""
    tmp = tmp_path_factory.mktemp("roads")
    week = tmp / "week"
    write_week(week)
    job = ["data=metr_la", f"data.source.root={week}", "data.source.graph=adj_mx.pkl"]
    job += ["data.input_steps=4", "data.output_steps=3", "logger=none", *JOB]
    cfg = compose_train(tmp, [*job, "model=stgcn", "model.hidden_channels=4"])
    train(cfg)
    return Path(cfg.paths.output_dir), week


def test_eval_refuses_another_graph_than_the_trained_one(road_run, tmp_path):
    """eval.py data.source.graph=null on an STGCN trained on a road graph scored it, in
    silence, on the distance graph of the positions (another file: on other roads), where
    predict.py forecasts with the checkpoint's graph: both are refused, naming both graphs.
    The first from the configs, before the data are read (a folder without the files is
    never reached; it was, and only then was the graph told); the second once read, as two
    paths may name one file."""
    from cloudlstm.cli.evaluate import evaluate
    from cloudlstm.errors import UserError
    from tests.test_eval import compose_eval

    run, week = road_run
    gone = f"data.source.root={tmp_path / 'gone'}"
    with pytest.raises(UserError) as err:
        evaluate(compose_eval(run, tmp_path / "null", "data.source.graph=null", gone))
    assert str(err.value) == (
        f"{run} was trained on the graph of data.source.graph=adj_mx.pkl, and this evaluation "
        "gives none (data.source.graph=null: the model would build its own): its weights were "
        "learnt over the one, and would be scored over the other. Evaluate it with "
        "data.source.graph=adj_mx.pkl (leave out the override that changes it), or train a "
        "model for this graph."
    )
    weights = pickle.loads((week / "adj_mx.pkl").read_bytes())[2]
    with (week / "roads.pkl").open("wb") as f:  # the same sensors, other roads
        roads = weights + 0.25 * np.eye(len(IDS), k=2)
        pickle.dump((IDS, {s: i for i, s in enumerate(IDS)}, roads), f, protocol=2)
    with pytest.raises(
        UserError,
        match=re.escape(f"these data give the graph of data.source.graph={week / 'roads.pkl'} ("),
    ):
        evaluate(compose_eval(run, tmp_path / "roads", "data.source.graph=roads.pkl"))
    # the same file's graph of fewer points: the points are what differs, and are refused
    with pytest.raises(UserError, match=r"can only be evaluated on its 6 training points"):
        evaluate(compose_eval(run, tmp_path / "fewer", "data.num_points=4"))
    assert math.isfinite(
        evaluate(compose_eval(run, tmp_path / "own"))["test"]["overall"]["mae"]["mean"]
    )


def test_a_graph_given_to_a_model_trained_without_one_is_refused(road_run):
    """The other way round: the trained model built its own graph, the data give one; and
    a checkpoint that does not name its graph's file."""
    from cloudlstm.assembly.checkpoint_fit import TrainedCheckpoint, check_same_graph
    from cloudlstm.errors import UserError
    from cloudlstm.rundir.layout import read_run_config

    run, _ = road_run
    model = read_run_config(run).model
    checkpoint = TrainedCheckpoint.read(next((run / "checkpoints").glob("last*.ckpt")))
    own = dataclasses.replace(checkpoint.spec, adjacency=None, graph=None)
    without = TrainedCheckpoint(checkpoint.path, checkpoint.contents, own)
    with pytest.raises(
        UserError,
        match=r"was trained without a given graph .* Evaluate it with "
        r"data\.source\.graph=null \(",
    ):
        check_same_graph(model, checkpoint.spec, without)
    check_same_graph(model, checkpoint.spec, checkpoint)  # its own graph
    check_same_graph(model, own, without)  # neither has one
    # a checkpoint from before the description named the graph's file: its config names it
    unnamed = dataclasses.replace(checkpoint.spec, graph=None)
    older = TrainedCheckpoint(checkpoint.path, checkpoint.contents, unnamed)
    with pytest.raises(
        UserError,
        match=r"trained on a given graph of 6 points, and these data give none .* Evaluate "
        r"it with the data\.source\.graph of its config\.yaml \(",
    ):
        check_same_graph(model, own, older)


def test_stgcn_takes_its_graph_transposed_and_dcrnn_does_not(road_run, tmp_path):
    """A directed road graph given as A^T (rows and columns swapped: each edge reversed) was
    refused as another graph for STGCN, which makes a graph undirected (max(w_ij, w_ji),
    no self-loops) and so convolves over the very graph it was trained on. DCRNN reads the
    edges' direction (its forward and backward walks swap): refused, saying so."""
    from cloudlstm.assembly.checkpoint_fit import TrainedCheckpoint, check_same_graph
    from cloudlstm.cli.evaluate import evaluate
    from cloudlstm.errors import UserError
    from tests.test_eval import compose_eval

    run, week = road_run
    _, to_index, weights = pickle.loads((week / "adj_mx.pkl").read_bytes())
    assert not np.array_equal(weights, weights.T)  # a directed graph
    with (week / "transposed.pkl").open("wb") as f:
        pickle.dump((IDS, to_index, weights.T), f, protocol=2)
    evaluated = evaluate(compose_eval(run, tmp_path / "t", "data.source.graph=transposed.pkl"))
    assert math.isfinite(evaluated["test"]["overall"]["mae"]["mean"])
    checkpoint = TrainedCheckpoint.read(next((run / "checkpoints").glob("last*.ckpt")))
    transposed = dataclasses.replace(
        checkpoint.spec, adjacency=weights.T.tolist(), graph="transposed.pkl"
    )
    dcrnn = OmegaConf.create({"_target_": "cloudlstm.models.dcrnn.DCRNN"})
    with pytest.raises(
        UserError,
        match=r"data\.source\.graph=transposed\.pkl \(6 points\), the trained graph transposed "
        r"\(each edge reversed\), which DCRNN reads along the edges' direction: its weights",
    ):
        check_same_graph(dcrnn, transposed, checkpoint)


def mph_job(week: Path) -> list[str]:
    """A tiny linear run's overrides on the Los-loop-like ``week`` (:func:`write_week`)."""
    job = ["data=metr_la", f"data.source.root={week}", "data.input_steps=4"]
    return [*job, "data.output_steps=3", "logger=none", *JOB, "model=linear"]


@pytest.fixture(scope="module")
def mph_run(tmp_path_factory) -> Path:
    """A tiny linear run on a Los-loop-like week whose speeds it records in mph."""
    tmp = tmp_path_factory.mktemp("mph")
    write_week(tmp / "week")
    cfg = compose_train(tmp, [*mph_job(tmp / "week"), "data.source.units={speed: mph}"])
    train(cfg)
    return Path(cfg.paths.output_dir)


def test_eval_refuses_a_run_of_mph_evaluated_in_km_h(mph_run, tmp_path):
    """The units a table's run trained in (data.source.units) are recorded in its data
    summary, and eval.py refuses data given in others, as it does Beijing's; a table in
    km/h scored by a model of mph reads every speed 1.6 times too large."""
    from cloudlstm.cli.evaluate import evaluate
    from cloudlstm.errors import UserError
    from tests.test_eval import compose_eval

    summary = json.loads((mph_run / "data_summary.json").read_text())
    assert summary["source_metadata"]["units"] == {"speed": "mph"}
    # refused from the configs, before the data are read: the folder given holds none
    for extra in ([], ["data.source.root=/nonexistent/week"]):
        kmh = compose_eval(mph_run, tmp_path / "kmh", "data.source.units={speed: km/h}", *extra)
        with pytest.raises(UserError) as err:
            evaluate(kmh)
        assert str(err.value).endswith(
            " was trained on speed in mph, and these data give it in km/h: the model and its "
            "training scaler would read every value in the wrong units. Evaluate it on data in "
            "mph (leave out data.source.units={speed: km/h}), or train a model for these units."
        )
    assert math.isfinite(
        evaluate(compose_eval(mph_run, tmp_path / "own"))["test"]["overall"]["mae"]["mean"]
    )


def test_units_one_side_does_not_name_pass_the_check_of_the_configs(mph_run):
    """A channel whose unit the run or the evaluation does not name is unknown there: the
    check of the configs lets it through, as the check of the data does."""
    from omegaconf import OmegaConf

    from cloudlstm.assembly.evaluated_data import check_units_and_graph_settings
    from cloudlstm.rundir.layout import read_run_config

    trained = read_run_config(mph_run)
    unnamed = OmegaConf.merge(trained, {"data": {"source": {"units": None}}})
    other = OmegaConf.merge(trained, {"data": {"source": {"units": {"speed": "km/h"}}}})
    check_units_and_graph_settings(trained, unnamed, [], mph_run)
    check_units_and_graph_settings(unnamed, other, [], mph_run)
    with pytest.raises(
        Exception, match="was trained on speed in mph, and these data give it in km/h"
    ):
        check_units_and_graph_settings(trained, other, [], mph_run)


def test_a_run_saved_before_units_existed_evaluates(mph_run, tmp_path):
    """A run's config.yaml from before data.source.units has no such key, and its summary
    no units: eval.py rebuilds its data without them, and compares nothing."""
    from cloudlstm.cli.evaluate import evaluate
    from tests.test_eval import compose_eval

    old = tmp_path / "old"
    shutil.copytree(mph_run, old)
    config = yaml.safe_load((old / "config.yaml").read_text())
    del config["data"]["source"]["units"]
    (old / "config.yaml").write_text(yaml.safe_dump(config))
    summary = json.loads((old / "data_summary.json").read_text())
    del summary["source_metadata"]["units"]
    (old / "data_summary.json").write_text(json.dumps(summary))
    results = evaluate(compose_eval(old, tmp_path / "eval"))
    assert math.isfinite(results["test"]["overall"]["mae"]["mean"])
    written = json.loads((tmp_path / "eval" / "data_summary.json").read_text())
    assert "units" not in written["source_metadata"]


def test_a_committed_metr_la_run_resumes_with_the_units_key_new(tmp_path):
    """The committed runs' config.yaml (experiment=metr_la) has no data.source.units: a
    resume takes it as a key new in the code, at its null default, and refuses nothing."""
    from cloudlstm.rundir.config_changes import config_changes

    run = tmp_path / "run"
    run.mkdir()
    committed = ROOT / "docs" / "results" / "metr_la_recipe" / "small" / "linear" / "seed_0"
    shutil.copy(committed / "config.yaml", run / "config.yaml")
    assert "units" not in yaml.safe_load((run / "config.yaml").read_text())["data"]["source"]
    job = ["experiment=metr_la", "hydra.sweeper.params=null", "model=linear", "seed=0"]
    cfg = compose_train(tmp_path, job)
    cfg.paths.output_dir = str(run)
    changes = {c.key: c.allowed_by for c in config_changes(cfg, run)}
    assert changes["data.source.units"] == "new key"
    assert None not in changes.values()


def test_the_graph_setting_is_compared_before_the_data_are_read(road_run):
    """check_units_and_graph_settings refuses a graph given to a model trained without one
    too; two files, which may hold one graph, are left to check_same_graph once the data
    are read, and a model that reads no graph takes any setting."""
    from omegaconf import OmegaConf

    from cloudlstm.assembly.evaluated_data import check_units_and_graph_settings
    from cloudlstm.errors import UserError
    from cloudlstm.rundir.layout import read_run_config

    run, week = road_run
    trained = read_run_config(run)
    no_graph = {"data": {"source": {"graph": None}}}
    without = OmegaConf.merge(trained, no_graph)
    with pytest.raises(
        UserError,
        match=r"was trained without a given graph \(data.source.graph=null: the model built "
        r"its own\), and this evaluation gives the graph of data.source.graph=adj_mx.pkl: .* "
        r"Evaluate it with data\.source\.graph=null \(",
    ):
        check_units_and_graph_settings(without, trained, [], run)
    check_units_and_graph_settings(trained, trained, [], run)  # its own
    other_file = OmegaConf.merge(trained, {"data": {"source": {"graph": str(week / "adj_mx.pkl")}}})
    check_units_and_graph_settings(trained, other_file, [], run)
    linear = OmegaConf.merge(trained, {"model": {"_target_": "cloudlstm.models.TimeLinear"}})
    check_units_and_graph_settings(linear, OmegaConf.merge(linear, no_graph), [], run)
