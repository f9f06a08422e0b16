"""Where a training step's device time goes, by part: the neighbour searches, the matrix
products, the neighbour gathers, the LSTM state update and the rest (mostly elementwise).

On CUDA each kernel's time is given to the op that launched it (torch.profiler links them);
a kernel launched inside a search (:func:`profiled.profiled_step` labels them) is search
time whatever it is. On CPU (the benchmarks' smoke checks) the ops' own CPU time stands in
for kernels, so that the same code runs everywhere.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from profiled import profiled_step

SEARCH_LABEL = "bench::search"
# parts by kernel (or, on CPU, op) name: cuBLAS / CUTLASS products, the Triton gather and
# its scatter backward (index_select / index_add without Triton), the Triton state update
# (its torch expression's autograd function without Triton)
PARTS = {
    "matmul": ("gemm", "gemv", "xmma", "nvjet", "cutlass", "cublas", "aten::mm", "aten::addmm",
               "aten::bmm", "aten::baddbmm", "_linear_pointwise"),
    "gather": ("_gather_kernel", "_scatter_kernel", "index_select", "index_add", "indexSelect",
               "indexFunc", "_GatherNeighbours"),
    "state update": ("_forward_kernel", "_backward_kernel", "_LSTMPointwise"),
}  # fmt: skip


def part_of(name: str) -> str:
    """The part of the step a kernel (or op) of this name belongs to, searches apart."""
    for part, patterns in PARTS.items():
        if any(pattern in name for pattern in patterns):
            return part
    return "other"


def _in_search(event) -> bool:
    while event is not None:
        if event.name == SEARCH_LABEL:
            return True
        event = event.cpu_parent
    return False


def _timed(prof, device: bool) -> Iterator[tuple[str, float, bool]]:
    """(kernel or op name, microseconds, launched inside a search) of each timed piece."""
    for event in prof.events():
        if event.device_type.name != "CPU":
            continue
        if device:
            for kernel in event.kernels:
                yield kernel.name, kernel.duration, _in_search(event)
        elif event.self_cpu_time_total > 0:
            yield event.name, event.self_cpu_time_total, _in_search(event)


def step_parts(step: Callable[[], Any], device: bool, top: int = 8) -> dict[str, Any]:
    """``step()`` profiled once: ``{"ms": {part: milliseconds, "total": ...}, "top":
    [[name, ms], ...]}``, the ``top`` costliest kernels (or ops) over the step. On CUDA also
    ``ms["unlinked"]``: the time of kernels the profiler tied to no op (left out of the
    parts)."""
    prof, _ = profiled_step(step, SEARCH_LABEL, device=device)
    parts: Counter[str] = Counter()
    names: Counter[str] = Counter()
    for name, us, in_search in _timed(prof, device):
        parts["search" if in_search else part_of(name)] += us / 1e3
        names[name] += us / 1e3
    ms = {part: round(parts[part], 2) for part in ("search", *PARTS, "other")}
    ms["total"] = round(sum(parts.values()), 2)
    if device:
        kernels = sum(
            e.time_range.elapsed_us() for e in prof.events() if e.device_type.name == "CUDA"
        )
        ms["unlinked"] = round(kernels / 1e3 - ms["total"], 2)
    return {"ms": ms, "top": [[name[:80], round(t, 2)] for name, t in names.most_common(top)]}
