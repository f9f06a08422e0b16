"""Where a training step's device time goes, by part: the neighbour searches, the matrix
products, the neighbour gathers, the LSTM state update and the rest (mostly elementwise).

On CUDA each kernel's time is given to the op that launched it (torch.profiler links them);
a kernel launched inside a search (:func:`profiled.profiled_step` labels them) is search
time whatever it is. On CPU (the benchmarks' smoke checks) the ops' own CPU time stands in
for kernels, so that the same code runs everywhere.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
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
# the Triton searches' kernels (nn/knn_triton.py: _knn_<algorithm>_kernel), told by name
# where tied to no op; a prefix, so that a new algorithm's kernel is counted too
SEARCH_KERNEL_PREFIX = "_knn_"


def part_of(name: str) -> str:
    """The part of the step a kernel (or op) of this name belongs to; a search's torch
    ops are told by where they ran (:func:`_in_search`), not by name."""
    if name.startswith(SEARCH_KERNEL_PREFIX):
        return "search"
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
    """(kernel or op name, microseconds, launched inside a search) of each piece the profiler
    tied to an op."""
    for event in prof.events():
        if event.device_type.name != "CPU":
            continue
        if device:
            for kernel in event.kernels:
                if kernel.name != SEARCH_LABEL:  # the label's span, should it be tied here
                    yield kernel.name, kernel.duration, _in_search(event)
        elif event.self_cpu_time_total > 0:
            yield event.name, event.self_cpu_time_total, _in_search(event)


def _device_kernels(prof) -> Iterator[tuple[str, float]]:
    """(name, microseconds) of every kernel the device ran, tied to an op or not. A
    ``record_function`` label (the searches') has a span on the device's timeline too: a
    user annotation, not a kernel, whose time its kernels already count."""
    for event in prof.events():
        if event.device_type.name == "CUDA" and not event.is_user_annotation:
            yield event.name, event.time_range.elapsed_us()


def split(
    linked: Iterable[tuple[str, float, bool]],
    every: Iterable[tuple[str, float]] | None = None,
    top: int = 8,
) -> dict[str, Any]:
    """Milliseconds by part from (name, microseconds, inside a search) of the pieces tied
    to an op and, on a device, (name, microseconds) of every kernel it ran. A kernel tied
    to no op (Triton's launches of the searches, under torch 2.11's profiler) goes to its
    part by name alone, and their sum is ``ms["unlinked"]``."""
    parts: Counter[str] = Counter()
    names: Counter[str] = Counter()
    for name, us, in_search in linked:
        parts["search" if in_search else part_of(name)] += us / 1e3
        names[name] += us / 1e3
    unlinked = 0.0
    if every is not None:
        ran: Counter[str] = Counter()
        for name, us in every:
            ran[name] += us / 1e3
        for name, ms in ran.items():
            rest = ms - names[name]
            if rest > 1e-6:
                parts[part_of(name)] += rest
                names[name] += rest
                unlinked += rest
    ms = {part: round(parts[part], 2) for part in ("search", *PARTS, "other")}
    ms["total"] = round(sum(parts.values()), 2)
    if every is not None:
        ms["unlinked"] = round(unlinked, 2)
    return {"ms": ms, "top": [[name[:80], round(t, 2)] for name, t in names.most_common(top)]}


def step_parts(step: Callable[[], Any], device: bool, top: int = 8) -> dict[str, Any]:
    """``step()`` profiled once: ``{"ms": {part: milliseconds, "total": ...}, "top":
    [[name, ms], ...]}``, the ``top`` costliest kernels (or ops) over the step. On CUDA
    every kernel counts, ``ms["unlinked"]`` being those placed by name (:func:`split`)."""
    prof, _ = profiled_step(step, SEARCH_LABEL, device=device)
    every = list(_device_kernels(prof)) if device else None
    return split(_timed(prof, device), every, top)
