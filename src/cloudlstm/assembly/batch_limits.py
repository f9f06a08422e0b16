"""``trainer.limit_<split>_batches`` checked against the data before anything is run.

Lightning takes ``limit_train_batches=0`` for a training of no step, after which the run
tests the untrained model and is written up as finished; ``limit_test_batches=0`` fails
only once training is over (``trainer.test() returned no test results``); and a fraction
that leaves less than one batch of a split is refused where that split first runs, after
the training for the test split, each with a traceback. Here each of them is one line
before the data's first batch, naming the value and what to give. Under DDP Lightning
takes a fraction of each process's batches, so a fraction is checked against the fewest
any process has. A validation limit of 0 stays allowed: no validation, which the run
warns of (it then tests the final weights).
So does a test part left empty on purpose (``data.test_fraction=0``) where the job tests:
it trained to the end and then failed with the same traceback.

``trainer.val_check_interval`` in steps is checked against an epoch too: where validation
also counts epochs (``trainer.check_val_every_n_epoch`` set, as under ``recipe=paper``),
Lightning refuses an interval longer than an epoch with a traceback when training starts.
So is ``trainer.accumulate_grad_batches``: Lightning steps the optimizer at an epoch's end
whatever it has accumulated, so a count above an epoch's batches would be run as fewer.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from omegaconf import DictConfig

from cloudlstm.assembly.compile import run_device
from cloudlstm.data.pipeline.splits import window_counts
from cloudlstm.engine.distributed import rank_shares
from cloudlstm.errors import UserError

log = logging.getLogger(__name__)

_INSTEAD = {
    "train": "train=false to test without training",
    "test": "test=false to train without testing",
}


def splits_run(cfg: DictConfig) -> list[str]:
    """The splits this job runs: train and val where it trains, test where it tests.
    An evaluation only tests, whatever the flags of the run's config it builds on say."""
    if _evaluates(cfg):
        return ["test"]
    splits = ["train", "val"] if cfg.get("train") else []
    return [*splits, "test"] if cfg.get("test") else splits


def _evaluates(cfg: DictConfig) -> bool:
    return cfg.get("task_name") == "eval"  # conf/eval.yaml


def check_batch_limits(cfg: DictConfig, windows: dict[str, int], batch_size: int) -> None:
    """Refuse a ``trainer.limit_<split>_batches`` that leaves a split this job runs without
    a batch (0 for training or testing; a fraction below one batch for any split).

    Args:
        cfg: the job's config (``trainer``, ``train``, ``test``).
        windows: split -> its windows (the data summary's ``windows``).
        batch_size: windows per batch.

    Raises:
        UserError: names the key, the split's batches and what to give instead.
    """
    trainer = cfg.get("trainer") or {}
    other_ways = not _evaluates(cfg)  # train.py may skip one; eval.py only tests
    if "test" in splits_run(cfg) and not windows.get("test", 0):
        raise UserError(_no_test_part(other_ways))
    world = processes(trainer)
    for split in splits_run(cfg):
        key = f"limit_{split}_batches"
        limit = trainer.get(key)
        batches = _batches_per_process(split, windows.get(split, 0), batch_size, world)
        problem = _problem(split, limit, batches, other_ways, world)
        if problem:
            raise UserError(f"trainer.{key}={limit}: {problem}.")


def _batches_per_process(split: str, windows: int, batch_size: int, world: int) -> int:
    """The batches of a split in the process with the fewest, of ``world`` processes:
    Lightning takes a fractional limit of each process's own batches, and refuses it in
    any process where it leaves none."""
    shares = rank_shares(split, windows, world) if world > 1 else [windows]
    return min(math.ceil(share / max(batch_size, 1)) for share in shares)


def check_validation_interval(cfg: DictConfig, windows: dict[str, int], batch_size: int) -> None:
    """Refuse a ``trainer.val_check_interval`` of more steps than an epoch's training batches
    on each process where ``trainer.check_val_every_n_epoch`` is set (validations at
    epochs' ends), as Lightning does when training starts, with a traceback.

    Raises:
        UserError: names both settings, the epoch's batches and the two ways out.
    """
    trainer = cfg.get("trainer") or {}
    interval, every = trainer.get("val_check_interval"), trainer.get("check_val_every_n_epoch")
    if "train" not in splits_run(cfg) or every is None:
        return
    if isinstance(interval, bool) or not isinstance(interval, int):
        return  # a fraction of an epoch, or Lightning's default (every epoch)
    batches = _train_batches(trainer, windows.get("train", 0), batch_size)
    if 0 < batches < interval:
        raise UserError(
            f"trainer.val_check_interval={interval} steps is longer than an epoch of training "
            f"({batches} batches per process), and trainer.check_val_every_n_epoch={every} "
            "validates at epochs' ends: give trainer.check_val_every_n_epoch=null to validate "
            f"every {interval} steps across epochs, or a trainer.val_check_interval of at most "
            f"{batches}."
        )


