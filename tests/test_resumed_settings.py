"""A resumed training trains with its config's optimizer and schedule settings, keeping the
checkpoint's progress (engine/resumed_settings.py): real torch optimizers and schedulers,
their states restored as Lightning restores them (``load_state_dict``)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping
from torch.optim.lr_scheduler import ReduceLROnPlateau

from cloudlstm.engine.resumed_settings import (
    CONFIGURED_LR,
    apply_configured,
    configured_patience,
    configured_settings,
    note_configured_lr,
)
from cloudlstm.engine.schedules import warmup_cosine


def trained(optimizer_cls, scheduler, steps: int, metrics=(), **settings):
    """A weight trained ``steps`` steps: its optimizer and scheduler."""
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(4))
    optimizer = optimizer_cls([weight], **settings)
    note_configured_lr(optimizer)
    schedule = scheduler(optimizer)
    for step in range(steps):
        optimizer.zero_grad()
        (weight**2).sum().backward()
        optimizer.step()
        schedule.step(metrics[step]) if metrics else schedule.step()
    return weight, optimizer, schedule


def resumed(checkpoint, optimizer_cls, scheduler, **settings):
    """A fresh optimizer and scheduler of ``settings``, noted, then given the checkpoint's
    states, as a resumed fit goes: returns them and the trainer they belong to."""
    _, optimizer, schedule = trained(optimizer_cls, scheduler, 0, **settings)
    trainer = SimpleNamespace(
        optimizers=[optimizer],
        lr_scheduler_configs=[SimpleNamespace(scheduler=schedule)],
        early_stopping_callbacks=[],
    )
    configured = configured_settings(trainer, [])
    optimizer.load_state_dict(checkpoint[0].state_dict())
    schedule.load_state_dict(checkpoint[1].state_dict())
    return optimizer, schedule, trainer, configured


def cosine(total: int):
    return lambda optimizer: warmup_cosine(optimizer, total_steps=total, warmup_steps=2)


def test_a_new_rate_and_weight_decay_are_trained_with_and_the_schedule_keeps_its_step():
    _, *before = trained(torch.optim.AdamW, cosine(10), 5, lr=1e-3, weight_decay=1e-2)
    optimizer, schedule, trainer, configured = resumed(
        before, torch.optim.AdamW, cosine(20), lr=1e-2, weight_decay=0.1
    )
    moments = {k: v.clone() for k, v in next(iter(optimizer.state.values())).items()}

    changes = apply_configured(trainer, configured)

    assert changes == ["weight_decay 0.01 -> 0.1", "lr 0.001 -> 0.01"]
    (group,) = optimizer.param_groups
    factor = schedule.lr_lambdas[0]  # the new schedule: 20 steps
    assert schedule.last_epoch == 5 and group["lr"] == pytest.approx(1e-2 * factor(5), rel=1e-12)
    assert group["initial_lr"] == group[CONFIGURED_LR] == 1e-2 and schedule.base_lrs == [1e-2]
    assert group["weight_decay"] == 0.1 and schedule.get_last_lr() == [group["lr"]]
    state = next(iter(optimizer.state.values()))
    assert all(torch.equal(state[k], v) for k, v in moments.items()), "the moments are kept"
    schedule.step()
    assert group["lr"] == pytest.approx(1e-2 * factor(6), rel=1e-12)


def test_a_resume_with_the_same_settings_changes_nothing():
    _, *before = trained(torch.optim.AdamW, cosine(10), 5, lr=1e-3)
    lr = before[0].param_groups[0]["lr"]
    optimizer, _, trainer, configured = resumed(before, torch.optim.AdamW, cosine(10), lr=1e-3)
    assert apply_configured(trainer, configured) == []
    assert optimizer.param_groups[0]["lr"] == lr, "bit for bit: a resume goes on exactly"


def test_a_plateaus_reductions_are_kept_and_its_settings_are_the_new_ones():
    def plateau(factor: float, patience: int):
        return lambda optimizer: ReduceLROnPlateau(optimizer, factor=factor, patience=patience)

    worse = [1.0, 2.0, 3.0]  # no improvement after the first: one reduction at patience 1
    _, *before = trained(torch.optim.SGD, plateau(0.5, 1), 3, worse, lr=0.1)
    assert before[0].param_groups[0]["lr"] == pytest.approx(0.05)
    counters = {k: before[1].state_dict()[k] for k in ("best", "num_bad_epochs", "last_epoch")}
    optimizer, schedule, trainer, configured = resumed(
        before, torch.optim.SGD, plateau(0.1, 4), lr=0.2
    )

    changes = apply_configured(trainer, configured)

    assert "scheduler.factor 0.5 -> 0.1" in changes and "scheduler.patience 1 -> 4" in changes
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.1), "0.2, reduced once by half"
    assert (schedule.factor, schedule.patience) == (0.1, 4)
    assert {k: schedule.state_dict()[k] for k in counters} == counters


def test_a_checkpoint_without_the_record_keeps_its_rate_and_says_so(caplog):
    _, *before = trained(torch.optim.SGD, lambda o: ReduceLROnPlateau(o), 1, [1.0], lr=0.1)
    del before[0].param_groups[0][CONFIGURED_LR]  # as written by an older version
    optimizer, _, trainer, configured = resumed(
        before, torch.optim.SGD, lambda o: ReduceLROnPlateau(o), lr=0.3
    )
    with caplog.at_level(logging.WARNING):
        apply_configured(trainer, configured)
    assert optimizer.param_groups[0]["lr"] == 0.1
    assert "no record of the learning rate" in caplog.text


def test_early_stoppings_new_patience_counts_on_from_the_validations_it_has_waited():
    before = EarlyStopping(monitor="val/mae", patience=5)
    before.wait_count, before.best_score = 3, torch.tensor(2.5)
    stopping = EarlyStopping(monitor="val/mae", patience=9)
    trainer = SimpleNamespace(
        optimizers=[], lr_scheduler_configs=[], early_stopping_callbacks=[stopping]
    )
    patience = configured_patience(trainer)
    stopping.load_state_dict(before.state_dict())
    configured = configured_settings(trainer, patience)
    assert stopping.patience == 5  # Lightning's restore

    assert apply_configured(trainer, configured) == ["early stopping's patience 5 -> 9"]
    assert (stopping.patience, stopping.wait_count, float(stopping.best_score)) == (9, 3, 2.5)
