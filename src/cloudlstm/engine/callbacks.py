"""Lightning callbacks of the default configuration (``conf/callbacks/default.yaml``)."""

from __future__ import annotations

import logging
import math
import random
import time
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import RichModelSummary, RichProgressBar
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.model_summary import get_human_readable_count

log = logging.getLogger(__name__)


def accumulating(trainer: L.Trainer) -> bool:
    """Whether the training batch that just ended (in ``on_train_batch_end``) only added its
    gradients to an optimizer step still to come (``trainer.accumulate_grad_batches`` > 1).

    A stop waits for that step (:mod:`cloudlstm.engine.signals`): stopped between, the
    checkpoint would lose the gradients gathered so far; and the timer counts steps, not
    batches (:class:`EpochTimer`)."""
    if trainer.accumulate_grad_batches == 1:
        return False
    try:
        return bool(trainer.fit_loop.epoch_loop._should_accumulate())
    except Exception:  # Lightning's private API changed: every batch a step
        return False


def steps_per_epoch(trainer: L.Trainer) -> int | None:
    """Optimiser steps an epoch of training takes (None where its batches are unknown)."""
    batches = trainer.num_training_batches
    if not math.isfinite(batches) or batches <= 0:
        return None
    return math.ceil(batches / trainer.accumulate_grad_batches)


class EpochTimer(L.Callback):
    """Time per epoch, per 1,000 optimiser steps, and training throughput.

    Logs, every epoch, ``perf/epoch_time_s`` (training and validation of the epoch) and
    ``perf/train_samples_per_s`` (training windows per second of training time, validation
    excluded); and at every validation ``perf/train_s_per_1k_steps``: the seconds of
    training batches (forward, backward and optimiser step; no data loading or validation)
    per 1,000 steps so far, the cost measure of a step budget; and ``fit_time_s``, the
    wall-clock time of fitting, validation included. The times travel in checkpoints, so a
    resumed run reports the whole run (time after the last checkpoint of a killed process
    is not counted: its work is done again). Loading a checkpoint that measured
    no more than this timer already has (testing the best checkpoint after training) keeps
    this timer's figures: a restore must not forget time this process measured.
    """

    def __init__(self) -> None:
        self.epoch_times: list[float] = []
        self.train_time_s = 0.0
        self.train_steps = 0
        self._fit_before = 0.0  # fitting time of earlier processes, from the checkpoint
        self._fit_start: float | None = None
        self._start: float | None = None  # of the epoch in progress, if it began here
        self._val_start = self._batch_start = 0.0
        self._val_time = 0.0
        self._samples = 0

    @staticmethod
    def of(trainer: L.Trainer) -> EpochTimer | None:
        """The trainer's timer, if its callbacks have one."""
        return next((cb for cb in trainer.callbacks if isinstance(cb, EpochTimer)), None)

    @property
    def mean_epoch_time_s(self) -> float | None:
        return float(np.mean(self.epoch_times)) if self.epoch_times else None

    @property
    def train_s_per_1k_steps(self) -> float | None:
        return 1000 * self.train_time_s / self.train_steps if self.train_steps else None

    @property
    def fit_time_s(self) -> float:
        running = time.perf_counter() - self._fit_start if self._fit_start is not None else 0.0
        return self._fit_before + running

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._fit_start = time.perf_counter()

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._fit_before, self._fit_start = self.fit_time_s, None

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
        if not accumulating(trainer):  # a step's time is that of all its batches
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
        if self._start is None:
            # a resumed run ending the epoch its checkpoint was written in, at its last
            # batch, without starting it here: its time is not known (timed from 0, it was
            # the machine's uptime)
            return
        elapsed = time.perf_counter() - self._start
        self._start = None
        self.epoch_times.append(elapsed)
        train_time = max(elapsed - self._val_time, 1e-9)
        pl_module.log("perf/epoch_time_s", elapsed)
        pl_module.log("perf/train_samples_per_s", self._samples / train_time)

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch_times": list(self.epoch_times),
            "train_time_s": self.train_time_s,
            "train_steps": self.train_steps,
            "fit_time_s": self.fit_time_s,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.train_steps and state_dict.get("train_steps", 0) <= self.train_steps:
            return
        self.epoch_times = list(state_dict.get("epoch_times", []))
        self.train_time_s = float(state_dict.get("train_time_s", 0.0))
        self.train_steps = int(state_dict.get("train_steps", 0))
        self._fit_before = float(state_dict.get("fit_time_s", 0.0))


