"""Experiment loggers of ``conf/logger/``: Lightning's, with what they print made right
and one CSV log per run however often it restarts."""

from __future__ import annotations

import csv
import io
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import CSVLogger as LightningCSVLogger
from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from cloudlstm.engine.results import without_results
from cloudlstm.errors import UserError, wandb_error_reason

log = logging.getLogger(__name__)


class WandbLogger(LightningWandbLogger):
    """Lightning's W&B logger, without the ``anonymous`` argument it always hands to
    ``wandb.init``: recent W&B versions warn on every run that the setting has no
    effect, even when it is None; and without the test results' reserved keys
    (:mod:`cloudlstm.engine.results`), which the test report logs as tables."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        offline = kwargs.get("offline", False)
        if not isinstance(offline, bool):  # "no" or "maybe" would be true: offline in silence
            raise UserError(
                f"logger.wandb.offline={offline!r}: give true (log offline, the default) or "
                "false (log to the W&B server)."
            )
        if kwargs.get("save_dir") is not None:
            _check_save_dir(Path(str(kwargs["save_dir"])).expanduser())
        super().__init__(*args, **kwargs)
        if self._wandb_init.get("anonymous") is None:  # never asked for: not sent at all
            self._wandb_init.pop("anonymous", None)

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        super().log_metrics(without_results(metrics), step)

    @property
    def experiment(self) -> Any:
        """The W&B run, started on first use (Lightning's).

        Raises:
            UserError: W&B cannot start it: no API key for an online run, a server it
                cannot reach, a key it refuses. One line with W&B's reason and the way out.
                Or another W&B run is open in this process (:meth:`_refuse_a_run_in_progress`).
        """
        if self._experiment is None:
            self._refuse_a_run_in_progress()
        try:
            return super().experiment  # read at every log call: nothing more on this path
        except Exception as err:
            from pydantic import ValidationError
            from wandb.errors import Error as WandbError

            if isinstance(err, ValidationError):  # a setting of wandb.init it refuses
                raise UserError(_refused_setting(err)) from None
            if not isinstance(err, WandbError):
                raise
            reason = wandb_error_reason(err)
            way = (
                "log offline (logger.wandb.offline=true, the default) and upload the run "
                "later with `wandb sync <run dir>/wandb/offline-run-*`"
                if not self._offline
                else "run without W&B (logger=csv)"
            )
            raise UserError(
                f"logger=wandb: W&B could not start the run ({reason}): fix that, or {way}."
            ) from None

    def _refuse_a_run_in_progress(self) -> None:
        """Lightning's logger takes over a W&B run that is open in the process, as its own:
        this run's curves and tables would go into another run's folder and name, and its
        own folder would stay empty. (A notebook's ``wandb.init()``, or a job before in the
        same process that was never finished.)

        Raises:
            UserError: names the open run and how to close it.
        """
        import wandb

        run = wandb.run
        if run is None or run.id == self._wandb_init.get("id"):
            return
        raise UserError(
            f"logger=wandb: the W&B run {run.id} ({run.dir}) is still open in this process, "
            "and this run's logs would go into it: close it first (wandb.finish())."
        )


def _check_save_dir(folder: Path) -> None:
    """Refuse a ``logger.wandb.save_dir`` this process cannot write: W&B writes the run to
    a temporary folder instead, without a word, and the run directory has no ``wandb/``.

    Raises:
        UserError: naming the folder and why.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        why = err.strerror or str(err)
    else:
        if os.access(folder, os.W_OK | os.X_OK):
            return
        why = "no permission to write in it"
    raise UserError(
        f"logger.wandb.save_dir={folder} cannot be written ({why}), and W&B would put the run "
        "in a temporary folder instead: give a folder you can write (by default the run "
        "directory)."
    )


def _refused_setting(err: Any) -> str:
    """One line for the first setting W&B's settings model refuses (``resume=sometimes``),
    where pydantic's message spans lines and its traceback ended the run."""
    first = err.errors()[0]
    key = ".".join(str(part) for part in first.get("loc", ())) or "?"
    return (
        f"logger.wandb.{key}={first.get('input')!r}: W&B refuses it ({first.get('msg')}); "
        "correct it, or run without W&B (logger=csv)."
    )


def finish_wandb(loggers: list[Any], quietly: bool = False, exit_code: int | None = None) -> None:
    """Close the W&B run that a logger of ``loggers`` started, so that the next job in this
    process gets its own run; a run this process has open otherwise (a notebook's own) is
    left as it is. ``quietly``: a failure to close is logged, not raised; ``exit_code``:
    the run's, where it is not 0 (W&B shows the run as failed)."""
    for logger in loggers:
        # Lightning's logger keeps the run it started (or took over) in _experiment
        run = getattr(logger, "_experiment", None)
        if not isinstance(logger, LightningWandbLogger) or run is None:
            continue
        try:
            run.finish(exit_code=exit_code)
        except Exception as err:
            if not quietly:
                raise
            log.warning("Could not close the W&B run (%s: %s).", type(err).__name__, err)


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
        metrics_dict = without_results(metrics_dict)  # the test's return value, not curves
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
        numbered = _rows_of(complete, self.metrics_file_path)
        rows = [row for row_step, row in numbered if row_step < step]
        # a column none of the kept rows fills (a metric of a setting since changed) goes
        self.metrics_keys = sorted({k for row in rows for k, value in row.items() if value})
        with self._fs.open(self.metrics_file_path, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=self.metrics_keys)
            writer.writeheader()
            writer.writerows({key: row[key] for key in self.metrics_keys} for row in rows)


def _rows_of(text: str, path: str) -> list[tuple[float, dict[str, str]]]:
    """The rows of a log's complete lines, as they are, each after its step.

    Raises:
        UserError: a row whose cells do not match the header, or whose step is not a
            number. The logger writes neither, and a kill only cuts the last line, which
            has no line end and is not read; so the file was changed some other way, and
            guessing which of its rows to keep would rewrite the run's curves.
    """
    reader = csv.DictReader(io.StringIO(text))
    rows = []
    for row in reader:
        cells_match = None not in row and None not in row.values()
        step = _number(row.get("step")) if cells_match else None
        if step is None:
            raise UserError(
                f"{path}, line {reader.line_num}, is not a row this log can continue (its cells "
                "do not match the header, or its step is not a number): fix or delete that line, "
                "or move the file away to start a new log, and run again."
            )
        rows.append((step, row))
    return rows


def _number(text: str | None) -> float | None:
    """``text`` as a number; None for a missing, unreadable or NaN one."""
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


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
