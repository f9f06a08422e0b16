"""The programs: ``cloudlstm-train``, ``cloudlstm-eval`` and ``cloudlstm-predict`` (console
scripts of the installed package), which ``train.py``, ``eval.py`` and ``predict.py`` of
the repository run too.

Each runs Hydra on the configs of :func:`cloudlstm.paths.config_dir` (the checkout's
``conf/`` or the packaged copy), so the programs work from any directory. Runs are written
under ``$PROJECT_ROOT/outputs`` (``paths.log_dir``): the repository's scripts set
PROJECT_ROOT to the repository, the installed programs to the working directory, unless
it is set already.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import hydra
from omegaconf import DictConfig

from cloudlstm.paths import config_dir


def train() -> None:
    """``cloudlstm-train [group=option ...] [key=value ...]``: train and test a model."""
    _run_hydra("train", _train)


def evaluate() -> None:
    """``cloudlstm-eval run=<run dir> [ckpt=best|last|<path>] [key=value ...]``: test a
    trained run again."""
    from cloudlstm.cli.evaluate import with_run_config
    from cloudlstm.errors import UserError

    try:
        sys.argv = with_run_config(sys.argv)
    except UserError as err:  # before Hydra, which would print it the same way
        sys.exit(str(err))
    _run_hydra("eval", _evaluate)


def predict() -> None:
    """``cloudlstm-predict run=<run dir> data.path=<file>``: forecast new data."""
    _run_hydra("predict", _predict)


# the process that runs Hydra: jobs of the basic launcher run in it, joblib's and
# submitit's in processes of their own
_HYDRA_PID: int | None = None


def _run_hydra(config_name: str, task: Callable[[DictConfig], Any]) -> None:
    global _HYDRA_PID
    _HYDRA_PID = os.getpid()
    os.environ.setdefault("PROJECT_ROOT", os.getcwd())
    main = hydra.main(version_base="1.3", config_path=str(config_dir()), config_name=config_name)
    main(task)()


def _train(cfg: DictConfig) -> float | None:
    from cloudlstm.cli import console
    from cloudlstm.cli.train import main
    from cloudlstm.errors import one_line_errors
    from cloudlstm.rundir.preemption import EXIT_CODE, RunInterrupted

    console.set_up(cfg)
    try:
        with one_line_errors():
            return main(cfg)
    except RunInterrupted:
        if os.getpid() != _HYDRA_PID:
            raise  # a job in its own process: the sweep reports it and fails
        # a run, or a job of the basic launcher's sweep, which stops with it: its line is
        # logged; SIGTERM's exit status, not Hydra's 1 of an error
        raise SystemExit(EXIT_CODE) from None


def _evaluate(cfg: DictConfig) -> None:
    from cloudlstm.cli import console
    from cloudlstm.cli.evaluate import evaluate
    from cloudlstm.errors import one_line_errors

    console.set_up(cfg)
    with one_line_errors():
        evaluate(cfg)


def _predict(cfg: DictConfig) -> None:
    from cloudlstm.cli.predict import main
    from cloudlstm.errors import one_line_errors

    with one_line_errors():
        main(cfg)
