"""What a trained model costs: parameters, training time, inference time per window and peak
memory, measured as a run ends (a report, not a benchmark: ``benchmarks/`` measure)."""

from __future__ import annotations

import gc
import re
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch

from cloudlstm.engine.callbacks import EpochTimer
from cloudlstm.engine.host_memory import give_back_freed_memory
from cloudlstm.models.build import count_parameters


def cost(module: L.LightningModule, datamodule: Any, trainer: L.Trainer) -> dict[str, Any]:
    """Parameters, time per epoch and per 1,000 training steps, inference time per sample
    on the run's device, and memory (:func:`gpu_memory_mb`, then the process's peak RSS)."""
    timer = EpochTimer.of(trainer)
    # the device the run trained and tested on: trainer.test() has moved the model back to
    # the CPU as it ended, where its forward would be timed as a CPU run's
    device = trainer.strategy.root_device
    out: dict[str, Any] = {
        "params": count_parameters(module.model),
        "epoch_time_s": timer.mean_epoch_time_s if timer else None,
        "train_s_per_1k_steps": timer.train_s_per_1k_steps if timer else None,
        "inference_ms_per_sample": inference_ms_per_sample(
            module.model,
            datamodule,
            batch=int(getattr(datamodule, "batch_size", 32) or 32),
            device=device,
        ),
        **gpu_memory_mb(device),
    }
    out["peak_cpu_rss_mb"] = peak_cpu_rss_mb()
    return out


# Linux's files of the process's memory: its peak resident set (VmHWM) since it started or
# since "5" was written to clear_refs (proc(5))
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def reset_cpu_peak() -> bool:
    """Start the process's peak resident memory (:func:`peak_cpu_rss_mb`) at this run, as
    :func:`reset_gpu_peak` does the GPU's: runs one after another in one process (a sweep's
    jobs) read the process's otherwise, an earlier run's larger model's. The earlier runs'
    objects are collected and the memory they freed is handed back first
    (:func:`~cloudlstm.engine.host_memory.give_back_freed_memory`: the process keeps it),
    so the peak starts at what is in use. Returns whether the peak was reset: only on
    Linux, where ``/proc/self/clear_refs`` takes it; elsewhere it stays the process's."""
    gc.collect()
    give_back_freed_memory()
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:  # not Linux, or a kernel (or sandbox) without the file
        return False
    return _vm_hwm_kib() is not None


def peak_cpu_rss_mb() -> float:
    """The process's peak resident memory in MiB: since :func:`reset_cpu_peak` where it
    took (Linux's VmHWM), else since the process started (``ru_maxrss``: KiB on Linux,
    bytes on macOS)."""
    hwm = _vm_hwm_kib()
    if hwm is not None:
        return hwm / 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def _vm_hwm_kib() -> int | None:
    """VmHWM of ``/proc/self/status`` in KiB, or None where the file or the line is not."""
    try:
        found = re.search(r"^VmHWM:\s*(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(found.group(1)) if found else None


def gpu_memory_mb(device: torch.device) -> dict[str, float]:
    """The GPU memory of a run on ``device``, in MiB, under the key that says what it is:
    on CUDA ``peak_gpu_memory_mb``, the most its tensors held at once; on Apple's GPU
    (``mps``), which keeps no peak, ``mps_driver_memory_mb``, what Metal's driver holds for
    the process as the run ends (the allocator's cache of freed blocks included, so near
    the peak of what it reserved); on the CPU nothing (``peak_cpu_rss_mb`` is the
    process's)."""
    if device.type == "cuda" and torch.cuda.is_initialized():
        return {"peak_gpu_memory_mb": torch.cuda.max_memory_allocated(device) / 2**20}
    if device.type == "mps":
        return {"mps_driver_memory_mb": torch.mps.driver_allocated_memory() / 2**20}
    return {}


def reset_gpu_peak() -> None:
    """Start the CUDA peak (:func:`gpu_memory_mb`) at this run: runs one after another in
    one process (a sweep's jobs) read the process's otherwise, an earlier run's larger
    model's. Nothing where CUDA is not initialised: no run of this process used it yet."""
    if torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()


@torch.no_grad()
def inference_ms_per_sample(
    model: torch.nn.Module,
    datamodule: Any,
    batch: int = 32,
    budget_s: float = 5.0,
    device: torch.device | None = None,
) -> float:
    """Forward time per window on a batch of up to ``batch`` test windows (the run's batch
    size) on ``device`` (None: where the model is; it is moved there and back): best of 3
    after a warm-up, fewer once ``budget_s`` is spent (a city-size cloud's forward takes
    seconds, and this is a report, not a benchmark)."""
    dataset = datamodule.test_dataset
    if not dataset:
        return float("nan")
    items = [dataset[i] for i in range(min(batch, len(dataset)))]
    times = []
    with on_device(model, device), evaluating(model) as (device, dtype):
        inputs = model_inputs(items, device, dtype)
        model(*inputs)  # warm-up: first-call allocations and kernel selection
        while len(times) < 3 and sum(times) < budget_s:
            _synchronize(device)
            start = time.perf_counter()
            model(*inputs)
            _synchronize(device)
            times.append(time.perf_counter() - start)
    return 1000 * min(times) / len(items)


def _synchronize(device: torch.device) -> None:
    """Wait for the kernels queued on ``device`` (a GPU runs them after the call returns)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


@contextmanager
def on_device(model: torch.nn.Module, device: torch.device | None) -> Iterator[None]:
    """``model`` on ``device`` (None: where it is), moved back to where it was after."""
    weight = next(model.parameters(), None)
    if device is None or weight is None or weight.device == device:
        yield
        return
    was = weight.device
    model.to(device)
    try:
        yield
    finally:
        model.to(was)


def model_inputs(
    items: list[dict[str, torch.Tensor]], device: torch.device, dtype: torch.dtype | None = None
) -> list:
    """A forward's arguments from dataset items, batched on ``device`` and, given ``dtype``,
    in the model's float type (``trainer.precision=64`` trains in float64): ``x``,
    ``coords`` and, with time features, ``future``."""
    keys = [key for key in ("x", "coords", "future") if key in items[0]]
    return [torch.stack([it[key] for it in items]).to(device, dtype) for key in keys]


@contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[tuple[torch.device, torch.dtype]]:
    """The model in eval mode, its device and float type yielded, its training mode restored
    after."""
    was_training = model.training
    model.eval()
    try:
        weight = next(model.parameters(), torch.empty(0))
        yield weight.device, weight.dtype
    finally:
        model.train(was_training)
