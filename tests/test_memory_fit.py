"""A model is weighed on the meta device before it is built: the count is the real model's,
the weighing leaves the real build's weights as they would be, and a model whose weights
(and gradients, training on the CPU) need more than the room is refused with one line."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from cloudlstm.assembly.memory_fit import check_model_fits, model_bytes, trains_in_host_memory
from cloudlstm.data.spec import DataSpec
from cloudlstm.errors import OutOfMemoryError, readable_size
from cloudlstm.models.build import build_model
from tests.conftest import ROOT
from tests.test_model_options import _model_config

SPEC = DataSpec.sized(
    num_points=16, num_channels=2, input_steps=24, output_steps=3, steps_per_day=24
)
MODELS = sorted(
    p.stem for p in (ROOT / "conf" / "model").glob("*.yaml") if "_global_" not in p.read_text()
)


def _with_graph(spec: DataSpec) -> DataSpec:
    """``spec`` with a road graph's weights, as ``data.source.graph`` gives them."""
    weights = np.random.default_rng(0).random((spec.num_points, spec.num_points))
    graph = (weights + weights.T) * (weights > 0.5)
    return dataclasses.replace(spec, adjacency=graph.tolist())


@pytest.mark.parametrize("graph", [False, True], ids=["positions", "a road graph"])
@pytest.mark.parametrize("name", MODELS)
def test_the_weighing_counts_the_real_model_and_leaves_its_weights_as_they_were(name, graph):
    spec = _with_graph(SPEC) if graph else SPEC
    config = _model_config(name)
    torch.manual_seed(0)
    alone = build_model(config, spec)
    torch.manual_seed(0)
    weighed = model_bytes(OmegaConf.create(config), spec)
    after = build_model(config, spec)
    params, size = weighed
    assert params == sum(p.numel() for p in alone.parameters())
    real = sum(t.numel() * t.element_size() for t in [*alone.parameters(), *alone.buffers()])
    # a given graph is weighed without it: its buffer (two supports at most) is left out
    missed = 2 * spec.num_points**2 * 4 if graph else 0
    assert real - missed <= size <= real
    state, state_after = alone.state_dict(), after.state_dict()
    assert state.keys() == state_after.keys()
    assert all(torch.equal(state[key], state_after[key]) for key in state), name
    # nothing the meta build memoised (a graph, a grid) reaches the real model's forward
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 24, spec.num_points, 2, generator=gen)
    coords = torch.rand(spec.num_points, 2, generator=gen).expand(2, -1, -1).contiguous()
    with torch.no_grad():
        assert torch.equal(after.eval()(x, coords), alone.eval()(x, coords)), name


def test_a_model_is_refused_where_its_weights_and_gradients_exceed_the_room():
    config = OmegaConf.create(_model_config("cloudlstm_k3"))
    params, size = model_bytes(config, SPEC)
    check_model_fits(config, SPEC, in_host_memory=False, room=size)  # the weights alone fit
    check_model_fits(config, SPEC, in_host_memory=True, room=2 * size)
    with pytest.raises(OutOfMemoryError) as refused:
        check_model_fits(config, SPEC, in_host_memory=True, room=2 * size - 1)
    assert str(refused.value) == (
        f"The model (CloudSeq2Seq) has {params:,} parameters: its weights and their gradients "
        f"alone need {readable_size(2 * size)}, and {readable_size(2 * size - 1)} of memory "
        "is available here. Make the model smaller (its hidden channels, layers or K), or "
        "run it where more memory is free."
    )
    with pytest.raises(OutOfMemoryError, match=r"parameters: its weights alone need "):
        check_model_fits(config, SPEC, in_host_memory=False, room=size - 1)


def test_a_constructor_that_computes_with_values_is_left_to_the_real_build():
    # a seasonal naive forecaster checks its window when built: a refusal is the build's
    config = OmegaConf.create({**_model_config("seasonal_naive"), "period": 48})
    assert model_bytes(config, SPEC) is None
    check_model_fits(config, SPEC, in_host_memory=True, room=0)  # no refusal of its own


@pytest.mark.parametrize(
    "job, on_cpu",
    [
        ({"train": True, "trainer": {"accelerator": "cpu"}}, True),
        ({"train": True, "trainer": {"accelerator": "gpu"}}, False),
        ({"train": False, "trainer": {"accelerator": "cpu"}}, False),
        ({"train": True, "task_name": "eval", "trainer": {"accelerator": "cpu"}}, False),
    ],
    ids=["training on the CPU", "on a GPU", "testing only", "an evaluation"],
)
def test_gradients_are_counted_only_where_the_job_trains_on_the_cpu(job, on_cpu):
    assert trains_in_host_memory(OmegaConf.create(job)) is on_cpu
