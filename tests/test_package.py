"""The package installs anywhere: a wheel carries the configs and the programs, and they
run from a directory outside the checkout, writing runs under that directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import cloudlstm
from tests.conftest import ROOT, TINY

# What a wheel is built from (a copy: building in the checkout would leave build/ there)
SOURCES = ("pyproject.toml", "README.md", "conf", "docs/paper", "src")
PROGRAMS = ("train", "eval", "predict", "compare", "models")
# where an interpreter finds the package, its configs and the paper's tables
WHERE = "import cloudlstm.paths as p; print(p.__file__, p.config_dir(), p.paper_dir())"


def test_version_config_dir_and_paper_tables_of_the_checkout():
    from cloudlstm.paths import config_dir, paper_dir

    assert cloudlstm.__version__ and cloudlstm.__version__ != "0+unknown"
    assert config_dir() == ROOT / "conf"
    assert (ROOT / "src" / "cloudlstm" / "conf").resolve() == ROOT / "conf"  # the links
    assert paper_dir() == ROOT / "docs" / "paper"
    tables = ROOT / "src" / "cloudlstm" / "compare" / "paper_tables"
    assert tables.resolve() == paper_dir()


def test_torch_is_a_range_not_a_pin():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    torch = [d for d in project["dependencies"] if d.startswith("torch") and "metrics" not in d]
    assert torch == ["torch>=2.4"]
    assert {f"cloudlstm-{p}" for p in PROGRAMS} == set(project["scripts"])


def run(cmd: list[str | Path], cwd: Path, timeout: int = 300) -> str:
    """stdout of ``cmd``, which must succeed, in an environment without PROJECT_ROOT."""
    env = {k: v for k, v in os.environ.items() if k not in ("PROJECT_ROOT", "WANDB_SERVICE")}
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{cmd}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def build_wheel(tmp_path: Path) -> Path:
    """The wheel of a copy of the checkout (the conf link copied as a link)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
        if path.is_dir():
            shutil.copytree(path, source / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", "wheels", source], tmp_path)
    (wheel,) = (tmp_path / "wheels").glob("cloudlstm-*.whl")
    return wheel


def fresh_venv(tmp_path: Path, wheel: Path) -> Path:
    """A new venv with the wheel installed and this environment's packages (torch, ...)
    behind it; returns its bin/ folder.

    A venv made from this interpreter would see the base Python's site-packages, not this
    environment's, so those are added by a .pth line, which (unlike a site directory) does
    not run their own .pth files: the editable install of the checkout stays out.
    """
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], tmp_path)
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    (site / "site-packages" / "outer_environment.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", python]
    run([*pip, "install", "-q", "--no-deps", wheel], tmp_path)
    return venv / "bin"


@pytest.mark.slow  # builds a wheel into a new virtual environment: about 30 s
def test_wheel_programs_run_outside_the_checkout(tmp_path):
    wheel = build_wheel(tmp_path)
    bin_dir = fresh_venv(tmp_path, wheel)
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = run([bin_dir / "python", "-c", WHERE], work).split()
    site = str(bin_dir.parent / "lib")
    assert all(w.startswith(site) for w in where)  # the wheel, not the checkout
    assert (Path(where[1]) / "train.yaml").is_file()
    assert {p.name for p in Path(where[2]).glob("*.csv")} == {
        p.name for p in (ROOT / "docs" / "paper").glob("*.csv")
    }
    assert all((bin_dir / f"cloudlstm-{p}").is_file() for p in PROGRAMS)

    assert run([bin_dir / "cloudlstm-train", "--cfg", "job"], work).startswith("task_name: train")
    csv = work / "stream.csv"
    long_table(160, 12).to_csv(csv, index=False)
    tiny = [
        o
        for o in TINY
        if not o.startswith(("trainer.max_epochs", "trainer.limit_train", "data.source."))
    ]
    run(
        [
            bin_dir / "cloudlstm-train",
            "experiment=demo",
            "data=points",
            f"data.source.path={csv}",
            *tiny,
            "trainer.max_steps=3",
            "trainer.val_check_interval=3",
            "scheduler.warmup_steps=1",
            "logger=none",
            "print_config=false",
            "report.figures=false",
        ],
        work,
    )
    (metrics,) = (work / "outputs" / "runs").glob("*/*/metrics.json")
    trained = metrics.parent
    run([bin_dir / "cloudlstm-eval", f"run={trained}", "report.figures=false"], work)
    assert len(list(trained.glob("eval/*/metrics.json"))) == 1
    run([bin_dir / "cloudlstm-predict", f"run={trained}", f"data.path={csv}", "out=./f.csv"], work)
    forecast = (work / "f.csv").read_text().splitlines()
    assert len(forecast) == 1 + 3 * 12  # a header, then J = 3 steps x 12 points
    table = run([bin_dir / "cloudlstm-compare", work / "outputs"], work)
    assert table.startswith("| model | data |") and "| cloudlstm | points |" in table


def long_table(steps: int, points: int) -> pd.DataFrame:
    """A long-format history: hourly rows of ``points`` points at fixed positions, two
    channels of smooth signals."""
    rng = np.random.default_rng(0)
    xy = rng.random((points, 2))
    t = np.arange(steps)[:, None]
    phase = rng.random(points)[None, :] * 6.28
    return pd.DataFrame(
        {
            "timestamp": np.repeat(pd.date_range("2024-01-01", periods=steps, freq="h"), points),
            "id": np.tile([f"p{i}" for i in range(points)], steps),
            "x": np.tile(xy[:, 0], steps),
            "y": np.tile(xy[:, 1], steps),
            "pm25": (np.sin(0.3 * t + phase) + 2).ravel(),
            "no2": (np.cos(0.2 * t + phase) + 2).ravel(),
        }
    )
