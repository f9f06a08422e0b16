"""A model too large for this machine's memory, refused before its weights are made.

On Linux an allocation of less than the machine's memory succeeds even where the memory is
not free (overcommit), and the kernel kills the process once the weights' pages are written:
a run of ``model.hidden_channels=3000`` ended with no line at all. So the model is first
built on torch's meta device, which records each tensor's size and allocates nothing, and
its weights are weighed against the memory available. What a step adds (activations, the
optimiser's state) is not counted: the check refuses only what cannot fit whatever the data.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import torch
from omegaconf import DictConfig

from cloudlstm.assembly.batch_limits import splits_run
from cloudlstm.assembly.devices import run_accelerator
from cloudlstm.data.spec import DataSpec
from cloudlstm.errors import OutOfMemoryError, memory_info, process_limit, readable_size
from cloudlstm.models.build import build_model

log = logging.getLogger(__name__)

# cgroup v2's and v1's memory limit of this process's container
CGROUP_LIMITS = (
    (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory.current")),
    (
        Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
        Path("/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ),
)


def model_bytes(model_config: DictConfig, spec: DataSpec) -> tuple[int, int] | None:
    """``(parameters, bytes of parameters and buffers)`` of the model ``model_config``
    builds for ``spec``, built on the meta device; None where its constructor computes
    with values, which meta tensors do not have: the real build then decides.

    A graph model's constructor computes with its graph's weights (DCRNN's and Graph
    WaveNet's normalisations, STGCN's Chebyshev scaling), so it is weighed as built without
    the data's graph, from the points' positions: the graph's values change no weight's
    size, and what is missed is the graph kept as a buffer, N x N per support. The
    meta build draws no random numbers, so the real build's weights are those it would
    make without this check."""
    specs = [spec] if spec.adjacency is None else [spec, replace(spec, adjacency=None)]
    for sized in specs:
        try:
            # the real build logs what the build has to say: said here, it would be said twice
            with torch.device("meta"), _quiet(logging.getLogger(build_model.__module__)):
                model = build_model(model_config, sized, compile=False)
        except Exception as err:  # noqa: BLE001 - any refusal is the real build's to make
            log.debug("no size estimate before the build: %s", err)
            continue
        params = sum(p.numel() for p in model.parameters())
        tensors = (*model.parameters(), *model.buffers())
        return params, sum(t.numel() * t.element_size() for t in tensors)
    return None


@contextmanager
def _quiet(logger: logging.Logger) -> Iterator[None]:
    """``logger`` says nothing below an error while the block runs."""
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def available_memory() -> tuple[int, str] | None:
    """Bytes of memory this process can still take, and where the bound comes from: the
    machine's available memory and free swap, or less where its container's limit or its
    address-space limit (``ulimit -v``) leaves less; None where none says."""
    memory = memory_info()
    rooms = [
        (memory["MemAvailable"] + memory["SwapFree"] if memory else None, "is available here"),
        (_container_room(), "is left under this container's memory limit"),
        (_address_space_room(), "is left under this process's `ulimit -v`"),
    ]
    known = [(room, where) for room, where in rooms if room is not None]
    return min(known, key=lambda known_room: known_room[0]) if known else None


def _container_room() -> int | None:
    for limit_file, usage_file in CGROUP_LIMITS:
        try:
            limit = limit_file.read_text().strip()
            usage = int(usage_file.read_text().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 2**60:  # "max", or v1's "no limit" of ~2**63
            return max(int(limit) - usage, 0)
    return None


def _address_space_room() -> int | None:
    """What ``ulimit -v`` leaves this process beyond the address space it has mapped."""
    limit = process_limit("RLIMIT_AS")
    if limit is None:
        return None
    try:
        status = Path("/proc/self/status").read_text()
        mapped = int(status.split("VmSize:", 1)[1].split()[0]) * 1024
    except (OSError, IndexError, ValueError):
        return None
    return max(limit - mapped, 0)


def trains_in_host_memory(cfg: DictConfig) -> bool:
    """Whether the job ``cfg`` trains, in this machine's memory: on the CPU, or on Apple's
    GPU, which shares it, as Lightning maps ``trainer.accelerator`` here
    (:func:`~cloudlstm.assembly.devices.run_accelerator`: auto where it picks either, gpu
    on a Mac)."""
    if "train" not in splits_run(cfg):  # an evaluation, or train=false
        return False
    return run_accelerator((cfg.get("trainer") or {}).get("accelerator", "auto")) in ("cpu", "mps")


def check_model_fits(
    model_config: DictConfig, spec: DataSpec, in_host_memory: bool, room: int | None = None
) -> None:
    """Refuse a model whose weights (and, where it trains in this machine's memory, their
    gradients) alone need more memory than is available.

    Args:
        model_config: the ``model`` config.
        spec: the data's description the model is sized for.
        in_host_memory: the job trains in this machine's memory (the CPU, Apple's GPU:
            :func:`trains_in_host_memory`), where the gradients take as much again; on a
            CUDA GPU the weights are made in this machine's memory first, and the GPU's own
            allocator refuses what does not fit there.
        room: the memory available, in bytes (by default :func:`available_memory`).

    Raises:
        OutOfMemoryError: names the model, its parameters, what they need and what is free.
    """
    free = available_memory() if room is None else (room, "is available here")
    weighed = model_bytes(model_config, spec) if free is not None else None
    if free is None or weighed is None:
        return
    room, where = free
    params, size = weighed
    need, what = (size, "its weights")
    if in_host_memory:
        need, what = 2 * size, "its weights and their gradients"
    if need <= room:
        return
    name = str(model_config.get("_target_", "the model")).rsplit(".", 1)[-1]
    raise OutOfMemoryError(
        f"The model ({name}) has {params:,} parameters: {what} alone need "
        f"{readable_size(need)}, and {readable_size(room)} of memory {where}. Make "
        "the model smaller (its hidden channels, layers or K), or run it where more memory "
        "is free."
    )
