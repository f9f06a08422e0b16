"""benchmarks/device_profile.py: a step's time by part, on CPU (ops' own time stands in
for the kernels a GPU profile reads). The parts add up to the whole, a search is search time
whatever it runs, and each part gets the ops it names."""

from pathlib import Path

import pytest
import torch
from conftest import benchmark_module

from cloudlstm.nn import knn_triton


@pytest.fixture(scope="module")
def profiler():
    yield from benchmark_module("device_profile")


@pytest.mark.parametrize(
    ("name", "part"),
    [
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matmul"),
        ("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNT", "matmul"),
        ("mkldnn::_linear_pointwise", "matmul"),
        ("_gather_kernel", "gather"),
        ("_knn_insert_kernel", "search"),
        (
            "void at::native::indexFuncLargeIndex<float, long, unsigned int, 2, 2, -2, true>",
            "gather",
        ),
        ("_forward_kernel", "state update"),
        ("_LSTMPointwiseBackward", "state update"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>",
            "other",
        ),
    ],
)
def test_kernels_and_ops_go_to_their_part(profiler, name: str, part: str) -> None:
    assert profiler.part_of(name) == part


@pytest.mark.parametrize("algorithm", knn_triton.ALGORITHMS)
def test_every_triton_search_kernel_is_search_time(profiler, algorithm: str) -> None:
    # Triton's launches are tied to no torch op, so the profile tells them by name
    kernel = f"_knn_{algorithm}_kernel"
    assert f"def {kernel}(" in Path(knn_triton.__file__).read_text()
    assert profiler.part_of(kernel) == "search"


def test_a_cloudlstm_step_splits_into_parts_that_add_up(profiler) -> None:
    from cloudlstm.models import CloudSeq2Seq

    torch.manual_seed(0)
    model = CloudSeq2Seq(num_channels=2, output_steps=3, k=3, hidden_channels=8)
    x, coords = torch.randn(2, 3, 30, 2), torch.rand(2, 30, 2)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        model(x, coords).square().mean().backward()

    step()
    profile = profiler.step_parts(step, device=False, top=5)
    ms = profile["ms"]
    assert set(ms) == {"search", "matmul", "gather", "state update", "other", "total"}
    parts = sum(t for part, t in ms.items() if part != "total")
    assert parts == pytest.approx(ms["total"], abs=0.05)  # each part rounded to 0.01 ms
    assert min(ms["search"], ms["matmul"], ms["gather"], ms["state update"]) > 0
    assert len(profile["top"]) == 5
    assert [t for _, t in profile["top"]] == sorted((t for _, t in profile["top"]), reverse=True)


def test_kernels_launched_inside_a_search_are_search_time(profiler, monkeypatch) -> None:
    """A product run inside a search (here: a search that also multiplies) counts as
    search, not as matmul."""
    import cloudlstm.nn.dconv as dconv

    real_knn = dconv.knn
    # a product of tens of milliseconds: more than a loaded machine's noise on the search
    # (a 400 x 400 one lost to it, 2.2 against 5.1 ms, with two other runs on 2 cores)
    a = torch.randn(1200, 1200)

    def knn_with_a_product(points, k, **options):
        (a @ a).sum()
        return real_knn(points, k, **options)

    monkeypatch.setattr(dconv, "knn", knn_with_a_product)
    from cloudlstm.nn import DConv

    conv = DConv(2, 3, k=3)
    cloud = torch.rand(2, 30, 2, 3)

    def step() -> None:
        conv(cloud).sum()

    with_product = profiler.step_parts(step, device=False)["ms"]
    monkeypatch.setattr(dconv, "knn", real_knn)
    without = profiler.step_parts(step, device=False)["ms"]
    assert with_product["search"] > without["search"]
    assert with_product["matmul"] < with_product["search"]


def test_kernels_tied_to_no_op_count_by_name(profiler) -> None:
    """On a GPU the profiler ties Triton's search launches to no op: every kernel the
    device ran counts, placed by its name, and the time so placed is given apart."""
    linked = [("nvjet_hsh_128x256", 6000.0, False), ("_scatter_kernel", 16000.0, False),
              ("void at::native::copy", 500.0, True)]  # fmt: skip
    every = [("nvjet_hsh_128x256", 6000.0), ("_scatter_kernel", 16000.0),
             ("void at::native::copy", 500.0), ("_knn_insert_kernel", 30000.0),
             ("_knn_insert_kernel", 18000.0), ("_forward_kernel", 800.0),
             ("void at::native::copy", 1500.0)]  # fmt: skip
    profile = profiler.split(linked, every, top=3)
    assert profile["ms"] == {
        "search": 48.5, "matmul": 6.0, "gather": 16.0, "state update": 0.8, "other": 1.5,
        "total": 72.8, "unlinked": 50.3,
    }  # fmt: skip
    assert profile["top"] == [["_knn_insert_kernel", 48.0], ["_scatter_kernel", 16.0],
                              ["nvjet_hsh_128x256", 6.0]]  # fmt: skip
    # on CPU there is no device list: the ops' own time alone, and no "unlinked"
    assert "unlinked" not in profiler.split(linked)["ms"]


def test_a_labels_span_on_the_device_is_no_kernel(profiler) -> None:
    """The search label's span on the device timeline (a user annotation) covers the
    search kernels: counting it too would count them twice."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    def device_event(name: str, start: float, end: float, annotation: bool) -> FunctionEvent:
        return FunctionEvent(0, name, 0, start, end, device_type=DeviceType.CUDA,
                             is_user_annotation=annotation)  # fmt: skip

    class Profile:
        def events(self) -> list[FunctionEvent]:
            return [device_event(profiler.SEARCH_LABEL, 0.0, 700.0, True),
                    device_event("_knn_insert_kernel", 10.0, 680.0, False)]  # fmt: skip

    assert list(profiler._device_kernels(Profile())) == [("_knn_insert_kernel", 670.0)]
