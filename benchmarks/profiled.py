"""A step under ``torch.profiler`` with its neighbour searches labelled, for the benchmarks
that split a step's time by part."""

from __future__ import annotations

from collections.abc import Callable

from torch.profiler import ProfilerActivity, profile, record_function

import cloudlstm.nn.dconv as dconv


def profiled_step(
    step: Callable[[], float], search_label: str, device: bool = False
) -> tuple[profile, float]:
    """``step()`` under the profiler, each search inside ``record_function(search_label)``
    (every search goes through ``dconv.knn``) -> the profile and what ``step`` returned.
    ``device``: record the CUDA kernels too."""
    real_knn = dconv.knn

    def knn(points, k, **options):
        with record_function(search_label):
            return real_knn(points, k, **options)

    dconv.knn = knn
    try:
        activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if device else [])]
        with profile(activities=activities) as prof:
            result = step()
    finally:  # a failed step must not leave the wrapper in place (tests run this in-process)
        dconv.knn = real_knn
    return prof, result
