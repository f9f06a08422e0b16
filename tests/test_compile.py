"""``model.compile``: a build option of every model, and for CloudLSTM one graph per forward.

Under ``torch.compile`` each neighbour search is one opaque operator of the graph
(``cloudlstm::knn``) and the numba kernels give way to the torch ops they replace, so the
whole seq2seq forward, its time loops unrolled, is one graph: no graph break, no
recompilation per step or per cell. That is what lets ``model.compile=reduce-overhead``
replay a training step's forward and backward as CUDA graphs (tests/test_gpu.py).

Structure is checked with dynamo's eager backends (seconds); values with ``aot_eager``
(the graph AOTAutograd builds, run by torch ops) and, marked slow, with Inductor.
"""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT, compose_train
from torch._dynamo.utils import counters

from cloudlstm.data.spec import DataSpec
from cloudlstm.models import CloudSeq2Seq
from cloudlstm.nn.knn import knn
from cloudlstm.nn.knn_brute import knn_reference
from cloudlstm.nn.knn_finite import NonFiniteCoordinatesError


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test counts its own frames and graphs."""
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


# the data's description: 12 points, 2 channels, M = 4, J = 3
SPEC = DataSpec.sized(12, 2, input_steps=4, output_steps=3, steps_per_day=24)


def _model_config(tmp_path, name: str, compile: str):
    """The composed train config of ``model=name`` with ``model.compile=compile``."""
    return compose_train(tmp_path, [f"model={name}", f"model.compile={compile}"])


def test_compile_is_a_build_option_of_every_model(tmp_path) -> None:
    """``model.compile`` composes for any model, is taken out before the constructor sees it,
    and compiles in place: parameter names, so checkpoints, do not change."""
    from cloudlstm.models.build import build_model

    for name in ("cloudlstm", "convlstm", "persistence"):
        cfg = _model_config(tmp_path, name, "true")
        compiled = build_model(cfg.model, SPEC)
        plain = build_model(cfg.model, SPEC, compile=False)
        assert getattr(compiled, "_compiled_call_impl", None) is not None, name
        assert getattr(plain, "_compiled_call_impl", None) is None, name
        assert list(compiled.state_dict()) == list(plain.state_dict())


def test_compile_takes_a_mode_and_refuses_anything_else(tmp_path, monkeypatch) -> None:
    """``model.compile=reduce-overhead`` (CUDA graphs) reaches ``torch.compile`` as its mode;
    a typo is a user error that names the key and the choices, before anything is built."""
    from cloudlstm.errors import UserError
    from cloudlstm.models.build import COMPILE_MODES, build_model

    modes = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: modes.append(kw["mode"]))
    for value, expected in [
        ("true", None),
        ("default", None),
        ("reduce-overhead", "reduce-overhead"),
    ]:
        build_model(_model_config(tmp_path, "persistence", value).model, SPEC)
        assert modes.pop() == expected
    build_model(_model_config(tmp_path, "persistence", "auto").model, SPEC)
    assert not modes  # auto: uncompiled, for the run to decide (tests/test_capture.py)
    built = []
    monkeypatch.setattr("hydra.utils.instantiate", lambda *a, **k: built.append(1))
    for typo in ("reduce_overhead", "yes", "1"):
        cfg = _model_config(tmp_path, "persistence", typo)
        with pytest.raises(
            UserError, match="model.compile=.* is not a boolean, auto or a torch"
        ) as err:
            build_model(cfg.model, SPEC)
        assert all(mode in str(err.value) for mode in COMPILE_MODES)
    assert not built and not modes


# ------------------------------------------------------------- the search as an operator
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_knn_compiles_without_a_graph_break(dims: int) -> None:
    """``fullgraph=True`` fails on any graph break; the operator gives knn's indices, in the
    type asked for."""
    torch.manual_seed(dims)
    coords = torch.rand(3, 4, 60, dims)
    search = torch.compile(lambda c: knn(c, 7, dtype=torch.int16), fullgraph=True)
    found = search(coords)
    assert found.dtype == torch.int16 and found.shape == (3, 4, 60, 7)
    assert torch.equal(found.long(), knn_reference(coords, 7))


def test_knn_operator_refuses_nan_coordinates_in_a_compiled_graph() -> None:
    """On CPU the operator checks its coordinates itself (no deferral inside a graph)."""
    coords = torch.rand(2, 30, 2)
    coords[1, 5, 0] = float("nan")
    with pytest.raises(NonFiniteCoordinatesError, match="NaN or inf"):
        torch.compile(lambda c: knn(c, 4), fullgraph=True)(coords)


def test_knn_operator_passes_torch_library_opcheck() -> None:
    """Schema, fake (shape-only) implementation and dispatch agree with the real kernel."""
    coords = torch.rand(2, 3, 40, 2)
    for method in ("auto", "cells", "brute"):
        for dtype in (torch.int64, torch.int16):
            args = (coords, 5, method, 16, dtype)
            torch.library.opcheck(torch.ops.cloudlstm.knn.default, args)
            out = torch.ops.cloudlstm.knn(*args)  # as its shape function says
            assert out.is_contiguous() and out.shape == (2, 3, 40, 5) and out.dtype == dtype


# ------------------------------------------------------------- CloudSeq2Seq: one graph
# the options no model preset sets; the presets (the paper's model, attention, GRU, RNN,
# residual) are test_every_model_compiles_its_dense_work_into_one_graph's
VARIANTS = {
    "checkpointing": {"checkpointing": True, "attention": True},
    "spatial order": {"spatial_order": True},
    "static neighbours": {"neighbours": "static", "residual": True},
}


def _seq2seq(k: int = 4, **options) -> tuple[CloudSeq2Seq, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = CloudSeq2Seq(num_channels=2, output_steps=3, k=k, hidden_channels=6, **options)
    return model, torch.randn(2, 4, 30, 2), torch.rand(2, 30, 2)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cloudseq2seq_forward_is_one_graph(variant: str) -> None:
    """Every search and every cell of the unrolled seq2seq in one graph, traced once: a
    second batch of the same shape runs it again without recompiling."""
    model, x, coords = _seq2seq(**VARIANTS[variant])
    model.compile(backend="eager")
    for _ in range(2):
        model(x, coords).square().mean().backward()
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1
    assert counters["frames"]["total"] == 1


# Compiled and eager round differently (torch ops in place of the numba kernels); a
# rounding difference in a hidden coordinate can reorder two near-tied neighbours, which
# the recurrence carries on (tests/test_gpu.py, TIGHT). So values are compared where no
# neighbour set can change: with the points' own neighbours, or with K = 1.
@pytest.mark.parametrize("options", [{"neighbours": "static"}, {"k": 1}], ids=str)
def test_compiled_cloudseq2seq_equals_eager_forward_and_gradients(options: dict) -> None:
    """AOTAutograd's forward and backward graphs (the searches as operators, the torch ops
    in place of the numba kernels) against the eager model with its numba kernels."""
    model, x, coords = _seq2seq(attention=True, **options)
    eager = model(x, coords)
    eager.square().mean().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    model.compile(backend="aot_eager")
    compiled = model(x, coords)
    compiled.square().mean().backward()
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.slow  # two compilations of a training step: about 40 s
def test_another_batch_size_compiles_one_dynamic_graph() -> None:
    """An epoch's last, smaller batch: dynamo traces the forward once more with a symbolic
    batch size (the operators' shape functions take one), and that graph serves every
    later size."""
    model, _, _ = _seq2seq(attention=True, neighbours="static")
    batches = [(torch.randn(b, 4, 30, 2), torch.rand(b, 30, 2)) for b in (4, 3, 5, 2)]
    expected = [model(x, coords).detach() for x, coords in batches]
    model.compile(backend="aot_eager")
    for (x, coords), eager in zip(batches, expected, strict=True):
        out = model(x, coords)
        out.square().mean().backward()
        torch.testing.assert_close(out, eager, rtol=1e-5, atol=1e-5)
    assert counters["stats"]["unique_graphs"] == 2
    assert sum(counters["graph_break"].values()) == 0


@pytest.mark.slow
def test_inductor_compiled_cloudlstm_equals_eager_on_cpu() -> None:
    """Inductor's generated code in place of the numba kernels, forward and gradients."""
    torch.manual_seed(0)
    model = CloudSeq2Seq(
        num_channels=3, output_steps=4, k=6, hidden_channels=8, neighbours="static"
    )
    x, coords = torch.randn(2, 5, 40, 3), torch.rand(2, 40, 2)
    eager = model(x, coords)
    eager.square().mean().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    model.compile()
    compiled = model(x, coords)
    compiled.square().mean().backward()
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[name], rtol=1e-4, atol=1e-5, msg=name)


