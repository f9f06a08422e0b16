"""What ``eval.py`` reads from its command line before Hydra starts: the run directory
(``run=``), put on Hydra's search path, and the help without a run.

Kept apart from :mod:`cloudlstm.cli.evaluate`, which imports Lightning: a missing or wrong
``run=`` and ``--help`` are answered at once.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from cloudlstm.cli.group_choices import group_choices
from cloudlstm.cli.invoked import command
from cloudlstm.cli.override_text import as_override, hydra_quoted, override_text
from cloudlstm.errors import UserError
from cloudlstm.rundir.layout import check_run_dir, read_run_config

HELP_FLAGS = ("--help", "-h", "--hydra-help")


def usage() -> str:
    """The command line, as the user runs the program."""
    return f"{command('eval')} run=<run dir> [ckpt=best|last|<path>] [key=value ...]"


def help_header() -> str:
    """What --help without run= says first: the config it shows is eval.yaml's alone."""
    return (
        f"Usage: {usage()}\n"
        "The base of the config is the run's own config.yaml (written by train.py): every key "
        f"of `{command('train')} --help` is overridden as there. With run=<run dir>, --help "
        "shows that run's config below.\n"
    )


def wants_help(argv: list[str]) -> bool:
    """Whether ``argv`` asks for the help without a ``run=``: it is shown without a run."""
    args = argv[1:]
    return any(a in HELP_FLAGS for a in args) and not any(a.startswith("run=") for a in args)


def with_run_config(argv: list[str], stand_in: Path | None = None) -> list[str]:
    """``argv`` plus the override that puts the directory of its ``run=<dir>`` on Hydra's
    search path, where ``conf/eval.yaml`` finds the run's ``config.yaml``, and with ``run=``
    quoted for Hydra where its grammar would not read the folder (``run=/data/dü``).

    Idempotent: DDP starts the other ranks with the argv already extended. With
    ``stand_in``, a folder with an empty ``config.yaml``, the help (:func:`wants_help`) is
    composed on it: Hydra composes the config to show the help.

    Raises:
        UserError: ``run=`` is missing, or names no run directory.
    """
    runs = _run_folders(argv)
    if not runs:
        if stand_in is not None and wants_help(argv):
            return [*argv, _searchpath(stand_in)]
        raise UserError(f"eval.py needs the run directory: `{usage()}`.")
    searchpath = _searchpath(check_run_dir(runs[-1]).resolve())
    quoted = [as_override("run", override_text(a)) if a.startswith("run=") else a for a in argv]
    return quoted if searchpath in quoted else [*quoted, searchpath]


def _run_folders(argv: list[str]) -> list[str]:
    """The folders ``argv``'s ``run=`` arguments name, in order."""
    return [override_text(arg) for arg in argv[1:] if arg.startswith("run=")]


# The config groups eval.py takes: another trainer runs the same test (trainer=cpu for a
# run trained on GPUs); hydra/* choose how Hydra itself runs.
EVAL_GROUPS = ("trainer", "hydra")


def refuse_group_choices(argv: list[str]) -> None:
    """Refuse, in one line, an override choosing another option of a train.py config group
    (:mod:`~cloudlstm.cli.group_choices`): the run's config.yaml holds what trained the
    checkpoint.

    Raises:
        UserError: naming the override and what eval.py takes instead.
    """
    for arg, group in group_choices(argv, keep=EVAL_GROUPS):
        fix = (
            f"change single keys instead ({group}.<key>=...), or train a run with {arg}"
            if group in ("model", "data")
            else f"{group}=<option> is train.py's"
        )
        raise UserError(
            f"eval.py {arg}: eval.py tests the checkpoint as the run's config.yaml set it up "
            f"and, of the config groups, takes trainer=<option> alone; {fix}."
        )


# Settings of training alone (or of prefixes of keys): an evaluation builds the run's data
# and model and tests its checkpoint, and never optimises, validates or selects, so a value
# given here would change nothing but the evaluation's config, which compare then shows
TRAINING_SETTINGS = (
    "optimizer", "scheduler", "recipe_name", "monitor", "optimized_metric",
    # the callbacks that checkpoint, stop, average or log training (not the console's)
    "callbacks.model_checkpoint", "callbacks.last_checkpoint", "callbacks.step_checkpoint",
    "callbacks.final_checkpoint", "callbacks.sigterm_checkpoint", "callbacks.early_stopping",
    "callbacks.lr_monitor", "callbacks.ema_weights", "callbacks.rng_state",
    "resume", "allow_changes", "train", "test", "ckpt_path",
    "trainer.max_steps", "trainer.max_epochs", "trainer.min_steps", "trainer.min_epochs",
    "trainer.max_time", "trainer.val_check_interval", "trainer.check_val_every_n_epoch",
    "trainer.gradient_clip_val", "trainer.gradient_clip_algorithm",
    "trainer.accumulate_grad_batches", "trainer.limit_train_batches",
    "trainer.limit_val_batches", "module.diverge_factor",
)  # fmt: skip


def refuse_training_settings(argv: list[str]) -> None:
    """Refuse, in one line, an override of a setting of training alone
    (:data:`TRAINING_SETTINGS`): eval.py would take it without a word and use none of it.

    Raises:
        UserError: naming the override and the ways out.
    """
    for arg in argv[1:]:
        key, sep, _ = arg.lstrip("+~").partition("=")
        if arg.startswith("-") or not sep:
            continue
        if any(key == k or key.startswith(f"{k}.") for k in TRAINING_SETTINGS):
            raise UserError(
                f"eval.py {arg}: {key} takes part in training alone, and eval.py tests the "
                "run's checkpoint without training: leave it out, or train a run with it."
            )


def run_data_keys(argv: list[str]) -> set[str]:
    """The keys at the top of the ``data`` node of the config of ``argv``'s ``run=``, which
    an override of ``eval.py`` may name (an older run's may hold its source's keys there).

    Raises:
        UserError: ``run=`` is missing, or names no run directory.
    """
    runs = _run_folders(argv)
    if not runs:
        raise UserError(f"eval.py needs the run directory: `{usage()}`.")
    data = read_run_config(check_run_dir(runs[-1])).get("data")
    return {str(key) for key in data} if isinstance(data, DictConfig) else set()


def _searchpath(folder: Path) -> str:
    """The override that puts ``folder`` on Hydra's search path."""
    # quoted, so that any character of the path survives Hydra's override grammar
    return f"hydra.searchpath=[{hydra_quoted(f'file://{folder}')}]"