class RngState(L.Callback):
    """Saves the random number generators' states in checkpoints and restores them.

    A resumed run then continues exactly as the uninterrupted run would have, from any
    checkpoint, mid-epoch ones too: the same dropout masks, the same shuffles of the next
    epochs (drawn from the global generator) and any other draw; the training loader
    continues the epoch in progress (:mod:`cloudlstm.data.pipeline.resumable`). A checkpoint
    saved during a fit's validation holds the states of the end of the step before it: the
    resumed run runs that validation again (:mod:`cloudlstm.rundir.pending_validation`).

    At the start of a resumed training it says, in one line each, what keeps it from
    matching the uninterrupted run bit for bit: kernels that are not deterministic (a GPU
    without ``trainer.deterministic=true``), a mid-epoch checkpoint without the training
    loader's position (written by an older version), or another number of DDP processes
    than the checkpoint's run had.
    """

    def __init__(self) -> None:
        self._resumed: dict[str, bool] | None = None
        self._world_size = 1  # this run's processes (DDP), saved with the states
        self._saved_world_size: int | None = None  # the checkpoint's run's
        self._step_end: dict[str, Any] | None = None  # the states as the last step ended
        self._before_validation: dict[str, Any] | None = None  # those, while the fit validates

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._world_size = trainer.world_size

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if trainer.state.fn == TrainerFn.FITTING:
            fit_loop = checkpoint.get("loops", {}).get("fit_loop", {})
            self._resumed = {"loader_state": "combined_loader" in fit_loop.get("state_dict", {})}

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        resumed, self._resumed = self._resumed, None
        if resumed is None:
            return
        device = trainer.strategy.root_device.type
        if device != "cpu" and not torch.are_deterministic_algorithms_enabled():
            log.warning(
                "Resumed on %s without trainer.deterministic=true: its kernels are not "
                "deterministic, so the run matches an uninterrupted one only up to rounding, "
                "not bit for bit.",
                device.upper(),
            )
        steps = steps_per_epoch(trainer)
        if not resumed["loader_state"] and steps and trainer.global_step % steps:
            log.warning(
                "The checkpoint was written mid-epoch without the training loader's "
                "position (by an older version): the rest of its epoch is shuffled anew, "
                "so the run will not match an uninterrupted one."
            )
        saved = self._saved_world_size
        if saved is not None and saved != trainer.world_size and trainer.is_global_zero:
            log.warning(
                "The checkpoint was written by a run of %d processes, this one has %d "
                "(trainer.devices x trainer.num_nodes): each step averages the gradients of "
                "other batches, so the run will not match an uninterrupted one.",
                saved,
                trainer.world_size,
            )

    def on_train_batch_end(self, trainer: L.Trainer, *_: Any) -> None:
        self._step_end = _generator_states()  # before a validation that may follow draws

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking:
            self._before_validation = self._step_end

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._before_validation = None  # the validation's checkpoints resume after it

    def state_dict(self) -> dict[str, Any]:
        # during a validation, the states as its step ended: a checkpoint saved then resumes
        # by running that validation again (rundir/pending_validation.py), which draws again
        # what it drew (its loader's base seed, drawn before on_validation_start)
        states = self._before_validation or _generator_states()
        return {**states, "world_size": self._world_size}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._saved_world_size = state_dict.get("world_size")  # none before it was saved
        torch.set_rng_state(state_dict["torch"])
        np.random.set_state(state_dict["numpy"])
        random.setstate(state_dict["python"])
        if "cuda" in state_dict and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state_dict["cuda"])
        # a resume that validates first (rundir/pending_validation.py) does so from these
        self._step_end = _generator_states()


def _generator_states() -> dict[str, Any]:
    """The states of the random number generators: torch's (CUDA's too), numpy's, Python's."""
    state = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


class ProgressBar(RichProgressBar):
    """Lightning's rich progress bar, saying what the budget is.

    * Under a step budget (``trainer.max_steps`` with ``max_epochs=-1``, as the recipes
      set), one bar counts the optimiser steps out of ``max_steps`` across epochs
      (``Epoch 6 · step 1200/5000``); Lightning's would read ``Epoch 6/-2`` with a bar
      restarting every epoch.
    * The logger's run version (``v_num``), a random W&B id, is not shown: the run
      directory names the run.
    """

    def step_budget(self) -> int | None:
        """``max_steps`` when training runs to a number of steps, else None."""
        trainer = self.trainer
        if trainer.max_epochs in (None, -1) and trainer.max_steps and trainer.max_steps > 0:
            return int(trainer.max_steps)
        return None

    @property
    def total_train_batches(self) -> int | float:
        return self.step_budget() or super().total_train_batches

    def _get_train_description(self, current_epoch: int) -> str:
        if self.step_budget() is None:
            return super()._get_train_description(current_epoch)
        return f"Epoch {current_epoch} · step"

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.step_budget() is None or self.train_progress_bar_id is None:
            super().on_train_epoch_start(trainer, pl_module)
            self._show_steps(trainer)  # a resumed run starts at its step
            return
        # the same bar goes on: restarting it would reset its clock and speed every epoch
        description = self._get_train_description(trainer.current_epoch)
        if self.theme.description:
            description = f"[{self.theme.description}]{description}"
        if self.progress is not None:
            self.progress.update(self.train_progress_bar_id, description=description)
        self.refresh()

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self._show_steps(trainer)

    def _show_steps(self, trainer: L.Trainer) -> None:
        """The bar at the optimiser step (Lightning puts it at the epoch's batch)."""
        if self.step_budget() is not None:
            self._update(self.train_progress_bar_id, trainer.global_step)

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items


class ModelSummary(RichModelSummary):
    """Lightning's rich model summary without what it cannot fill in: the FLOPs (0 unless
    the module has an ``example_input_array``) and the count of modules in train mode."""

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int = 0,
        **summarize_kwargs: Any,
    ) -> None:
        from rich import get_console
        from rich.table import Table

        columns = [
            (name, values) for name, values in summary_data if name != "FLOPs" or total_flops
        ]
        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        for i, (name, _) in enumerate(columns):
            table.add_column(name, style="dim" if i == 0 else None, justify=_justify(name))
        for row in zip(*(values for _, values in columns), strict=True):
            table.add_row(*row)
        console = get_console()
        console.print(table)
        frozen = total_parameters - trainable_parameters
        lines = [
            f"Trainable params: {get_human_readable_count(trainable_parameters)}",
            f"Non-trainable params: {get_human_readable_count(frozen)}",
            f"Total params: {get_human_readable_count(total_parameters)}",
            f"Total estimated model params size (MB): {model_size:,.1f}",
        ]
        if total_flops:
            lines.append(f"Total FLOPs: {get_human_readable_count(total_flops)}")
        console.print("\n".join(lines), highlight=False)


def _justify(column: str) -> str:
    return "right" if column in ("Params", "Params per Device", "FLOPs") else "left"
