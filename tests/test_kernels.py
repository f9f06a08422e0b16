"""The numba kernels against the torch expressions they replace."""

import re

import pytest
import torch
from conftest import compile_for_hopper, run_in_triton_interpreter

from cloudlstm.nn import CloudLSTMCell, cells, channel_neighbours, dconv
from cloudlstm.nn.kernels import gather_neighbours, lstm_pointwise


def gather_index_select(cloud: torch.Tensor, neighbours: torch.Tensor) -> torch.Tensor:
    """The index_select path of gather_neighbourhoods (used off CPU)."""
    b, n, u, f = cloud.shape
    channel = torch.arange(u).view(1, 1, u, 1)
    sample = torch.arange(b).view(b, 1, 1, 1) * (n * u)
    rows = (neighbours * u + channel + sample).reshape(-1)
    return cloud.reshape(b * n * u, f).index_select(0, rows).view(b * n, -1)


def lstm_torch(z: torch.Tensor, c: torch.Tensor, h: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CloudLSTMCell's torch expression."""
    i, f, o, g = z.chunk(4, dim=2)
    g = torch.tanh(torch.cat([g[..., :h], torch.sigmoid(g[..., h:])], dim=-1))
    memory = torch.sigmoid(f) * c + torch.sigmoid(i) * g
    return torch.sigmoid(o) * torch.tanh(memory), memory


def random_neighbours(b: int, n: int, u: int, k: int, seed: int = 0) -> torch.Tensor:
    """Arbitrary indices with many repeats (a row gathered several times)."""
    return torch.randint(0, n, (b, n, u, k), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("features", [3, 5])  # 3 takes the unrolled path
def test_gather_equals_index_select(dtype, features):
    torch.manual_seed(0)
    cloud = torch.rand(3, 11, 4, features, dtype=dtype)
    knn_view = channel_neighbours(cloud, 5, 1)  # a permuted view, as DConv passes it
    for neighbours in (knn_view, random_neighbours(3, 11, 4, 5), knn_view[:, :, 1:3]):
        part = cloud[:, :, : neighbours.shape[2]]
        assert torch.equal(
            gather_neighbours(part, neighbours), gather_index_select(part, neighbours)
        )


@pytest.mark.parametrize("features", [3, 5])
def test_gather_gradient_equals_index_select(features):
    torch.manual_seed(0)
    cloud = torch.rand(2, 9, 3, features, requires_grad=True)
    neighbours = random_neighbours(2, 9, 3, 6)
    grad_out = torch.randn(2 * 9, 3 * 6 * features)
    (ours,) = torch.autograd.grad(gather_neighbours(cloud, neighbours), cloud, grad_out)
    (ref,) = torch.autograd.grad(gather_index_select(cloud, neighbours), cloud, grad_out)
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-6)  # summation order differs
    # An expanded (stride 0) incoming gradient, as from .sum().
    (ours,) = torch.autograd.grad(gather_neighbours(cloud, neighbours).sum(), cloud)
    (ref,) = torch.autograd.grad(gather_index_select(cloud, neighbours).sum(), cloud)
    assert torch.equal(ours, ref)  # small integer counts: exact


def test_gather_gradcheck_and_bounds():
    cloud = torch.rand(2, 4, 2, 3, dtype=torch.float64, requires_grad=True)
    neighbours = random_neighbours(2, 4, 2, 3)
    assert torch.autograd.gradcheck(lambda c: gather_neighbours(c, neighbours), (cloud,))
    with pytest.raises(IndexError):
        gather_neighbours(cloud, neighbours + 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("value_features", [1, 2])
def test_lstm_pointwise_forward(dtype, value_features):
    torch.manual_seed(0)
    z = torch.randn(3, 7, 4 * 5, 3, dtype=dtype) * 4
    z[0, 0, :, 0] = torch.tensor([-200.0, -88.0, 88.0, 200.0] * 5)  # saturation stays finite
    c = torch.randn(3, 7, 5, 3, dtype=dtype)
    for ours, ref in zip(
        lstm_pointwise(z, c, value_features), lstm_torch(z, c, value_features), strict=True
    ):
        torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-6)
    z[1, 2, 3, 1] = float("nan")
    assert lstm_pointwise(z, c, value_features)[1][1, 2, 3, 1].isnan()


def test_lstm_pointwise_gradcheck():
    torch.manual_seed(0)
    z = torch.randn(1, 3, 4 * 2, 3, dtype=torch.float64, requires_grad=True)
    c = torch.randn(1, 3, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda z, c: lstm_pointwise(z, c, 1), (z, c))


def test_lstm_pointwise_gradients_equal_autograd():
    torch.manual_seed(0)
    z = (torch.randn(4, 30, 4 * 6, 3) * 3).requires_grad_()
    c = torch.randn(4, 30, 6, 3, requires_grad=True)
    # Both outputs used, one incoming gradient a non-contiguous view.
    gh = torch.randn(4, 30, 12, 3)[:, :, ::2]
    gc = torch.randn(4, 30, 6, 3)
    grads = [
        torch.autograd.grad(fn(z, c, 1), (z, c), (gh, gc)) for fn in (lstm_pointwise, lstm_torch)
    ]
    for ours, ref in zip(*grads, strict=True):
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
    # Only the hidden state used: the memory's gradient arrives as None.
    (ours,) = torch.autograd.grad(lstm_pointwise(z, c, 1)[0].sum(), z)
    (ref,) = torch.autograd.grad(lstm_torch(z, c, 1)[0].sum(), z)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)


