"""Lightning callbacks of the default configuration (``conf/callbacks/default.yaml``)."""

from __future__ import annotations

import random
import time
from typing import Any

import lightning as L
import numpy as np
import torch


class EpochTimer(L.Callback):
    """Time per epoch and training throughput, logged every epoch.

    Logs ``perf/epoch_time_s`` (training and validation of the epoch) and
    ``perf/train_samples_per_s`` (training windows per second of training time, validation
    excluded). The list of epoch times travels in checkpoints, so a resumed run reports
    every epoch, and :attr:`mean_epoch_time_s` covers the whole run.
    """

    def __init__(self) -> None:
        self.epoch_times: list[float] = []
        self._start = self._val_start = 0.0
        self._val_time = 0.0
        self._samples = 0

    @property
    def mean_epoch_time_s(self) -> float | None:
        return float(np.mean(self.epoch_times)) if self.epoch_times else None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start, self._val_time, self._samples = time.perf_counter(), 0.0, 0

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, *_: Any
    ) -> None:
        self._samples += int(batch["x"].shape[0])

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._val_start = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._val_time += time.perf_counter() - self._val_start

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        elapsed = time.perf_counter() - self._start
        self.epoch_times.append(elapsed)
        train_time = max(elapsed - self._val_time, 1e-9)
        pl_module.log("perf/epoch_time_s", elapsed)
        pl_module.log("perf/train_samples_per_s", self._samples / train_time)

    def state_dict(self) -> dict[str, Any]:
        return {"epoch_times": list(self.epoch_times)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epoch_times = list(state_dict.get("epoch_times", []))


class RngState(L.Callback):
    """Saves the random number generators' states in checkpoints and restores them.

    A run resumed from an end-of-epoch checkpoint then continues exactly as the
    uninterrupted run would have: the same shuffling of training windows (torch's sampler
    draws it from the global generator), the same dropout masks and any other draw.
    """

    def state_dict(self) -> dict[str, Any]:
        state = {
            "torch": torch.get_rng_state(),
            "numpy": np.random.get_state(),
            "python": random.getstate(),
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        torch.set_rng_state(state_dict["torch"])
        np.random.set_state(state_dict["numpy"])
        random.setstate(state_dict["python"])
        if "cuda" in state_dict and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state_dict["cuda"])