# ------------------------------------------------------------------------ every model
# nn.LSTM is not traced by dynamo (torch._dynamo.config.allow_rnn is off): the per-point
# LSTM baseline runs eagerly under model.compile.
UNTRACED = {"lstm"}


# presets of a model above with another K or loss: the same graph, compiled again (slow)
PRESET_VARIANTS = {
    "cloudlstm_k3",
    "cloudlstm_k6",
    "cloudgru_k3",
    "attention_cloudlstm_k3",
    "cloudlstm_mae",
}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.slow) if name in PRESET_VARIANTS else name
        for name in sorted(
            p.stem for p in (ROOT / "conf" / "model").glob("*.yaml") if p.stem not in UNTRACED
        )
    ],
)
def test_every_model_compiles_its_dense_work_into_one_graph(tmp_path, name: str) -> None:
    """Host work (the grid models' Hungarian mapping, STGCN's Laplacian cache, input checks)
    stays outside the graph as whole functions (``torch.compiler.disable``), so what is left
    is one graph, not one per data-dependent check. A model has a search in that graph
    exactly when it declares ``searches_neighbours`` (which ``model.compile=auto`` reads to
    capture it on a GPU only through the Triton search)."""
    from cloudlstm.models.build import build_model

    cfg = _model_config(tmp_path, name, "false")
    steps = 24 if name == "seasonal_naive" else 4
    model = build_model(cfg.model, DataSpec.sized(30, 2, steps, 3, steps_per_day=24))
    graphs = []
    model.compile(backend=lambda gm, _inputs: graphs.append(gm.graph) or gm.forward)
    x, coords = torch.randn(2, steps, 30, 2), torch.rand(2, 30, 2)
    for _ in range(2):
        out = model(x, coords)
        if out.requires_grad:
            out.square().mean().backward()
    assert counters["stats"]["unique_graphs"] == 1
    breaks = [reason for reason in counters["graph_break"] if "disable()" not in reason]
    assert not breaks, breaks
    searches = [
        node for graph in graphs for node in graph.nodes if "cloudlstm.knn" in str(node.target)
    ]
    assert bool(searches) == model.searches_neighbours, (name, len(searches))
