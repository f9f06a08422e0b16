"""Every search of ``knn`` (the CPU numba grid kernel, the device-agnostic cell-list search in
torch ops, chunked brute force) against the all-pairs ``knn_reference``, bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import compile_for_hopper, run_in_triton_interpreter

from cloudlstm.nn import knn_numba
from cloudlstm.nn.knn import PAIRS_MAX_POINTS, knn
from cloudlstm.nn.knn_brute import knn_reference
from cloudlstm.nn.knn_checks import NeighbourCountError, check_k


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(params=["numba", "cells", "brute"])
def method(request) -> str:
    return request.param


def assert_exact(coords: torch.Tensor, k: int, method: str = "auto") -> torch.Tensor:
    """knn == knn_reference (same indices, same order), plus basic sanity of the rows."""
    got = knn(coords, k, method=method)
    torch.testing.assert_close(got, knn_reference(coords, k), rtol=0, atol=0)
    n = coords.shape[-2]
    assert got.shape == (*coords.shape[:-1], k) and got.dtype == torch.int64
    assert torch.equal(got[..., 0], torch.arange(n).expand(coords.shape[:-1]))
    assert int(got.min()) >= 0 and int(got.max()) < n
    rows = got.reshape(-1, k).sort(-1).values
    assert bool((rows[:, 1:] != rows[:, :-1]).all()), "duplicate neighbour in a row"
    return got


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_uniform(dims: int, method: str) -> None:
    for n, k in [(9, 9), (10, 9), (60, 1), (60, 2), (274, 9)]:
        assert_exact(torch.rand(8, n, dims, generator=_gen(n * 10 + dims)), k, method=method)


@pytest.mark.parametrize("k", [5, 9, 40])
def test_larger_clouds_and_k(k: int, method: str) -> None:
    # Enough cells for several rings of tiles, and K large enough to fill whole tiles.
    assert_exact(torch.rand(2, 900, 2, generator=_gen(k)), k, method=method)


def test_exact_ties_on_integer_grid_with_duplicates(method: str) -> None:
    coords = torch.randint(0, 5, (16, 80, 2), generator=_gen(1)).float()
    coords[:, 40:] = coords[:, :40]  # every point twice
    for k in (2, 30):
        assert_exact(coords, k, method=method)


def test_all_points_identical(method: str) -> None:
    assert_exact(torch.full((4, 30, 2), 0.25), 9, method=method)
    assert_exact(torch.zeros(2, 12, 3), 12, method=method)


def test_points_on_a_line(method: str) -> None:
    t = torch.rand(8, 300, 1, generator=_gen(2))
    assert_exact(t * torch.tensor([1.0, 0.5]), 9, method=method)  # diagonal
    assert_exact(t * torch.tensor([0.0, 2.0]), 9, method=method)  # along the second axis only
    assert_exact(torch.cat([t, torch.full_like(t, 3.0)], -1), 9, method=method)  # flat box


def test_tight_cluster_plus_far_outlier(method: str) -> None:
    cluster = 0.5 + 1e-3 * torch.rand(2, 599, 2, generator=_gen(3))
    coords = torch.cat([cluster, torch.full((2, 1, 2), 100.0)], 1)
    assert_exact(coords, 9, method=method)
    assert_exact(coords.flip(1), 9, method=method)  # the outlier first
    assert_exact(torch.tanh(0.05 * torch.randn(8, 274, 2, generator=_gen(4))), 9, method=method)


def test_float32_near_ties(method: str) -> None:
    # Coordinates a few ulps apart around 1.0 (and a coarse lattice of them): squared
    # distances collide or differ in the last bit, so any change in rounding would show.
    ulp = torch.finfo(torch.float32).eps
    steps = torch.randint(-4, 5, (16, 120, 2), generator=_gen(5)).float()
    assert_exact(1.0 + steps * ulp, 9, method=method)
    lattice = 1.0 + steps * ulp + torch.randint(0, 3, (16, 120, 2), generator=_gen(6))
    assert_exact(lattice, 9, method=method)
    assert_exact(torch.rand(16, 120, 2, generator=_gen(7)).half().float(), 9, method=method)


def test_permutation_equivariance(method: str) -> None:
    coords = torch.rand(4, 200, 2, generator=_gen(8))  # continuous: no ties
    perm = torch.randperm(200, generator=_gen(9))
    base, permuted = knn(coords, 9, method=method), knn(coords[:, perm], 9, method=method)
    # Point i of the permuted cloud is point perm[i] of the original.
    torch.testing.assert_close(perm[permuted], base[:, perm], rtol=0, atol=0)


def test_leading_batch_dims(method: str) -> None:
    coords = torch.rand(2, 3, 40, 2, generator=_gen(10))
    got = assert_exact(coords, 7, method=method)
    torch.testing.assert_close(got[1, 2], knn(coords[1, 2], 7), rtol=0, atol=0)


def _city(clouds: int, n: int, seed: int) -> torch.Tensor:
    """Dense centres of different sizes, sparse outskirts and two far outliers per cloud."""
    g = _gen(seed)
    centres = torch.rand(clouds, 4, 2, generator=g)
    which = torch.randint(0, 4, (clouds, n), generator=g)
    spread = torch.tensor([0.002, 0.01, 0.03, 0.1])[which, None]
    coords = centres.gather(1, which[..., None].expand(-1, -1, 2))
    coords = coords + spread * torch.randn(clouds, n, 2, generator=g)
    coords[:, : n // 10] = torch.rand(clouds, n // 10, 2, generator=g)  # outskirts
    coords[:, -2:] = torch.tensor([[40.0, -3.0], [-9.0, 25.0]])  # far outliers
    return coords


@pytest.mark.parametrize("budget", [1 << 23, 999])  # 999: blocks of a few queries
def test_cells_on_city_layouts_in_small_blocks(budget: int) -> None:
    """Crowded cells, outliers that need the whole cloud, and many blocks per round."""
    from cloudlstm.nn.knn_cells import knn_cells

    coords = _city(3, 700, seed=11)
    for k in (2, 9, 25):
        got = knn_cells(coords, k, budget=budget)
        torch.testing.assert_close(got, knn_reference(coords, k), rtol=0, atol=0)


@pytest.mark.parametrize("per_cell", [0.5, 3.0, 40.0, 1000.0])
def test_cells_any_grid_size_is_exact(per_cell: float) -> None:
    """From more cells than points to a single cell: the grid changes the work, not the answer."""
    from cloudlstm.nn.knn_cells import knn_cells

    coords = torch.cat([_city(2, 300, seed=12), torch.rand(2, 300, 2, generator=_gen(13))])
    got = knn_cells(coords, 9, per_cell=per_cell)
    torch.testing.assert_close(got, knn_reference(coords, 9), rtol=0, atol=0)


def test_cells_equal_values_share_a_bin() -> None:
    """Equal-count bins by rank of the first equal value: ties never straddle two bins, so
    a stack of duplicates cannot force every query to search past it."""
    from cloudlstm.nn.knn_cells import equal_count_bins

    values = torch.tensor([[0.3, 0.1, 0.3, 0.3, 0.9, 0.3, 0.2, 0.5]])
    bins = equal_count_bins(values, 4)
    assert bins.tolist() == [[1, 0, 1, 1, 3, 1, 0, 3]]
    assert bool((bins[0, values[0] == 0.3] == 1).all())


def test_k_larger_than_cloud_raises() -> None:
    with pytest.raises(NeighbourCountError, match=r"model\.k"):
        knn(torch.rand(2, 5, 2), 6)
    with pytest.raises(NeighbourCountError, match=r"model\.k"):
        check_k(10, 9)


def test_unknown_method_is_refused() -> None:
    with pytest.raises(ValueError, match="method='kd' is not one of"):
        knn(torch.rand(2, 5, 2), 2, method="kd")


def test_k_zero_raises() -> None:
    with pytest.raises(NeighbourCountError):
        knn(torch.rand(2, 5, 2), 0)


def test_the_knn_module_still_exports_the_names_that_moved_out_of_it() -> None:
    """Code written against ``cloudlstm.nn.knn`` before the checks, the finiteness block and
    the reference had modules of their own gets the same objects from it."""
    import importlib

    from cloudlstm.nn import knn_brute, knn_checks, knn_finite

    module = importlib.import_module("cloudlstm.nn.knn")  # the package exports the function
    homes = {
        knn_checks: ["NeighbourCountError", "check_k", "check_k_option"],
        knn_finite: ["NonFiniteCoordinatesError", "deferred_finite_check"],
        knn_brute: ["knn_reference"],
    }
    for home, names in homes.items():
        for name in names:
            assert getattr(module, name) is getattr(home, name), name
            assert name in module.__all__


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e300])  # 1e300: inf in float32
def test_non_finite_coordinates_are_refused(bad):
    from cloudlstm.nn.knn_finite import NonFiniteCoordinatesError

    coords = torch.rand(2, 10, 2, dtype=torch.float64)
    coords[1, 4, 0] = bad
    with pytest.raises(NonFiniteCoordinatesError, match="NaN or inf"):
        knn(coords, 3)


def test_deferred_finite_check_refuses_nan_once_at_the_end_of_the_block() -> None:
    """Inside the block a NaN-safe search (brute force here, Triton on a GPU) returns
    in-range indices and the error comes at the block's end; the outermost block checks;
    the numba grid, which is not NaN-safe, still refuses at once."""
    from cloudlstm.nn.knn_finite import NonFiniteCoordinatesError, deferred_finite_check

    bad = torch.rand(2, 10, 2)
    bad[1, 4, 0] = float("nan")
    reached = []
    with pytest.raises(NonFiniteCoordinatesError, match="NaN or inf"), deferred_finite_check():
        with deferred_finite_check():
            index = knn(bad, 3, method="brute")
        reached.append("inner block left without an error")
        assert index.min() >= 0 and index.max() < 10
        assert torch.equal(index[0], knn_reference(bad[0], 3))  # the finite cloud
    assert reached
    with pytest.raises(NonFiniteCoordinatesError), deferred_finite_check():
        knn(bad, 3)  # numba: immediately
    with deferred_finite_check():  # finite coordinates: nothing raised, same result
        assert torch.equal(knn(bad[:1], 3, method="brute"), knn_reference(bad[:1], 3))
    with pytest.raises(NonFiniteCoordinatesError):  # outside a block: at once, as before
        knn(bad, 3, method="brute")


def _compile_for_hopper(
    algorithm: str,
    constants: dict[str, int],
    num_warps: int = 4,
    out: str = "*i64",
    output: str = "ptx",
) -> str | bytes:
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only setup)")
    from cloudlstm.nn import knn_triton

    kernel = getattr(knn_triton, f"_knn_{algorithm}_kernel")
    signature = {"coords_ptr": "*fp32", "out_ptr": out, "nonfinite_ptr": "*i32"}
    return compile_for_hopper(kernel, signature, constants, num_warps, output)


@pytest.mark.parametrize(
    "algorithm, blocks",
    [
        ("passes", {"BLOCK_Q": 32, "BLOCK_N": 64}),
        ("insert", {"BLOCK_Q": 128, "KP": 8}),
        ("sorted", {"BLOCK_Q": 128}),
    ],
)
def test_triton_kernels_compile_for_hopper_without_fused_multiply_add(algorithm, blocks) -> None:
    """A fused multiply-add would round the squared distances differently from
    knn_reference and break exact ties."""
    ptx = _compile_for_hopper(algorithm, {"n": 274, "K": 9, "L": 2, **blocks})
    assert "fma" not in ptx and "mul.rn.f32" in ptx
    narrow = _compile_for_hopper(algorithm, {"n": 274, "K": 9, "L": 2, **blocks}, out="*i16")
    assert "st.global.b16" in narrow  # int16 indices stored directly


@pytest.mark.parametrize("k, block_q, num_warps", [(9, 128, 4), (3, 32, 1), (17, 64, 1)])
def test_insert_kernel_keeps_a_query_in_one_thread(k, block_q, num_warps) -> None:
    """What makes ``insert`` cheap: the loop over points has no shuffles or barriers (a
    query's slots live in one thread) and stays short. Laying the slots out (BLOCK_Q, KP)
    instead compiles to ~400 instructions with both."""
    triton = pytest.importorskip("triton", reason="Triton is not installed (CPU-only setup)")

    slots = triton.next_power_of_2(k - 1)
    ptx = _compile_for_hopper(
        "insert", {"n": 274, "K": k, "L": 2, "KP": slots, "BLOCK_Q": block_q}, num_warps
    )
    loop = ptx[ptx.index("$L__BB0_1:") :]
    loop = loop[: loop.index("bra")]
    assert "shfl" not in loop and "bar.sync" not in loop
    instructions = [
        line for line in loop.splitlines()[1:] if line.strip() and not line.strip().startswith(
            ("//", "$L__tmp", ".loc", "mov.u32")
        )
    ]  # fmt: skip
    queries_per_thread = block_q // (32 * num_warps)
    assert len(instructions) <= queries_per_thread * (24 + 5 * slots)


def _machine_instructions_per_pair(algorithm: str, k: int, folder: Path) -> float:
    """Machine instructions (sm_90, ``nvdisasm`` of the cubin) of the kernel's loop over
    points, per (query, point) pair: ptxas unrolls that loop, two loads a pair (L = 2)."""
    import os
    import re
    import subprocess

    triton = pytest.importorskip("triton", reason="Triton is not installed (CPU-only setup)")
    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/nvdisasm")
    if not os.access(nvdisasm, os.X_OK):
        pytest.skip("this Triton carries no nvdisasm")
    constants = {"n": 274, "K": k, "L": 2, "BLOCK_Q": 128}
    if algorithm == "insert":
        constants["KP"] = triton.next_power_of_2(k - 1)
    path = folder / f"{algorithm}.cubin"
    path.write_bytes(_compile_for_hopper(algorithm, constants, out="*i16", output="cubin"))
    lines = subprocess.run([nvdisasm, "-c", str(path)], capture_output=True, text=True).stdout
    lines = lines.splitlines()
    loops = []  # (label line, backward branch line)
    for at, line in enumerate(lines):
        if branch := re.search(r"BRA `?\(?(\.L_x_\d+)", line):
            start = next((i for i, x in enumerate(lines) if x.startswith(branch[1] + ":")), at)
            if start < at:
                loops.append((start, at))
    start, end = max(loops, key=lambda loop: loop[1] - loop[0])
    body = [x for x in lines[start : end + 1] if re.search(r"/\*[0-9a-f]{4}\*/", x)]
    assert not any("SHFL" in x or "BAR.SYNC" in x for x in body)  # a query in one thread
    return len(body) / (sum("LDG" in x for x in body) / 2)


@pytest.mark.parametrize("k", [6, 9, 17])
def test_sorted_takes_fewer_machine_instructions_a_pair_than_insert(k, tmp_path) -> None:
    """Why ``sorted`` is the default: 32-bit registers, five instructions a slot, where
    ``insert``'s 64-bit keys cost several each (53 against 78-111 at K = 9)."""
    sorted_, insert = (_machine_instructions_per_pair(a, k, tmp_path) for a in ("sorted", "insert"))
    assert sorted_ < 0.75 * insert, (sorted_, insert)
    assert sorted_ <= 16 + 5.5 * (k - 1), sorted_


def test_triton_kernels_are_exact_in_the_interpreter() -> None:
    """The kernels' logic on CPU through Triton's interpreter (a subprocess: the mode is
    read when the kernel is defined), ties and 3-D included; NaN / inf coordinates give
    in-range, distinct neighbours, the point itself first."""
    script = (
        "import torch\n"
        "from cloudlstm.nn.knn_brute import knn_reference\n"
        "from cloudlstm.nn.knn_triton import knn_triton\n"
        "g = torch.Generator().manual_seed(0)\n"
        "ties = torch.randint(0, 4, (2, 50, 3), generator=g).float()\n"
        "clouds = [torch.rand(2, 70, 2, generator=g), ties]\n"
        "bad = torch.rand(3, 40, 2, generator=g)\n"
        "bad[0, 5, 0], bad[1, :, 1], bad[2, 7, 1] = float('nan'), float('nan'), float('inf')\n"
        "runs = [('passes', {'BLOCK_Q': 16, 'BLOCK_N': 32}), ('passes', {'BLOCK_Q': 64, "
        "'BLOCK_N': 64}), ('insert', {'BLOCK_Q': 32}), ('insert', {'BLOCK_Q': 64}),\n"
        "        ('sorted', {'BLOCK_Q': 32}), ('sorted', {'BLOCK_Q': 64})]\n"
        "for algorithm, blocks in runs:\n"
        "    for c in clouds:\n"
        "        for k in (1, 2, 3, 9, 17):\n"
        "            got = knn_triton(c, k, blocks, algorithm)\n"
        "            assert torch.equal(got, knn_reference(c, k)), (algorithm, c.shape, k)\n"
        "        for dtype in (torch.int16, torch.int32):  # written as such\n"
        "            got = knn_triton(c, 9, blocks, algorithm, dtype)\n"
        "            assert torch.equal(got, knn_reference(c, 9).to(dtype)), (algorithm, dtype)\n"
        "    got = knn_triton(bad, 9, blocks, algorithm)\n"
        "    assert torch.equal(got[:, :, 0], torch.arange(40).expand(3, -1)), algorithm\n"
        "    assert got.min() >= 0 and got.max() < 40, algorithm\n"
        "    assert (got.sort(-1).values.diff(dim=-1) > 0).all(), algorithm\n"
    )
    run_in_triton_interpreter(script)


# The start of a script for run_in_triton_interpreter: knn's module as K, its Triton path
# taken for CPU tensors (interpreted), with fixed blocks (the interpreter cannot autotune).
INTERPRETED_KNN = (
    "import sys, torch\n"
    "import cloudlstm.nn.knn\n"
    "K = sys.modules['cloudlstm.nn.knn']  # the package re-exports the function knn\n"
    "K.knn_triton.available = lambda coords: True\n"
    "K.knn_triton.fits = lambda is_cuda, points, dims: True  # what a compiled graph asks\n"
    "kernel = K.knn_triton.knn_triton\n"
    "K.knn_triton.knn_triton = lambda c, k, **kw: kernel(c, k, {'BLOCK_Q': 16}, **kw)\n"
)


def test_triton_search_flags_non_finite_coordinates_in_its_pass() -> None:
    """knn's Triton path (run here on CPU through the interpreter): the kernel sets the
    NaN / inf flag as it reads the coordinates; outside a deferred block the search refuses
    at once, inside one the block's end does, after every search has returned in-range
    indices; finite clouds leave the flag at 0 and equal the reference."""
    script = INTERPRETED_KNN + (
        "import pytest\n"
        "from cloudlstm.nn.knn_finite import open_block\n"
        "g = torch.Generator().manual_seed(0)\n"
        "good = torch.rand(3, 30, 2, generator=g)\n"
        "for value in (float('nan'), float('inf'), -float('inf')):\n"
        "    for axis in (0, 1):\n"
        "        bad = good.clone()\n"
        "        bad[2, 17, axis] = value\n"
        "        with pytest.raises(K.NonFiniteCoordinatesError):\n"
        "            K.knn(bad, 4, method='triton')\n"
        "        with pytest.raises(K.NonFiniteCoordinatesError):\n"
        "            with K.deferred_finite_check():\n"
        "                index = K.knn(bad, 4, method='triton')\n"
        "                assert index.min() >= 0 and index.max() < 30\n"
        "                assert torch.equal(index[:2], K.knn_reference(good[:2], 4))\n"
        "with K.deferred_finite_check():\n"
        "    for _ in range(3):\n"
        "        assert torch.equal(K.knn(good, 4, method='triton'), K.knn_reference(good, 4))\n"
        "    assert len(open_block().bad) == 1  # one flag for every search of the block\n"
        "flag = torch.zeros(1, dtype=torch.int32)\n"
        "kernel(good, 4, {'BLOCK_Q': 16}, 'insert', nonfinite=flag)\n"
        "assert int(flag) == 0\n"
    )
    run_in_triton_interpreter(script)


def test_a_compiled_graph_searches_with_the_capturable_triton_operator() -> None:
    """Where the Triton kernel searches (CUDA; here its interpreter on CPU), a compiled
    graph holds ``cloudlstm::knn_triton``: no host synchronisation, so CUDA graphs can
    capture it, and NaN coordinates rank last (indices in range) instead of being refused.
    Every other search is ``cloudlstm::knn``, tagged unsafe for CUDA graphs."""
    unsafe = getattr(torch.Tag, "cudagraph_unsafe", None)
    if unsafe is not None:
        assert unsafe in torch.ops.cloudlstm.knn.default.tags
        assert unsafe not in torch.ops.cloudlstm.knn_triton.default.tags
    script = INTERPRETED_KNN + (
        "ops = []\n"
        "def backend(gm, inputs):\n"
        "    ops.extend(str(node.target) for node in gm.graph.nodes)\n"
        "    return gm\n"
        "search = torch.compile(lambda c: K.knn(c, 4, dtype=torch.int16), backend=backend,\n"
        "                       fullgraph=True)\n"
        "good = torch.rand(3, 30, 2, generator=torch.Generator().manual_seed(0))\n"
        "assert torch.equal(search(good).long(), K.knn_reference(good, 4))\n"
        "assert 'cloudlstm.knn_triton.default' in ops, ops\n"
        "bad = good.clone()\n"
        "bad[2, 17, 0] = float('nan')\n"
        "index = search(bad)\n"
        "assert index.min() >= 0 and index.max() < 30\n"
        "assert torch.equal(index[:2].long(), K.knn_reference(good[:2], 4))\n"
    )
    run_in_triton_interpreter(script)


@pytest.mark.parametrize("n", [2, 12, 35, PAIRS_MAX_POINTS, PAIRS_MAX_POINTS + 1])
def test_small_clouds_rank_all_pairs_as_the_grid_does(n: int) -> None:
    """The all-pairs kernel of small CPU clouds and the grid kernel give the reference's
    indices on both sides of the size where ``knn`` switches, ties and near-ties included,
    written directly in the narrow index types."""
    ulp = torch.finfo(torch.float32).eps
    clouds = [
        torch.rand(64, n, 2, generator=_gen(n)),
        torch.randint(0, 3, (64, n, 2), generator=_gen(n + 1)).float(),  # exact ties
        1.0 + torch.randint(-2, 3, (64, n, 3), generator=_gen(n + 2)).float() * ulp,
        torch.full((4, n, 2), 0.5),
    ]
    for coords in clouds:
        for k in sorted({1, min(3, n), n}):
            expected = knn_reference(coords, k)
            out = np.empty((len(coords), n, k), np.int16)
            knn_numba._knn_grid(coords.numpy(), k, out)
            assert torch.equal(torch.from_numpy(out).long(), expected)
            # all pairs, read through a strided view as a DConv's channels are
            strided = torch.stack([coords, coords], dim=-1)[..., 0].numpy()[None]
            assert knn_numba._knn_pairs(strided, k, out[None])
            assert torch.equal(torch.from_numpy(out).long(), expected)
            got = knn(coords, k, dtype=torch.int16)
            assert got.dtype == torch.int16 and torch.equal(got.long(), expected)
