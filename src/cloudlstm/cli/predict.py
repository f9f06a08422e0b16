"""Forecast entry point: a run directory and a long-format file -> a forecast file.

``predict.py`` and ``cloudlstm-predict`` run :func:`main` through Hydra
(:mod:`cloudlstm.cli.scripts`, ``conf/predict.yaml``). Every mistake is a
:class:`~cloudlstm.errors.UserError`, which Hydra prints as one line.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from cloudlstm.assembly.build import check_process_settings, set_torch_threads
from cloudlstm.assembly.known_keys import check_added_top_level_keys
from cloudlstm.cli.group_choices import group_choices
from cloudlstm.cli.invoked import command
from cloudlstm.cli.sigterm_at_start import BEFORE_FORECASTING, line_by_file, stops_now_say
from cloudlstm.data.pipeline.forecast_input import TimeReading, user_errors
from cloudlstm.data.sources.long_format import dataset_parts
from cloudlstm.data.sources.tables import file_row_names, read_table
from cloudlstm.data.sources.times import SOURCE_OPTIONS, check_time_reading
from cloudlstm.errors import UserError, replacing, why_not_written
from cloudlstm.forecast import Forecaster
from cloudlstm.paths import config_dir
from cloudlstm.rundir.layout import path_option, read_run_config

PARQUET = (".parquet", ".pq")
STDOUT = "-"  # out=-: the forecast as CSV on standard output, for a pipe
TAKES = (
    "predict.py forecasts with the run's model and data settings as its checkpoint holds "
    "them (missing value, ...), and takes run, ckpt, out, device, torch_threads, data.path "
    "(or data.source.path), data.source.bad_values, data.source.time_format and "
    "data.source.time_unit alone"
)


def refuse_unread_overrides(argv: list[str]) -> None:
    """Refuse an override choosing an option of a train.py config group (``model=``,
    ``+data=beijing``, :mod:`~cloudlstm.cli.group_choices`) or setting a key that
    ``conf/predict.yaml`` lacks (``model.k=5``, which Hydra would call a config without a
    setting ``model``), in one line, before Hydra composes it.

    Raises:
        UserError: naming the override and what predict.py takes.
    """
    for arg, _ in group_choices(argv, keep=("hydra",)):
        raise UserError(f"predict.py {arg}: {TAKES}.")
    declared = OmegaConf.load(config_dir() / "predict.yaml")
    for arg in argv[1:]:
        key, sep, _ = arg.lstrip("+~").partition("=")
        if arg.startswith("-") or not sep or key.split(".")[0] == "hydra" or "/" in key:
            continue
        if arg.startswith("+") and "." not in key:
            continue  # check_added_top_level_keys names the nearest setting
        if not _declares(declared, key.split(".")):
            # Hydra would say the config has no setting of its first part (model)
            raise UserError(f"predict.py {arg}: nothing reads it; {TAKES}.")


def _declares(node: Any, parts: list[str]) -> bool:
    """Whether the config ``node`` has the dotted key ``parts`` (one set to ``???`` too)."""
    for part in parts:
        if not isinstance(node, DictConfig) or part not in set(node.keys()):
            return False
        node = node._get_node(part)
    return True


def check_settings(cfg: DictConfig) -> None:
    """Refuse a setting that ``conf/predict.yaml`` does not have (``+data.source.step=5min``):
    nothing would read it.

    Raises:
        UserError: naming the first such setting and what predict.py takes.
    """
    declared = OmegaConf.load(config_dir() / "predict.yaml")
    extra = _extra_keys(cfg, declared, "")
    if extra:
        raise UserError(f"predict.py {extra[0]}: nothing reads it; {TAKES}.")


def _extra_keys(node: DictConfig, declared: DictConfig, path: str) -> list[str]:
    """The keys of ``node`` (``hydra`` left out) that ``declared`` does not have."""
    extra = []
    known_keys = set(declared.keys())  # not `key in declared`: False for a key set to ???
    for key in node:
        where = f"{path}{key}"
        if where in ("hydra", "defaults"):
            continue
        if key not in known_keys:
            extra.append(where)
            continue
        child, known = node._get_node(key), declared._get_node(key)
        if isinstance(child, DictConfig) and isinstance(known, DictConfig):
            extra += _extra_keys(child, known, f"{where}.")
    return extra


def main(cfg: DictConfig) -> Path | None:
    """Forecast the J steps after the last timestamp of ``data.path`` (or
    ``data.source.path``, as ``train.py`` names it) for every point in it.

    Writes the forecast to :func:`output_path` (CSV, or Parquet by extension), prints its
    path and returns it; with ``out=-``, prints the forecast as CSV alone (the log goes to
    standard error) and returns None.
    """
    check_added_top_level_keys(cfg)  # the nearest setting named
    check_settings(cfg)
    key, given = history_key(cfg)
    missing = sorted({*OmegaConf.missing_keys(cfg), *(["data.path"] if given is None else [])})
    if missing:
        usage = (
            f"{command('predict')} run=<run dir> data.path=<history.csv> [ckpt=best] "
            "[out=forecast.csv]"
        )
        raise UserError(f"predict.py needs {', '.join(missing)}: `{usage}`.")
    check_process_settings(cfg)
    set_torch_threads(cfg)
    out = str(cfg.out)
    if out == STDOUT:
        with _output_to_stderr() as table_out:  # standard output carries the table alone
            forecast = _forecast(cfg, key, given)
        stops_now_say(
            "while writing the forecast to standard output, which may hold part of it: run the "
            "same command again."
        )
        forecast.to_csv(table_out, index=False)  # a reader may leave: scripts.predict
        stops_now_say("after writing the forecast to standard output.")
        return None
    check_format(out)
    run = Path(path_option(cfg.run, "run", "<run dir>"))
    path = output_path(out, run)
    check_not_an_input(path, out, {key: given, "the run's data.source.path": _trained_on(run)})
    written = f"after writing the forecast: {path} holds it."
    stops_now_say(line_by_file(path, written, BEFORE_FORECASTING))
    forecast = _forecast(cfg, key, given)
    write_forecast(forecast, path, out)
    print(path)
    return path


def _forecast(cfg: DictConfig, key: str, given: str) -> pd.DataFrame:
    """The forecast of the run's model from the history file ``given`` as ``key``."""
    forecaster = Forecaster.load(cfg.run, ckpt=cfg.ckpt, device=cfg.get("device"))
    source = Path(str(given)).expanduser()
    options = cfg.data.get("source") or {}
    bad_values = str(options.get("bad_values") or "error")
    reading = TimeReading(
        *check_time_reading(options.get("time_format"), options.get("time_unit")),
        options=SOURCE_OPTIONS,
    )
    history = read_history(source, key, forecaster.info.id_col)
    # a row named as the user finds it in the file: a CSV's line, a Parquet file's data row
    rows = file_row_names(source, None)
    return forecaster.forecast(history, f"{key}={source}", bad_values, reading, row_names=rows)