def check_accumulation(cfg: DictConfig, windows: dict[str, int], batch_size: int) -> None:
    """Refuse a ``trainer.accumulate_grad_batches`` above an epoch's training batches on
    each process.

    Why: Lightning steps the optimizer at each epoch's end over the batches accumulated so
    far, so ``accumulate_grad_batches=100`` over epochs of 14 batches would train with steps
    of 14 batches, not 100, and the validation interval (steps x 100 batches,
    :func:`~cloudlstm.assembly.build.validation_in_optimizer_steps`) would come 7 times
    later than the recipe's steps say, or never within the budget.

    Raises:
        UserError: names the value, the epoch's batches and the ways out.
    """
    trainer = cfg.get("trainer") or {}
    accumulate = trainer.get("accumulate_grad_batches")
    if "train" not in splits_run(cfg) or not _positive_int(accumulate):
        return  # other values are refused with the Trainer's (models/options.py)
    batches = _train_batches(trainer, windows.get("train", 0), batch_size)
    if 0 < batches < accumulate:
        raise UserError(
            f"trainer.accumulate_grad_batches={accumulate} is more than an epoch's training "
            f"batches ({batches} per process, of data.batch_size={batch_size}): Lightning "
            f"would step the optimizer at each epoch's end over {batches} batches, not "
            f"{accumulate}. Give trainer.accumulate_grad_batches of at most {batches}, or "
            "train on more data."
        )


def processes(trainer: Any) -> int:
    """The processes a training runs in, ``devices`` x ``num_nodes`` of the ``trainer``
    settings as the Trainer counts its devices (:func:`~cloudlstm.assembly.compile.run_device`:
    a list or ``"0,1"`` its length, ``"2"`` two, ``auto`` every visible GPU of a GPU run).
    Checked before (:func:`~cloudlstm.assembly.build.check_trainer_settings`): ``devices``
    names one or more, and Lightning refuses ``num_nodes`` below 1."""
    return run_device(trainer).devices


def _train_batches(trainer: Any, windows: int, batch_size: int) -> int:
    """The training batches of an epoch on each process, as Lightning counts them: the
    loader's, shared by the processes (``devices`` x ``num_nodes``), then
    ``limit_train_batches``."""
    world = processes(trainer)
    batches = math.ceil(math.ceil(windows / max(batch_size, 1)) / world)
    limit = trainer.get("limit_train_batches")
    if isinstance(limit, bool) or not isinstance(limit, int | float):
        return batches
    return min(batches, limit) if isinstance(limit, int) else int(batches * limit)


def _no_test_part(other_ways: bool) -> str:
    """The line for data without a test window (a zero ``data.test_fraction``)."""
    fix = "give the data a test part (data.test_fraction > 0, or data.split_times)"
    if other_ways:
        return (
            f"The data have no test part to test the run on: {fix}, or train without "
            "testing: test=false."
        )
    return f"The data have no test part to evaluate the run on: {fix}."


def _problem(split: str, limit: Any, batches: int, other_ways: bool, world: int = 1) -> str | None:
    if limit is None or isinstance(limit, bool) or not isinstance(limit, int | float):
        return None  # Lightning's default (every batch), or a value its own check refuses
    if limit == 0 and split in _INSTEAD:
        instead = f", or {_INSTEAD[split]}" if other_ways else ""
        return f"no {split} batch would run: leave it out for every batch{instead}"
    fraction = isinstance(limit, float) and 0 < limit < 1
    if fraction and batches > 0 and int(limit * batches) < 1:
        of = f"{batches} batch{'es' if batches > 1 else ''}"
        of += f" per process ({world} processes)" if world > 1 else ""
        return (
            f"less than one of the {split} split's {of}: give a fraction of at least "
            f"{1 / batches:.3g}, a whole number of batches, or leave it out for every batch"
        )
    return None


