"""Triton for the package's CUDA kernels, when it is installed and not switched off.

``CLOUDLSTM_TRITON=0`` in the environment makes every CUDA path fall back to torch ops (kNN
to the cell list, the gather to ``index_select``, the LSTM update to its torch expression):
a way out if a Triton or driver version misbehaves, and a baseline to time the kernels
against. CPU-only installs have no Triton, and nothing here matters to them.
"""

from __future__ import annotations

import os

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: numba on CPU, torch ops elsewhere
    triton = tl = None

ENABLED = triton is not None and os.environ.get("CLOUDLSTM_TRITON", "1") != "0"
# A kernel computes its offsets in int32 while they fit, where 64-bit divisions and
# products take several times the machine instructions; past this it compiles in int64.
INT32_MAX = 2**31 - 1


def wide_offsets(entries: int, block: int, values_per_entry: int) -> bool:
    """Whether a kernel over ``entries`` in programs of ``block`` (the last program's lanes
    too), ``values_per_entry`` values an entry, reaches an offset past :data:`INT32_MAX`."""
    return (entries + block) * values_per_entry > INT32_MAX