def write_forecast(forecast: pd.DataFrame, path: Path, out: str) -> None:
    """Write ``forecast`` to ``path`` (Parquet or CSV by its suffix), its folders made.

    The file is written under its own name in a new hidden folder beside ``path`` (so the
    format, compression and a zip's member name are those of ``path``), then renamed over
    ``path`` (:func:`~cloudlstm.errors.replacing`): a write that fails leaves no part of a
    file, and an earlier forecast there as it was.

    Raises:
        UserError: the file cannot be written (``out=`` as given named in the message), or
            the disk is full (:class:`~cloudlstm.errors.OutOfSpaceError`).
    """
    try:
        with replacing(path) as part:
            if path.suffix.lower() in PARQUET:
                forecast.to_parquet(part, index=False)
            else:
                forecast.to_csv(part, index=False)
    except OSError as err:
        reason = why_not_written(path.parent, err)
        raise UserError(
            f"out={out}: cannot write {path} ({reason}): name a file in a folder you can write to."
        ) from None


@contextmanager
def _output_to_stderr() -> Iterator[TextIO]:
    """Within the block, what would go to standard output (the log's handlers there, as
    predict.py logs, and any print) goes to standard error; yields standard output."""
    table_out = sys.stdout
    moved = [
        handler
        for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
        for handler in getattr(logger, "handlers", [])
        if isinstance(handler, logging.StreamHandler) and handler.stream is table_out
    ]
    for handler in moved:
        handler.setStream(sys.stderr)
    try:
        with redirect_stdout(sys.stderr):
            yield table_out
    finally:
        for handler in moved:
            handler.setStream(table_out)


