"""The CUDA path: neighbour search, DConv, the seq2seq model, bf16 autocast, torch.compile
and a whole training run on a GPU.

Marked ``gpu``; skipped, with the reason, where CUDA is absent (CI, this project's CPU
machines). Run them on a GPU machine with ``pytest -m gpu``. Their CPU counterparts
(tests/test_knn.py runs the same cell-list search on CPU against the reference) are what
must pass everywhere.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, TINY, subprocess_env

from cloudlstm.models import CloudSeq2Seq
from cloudlstm.nn import DConv, channel_neighbours, knn_triton
from cloudlstm.nn.knn import knn
from cloudlstm.nn.knn_brute import knn_reference
from cloudlstm.nn.knn_finite import NonFiniteCoordinatesError

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _layouts() -> dict[str, torch.Tensor]:
    ulp = torch.finfo(torch.float32).eps
    clusters = 0.5 + 0.01 * torch.randn(6, 500, 2, generator=_gen(1))
    clusters[:, :3] = torch.tensor([[30.0, 30.0], [-5.0, 2.0], [0.5, 90.0]])  # far outliers
    return {
        "uniform": torch.rand(64, 274, 2, generator=_gen(0)),
        "clustered": clusters,
        "lattice ties": torch.randint(0, 6, (16, 200, 2), generator=_gen(2)).float(),
        "near ties": 1.0 + torch.randint(-4, 5, (16, 150, 2), generator=_gen(3)).float() * ulp,
        "3-d": torch.rand(8, 300, 3, generator=_gen(4)),
        "large": torch.rand(2, 13000, 2, generator=_gen(5)),
    }


# Block sizes for the kernels on every layout. Autotuning compiles and times each of 16
# (passes) or 10 (insert, sorted) configurations per (N, K, L): 2-4 s each time, minutes over
# these layouts and K, so it runs once per K, through knn() on the uniform layout.
FIXED_BLOCKS = {
    "passes": {"BLOCK_Q": 32, "BLOCK_N": 64},
    "insert": {"BLOCK_Q": 128},
    "sorted": {"BLOCK_Q": 128},
}


@pytest.mark.parametrize("k", [1, 2, 9, 25])
def test_knn_on_cuda_equals_the_cpu_reference(k: int) -> None:
    """Same indices in the same order, ties included: distances are summed per axis in the
    same order with the same IEEE float32 operations on both devices."""
    assert set(FIXED_BLOCKS) == set(knn_triton.ALGORITHMS)  # every kernel on every layout
    for name, coords in _layouts().items():
        expected = knn(coords, k) if name == "large" else knn_reference(coords, k)
        if name in ("uniform", "large"):  # autotuned Triton; the cell list past 2,048 points
            got = knn(coords.cuda(), k)
            assert got.device.type == "cuda"
            assert torch.equal(got.cpu(), expected), name
        assert torch.equal(knn(coords.cuda(), k, method="cells").cpu(), expected), name
        if name != "large":
            assert torch.equal(knn(coords.cuda(), k, method="brute").cpu(), expected), name
            for algorithm, blocks in FIXED_BLOCKS.items():
                got = knn_triton.knn_triton(coords.cuda(), k, blocks, algorithm=algorithm)
                assert torch.equal(got.cpu(), expected), (name, algorithm)


def test_dconv_on_cuda_matches_cpu() -> None:
    torch.manual_seed(0)
    conv = DConv(8, 16, 9)
    cloud = torch.rand(4, 200, 8, 3, requires_grad=True)
    out = conv(cloud)
    out.square().sum().backward()
    grads = [cloud.grad.clone(), conv.weight.grad.clone()]
    conv_gpu = DConv(8, 16, 9).cuda()
    conv_gpu.load_state_dict(conv.state_dict())
    cloud_gpu = cloud.detach().cuda().requires_grad_(True)
    out_gpu = conv_gpu(cloud_gpu)
    out_gpu.square().sum().backward()
    torch.testing.assert_close(out_gpu.cpu(), out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cloud_gpu.grad.cpu(), grads[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(conv_gpu.weight.grad.cpu(), grads[1], rtol=1e-4, atol=1e-4)
    assert torch.equal(
        channel_neighbours(cloud_gpu, 9, 1).cpu(), channel_neighbours(cloud.detach(), 9, 1)
    )


# How close two forecasts of one model must be when they are computed with different
# rounding (CPU vs GPU matmuls, fused compiled kernels, bf16): with K = 1 a DConv sees only
# the point itself, so no neighbour set can change and the forecasts agree to float32
# tolerance; with K > 1 a rounding difference can reorder two near-tied neighbours of a
# hidden coordinate, the recurrence carries that forward, and only the mean relative
# difference is bounded (measured on an H100: 1.6 % without attention, 4.3 % with).
TIGHT = dict(rtol=1e-4, atol=1e-4)
LOOSE = 0.1


def _model_and_batch(k: int = 6, attention: bool = False):
    torch.manual_seed(0)
    model = CloudSeq2Seq(
        num_channels=3, output_steps=4, k=k, hidden_channels=12, attention=attention
    )
    return model, torch.randn(4, 6, 80, 3), torch.rand(4, 80, 2)


def _mean_relative(got: torch.Tensor, expected: torch.Tensor) -> float:
    got = got.detach().float().cpu()
    return float((got - expected).abs().mean() / expected.abs().mean())


@pytest.mark.parametrize("attention", [False, True])
def test_seq2seq_on_cuda_matches_cpu(attention: bool) -> None:
    for k in (1, 6):
        model, x, coords = _model_and_batch(k, attention)
        expected = model(x, coords).detach()
        got = model.cuda()(x.cuda(), coords.cuda()).detach().cpu()
        if k == 1:
            torch.testing.assert_close(got, expected, **TIGHT)
        assert _mean_relative(got, expected) < LOOSE


def test_a_forward_on_cuda_synchronises_once() -> None:
    """The searches check their coordinates on the device; the forward's one host sync is
    the check at its end (docs/design.md, "GPU path"). NaN coordinates are still refused."""
    model, x, coords = _model_and_batch()
    model, x, coords = model.cuda(), x.cuda(), coords.cuda()
    model(x, coords)  # Triton's autotuning synchronises, once per shape
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with pytest.warns(UserWarning, match="synchroniz") as syncs:
            model(x, coords).square().mean().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len([w for w in syncs if "synchroniz" in str(w.message)]) == 1
    with torch.no_grad():
        model.encoder[0].gates.weight.fill_(float("nan"))
    with pytest.raises(NonFiniteCoordinatesError, match="NaN or inf"):
        model(x, coords)


def _loss_and_grads(model: CloudSeq2Seq, x: torch.Tensor, coords: torch.Tensor) -> list:
    loss = model(x, coords).square().mean()
    return [loss.detach(), *torch.autograd.grad(loss, list(model.parameters()))]


def test_a_training_step_replays_from_a_cuda_graph() -> None:
    """No host sync in a step (the deferred check stands aside while capturing), so forward
    and backward capture in one CUDA graph; replays, also on a new batch copied in, give the
    eager loss and gradients (to rounding: the gather's backward adds with atomics)."""
    model, x, coords = _model_and_batch()
    model, x, coords = model.cuda(), x.cuda(), coords.cuda()
    batches = [x, torch.randn_like(x)]
    expected = [_loss_and_grads(model, batch, coords) for batch in batches]
    static_x = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: autotuning, allocator
        _loss_and_grads(model, static_x, coords)
    torch.cuda.current_stream().wait_stream(side)
    model.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = model(static_x, coords).square().mean()
        static_loss.backward()
    for batch, (loss, *grads) in zip(batches, expected, strict=True):
        static_x.copy_(batch)
        graph.replay()
        torch.testing.assert_close(static_loss, loss, rtol=1e-5, atol=1e-6)
        for param, grad in zip(model.parameters(), grads, strict=True):
            torch.testing.assert_close(param.grad, grad, rtol=1e-4, atol=1e-6)


def test_cloudlstm_triton_0_runs_the_torch_paths_on_cuda(tmp_path) -> None:
    """The way out for the Triton kernels: with CLOUDLSTM_TRITON=0 the model runs on CUDA
    through torch ops and forecasts what it forecasts with the kernels, to rounding, where no
    neighbour set can differ: K = 1, and K = 6 with static neighbours (searched once, in the
    input's positions). Where the model searches the clouds it computes (K = 6, dynamic), a
    rounding difference can flip a near tie and move the forecast by percents: on CPU, noise
    of 1e-6 relative in the hidden state moves this untrained model's forecast by 1.8 % (mean
    relative) and the other two by 1e-6. There both paths must only run and give finite
    forecasts."""
    script = (
        "import torch\n"
        "from cloudlstm.models import CloudSeq2Seq\n"
        "out = {}\n"
        "for k, neighbours in ((1, 'dynamic'), (6, 'static'), (6, 'dynamic')):\n"
        "    torch.manual_seed(0)\n"
        "    model = CloudSeq2Seq(num_channels=3, output_steps=4, k=k, hidden_channels=12,\n"
        "                         neighbours=neighbours).cuda()\n"
        "    x, coords = torch.randn(4, 6, 80, 3).cuda(), torch.rand(4, 80, 2).cuda()\n"
        "    out[k, neighbours] = model(x, coords).detach().cpu()\n"
        "torch.save(out, 'out.pt')\n"
    )
    outputs = []
    for switch in ("1", "0"):
        env = {**subprocess_env(), "CLOUDLSTM_TRITON": switch}
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.append(torch.load(tmp_path / "out.pt"))
    kernels, torch_ops = outputs
    for case in ((1, "dynamic"), (6, "static")):
        assert _mean_relative(torch_ops[case], kernels[case]) < 1e-4, case
    dynamic = (6, "dynamic")
    assert torch_ops[dynamic].shape == kernels[dynamic].shape
    assert torch.isfinite(torch_ops[dynamic]).all() and torch.isfinite(kernels[dynamic]).all()


def test_bf16_autocast_on_cuda() -> None:
    model, x, coords = _model_and_batch()
    expected = model(x, coords).detach()
    model = model.cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x.cuda(), coords.cuda())
        loss = out.float().square().mean()
    loss.backward()
    assert out.dtype == torch.bfloat16
    assert _mean_relative(out, expected) < 0.15
    for name, param in model.named_parameters():
        assert param.grad is not None and bool(torch.isfinite(param.grad).all()), name


