"""What a trained model costs: parameters, training time, inference time per window and peak
memory, measured as a run ends (a report, not a benchmark: ``benchmarks/`` measure)."""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lightning as L
import torch

from cloudlstm.engine.callbacks import EpochTimer
from cloudlstm.models.build import count_parameters


def cost(module: L.LightningModule, datamodule: Any, trainer: L.Trainer) -> dict[str, Any]:
    """Parameters, time per epoch and per 1,000 training steps, inference time per sample
    and peak memory."""
    timer = EpochTimer.of(trainer)
    out: dict[str, Any] = {
        "params": count_parameters(module.model),
        "epoch_time_s": timer.mean_epoch_time_s if timer else None,
        "train_s_per_1k_steps": timer.train_s_per_1k_steps if timer else None,
        "inference_ms_per_sample": inference_ms_per_sample(
            module.model, datamodule, batch=int(getattr(datamodule, "batch_size", 32) or 32)
        ),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["peak_gpu_memory_mb"] = torch.cuda.max_memory_allocated() / 2**20
    # ru_maxrss is in KiB on Linux: the process's peak resident memory so far
    out["peak_cpu_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


@torch.no_grad()
def inference_ms_per_sample(
    model: torch.nn.Module, datamodule: Any, batch: int = 32, budget_s: float = 5.0
) -> float:
    """Forward time per window on a batch of up to ``batch`` test windows (the run's batch
    size): best of 3 after a warm-up, fewer once ``budget_s`` is spent (a city-size cloud's
    forward takes seconds, and this is a report, not a benchmark)."""
    dataset = datamodule.test_dataset
    if not dataset:
        return float("nan")
    items = [dataset[i] for i in range(min(batch, len(dataset)))]
    times = []
    with evaluating(model) as (device, dtype):
        inputs = model_inputs(items, device, dtype)
        model(*inputs)  # warm-up: first-call allocations and kernel selection
        while len(times) < 3 and sum(times) < budget_s:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            model(*inputs)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    return 1000 * min(times) / len(items)


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
