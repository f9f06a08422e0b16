"""Experiment loggers of ``conf/logger/``: Lightning's, with what they print made right
and one CSV log per run however often it restarts."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from lightning.pytorch.loggers import CSVLogger as LightningCSVLogger
from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment


class WandbLogger(LightningWandbLogger):
    """Lightning's W&B logger, without the ``anonymous`` argument it always hands to
    ``wandb.init``: recent W&B versions warn on every run that the setting has no
    effect, even when it is None."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self._wandb_init.get("anonymous") is None:  # never asked for: not sent at all
            self._wandb_init.pop("anonymous", None)


class _ContinuedCSV(ExperimentWriter):
    """Lightning's CSV writer that continues the ``metrics.csv`` it finds instead of
    deleting it. The first rows a restarted process logs, at step ``s``, replace the
    earlier rows of steps ``>= s``: the steps the killed process ran past its last
    checkpoint, which the restarted one runs again."""

    def __init__(self, log_dir: str) -> None:
        self._continuing = False
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:
        # called by the base __init__ in place of its deletion of the earlier file
        self._continuing = self._fs.isfile(self.metrics_file_path)

    def log_metrics(self, metrics_dict: dict[str, float], step: int | None = None) -> None:
        if self._continuing and step is not None:
            self._keep_rows_before(step)
            self._continuing = False
        super().log_metrics(metrics_dict, step)

    def _keep_rows_before(self, step: int) -> None:
        with self._fs.open(self.metrics_file_path, "r", newline="") as file:
            text = file.read()
        # a kill in the middle of a write leaves the last row without its line end; the
        # part written may still parse (a step cut from 13 to 1), so it goes unread
        complete = text[: text.rfind("\n") + 1]
        rows = [row for row in csv.DictReader(io.StringIO(complete)) if _step_of(row) < step]
        # a column none of the kept rows fills (a metric of a setting since changed) goes
        self.metrics_keys = sorted({k for row in rows for k, value in row.items() if value})
        with self._fs.open(self.metrics_file_path, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=self.metrics_keys)
            writer.writeheader()
            writer.writerows({key: row[key] for key in self.metrics_keys} for row in rows)


def _step_of(row: dict[str | None, Any]) -> float:
    """The row's step; infinity for a row whose step is unreadable or whose cells are
    missing or extra, which the restart drops with the steps it runs again."""
    if None in row or None in row.values():
        return math.inf
    try:
        return float(row["step"])
    except (KeyError, ValueError):
        return math.inf


class CSVLogger(LightningCSVLogger):
    """Lightning's CSV logger with one log per run: ``<save_dir>/<name>/version_0/metrics.csv``
    by default, continued by a restarted run (``resume=auto``) instead of a new
    ``version_N`` per process, so a run's curves are one file however often it was
    restarted. Rows of the steps a restart runs again are replaced, never doubled. A
    ``version`` of None gives Lightning's numbering back."""

    def __init__(self, *args: Any, version: int | str | None = 0, **kwargs: Any) -> None:
        super().__init__(*args, version=version, **kwargs)

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _ContinuedCSV(log_dir=self.log_dir)
        return self._experiment
