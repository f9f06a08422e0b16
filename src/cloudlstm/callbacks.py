"""Lightning callbacks of the default configuration (``conf/callbacks/default.yaml``)."""

from __future__ import annotations

import random
import time
from typing import Any

import lightning as L
import numpy as np
import torch


class EpochTimer(L.Callback):
    """Time per epoch, per 1,000 optimiser steps, and training throughput.

    Logs, every epoch, ``perf/epoch_time_s`` (training and validation of the epoch) and
    ``perf/train_samples_per_s`` (training windows per second of training time, validation
    excluded); and at every validation ``perf/train_s_per_1k_steps``: the seconds of
    training batches (forward, backward and optimiser step; no data loading or validation)
    per 1,000 steps so far, the cost measure of a step budget. The times travel in
    checkpoints, so a resumed run reports the whole run. Loading a checkpoint that measured
    less than this timer already has (testing the best checkpoint after training) keeps
    this timer's figures: a restore must not forget time this process measured.
    """

    def __init__(self) -> None:
        self.epoch_times: list[float] = []
        self.train_time_s = 0.0
        self.train_steps = 0
        self._start = self._val_start = self._batch_start = 0.0
        self._val_time = 0.0
        self._samples = 0

    @property
    def mean_epoch_time_s(self) -> float | None:
        return float(np.mean(self.epoch_times)) if self.epoch_times else None

    @property
    def train_s_per_1k_steps(self) -> float | None:
        return 1000 * self.train_time_s / self.train_steps if self.train_steps else None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start, self._val_time, self._samples = time.perf_counter(), 0.0, 0

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, *_: Any
    ) -> None:
        self._batch_start = time.perf_counter()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, *_: Any
    ) -> None:
        self.train_time_s += time.perf_counter() - self._batch_start
        self.train_steps += 1
        self._samples += int(batch["x"].shape[0])

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._val_start = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._val_time += time.perf_counter() - self._val_start

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.train_steps and not trainer.sanity_checking:
            pl_module.log("perf/train_s_per_1k_steps", self.train_s_per_1k_steps)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        elapsed = time.perf_counter() - self._start
        self.epoch_times.append(elapsed)
        train_time = max(elapsed - self._val_time, 1e-9)
        pl_module.log("perf/epoch_time_s", elapsed)
        pl_module.log("perf/train_samples_per_s", self._samples / train_time)

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch_times": list(self.epoch_times),
            "train_time_s": self.train_time_s,
            "train_steps": self.train_steps,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("train_steps", 0) < self.train_steps:
            return
        self.epoch_times = list(state_dict.get("epoch_times", []))
        self.train_time_s = float(state_dict.get("train_time_s", 0.0))
        self.train_steps = int(state_dict.get("train_steps", 0))


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