def test_cloudlstm_cell_unchanged(monkeypatch):
    torch.manual_seed(0)
    cell = CloudLSTMCell(3, 4, k=5)
    x = torch.rand(2, 16, 3, 3)
    hidden = torch.rand(2, 16, 4, 3, requires_grad=True)
    memory = torch.rand(2, 16, 4, 3, requires_grad=True)
    params = [hidden, memory, *cell.parameters()]

    def two_steps() -> list[torch.Tensor]:
        out, state = cell(x, (hidden, memory))
        out, state = cell(x, state)
        loss = out.square().sum() + state[1].sum()
        return [out, state[1], *torch.autograd.grad(loss, params)]

    ours = two_steps()
    # The torch path: cells and dconv hold their own reference to use_kernels.
    for module in (cells, dconv):
        monkeypatch.setattr(module, "use_kernels", lambda tensor: False)
    for a, b in zip(ours, two_steps(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_lstm_triton_kernels_equal_the_torch_expression_in_the_interpreter():
    """The CUDA LSTM update (nn/lstm_triton.py) through Triton's CPU interpreter: outputs and
    gradients of the torch expression, in float32 and with bf16 gates (autocast), also
    when only the hidden state is used; and CloudLSTMCell routes to it off the CPU path."""
    import inspect

    script = (
        "import torch\n"
        "from cloudlstm.nn import CloudLSTMCell, cells, dconv, lstm_triton, triton_switch\n"
        + inspect.getsource(lstm_torch)
        + "g = torch.Generator().manual_seed(0)\n"
        "# int32 offsets, then the int64 ones of updates past 2**31 values\n"
        "int32 = 2**31 - 1\n"
        "for dtype, tol, limit in ((torch.float32, 1e-6, int32), (torch.bfloat16, 1e-2, int32),\n"
        "                         (torch.float32, 1e-6, 0)):\n"
        "    triton_switch.INT32_MAX = limit\n"
        "    z = (2 * torch.randn(2, 7, 12, 3, generator=g)).to(dtype).requires_grad_()\n"
        "    c = torch.randn(2, 7, 3, 3, generator=g).requires_grad_()\n"
        "    w = torch.randn(2, 7, 3, 3, generator=g)\n"
        "    for hidden_only in (False, True):\n"
        "        runs = []\n"
        "        for fn in (lstm_torch, lstm_triton.lstm_pointwise_triton):\n"
        "            hidden, memory = fn(z, c, 1)\n"
        "            loss = (hidden * w).sum() + (0 if hidden_only else memory.sum())\n"
        "            runs.append([hidden, memory, *torch.autograd.grad(loss, (z, c))])\n"
        "        for ref, ours in zip(*runs):\n"
        "            assert ours.dtype == ref.dtype, (ours.dtype, ref.dtype)\n"
        "            torch.testing.assert_close(ours.float(), ref.float(), rtol=tol, atol=tol)\n"
        "triton_switch.INT32_MAX = int32\n"
        "torch.manual_seed(0)\n"
        "cell = CloudLSTMCell(3, 4, k=5)\n"
        "x, state = torch.rand(2, 16, 3, 3), cell.initial_state(torch.rand(2, 16, 2))\n"
        "cells.use_kernels = dconv.use_kernels = lambda tensor: False\n"
        "torch_path = cell(x, state)[0]\n"
        "lstm_triton.available = lambda z: True\n"
        "calls = []\n"
        "kernel = lstm_triton.lstm_pointwise_triton\n"
        "lstm_triton.lstm_pointwise_triton = lambda *a: calls.append(1) or kernel(*a)\n"
        "torch.testing.assert_close(cell(x, state)[0], torch_path, rtol=1e-6, atol=1e-6)\n"
        "assert calls\n"
    )
    run_in_triton_interpreter(script)


@pytest.mark.parametrize("kernel", ["_forward_kernel", "_backward_kernel"])
def test_lstm_triton_kernels_compile_for_hopper(kernel):
    """The interpreter does not lower a kernel; this does, as a GPU would (bf16 gates)."""
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only setup)")
    from cloudlstm.nn import lstm_triton

    pointers = {
        "_forward_kernel": ["z_ptr", "c_ptr", "hidden_ptr", "memory_ptr"],
        "_backward_kernel": ["z_ptr", "c_ptr", "grad_hidden_ptr", "grad_memory_ptr",
                             "grad_z_ptr", "grad_c_ptr"],
    }[kernel]  # fmt: skip
    signature = {
        name: "*bf16" if name.startswith(("z", "grad_z")) else "*fp32" for name in pointers
    }
    signature["total"] = "i64"
    shape = {"Q": 108, "H": 1, "F": 3, "BLOCK": 1024}
    ptx = compile_for_hopper(getattr(lstm_triton, kernel), signature, {**shape, "WIDE": False})
    assert ".entry" in ptx
    # the entry's row and column by 32-bit multiplies: no integer division (the sigmoid's
    # float one stays), nothing 64-bit wide
    assert not re.search(r"\b(div|rem)\.[su](32|64)", ptx) and "mul.hi.u64" not in ptx
    wide = compile_for_hopper(getattr(lstm_triton, kernel), signature, {**shape, "WIDE": True})
    assert "mul.hi.u64" in wide or "mul.hi.s64" in wide


def test_gather_triton_kernels_equal_index_select_in_the_interpreter():
    """The CUDA gather (nn/gather_triton.py) through Triton's CPU interpreter: the rows of
    the index_select path exactly, from int16 neighbours in knn's permuted memory order, and
    its gradient (atomic adds, so to rounding); DConv routes to it off the CPU path."""
    import inspect

    script = (
        "import torch\n"
        "from cloudlstm.nn import DConv, dconv, gather_triton, triton_switch\n"
        + inspect.getsource(gather_index_select)
        + "g = torch.Generator().manual_seed(0)\n"
        "cloud = torch.randn(2, 9, 4, 3, generator=g, requires_grad=True)\n"
        "stored = torch.randint(0, 9, (2, 4, 9, 5), generator=g).to(torch.int16)\n"
        "neighbours = stored.transpose(1, 2)  # (B, N, U, K) view, as knn returns them\n"
        "w = torch.randn(18, 60, generator=g)\n"
        "runs = []\n"
        "for fn, nb in ((gather_index_select, neighbours.long()),\n"
        "               (gather_triton.gather_neighbours_triton, neighbours)):\n"
        "    out = fn(cloud, nb)\n"
        "    runs.append((out, *torch.autograd.grad((out * w).sum(), cloud)))\n"
        "triton_switch.INT32_MAX = 0  # the int64 arithmetic of clouds past 2**31 values\n"
        "out = gather_triton.gather_neighbours_triton(cloud, neighbours)\n"
        "runs.append((out, *torch.autograd.grad((out * w).sum(), cloud)))\n"
        "for run in runs[1:]:\n"
        "    assert torch.equal(runs[0][0], run[0])\n"
        "    torch.testing.assert_close(run[1], runs[0][1], rtol=1e-6, atol=1e-6)\n"
        "triton_switch.INT32_MAX = 2**31 - 1\n"
        "torch.manual_seed(0)\n"
        "conv = DConv(4, 2, 5)\n"
        "dconv.use_kernels = lambda tensor: False\n"
        "torch_path = conv(cloud, neighbours.int())\n"
        "gather_triton.available = lambda cloud: True\n"
        "calls = []\n"
        "kernel = gather_triton.gather_neighbours_triton\n"
        "gather_triton.gather_neighbours_triton = lambda *a: calls.append(1) or kernel(*a)\n"
        "assert torch.equal(conv(cloud, neighbours.int()), torch_path) and calls\n"
    )
    run_in_triton_interpreter(script)


@pytest.mark.parametrize("kernel", ["_gather_kernel", "_scatter_kernel"])
def test_gather_triton_kernels_compile_for_hopper(kernel):
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only setup)")
    from cloudlstm.nn import gather_triton

    first, second = (
        ("src_ptr", "out_ptr") if kernel == "_gather_kernel" else ("grad_out_ptr", "grad_src_ptr")
    )
    signature = {first: "*fp32", "nb_ptr": "*i16", second: "*fp32"}
    signature |= dict.fromkeys(["s_b", "s_n", "s_u", "s_k", "total"], "i32")
    shape = {"N": 274, "U": 72, "K": 9, "F": 3, "BLOCK": 512}
    ptx = compile_for_hopper(getattr(gather_triton, kernel), signature, {**shape, "WIDE": False})
    assert ".entry" in ptx
    # the entry's (b, n, u, k) by 32-bit multiplies: no division, nothing 64-bit wide
    assert not re.search(r"\b(div|rem)\.", ptx) and "mul.hi.u64" not in ptx
    wide = compile_for_hopper(getattr(gather_triton, kernel), signature, {**shape, "WIDE": True})
    assert "mul.hi.u64" in wide
    if kernel == "_scatter_kernel":  # relaxed reductions: no barrier, no L1 flush per add
        assert re.search(r"(red|atom)\.global\.gpu\.relaxed\.add\.f32", ptx), ptx
        assert "acq_rel" not in ptx, ptx