def warn_schedule_cut_short(cfg: DictConfig, windows: dict[str, int], batch_size: int) -> bool:
    """Warn where ``trainer.max_epochs`` ends a training run before ``trainer.max_steps``, the
    span of a schedule that decays the learning rate over it (``scheduler.total_steps``):
    the run would stop at a high rate, unlike the recipe's runs. Returns whether it warned.
    """
    scheduler, trainer = cfg.get("scheduler") or {}, cfg.get("trainer") or {}
    total, epochs = scheduler.get("total_steps"), trainer.get("max_epochs")
    trains = "train" in splits_run(cfg)
    # a fast dev run trains a batch or a few, whatever the epochs say: nothing to warn of
    dev_run = bool(trainer.get("fast_dev_run"))
    if not trains or dev_run or not _positive_int(total) or not _positive_int(epochs):
        return False
    batches = _train_batches(trainer, windows.get("train", 0), batch_size)
    steps = epochs * math.ceil(batches / max(1, int(trainer.get("accumulate_grad_batches") or 1)))
    if steps >= total:
        return False
    log.warning(
        "trainer.max_epochs=%d ends training after about %d steps, before trainer.max_steps=%d, "
        "over which the learning rate schedule decays: the run would stop at a high rate. Give "
        "the budget in steps (trainer.max_steps=%d) to decay within it.",
        epochs,
        steps,
        total,
        steps,
    )
    return True


def warn_batch_above_windows(cfg: DictConfig, windows: dict[str, int], batch_size: int) -> bool:
    """Warn where ``data.batch_size`` is more than the training windows of each process:
    the loader keeps its short last batch, so every step would train on a batch of all of
    them, fewer than asked. Returns whether it warned."""
    train = windows.get("train", 0)
    if "train" not in splits_run(cfg) or not _positive_int(batch_size) or train <= 0:
        return False
    world = processes(cfg.get("trainer") or {})
    each = math.ceil(train / world)
    if batch_size <= each:
        return False
    of = f" ({each} on each of {world} processes)" if world > 1 else ""
    log.warning(
        "data.batch_size=%d is more than the %d training windows%s: every step trains on one "
        "batch of %d, not %d. Give data.batch_size=%d or less, or train on more data.",
        batch_size,
        train,
        of,
        each,
        batch_size,
        each,
    )
    return True


def warn_no_validation_in_budget(cfg: DictConfig, windows: dict[str, int]) -> bool:
    """Warn where ``trainer.val_check_interval`` (steps, the recipe's) is more than
    ``trainer.max_steps``: no validation would run, so none chooses the checkpoint tested,
    early stopping never acts, and the run tests its last weights. Returns whether it
    warned (not where validation is off: no validation windows, ``limit_val_batches=0``)."""
    trainer = cfg.get("trainer") or {}
    interval, budget = trainer.get("val_check_interval"), trainer.get("max_steps")
    if "train" not in splits_run(cfg) or trainer.get("fast_dev_run"):
        return False
    if trainer.get("check_val_every_n_epoch") is not None or windows.get("val", 0) <= 0:
        return False  # validations at epochs' ends (recipe=paper), or no validation part
    if trainer.get("limit_val_batches") == 0 or not _positive_int(interval):
        return False
    if not _positive_int(budget) or interval <= budget:
        return False
    log.warning(
        "trainer.val_check_interval=%d steps is more than trainer.max_steps=%d: no validation "
        "would run, so none chooses the checkpoint tested, early stopping never acts, and the "
        "run tests its last weights. Give trainer.val_check_interval=%d or less to validate "
        "within the budget.",
        interval,
        budget,
        budget,
    )
    return True


# a part with fewer windows than this, which stride 1 would multiply, is warned of
FEW_WINDOWS = 10


def warn_few_windows(cfg: DictConfig, summary: dict[str, Any]) -> bool:
    """Warn where ``data.stride`` leaves a part this job runs fewer than
    :data:`FEW_WINDOWS` windows, of many more at stride 1 (``data.stride=1000``: one window
    a part): the scores, or the checkpoint's choice, would rest on those alone. Returns
    whether it warned."""
    stride = summary.get("stride") or 1
    if stride <= 1:
        return False
    try:
        every = window_counts(
            summary["window_bounds"], summary["history_steps"], summary["output_steps"], 1
        )
        windows = summary["windows"]
    except (KeyError, TypeError):  # a summary of another form
        return False
    few = [
        split
        for split in splits_run(cfg)
        if 0 < windows.get(split, 0) < FEW_WINDOWS and every.get(split, 0) >= 2 * windows[split]
    ]
    if not few:
        return False
    counts = " and ".join(f"{windows[s]} {s} window(s) (of {every[s]} at stride 1)" for s in few)
    log.warning(
        "data.stride=%d leaves %s: what this job measures there rests on these alone. Lower "
        "data.stride.",
        stride,
        counts,
    )
    return True


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
