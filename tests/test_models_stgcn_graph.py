"""STGCN on a given graph (``adjacency``, from ``data.source.graph``) instead of its distance
graph, and how the build passes the data's graph to the models that take one."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
import torch
from hydra.errors import InstantiationException

from cloudlstm.cli.train import train
from cloudlstm.data.spec import DataSpec
from cloudlstm.errors import UserError, one_line_errors
from cloudlstm.models.build import build_model
from cloudlstm.models.stgcn import STGCN
from cloudlstm.nn.graph import given_laplacian, scaled_laplacian
from tests.conftest import TINY, compose_train

# a directed chain with self-loops, as DCRNN's road graphs are (and one isolated point)
WEIGHTS = [
    [1.0, 0.8, 0.0, 0.0, 0.0],
    [0.2, 1.0, 0.5, 0.0, 0.0],
    [0.0, 0.0, 1.0, 0.9, 0.0],
    [0.0, 0.0, 0.0, 1.0, 0.0],
    [0.0, 0.0, 0.0, 0.0, 1.0],
]
SPEC = replace(DataSpec.sized(5, 2, 4, 3), adjacency=WEIGHTS)
STGCN_CONFIG = {"_target_": "cloudlstm.models.stgcn.STGCN", "hidden_channels": 8}


def small(**kwargs) -> STGCN:
    args = {"num_channels": 2, "input_steps": 4, "output_steps": 3, "hidden_channels": 8}
    return STGCN(**{**args, **kwargs})


def test_given_laplacian_is_undirected_without_self_loops():
    lap = given_laplacian(WEIGHTS)
    assert lap.shape == (1, 5, 5) and lap.dtype == torch.float32
    symmetric = torch.tensor(WEIGHTS, dtype=torch.float64)
    symmetric = torch.maximum(symmetric, symmetric.T) * (1 - torch.eye(5, dtype=torch.float64))
    assert symmetric[0, 1] == 0.8 and symmetric[1, 0] == 0.8  # the larger of the two
    torch.testing.assert_close(lap, scaled_laplacian(symmetric[None]).float())
    eig = torch.linalg.eigvalsh(lap.double())
    assert eig.min() >= -1 - 1e-6 and eig.max() == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize(
    ("weights", "words"),
    [
        ([[0.0, 1.0]], "N x N matrix"),
        ([[0.0, -1.0], [1.0, 0.0]], "finite and >= 0"),
        ([[0.0, float("nan")], [1.0, 0.0]], "finite and >= 0"),
    ],
)
def test_given_laplacian_refuses_what_is_no_graph(weights, words):
    with pytest.raises(ValueError, match=words):
        given_laplacian(weights)


def test_a_given_graph_replaces_the_distance_graph():
    torch.manual_seed(0)
    model = small(adjacency=WEIGHTS).eval()
    assert model.fixed_points and "data.source.graph" in model.fixed_points
    assert small().fixed_points is None and STGCN.fixed_points is None  # the class's stays
    x, coords = torch.randn(2, 4, 5, 2), torch.rand(2, 5, 2)
    with torch.no_grad():
        out = model(x, coords)
        # the coordinates are not read: any others give the same forecast
        torch.testing.assert_close(model(x, torch.rand(2, 5, 2)), out)
    plain = small()
    plain.load_state_dict(model.state_dict())  # the same weights: the graph is no weight
    assert "given_laplacian" not in model.state_dict()
    with torch.no_grad():
        assert not torch.allclose(plain.eval()(x, coords), out)
    with pytest.raises(ValueError, match=r"built on a graph of 5 points .* x has 4 points"):
        model(x[:, :, :4], coords[:, :4])


def test_the_build_passes_the_datas_graph_to_a_model_that_takes_one(caplog):
    model = build_model(STGCN_CONFIG, SPEC)
    torch.testing.assert_close(model.given_laplacian, given_laplacian(WEIGHTS))
    assert build_model(STGCN_CONFIG, replace(SPEC, adjacency=None)).given_laplacian is None
    # a model that reads no graph is built as without one, and the log says so
    with caplog.at_level(logging.INFO, logger="cloudlstm.models.build"):
        linear = build_model({"_target_": "cloudlstm.models.linear.TimeLinear"}, SPEC)
    assert "TimeLinear reads no given graph" in caplog.text
    plain = build_model(
        {"_target_": "cloudlstm.models.linear.TimeLinear"}, replace(SPEC, adjacency=None)
    )
    assert linear.state_dict().keys() == plain.state_dict().keys()
    # a bad option of a model built with a graph is one line at the entry points, as without
    lines = []
    for spec in (SPEC, replace(SPEC, adjacency=None)):
        with pytest.raises(InstantiationException) as wrapped:
            build_model({**STGCN_CONFIG, "kt": 0}, spec)
        with pytest.raises(UserError) as one_line, one_line_errors():
            raise wrapped.value
        lines.append(str(one_line.value))
    assert lines[0] == lines[1] == "STGCN: model.kt must be >= 1, got 0."


def test_a_kernel_option_that_the_given_graph_replaces_is_warned_of(caplog):
    with caplog.at_level(logging.WARNING, logger="cloudlstm.models.build"):
        build_model({**STGCN_CONFIG, "sigma": 0.3, "neighbours": 3}, SPEC)
    assert (
        "model.sigma=0.3, model.neighbours=3 change nothing: the data's graph "
        "(data.source.graph) replaces the graph STGCN builds from the coordinates. Leave them "
        "out, or give data.source.graph=null for the coordinates' graph."
    ) in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cloudlstm.models.build"):
        build_model({**STGCN_CONFIG, "sigma": 0.3}, replace(SPEC, adjacency=None))  # its own
        build_model(STGCN_CONFIG, SPEC)  # at their defaults
    assert "nothing: the data's graph" not in caplog.text


@pytest.mark.parametrize("name", ["stgcn", "dcrnn", "graph_wavenet"])
def test_a_kernel_neighbour_the_points_do_not_have_is_warned_of(name, caplog):
    """Five points have four others each: a sixth neighbour was read as the fourth, silently;
    beside a model.sigma, model.neighbours is read not at all."""
    target = {
        "stgcn": "cloudlstm.models.stgcn.STGCN",
        "dcrnn": "cloudlstm.models.dcrnn.DCRNN",
        "graph_wavenet": "cloudlstm.models.graph_wavenet.GraphWaveNet",
    }[name]
    own_graph = replace(SPEC, adjacency=None)
    said = []
    for options, spec in (
        ({"neighbours": 6}, own_graph),
        ({"neighbours": 4}, own_graph),  # the farthest other point, as the user asks
        ({"neighbours": 6, "sigma": 0.3}, own_graph),
        ({"neighbours": 6}, SPEC),  # the given graph replaces it: said by its own warning
    ):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="cloudlstm.models.build"):
            build_model({"_target_": target, **options}, spec)
        said.append([r.getMessage() for r in caplog.records if "kernel width" in r.getMessage()])
    cls = target.rsplit(".", 1)[1]
    assert said[0] == [
        f"model.neighbours=6: the data's points have 4 other point(s) each, so {cls}'s kernel "
        "width is the mean distance to the farthest one. Set model.neighbours<=4 to say so, "
        "or give model.sigma."
    ]
    assert said[1] == [] and said[3] == []
    assert said[2] == [
        f"model.neighbours=6 changes nothing: model.sigma=0.3 sets {cls}'s kernel width. "
        "Leave model.neighbours out, or give model.sigma=null for the automatic width."
    ]


def test_a_run_says_a_build_warning_once(tmp_path, caplog):
    """The model is built twice, on the meta device to weigh it and then for real: both
    builds said their warnings."""
    job = [o for o in TINY if not o.startswith("model.")]
    cfg = compose_train(tmp_path, [*job, "logger=none", "model=stgcn", "model.neighbours=20"])
    with caplog.at_level(logging.WARNING):
        train(cfg)
    said = [r.getMessage() for r in caplog.records if "model.neighbours=20" in r.getMessage()]
    assert len(said) == 1, said