def test_int16_neighbours_do_not_overflow_the_index_select_path(monkeypatch):
    """Off the CPU, cat_neighbours keeps search's int16 (the Triton gather reads it as it
    is); the torch path must then widen before its row arithmetic: at N * U > 32,767 the
    int16 product would wrap."""
    monkeypatch.setattr(dconv, "use_kernels", lambda tensor: False)
    cloud = torch.randn(1, 1000, 40, 1)
    neighbours = random_neighbours(1, 1000, 40, 3)
    expected = gather_index_select(cloud, neighbours)
    assert torch.equal(dconv.gather_neighbourhoods(cloud, neighbours.to(torch.int16)), expected)


def test_join_neighbours_keeps_the_type_and_knn_order():
    """One part comes back without a copy; several are joined in knn's (B, U, N, K) memory
    order, of the searches' type (here on the meta device, as off the CPU)."""
    # (B, N, U, K) views of (B, U, N, K) memory, as search returns them
    parts = [torch.zeros(2, u, 4, 3, dtype=torch.int16).transpose(1, 2) for u in (5, 6)]
    for device_parts in (parts, [p.to("meta") for p in parts]):
        joined = dconv.join_neighbours(device_parts)
        assert joined.dtype == torch.int16 and joined.shape == (2, 4, 11, 3)
        assert joined.transpose(1, 2).is_contiguous()
        assert dconv.join_neighbours(device_parts[:1]) is device_parts[0]


