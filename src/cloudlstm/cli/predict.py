"""Forecast entry point: a run directory and a long-format file -> a forecast file.

``predict.py`` at the repository root wraps :func:`main` with ``@hydra.main``
(``conf/predict.yaml``). Every mistake is a :class:`~cloudlstm.errors.UserError`, which
Hydra prints as one line.
"""

from __future__ import annotations

import importlib.util
from datetime import datetime
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from cloudlstm.data.sources.long_format import read_table
from cloudlstm.errors import UserError
from cloudlstm.forecast import Forecaster
from cloudlstm.forecast_input import user_errors

USAGE = "python predict.py run=<run dir> data.path=<history.csv> [ckpt=best] [out=forecast.csv]"
PARQUET = (".parquet", ".pq")


def main(cfg: DictConfig) -> Path:
    """Forecast the J steps after the last timestamp of ``data.path`` for every point in it.

    Writes ``<run>/predict/<time>/<out>`` (CSV, or Parquet by extension), prints its path
    and returns it.
    """
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise UserError(f"predict.py needs {', '.join(missing)}: `{USAGE}`.")
    name = Path(str(cfg.out)).name
    check_format(name)
    forecaster = Forecaster.load(cfg.run, ckpt=cfg.ckpt, device=cfg.get("device"))
    source = Path(str(cfg.data.path)).expanduser()
    forecast = forecaster.forecast(read_history(source), what=f"data.path={source}")
    folder = Path(cfg.run) / "predict" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
    folder.mkdir(parents=True)
    path = folder / name
    if path.suffix.lower() in PARQUET:
        forecast.to_parquet(path, index=False)
    else:
        forecast.to_csv(path, index=False)
    print(path)
    return path


def check_format(name: str) -> None:
    """Refuse an output name that is neither CSV nor Parquet, or Parquet without pyarrow."""
    suffixes = [s.lower() for s in Path(name).suffixes]
    if suffixes[-1:] and suffixes[-1] in PARQUET:
        if not any(importlib.util.find_spec(m) for m in ("pyarrow", "fastparquet")):
            raise UserError(f"out={name}: writing Parquet needs pyarrow (`pip install pyarrow`).")
    elif ".csv" not in suffixes:
        raise UserError(f"out={name}: name a .csv (.csv.gz, ...) or .parquet file.")


def read_history(path: Path) -> pd.DataFrame:
    """The long-format history file (CSV, compressed CSV or Parquet)."""
    if not path.is_file():
        raise UserError(f"data.path={path}: no such file (the history to forecast from).")
    try:
        with user_errors():
            return read_table(path, "the history file")
    except ImportError as err:  # Parquet without pyarrow
        raise UserError(str(err)) from None
