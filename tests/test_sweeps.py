"""Sweeps through real launchers and sweepers: submitit (local and SLURM) and Optuna."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import PYTHON, ROOT, TINY, subprocess_env

ONE_EPOCH = [
    *[a for a in TINY if not a.startswith(("trainer.max_epochs", "model.k="))],
    "trainer.max_epochs=1",
    "torch_threads=1",
    "logger=csv",
    "report.figures=false",
]


def train_py(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**subprocess_env(), **(env or {})}
    cmd = [*PYTHON, "train.py", *args, f"paths.data_dir={tmp_path / 'data'}"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # the joblib and SLURM launchers' tests cover the launch in processes
def test_local_submitit_sweep_runs_every_job_in_its_own_process(tmp_path):
    sweep = tmp_path / "sweep"
    proc = train_py(
        tmp_path,
        "-m",
        "hydra/launcher=local",
        "model.k=2,3",
        f"hydra.sweep.dir={sweep}",
        *ONE_EPOCH,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    pids, groups = set(), set()
    for job, k in (("0", 2), ("1", 3)):
        metrics = json.loads((sweep / job / "metrics.json").read_text())
        assert metrics["test"]["overall"]["mae"]["mean"] > 0
        assert f"-k{k}-" in metrics["run"]["name"] and metrics["run"]["name"].endswith("-s42")
        groups.add(metrics["run"]["group"])
        assert yaml.safe_load((sweep / job / "config.yaml").read_text())["model"]["k"] == k
        # submitit's own logs of the job: it ran as a separate process
        logs = list((sweep / ".submitit").rglob("*_log.out"))
        assert logs, "submitit wrote no job logs"
    for log in (sweep / ".submitit").rglob("*_log.err"):
        pids.add(log.parent.name)
    assert len(pids) == 2, "one submitit job per sweep job"
    (group,) = groups  # one sweep, one W&B group
    assert group == f"sweep-{sweep.parent.name}_{sweep.name}"


def fake_slurm(bin_dir: Path, record: Path) -> None:
    """``sbatch`` that records the script and prints a job id; ``sacct`` that says FAILED;
    ``srun``, which submitit looks for but which only the job script would run.

    There is no cluster here: this checks what would be submitted, not that it runs.
    """
    bin_dir.mkdir()
    scripts = {
        "sbatch": f'#!/bin/sh\ncat "$1" > {record}\necho "Submitted batch job 4242"\n',
        "sacct": "#!/bin/sh\necho 'JobID|State|NodeList'\n"
        + "".join(f"echo '4242_{i}|FAILED|n1'\n" for i in range(2)),
        "srun": "#!/bin/sh\nexit 1\n",
    }
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_slurm_launcher_submits_an_array_job_with_the_cluster_settings(tmp_path):
    record = tmp_path / "sbatch_script.sh"
    fake_slurm(tmp_path / "bin", record)
    proc = train_py(
        tmp_path,
        "-m",
        "hydra/launcher=slurm",
        "hydra.launcher.partition=gpu",
        "hydra.launcher.account=proj42",
        "hydra.launcher.timeout_min=30",
        "hydra.launcher.setup=[source /opt/venv/bin/activate]",
        "trainer=ddp",
        "trainer.devices=2",
        "model.k=2,3",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        *[a for a in ONE_EPOCH[:-3] if a != "trainer=cpu"],  # a later trainer= would win
        env={"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"},
    )
    script = record.read_text()
    lines = set(script.splitlines())
    for line in (
        "#SBATCH --partition=gpu",
        "#SBATCH --account=proj42",
        "#SBATCH --gpus-per-node=2",
        "#SBATCH --ntasks-per-node=2",  # one task per GPU, as trainer.devices
        "#SBATCH --nodes=1",
        "#SBATCH --time=30",
        "#SBATCH --array=0-1%2",  # two jobs, both at once
        "#SBATCH --requeue",
        "#SBATCH --signal=USR1@120",  # Lightning's auto-requeue signal
        "source /opt/venv/bin/activate",
    ):
        assert line in lines, (line, script)
    assert "submitit.core._submit" in script
    # the stand-in sacct reports the jobs FAILED: the sweep ends with an error, not a hang
    assert proc.returncode != 0


def bin_without_slurm(tmp_path: Path) -> Path:
    """/bin less SLURM's programs, which this machine may have (tests/test_slurm.py)."""
    folder = tmp_path / "bin_without_slurm"
    folder.mkdir()
    for tool in Path("/bin").iterdir():
        if tool.name not in ("sbatch", "srun"):
            (folder / tool.name).symlink_to(tool)
    return folder


def test_slurm_launcher_without_sbatch_is_one_clear_line(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    python_dir = str(Path(sys.executable).parent)
    proc = train_py(
        tmp_path,
        "-m",
        "hydra/launcher=slurm",
        "model.k=2,3",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        *ONE_EPOCH,
        env={"PATH": f"{empty}:{python_dir}:{bin_without_slurm(tmp_path)}"},
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    message = [line for line in proc.stderr.splitlines() if "sbatch" in line]
    assert len(message) == 1 and "hydra/launcher=local" in message[0], proc.stderr


def test_optuna_search_optimises_the_best_validation_mae(tmp_path):
    sweep = tmp_path / "optuna"
    proc = train_py(
        tmp_path,
        "hparams_search=optuna",
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.sampler.n_startup_trials=3",
        f"hydra.sweep.dir={sweep}",
        *ONE_EPOCH,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Hydra calls the comparison's callback after a search that ended well
    assert "| cloudlstm | synthetic |" in proc.stdout, proc.stdout[-3000:]
    result = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    trials = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit())
    assert [p.name for p in trials] == ["0", "1", "2"]
    val_best = [json.loads((p / "metrics.json").read_text())["val"]["val/mae_best"] for p in trials]
    test_mae = [
        json.loads((p / "metrics.json").read_text())["test"]["overall"]["mae"]["mean"]
        for p in trials
    ]
    # the objective is the best validation MAE in real units, never a test metric
    assert result["best_value"] == min(val_best)
    assert result["best_value"] not in test_mae


def test_objective_is_none_for_a_run_without_validation(tmp_path):
    """A run that never validated (limit_val_batches=0) has no objective, and no error."""
    from cloudlstm.cli.train import objective
    from tests.conftest import compose_train

    cfg = compose_train(tmp_path, [])
    assert objective(cfg, {"val": {}}) is None
    assert objective(cfg, {"val": {"val/mae_best": 2.5}}) == 2.5
