"""What ``hydra/launcher=slurm`` asks SLURM for a multi-node DDP job, without a cluster: the
``sbatch`` script submitit writes, recorded by a stand-in ``sbatch``.

The job itself, a DDP job of two SLURM tasks on the real one-node cluster:
``tests/test_slurm.py``; two nodes of one process each: ``tests/test_ddp_nodes.py``.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, subprocess_env
from tests.test_sweeps import ONE_EPOCH

# the job without its trainer (each case names its own)
JOB = [a for a in ONE_EPOCH if not a.startswith("trainer=")]


def submit(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, str | None]:
    """``python train.py -m hydra/launcher=slurm ...`` with an ``sbatch`` that records the
    script and then fails (so that the sweep ends at once); the command and the script."""
    bin_dir, record = tmp_path / "bin", tmp_path / "sbatch_script.sh"
    bin_dir.mkdir()
    for name, text in {
        "sbatch": f'#!/bin/sh\ncat "$1" > {record}\necho "sbatch: error: recorded" >&2\nexit 1\n',
        "srun": "#!/bin/sh\nexit 1\n",
    }.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755 | stat.S_IEXEC)
    cmd = [
        sys.executable, "train.py", "-m", "hydra/launcher=slurm", *JOB, *args,
        f"hydra.sweep.dir={tmp_path / 'sweep'}", f"paths.data_dir={tmp_path / 'data'}",
    ]  # fmt: skip
    env = {**subprocess_env(), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return proc, record.read_text() if record.is_file() else None


def sbatch_options(script: str) -> dict[str, str]:
    """``#SBATCH --key=value`` lines as {key: value}."""
    lines = [x[len("#SBATCH --") :] for x in script.splitlines() if x.startswith("#SBATCH --")]
    return dict(line.partition("=")[::2] for line in lines)


@pytest.mark.parametrize(
    ("trainer", "expected"),
    [
        # 2 nodes x 4 GPUs: a task per GPU, the layout Lightning's SLURM environment reads
        (
            ["trainer=ddp", "trainer.devices=4", "trainer.num_nodes=2"],
            {"nodes": "2", "ntasks-per-node": "4", "gpus-per-node": "4"},
        ),
        # 2 nodes x 2 CPU processes: tasks without GPUs
        (
            ["trainer=ddp_cpu", "trainer.num_nodes=2"],
            {"nodes": "2", "ntasks-per-node": "2", "gpus-per-node": None},
        ),
        # one CPU process: one task, no GPU asked for
        (["trainer=cpu"], {"nodes": "1", "ntasks-per-node": "1", "gpus-per-node": None}),
    ],
)
def test_a_multi_node_job_asks_for_its_nodes_tasks_and_gpus(tmp_path, trainer, expected):
    proc, script = submit(tmp_path, *trainer, "hydra.launcher.cpus_per_task=4")
    assert script is not None, proc.stderr[-3000:]
    options = sbatch_options(script)
    for key, value in expected.items():
        assert options.get(key) == value, (key, script)
    assert options["cpus-per-task"] == "4"
    assert options["requeue"] == "" and options["signal"] == "USR1@120"
    # one srun, which starts ntasks-per-node tasks on each node, every one the same job
    (srun,) = [x for x in script.splitlines() if x.startswith("srun ")]
    assert "-m submitit.core._submit" in srun and "--ntasks" not in srun
    assert proc.returncode != 0  # the stand-in sbatch fails: nothing runs


@pytest.mark.parametrize("sweep", ["trainer.num_nodes=1,2", "trainer=cpu,ddp_cpu"])
def test_a_sweep_over_the_allocation_is_refused_in_one_line(tmp_path, sweep):
    """One array job has one allocation: a job of another size would get the wrong one."""
    proc, script = submit(tmp_path, "trainer=ddp_cpu", sweep)
    assert script is None  # nothing submitted
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = [x for x in proc.stderr.splitlines() if "hydra/launcher=slurm" in x]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert sweep.split("=")[0] in lines[0] and "one sweep per value" in lines[0]


def test_device_indices_ask_slurm_for_their_number(tmp_path):
    """``trainer.devices="0,1"`` are Lightning's device indices: SLURM is asked for 2."""
    proc, script = submit(tmp_path, "trainer=ddp", "trainer.devices='0,1'")
    assert script is not None, proc.stderr[-3000:]
    options = sbatch_options(script)
    assert (options["gpus-per-node"], options["ntasks-per-node"]) == ("2", "2")


@pytest.mark.parametrize("devices", ["auto", "-1"])
def test_every_gpu_of_the_node_is_refused_in_one_line(tmp_path, devices):
    """SLURM must be told how many GPUs per node before the job starts; it was given
    ``--gpus-per-node=auto`` (or -1), which sbatch refuses, after a traceback."""
    proc, script = submit(tmp_path, "trainer=ddp", f"trainer.devices={devices}")
    assert script is None  # nothing submitted
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"trainer.devices={devices} takes every GPU of the node it runs on, but "
        "hydra/launcher=slurm must ask SLURM for a number of GPUs (and tasks) per node "
        "before the job starts: give it, e.g. trainer.devices=4 (or trainer=cpu for CPU "
        "tasks)."
    ], proc.stderr[-3000:]


@pytest.mark.parametrize(
    ("trainer", "line"),
    [
        # the default trainer: auto, which asked for a GPU whatever the node would pick
        (
            [],
            "trainer.accelerator=auto, which picks a GPU or the CPU on the node that runs the "
            "job, but hydra/launcher=slurm must ask SLURM for GPUs, or none, before the job "
            "starts: give trainer=gpu (trainer.devices: the GPUs per node) or trainer=cpu "
            "(trainer.devices: the CPU tasks per node).",
        ),
        # asked for a GPU too, for a Trainer that refuses the name
        (
            ["trainer=cpu", "trainer.accelerator=CPU"],
            "trainer.accelerator=CPU: no accelerator Lightning takes (it reads the names in "
            "lower case): give one of auto, cpu, gpu, cuda, mps, tpu, e.g. trainer=cpu or "
            "trainer=gpu.",
        ),
        # went to sbatch as --nodes=0, then an IndexError traceback of submitit's
        (
            ["trainer=cpu", "trainer.num_nodes=0"],
            "trainer.num_nodes=0: no node to run on: give a whole number of nodes >= 1, e.g. "
            "trainer.num_nodes=1.",
        ),
    ],
    ids=["auto", "capitals", "no node"],
)
def test_what_the_submitting_machine_cannot_read_is_refused_before_submitting(
    tmp_path, trainer, line
):
    """The machine that submits is not the job's: what ``auto`` picks is the compute
    node's to know, and what SLURM is asked for must be what the job's Trainer takes."""
    proc, script = submit(tmp_path, *trainer)
    assert script is None  # nothing submitted
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [line], proc.stderr[-3000:]
