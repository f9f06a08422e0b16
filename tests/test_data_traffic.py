"""data=metr_la and data=milan: their configs, the shared copies of the data, a road graph
through train.py's config to STGCN, and a saved run's graph."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import ROOT, TINY, compose_train
from hydra.utils import instantiate

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