@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.int64])
def test_gather_of_parts_equals_gather_of_the_concatenation(dtype):
    """A cell's [S; H] gathered from its two parts: the same rows, and the same gradient
    for each part, bit for bit, as the gather of the concatenated cloud."""
    torch.manual_seed(0)
    x = torch.rand(3, 11, 4, 3, requires_grad=True)
    h = torch.rand(3, 11, 5, 3, requires_grad=True)
    nx, nh = cells.search(x.detach(), 4).to(dtype), cells.search(h.detach(), 4).to(dtype)
    rows = dconv.gather_neighbourhoods((x, h), (nx, nh))
    joined = torch.cat([x, h], dim=2)
    expected = gather_index_select(joined, dconv.join_neighbours([nx, nh]).long())
    assert torch.equal(rows, expected)
    grad_out = torch.randn_like(rows)
    ours = torch.autograd.grad(rows, (x, h), grad_out)
    ref = torch.autograd.grad(
        gather_neighbours(joined, dconv.join_neighbours([nx, nh])), (x, h), grad_out
    )
    assert all(torch.equal(a, b) for a, b in zip(ours, ref, strict=True))
    with pytest.raises(ValueError, match="2 clouds, but neighbours for 1"):
        gather_neighbours((x, h), (nx,))


def test_gather_splits_large_batches_between_threads_with_the_same_result(monkeypatch):
    """Slices of the batch on threads (forced: every sample its own slice) give the rows and
    gradients of one thread."""
    from cloudlstm.nn import kernels

    torch.manual_seed(0)
    cloud = torch.rand(5, 13, 3, 3, requires_grad=True)
    neighbours = random_neighbours(5, 13, 3, 4)
    grad_out = torch.randn(5 * 13, 3 * 4 * 3)
    one = gather_neighbours(cloud, neighbours)
    (one_grad,) = torch.autograd.grad(one, cloud, grad_out)
    monkeypatch.setattr(kernels, "_VALUES_PER_THREAD", 1)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 5)
    many = gather_neighbours(cloud, neighbours)
    (many_grad,) = torch.autograd.grad(many, cloud, grad_out)
    assert torch.equal(one, many) and torch.equal(one_grad, many_grad)