def history_key(cfg: DictConfig) -> tuple[str, str | None]:
    """Which key names the history file, and the file: ``data.path``, or
    ``data.source.path`` as ``train.py`` takes it for ``data=points`` (None: neither, or
    only empty values).

    Raises:
        UserError: both are given, naming different files.
    """
    data = cfg.get("data") or {}
    source = data.get("source") or {}
    named = (("data.path", data.get("path")), ("data.source.path", source.get("path")))
    # an empty value (data.path=) names no file, not the current folder
    given = {key: str(value) for key, value in named if value is not None and str(value).strip()}
    if len(set(given.values())) > 1:
        raise UserError(
            "data.path and data.source.path name different files "
            f"({given['data.path']}, {given['data.source.path']}): give one of them."
        )
    key = next(iter(given), "data.path")
    return key, given.get(key)


def output_path(out: str, run: Path) -> Path:
    """Where ``out=`` writes: a path with a folder (``/tmp/f.csv``, ``results/f.csv``,
    ``./f.csv``, ``~/f.csv``) is that file, relative to the working directory; a bare file
    name goes into a new folder of the run, ``<run>/predict/<time>/<out>``."""
    if os.sep in out or "/" in out or out.startswith("~"):
        return Path(out).expanduser().absolute()
    return run / "predict" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f") / out


def check_not_an_input(path: Path, out: str, inputs: dict[str, str | None]) -> None:
    """Refuse an ``out=`` that is one of the ``inputs`` (what names them: their paths): the
    forecast would be written over the readings it was made from, or over the run's
    training data.

    Raises:
        UserError: naming the input and the way out.
    """
    for name, given in inputs.items():
        if given is None:
            continue
        source = Path(given).expanduser()
        if source.exists() and path.exists() and os.path.samefile(source, path):
            raise UserError(
                f"out={out} is {name} ({given}): the forecast would be written over it. Name "
                "another file."
            )


def _trained_on(run: Path) -> str | None:
    """The file the run trained on (its ``data.source.path``), where its config names one."""
    try:
        config = read_run_config(run)
    except UserError:
        return None  # read (and refused in its words) where the forecast loads the run
    path = OmegaConf.select(config, "data.source.path", throw_on_resolution_failure=False)
    return path if isinstance(path, str) else None


def check_format(out: str) -> None:
    """Refuse an ``out=`` that is neither CSV nor Parquet, or Parquet without pyarrow."""
    suffixes = [s.lower() for s in Path(out).suffixes]
    if suffixes[-1:] and suffixes[-1] in PARQUET:
        if not any(importlib.util.find_spec(m) for m in ("pyarrow", "fastparquet")):
            raise UserError(f"out={out}: writing Parquet needs pyarrow (`pip install pyarrow`).")
    elif ".csv" not in suffixes:
        raise UserError(f"out={out}: name a .csv (.csv.gz, ...) or .parquet file.")


def read_history(path: Path, key: str = "data.path", id_col: str = "id") -> pd.DataFrame:
    """The long-format history file (CSV, compressed CSV, Parquet, or a Parquet dataset
    folder), given as ``key``, its point ids (``id_col``) read as text, as training read
    them; a named index (times written as a Parquet file's index) is the forecaster's to
    read (:func:`~cloudlstm.data.pipeline.wide_history.long_history`)."""
    if path.is_dir():
        dataset_parts(path, key)  # or one line: the folder is no Parquet dataset
    elif not path.is_file():
        raise UserError(f"{key}={path}: no such file (the history to forecast from).")
    try:
        with user_errors():
            return read_table(path, "the history file", text_cols=[id_col], dtype={id_col: str})
    except ImportError as err:  # Parquet without pyarrow
        raise UserError(str(err)) from None
