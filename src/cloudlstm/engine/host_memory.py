"""Keep freed memory in the process for the next training step (glibc's malloc).

A CloudLSTM training step allocates gigabytes in blocks of tens of MB and frees them at
the end of its backward: the gathered neighbourhoods every DConv keeps for the backward
are 68 MB per cell step at the paper's size (batch 32, N = 274), 3.3 GB per step. glibc
serves blocks above 32 MB with fresh ``mmap``\\s and unmaps them when they are freed, so
every step faults all of that memory in again: the kernel zeroes each page and, in a
virtual machine that reports freed pages to its host, the host maps them again as well.

:func:`keep_freed_memory` makes malloc serve large blocks from its heap and never hand
the heap back, so a step reuses the memory of the step before. Measured on the 2-vCPU dev
VM (paper-size CloudLSTM, batch 32, forward + MSE + backward, steps 2-4 of a fresh
process): 13.5-15.4 s per step without, 9.7-11.1 s with it; peak RSS 7.3 and 8.0 GB. The
price is that the process keeps its peak RSS until it exits, which a training process
reaches every step anyway, and fragmentation can raise that peak (at N = 13,000 with
checkpointing: 1.9 -> 2.4 GB). The entry points decide with :func:`keeps_freed_memory`.
"""

from __future__ import annotations

import ctypes
import platform

from cloudlstm.errors import UserError

# mallopt parameters (malloc.h), and glibc's defaults of the two (malloc/malloc.c)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
DEFAULT_TRIM_THRESHOLD = 128 * 1024
DEFAULT_MMAP_MAX = 65536

# whether keep_freed_memory changed malloc's settings in this process
_kept = False


def keep_freed_memory() -> bool:
    """Serve every allocation from malloc's heap (no ``mmap``) and never trim the heap.

    Returns whether it applied: only with glibc (on Linux); elsewhere nothing changes.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    global _kept
    libc = ctypes.CDLL(None)
    # mallopt returns 1 on success; -1 for the trim threshold means "never trim" (mallopt(3))
    _kept = libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, -1) == 1
    return _kept


def malloc_defaults() -> bool:
    """Undo :func:`keep_freed_memory` for a job that does not keep freed memory after one
    of this process that did (a sweep's): large blocks ``mmap``\\ed and the heap trimmed
    again, at glibc's default sizes (the mmap threshold stays where it is: glibc adapts it
    no more once a threshold is set). Returns whether there was anything to undo."""
    global _kept
    if not _kept:
        return False
    libc = ctypes.CDLL(None)
    libc.mallopt(M_MMAP_MAX, DEFAULT_MMAP_MAX)
    libc.mallopt(M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD)
    _kept = False
    return True


def give_back_freed_memory() -> bool:
    """Hand the heap's free memory back to the system (``malloc_trim``), which
    :func:`keep_freed_memory` keeps: a run that follows another in the process (a sweep's
    next job) starts from the memory in use, not the earlier run's peak. Returns whether it
    applied: only with glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    ctypes.CDLL(None).malloc_trim(0)
    return True


def keeps_freed_memory(setting: bool | str, checkpointing: bool) -> bool:
    """Whether a job keeps freed memory: ``setting`` (``keep_freed_memory``) true or false,
    or ``"auto"``: unless the model checkpoints, which trades speed for memory.

    Raises:
        UserError: ``setting`` is none of these.
    """
    if setting == "auto":
        return not checkpointing
    if isinstance(setting, bool):
        return setting
    raise UserError(
        f"keep_freed_memory={setting!r} is not one of auto, true, false; "
        "e.g. keep_freed_memory=auto (kept unless model.checkpointing=true)."
    )