@pytest.mark.parametrize("switch, expected", [(None, True), ("0", False), ("1", True)])
def test_cloudlstm_triton_0_sends_every_cuda_path_to_torch_ops(switch, expected):
    """The way out if a Triton version misbehaves on someone's GPU: every kernel's
    ``available`` says no (a CUDA tensor stood in for by its two attributes read)."""
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only setup)")
    import os
    import subprocess
    import sys

    script = (
        "from types import SimpleNamespace\n"
        "from cloudlstm.nn import gather_triton, knn_triton, lstm_triton\n"
        "cuda = SimpleNamespace(is_cuda=True, shape=(4, 274, 2))\n"
        "print([m.available(cuda) for m in (gather_triton, knn_triton, lstm_triton)])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CLOUDLSTM_TRITON"}
    if switch is not None:
        env["CLOUDLSTM_TRITON"] = switch
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str([expected] * 3)


def test_a_program_ends_without_tritons_leak_report(tmp_path):
    """With Triton installed (as with CUDA torch), a program's end lists no objects of its
    bindings as leaked: the collector is not frozen then (cli/scripts.py)."""
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only setup)")
    import subprocess
    import sys

    from tests.conftest import ROOT, subprocess_env

    # a fresh interpreter (not the tests' warm one, forked): its own end is what is tested
    run_dir = f"hydra.run.dir={tmp_path / 'run'}"
    command = [sys.executable, "train.py", "data.input_steps=-1", run_dir]
    done = subprocess.run(command, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True)
    assert "input_steps must be an integer >= 1" in done.stderr
    assert "nanobind" not in done.stderr and "leaked" not in done.stderr
