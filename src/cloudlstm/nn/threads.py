"""Run ``nogil`` numba kernels on slices of a batch with plain Python threads.

Why not numba's ``parallel=True``: its OpenMP pool and torch's intra-op pool busy-wait
against each other; on a 2-vCPU machine identical CloudLSTM steps took 1.4 s or 42 s in
the same process. Python threads sleep when idle, so torch keeps the cores in between.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

_pool: ThreadPoolExecutor | None = None


def run_sliced(total: int, kernel: Callable[[int, int], None], min_slice: int = 1) -> None:
    """Call ``kernel(start, stop)`` on contiguous slices covering ``range(total)``.

    One slice per torch intra-op thread (fewer when slices would hold under ``min_slice``
    items); the kernel must release the GIL and write only its own slice.
    """
    global _pool
    workers = max(1, min(torch.get_num_threads(), total // max(min_slice, 1)))
    if workers == 1:
        kernel(0, total)
        return
    if _pool is None or _pool._max_workers < workers:
        _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cloudlstm")
    bounds = np.linspace(0, total, workers + 1).astype(int)
    # Every slice on the pool: with the calling thread taking one, steps were ~5 % faster
    # but a paper-size K = 3 step's peak RSS rose by 350-400 MB (glibc's arenas, it seems;
    # 2-vCPU dev machine, 2026-11-27, four steps per process at f4a0dcd and with this).
    jobs = [_pool.submit(kernel, a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    for job in jobs:
        job.result()