def test_compiled_model_on_cuda_matches_eager() -> None:
    for k in (1, 6):
        model, x, coords = _model_and_batch(k)
        model = model.cuda()
        x, coords = x.cuda(), coords.cuda()
        eager = model(x, coords).detach().cpu()
        model.compile()
        compiled = model(x, coords)
        compiled.square().mean().backward()
        if k == 1:
            torch.testing.assert_close(compiled.detach().cpu(), eager, **TIGHT)
        assert _mean_relative(compiled, eager) < LOOSE


def test_reduce_overhead_replays_forward_and_backward_as_cuda_graphs() -> None:
    """``model.compile=reduce-overhead``: the forward is one graph (the Triton searches are
    operators without a host synchronisation) and Inductor skips CUDA graphs for none of
    it; the replayed steps train like eager ones."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model, x, coords = _model_and_batch(attention=True)
    model = model.cuda()
    x, coords = x.cuda(), coords.cuda()
    eager = model(x, coords).detach().cpu()
    model.compile(mode="reduce-overhead")
    for _ in range(3):  # warm-up, record, replay
        model.zero_grad(set_to_none=True)
        out = model(x, coords)
        out.square().mean().backward()
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1
    assert counters["inductor"]["cudagraph_skips"] == 0
    assert _mean_relative(out, eager) < LOOSE
    for name, param in model.named_parameters():
        assert param.grad is not None and bool(torch.isfinite(param.grad).all()), name
    torch._dynamo.reset()


@pytest.mark.parametrize("precision", ["32", "bf16-mixed"])
def test_train_py_on_one_gpu(tmp_path, precision: str) -> None:
    """A whole run of train.py on the GPU: Lightning's CUDA accelerator, the model's step
    replayed from CUDA graphs (``model.compile=auto``), test metrics."""
    tiny = [o for o in TINY if not o.startswith("trainer=")]
    cmd = [
        sys.executable, "train.py", *tiny, "trainer=gpu", f"trainer.precision={precision}",
        "logger=none", f"hydra.run.dir={tmp_path}/run", f"paths.data_dir={tmp_path}/data",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "model.compile=auto: reduce-overhead" in done.stdout + done.stderr
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    mae = metrics["test"]["overall"]["mae"]["mean"]
    assert mae == mae and mae > 0  # finite, not NaN


def test_an_allocation_beyond_the_gpu_is_one_line_naming_it() -> None:
    # torch's own message of a failed CUDA allocation, read by errors.out_of_memory
    from cloudlstm.errors import OutOfMemoryError, one_line_errors

    total = torch.cuda.get_device_properties(0).total_memory
    with pytest.raises(OutOfMemoryError) as err, one_line_errors():
        torch.empty(2 * total, dtype=torch.uint8, device="cuda")
    assert str(err.value).startswith("Out of memory: GPU 0 could not allocate "), err.value
    assert " free of " in str(err.value) and "\n" not in str(err.value)
