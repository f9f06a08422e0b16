"""A resumed training trains with its config's optimizer, schedule and early-stopping settings.

Lightning restores an optimizer's state whole: with the moments, its param groups'
hyperparameters (``lr``, ``weight_decay``, ``betas``, ...); with a plateau scheduler's
counters its ``factor`` and ``patience``; with early stopping's count its ``patience``. A
resume that takes a changed setting (``allow_changes=[optimizer.lr]``,
:mod:`cloudlstm.rundir.config_changes`) would then write the new value into
``config.yaml`` and ``config_changes.yaml`` and train on with the old one. So the settings
the config builds are noted before the restore (:func:`configured_settings`) and put back
after it (:func:`apply_configured`), keeping what is progress: the moments, the schedule's
step, a plateau's reductions and counters, the validations without improvement.

The learning rate is progress and setting at once: a schedule sets it at each step from a
base. Each param group keeps the rate it was configured with (:data:`CONFIGURED_LR`, saved
with the group), so that a new ``optimizer.lr`` scales the restored rate (a plateau's
reductions so far are kept) and the schedule's base; a warm-up + cosine (``LambdaLR``)
then gives the rate of the restored step from the new base and the new schedule (a
``trainer.max_steps`` extended).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import lightning as L
from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR, ReduceLROnPlateau

log = logging.getLogger(__name__)

CONFIGURED_LR = "configured_lr"  # a param group's rate as configured, saved with the group
SCHEDULE_KEYS = {"lr", "initial_lr", CONFIGURED_LR}  # progress, or the rate's record
# a plateau scheduler's settings; its best, counters and reductions are progress
PLATEAU_SETTINGS = (
    "factor", "patience", "threshold", "threshold_mode", "cooldown", "min_lrs", "eps",
)  # fmt: skip


def note_configured_lr(optimizer: Optimizer) -> None:
    """Record each param group's configured rate in it, before a scheduler changes it."""
    for group in optimizer.param_groups:
        group[CONFIGURED_LR] = group["lr"]


@dataclass(frozen=True)
class ConfiguredSettings:
    """The settings the config built, per optimizer and param group, per plateau scheduler
    (None for other schedulers, whose settings no state holds), and each early stopping's
    patience."""

    groups: list[list[dict[str, Any]]]
    plateaus: list[dict[str, Any] | None]
    patience: list[int]


def configured_patience(trainer: L.Trainer) -> list[int]:
    """Each early stopping's patience, before a checkpoint's callback states are restored
    (Lightning restores them before it builds the optimizers)."""
    return [callback.patience for callback in trainer.early_stopping_callbacks]


def configured_settings(trainer: L.Trainer, patience: list[int]) -> ConfiguredSettings:
    """The fresh optimizers' and schedulers' settings, before their states are restored,
    with early stopping's ``patience`` (:func:`configured_patience`)."""
    groups = [
        [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        for optimizer in trainer.optimizers
    ]
    plateaus = [
        {key: getattr(c.scheduler, key) for key in PLATEAU_SETTINGS}
        if isinstance(c.scheduler, ReduceLROnPlateau)
        else None
        for c in trainer.lr_scheduler_configs
    ]
    return ConfiguredSettings(groups, plateaus, patience)


def apply_configured(trainer: L.Trainer, configured: ConfiguredSettings) -> list[str]:
    """Put the configured settings back into the restored optimizers and schedulers; returns
    the changes made (``key old -> new``), logged in one line."""
    changes: list[str] = []
    for optimizer, groups in zip(trainer.optimizers, configured.groups, strict=True):
        for group, fresh in zip(optimizer.param_groups, groups, strict=True):
            changes += _apply_group(group, fresh)
    for config, plateau in zip(trainer.lr_scheduler_configs, configured.plateaus, strict=True):
        changes += _apply_schedule(config.scheduler, plateau)
    for callback, patience in zip(
        trainer.early_stopping_callbacks, configured.patience, strict=True
    ):
        if callback.patience != patience:
            changes.append(f"early stopping's patience {callback.patience} -> {patience}")
            callback.patience = patience
    changes = list(dict.fromkeys(changes))  # once, where several groups changed alike
    if changes:
        log.info(
            "Resumed with the configured settings, not the checkpoint's: %s.",
            ", ".join(changes),
        )
    return changes


def stop_if_stopped_early(trainer: L.Trainer) -> bool:
    """Stop a resumed training that its early stopping had ended (the process ended after
    that validation, before the test); returns whether it did.

    Lightning restores early stopping's state but not the Trainer's stop flag, so the
    resume trained on to the next validation, which stopped it again: steps, validation
    metrics, and where one improved, the best checkpoint and the test, unlike the
    uninterrupted run's. A patience raised on resume (after :func:`apply_configured`) that
    the validations without improvement no longer exhaust trains on."""
    stopped = [
        callback
        for callback in trainer.early_stopping_callbacks
        if callback.stopping_reason != EarlyStoppingReason.NOT_STOPPED
        and not (
            callback.stopping_reason == EarlyStoppingReason.PATIENCE_EXHAUSTED
            and callback.wait_count < callback.patience
        )
    ]
    if stopped:
        log.info(
            "Early stopping had ended this training before the resume (%s): nothing left to train.",
            stopped[0].stopping_reason_message or stopped[0].stopping_reason.name,
        )
        trainer.should_stop = True
    return bool(stopped)


def _apply_group(group: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
    changes = []
    for key, value in fresh.items():
        if key in SCHEDULE_KEYS:
            continue
        if key in group and group[key] != value:
            changes.append(f"{key} {group[key]} -> {value}")
        group[key] = value
    new = fresh[CONFIGURED_LR]
    old = group.get(CONFIGURED_LR, group.get("initial_lr"))
    if old is None:
        if not math.isclose(group["lr"], new):
            log.warning(
                "The checkpoint holds no record of the learning rate it was configured with "
                "(written by an older version): training goes on at its rate, %g; a new "
                "optimizer.lr applies to a run started anew.",
                group["lr"],
            )
        return changes
    if old != new:
        changes.append(f"lr {old} -> {new}")
        group["lr"] *= new / old
        if "initial_lr" in group:
            group["initial_lr"] *= new / old
    group[CONFIGURED_LR] = new
    return changes


def _apply_schedule(scheduler: Any, plateau: dict[str, Any] | None) -> list[str]:
    optimizer = scheduler.optimizer
    if plateau is not None:
        changes = [
            f"scheduler.{key} {getattr(scheduler, key)} -> {value}"
            for key, value in plateau.items()
            if getattr(scheduler, key) != value
        ]
        for key, value in plateau.items():
            setattr(scheduler, key, value)
    else:
        changes = []
    if hasattr(scheduler, "base_lrs") and all("initial_lr" in g for g in optimizer.param_groups):
        scheduler.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
    if isinstance(scheduler, LambdaLR):  # the restored step's rate, from the new schedule
        for group, base, factor in zip(
            optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas, strict=True
        ):
            group["lr"] = base * factor(scheduler.last_epoch)
    scheduler._last_lr = [g["lr"] for g in optimizer.param_groups]
    return changes
