"""``predict.py``'s faults of input and of the machine, each one line without a traceback,
and what it writes: a tiny CloudLSTM run on a long-format CSV (``data=points``) forecasts
histories written by each test."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from tests.conftest import ROOT, one_line, run_python
from tests.test_forecast import SPLIT, csv_run, long_table


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny CloudLSTM run on static points, its values and mask."""
    return csv_run(tmp_path_factory.mktemp("predict"))


def history(run) -> pd.DataFrame:
    """The rows of the 10 steps before SPLIT, every cell filled (6 points: 60 rows)."""
    _, values, observed = run
    return long_table(values, np.ones_like(observed), range(SPLIT - 10, SPLIT))


def predict(run, table: pd.DataFrame, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """``predict.py`` on ``table`` written as a CSV in ``tmp_path``."""
    data = tmp_path / "recent.csv"
    table.to_csv(data, index=False)
    return run_python(str(ROOT / "predict.py"), f"run={run[0]}", f"data.path={data}", *args)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here")
def test_a_device_this_machine_lacks_is_one_line(run, tmp_path):
    line = one_line(predict(run, history(run), tmp_path, "device=cuda"))
    assert line.startswith("device=cuda, but torch finds no GPU (torch ")
    assert line.endswith("or forecast on the CPU: device=cpu.")
    line = one_line(predict(run, history(run), tmp_path, "device=foo"))
    assert line.startswith("device=foo is no device to forecast on: give one of cpu, cuda, mps")
    assert "(this machine has cpu" in line
