"""Two nodes of one process each train as one node of two processes, and validate and test
as one process does.

The nodes are two ``torchrun --nnodes 2 --nproc-per-node 1`` launches on this machine,
which meet at a rendezvous on localhost and run the processes of global ranks 0 and 1
over gloo, as two machines of a cluster would (``trainer.devices=1 trainer.num_nodes=2``).
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from torch.utils.data import TensorDataset

from cloudlstm.assembly.assemble import assemble
from cloudlstm.assembly.build import LAUNCHER_VARIABLES, check_nodes_started
from cloudlstm.cli.process_group import check_shared_run_dir, launched_processes
from cloudlstm.data.pipeline.loaders import each_window_once
from cloudlstm.engine.distributed import per_process_limits
from cloudlstm.errors import UserError
from tests.conftest import ROOT, compose_train, subprocess_env
from tests.test_ddp import JOB as DDP_JOB
from tests.test_ddp import assert_close

# tests/test_ddp.py's job (one epoch of 3 steps, a validation at its end, the whole test
# part, predictions saved), every step logged to CSV
JOB = [
    *[a for a in DDP_JOB if a != "logger=none"],
    "logger=csv",
    "trainer.log_every_n_steps=1",
    "logger.csv.flush_logs_every_n_steps=1",
]
TWO_NODES = ["trainer=ddp_cpu", "trainer.devices=1", "trainer.num_nodes=2"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_two_nodes(run_dir: Path, data_dir: Path) -> list[subprocess.CompletedProcess]:
    """The job on two nodes: a torchrun per node, node 0 hosting the rendezvous."""
    port = free_port()
    args = [*JOB, *TWO_NODES, f"hydra.run.dir={run_dir}", f"paths.data_dir={data_dir}"]
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--nproc-per-node",
                "1",
                "--node-rank",
                str(rank),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(port),
                "train.py",
                *args,
            ],
            cwd=ROOT,
            env=subprocess_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for rank in (0, 1)
    ]
    done = []
    for node in nodes:
        try:
            out, err = node.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for other in nodes:
                other.kill()
            pytest.fail("the two-node run did not end")
        done.append(subprocess.CompletedProcess(node.args, node.returncode, out, err))
    return done


def run_one_node(run_dir: Path, data_dir: Path) -> subprocess.CompletedProcess:
    """The job on one node of two processes, which Lightning starts."""
    cmd = [
        sys.executable, "train.py", *JOB, "trainer=ddp_cpu",
        f"hydra.run.dir={run_dir}", f"paths.data_dir={data_dir}",
    ]  # fmt: skip
    return subprocess.run(
        cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300
    )


def training_log(run_dir: Path) -> pd.DataFrame:
    """Every logged value but the timings (and the epoch mean of the training loss, which
    is rank 0's own: the same in both layouts, but read from one process)."""
    (path,) = run_dir.glob("csv/*/metrics.csv")  # one log, written by rank 0
    log = pd.read_csv(path)
    return log.drop(columns=[c for c in log.columns if c.startswith("perf/")])


def validate_in_one_process(tmp_path: Path, checkpoint: Path) -> dict[str, float]:
    """``val/*`` of ``checkpoint`` on the job's validation part, in this process."""
    cfg = compose_train(tmp_path, [*JOB, "trainer=cpu"])
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True)
    job = assemble(cfg, output_dir)
    (metrics,) = job.trainer.validate(
        job.module, datamodule=job.datamodule, ckpt_path=str(checkpoint), weights_only=False
    )
    return {key: value for key, value in metrics.items() if key.startswith("val/")}


@pytest.mark.slow  # two runs of two processes: ~40 s on 2 CPU cores
def test_two_nodes_train_as_one_node_and_validate_as_one_process(tmp_path):
    data = tmp_path / "data"
    nodes_dir, node_dir = tmp_path / "two_nodes", tmp_path / "one_node"
    for node in run_two_nodes(nodes_dir, data):
        assert node.returncode == 0, node.stderr[-3000:]
    one = run_one_node(node_dir, data)
    assert one.returncode == 0, one.stderr[-3000:]
    log = (nodes_dir / "train.log").read_text()
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in log  # both nodes' processes write there

    nodes, node = (json.loads((d / "metrics.json").read_text()) for d in (nodes_dir, node_dir))
    # training: the same steps on the same batches, the same all-reduced gradients
    assert nodes["steps"] == node["steps"] == 3
    pd.testing.assert_frame_equal(training_log(nodes_dir), training_log(node_dir))
    weights = [
        torch.load(d / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
        for d in (nodes_dir, node_dir)
    ]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert nodes["checkpoint"] == node["checkpoint"]
    # test: every window once, in order, as one node of two processes scores them
    assert nodes["test"] == node["test"]
    with np.load(nodes_dir / "predictions.npz") as a, np.load(node_dir / "predictions.npz") as b:
        np.testing.assert_array_equal(a["prediction"], b["prediction"])

    # validation: every window once, the loss averaged over both processes' windows, as
    # one process validates the same weights
    single = validate_in_one_process(tmp_path / "single", nodes_dir / nodes["checkpoint"])
    assert single.keys() == nodes["val"].keys()
    assert_close(nodes["val"], single, "val")


def test_an_outside_launch_without_a_run_directory_is_refused_in_one_line(tmp_path):
    """torchrun starts train.py once per process: without hydra.run.dir each would make a
    directory of its own, and rank 0's checkpoints would be in none of the others'."""
    env = {**subprocess_env(), "WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "0"}
    cmd = [sys.executable, "train.py", *TWO_NODES, f"paths.log_dir={tmp_path / 'logs'}"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "one of 2 processes" in lines[0] and "hydra.run.dir=<dir>" in lines[0]
    assert not (tmp_path / "logs").exists()  # refused before Hydra made a directory


@pytest.mark.parametrize(
    ("environ", "argv", "started"),
    [
        ({"WORLD_SIZE": "4", "RANK": "3"}, [], "one of 4 processes"),
        ({"SLURM_NTASKS": "2", "SLURM_JOB_NAME": "train"}, [], "one of 2 SLURM tasks"),
        ({"NODE_RANK": "1"}, [], "node 1 of a multi-node run"),
        ({}, ["trainer.num_nodes=2"], "trainer.num_nodes=2"),
        # one process: torchrun with one, an interactive allocation, a plain command
        ({"WORLD_SIZE": "1"}, ["trainer.num_nodes=1"], None),
        ({"SLURM_NTASKS": "4", "SLURM_JOB_NAME": "interactive"}, [], None),
        ({}, [], None),
    ],
)
def test_a_launch_among_several_processes_is_recognised(environ, argv, started):
    got = launched_processes(environ, ["train.py", *argv])
    assert got == started if started is None else started in got
    if started is not None:
        with pytest.raises(UserError, match="hydra.run.dir=<dir>"):
            check_shared_run_dir(["train.py", *argv], environ)
        check_shared_run_dir(["train.py", *argv, "hydra.run.dir=/scratch/run"], environ)
        check_shared_run_dir(["train.py", "-m", *argv], environ)  # a sweep: its launcher's


def test_the_nodes_of_the_command_line_are_read_as_the_trainer_reads_them(monkeypatch):
    """trainer.num_nodes on the command line was read from its text: ``01`` (text to Hydra,
    which the Trainer refuses) as 1 node, and an interpolation as 1 node, whatever it gave.
    Now as the Trainer's (user_nodes): the text refused in its line, an interpolation
    that needs nothing of the config resolved, one that reads the config left to it."""
    monkeypatch.setenv("CLOUDLSTM_NODES", "2")
    argv = ["train.py", "trainer.num_nodes='${oc.decode:${oc.env:CLOUDLSTM_NODES}}'"]
    assert launched_processes({}, argv) == "one of the nodes of trainer.num_nodes=2"
    for given in ("01", "'2'", "${oc.env:CLOUDLSTM_NODES}", "0"):
        with pytest.raises(UserError, match=r"^trainer\.num_nodes=.*: give a whole number"):
            launched_processes({}, ["train.py", f"trainer.num_nodes={given}"])
    # the last override counts, as Hydra's; ones that read the config are read as it starts
    assert (
        launched_processes({}, ["train.py", "trainer.num_nodes=2", "trainer.num_nodes=1"]) is None
    )
    assert launched_processes({}, ["train.py", "trainer.num_nodes=${trainer.devices}"]) is None


@pytest.mark.parametrize(
    ("environ", "refused"),
    [
        ({}, True),  # a laptop, or a login node: nothing would ever join
        ({"WORLD_SIZE": "2", "RANK": "0"}, False),  # torchrun
        ({"SLURM_NTASKS": "2"}, False),  # srun
        ({"MASTER_ADDR": "node0", "NODE_RANK": "0"}, False),  # by hand
        ({"OMPI_COMM_WORLD_SIZE": "2"}, False),  # mpirun
    ],
)
def test_several_nodes_without_a_launcher_are_refused_in_one_line(environ, refused):
    """Lightning would wait for nodes that never come, for torch's 30 minutes."""
    trainer = {"num_nodes": 2, "plugins": [{"_target_": "cloudlstm.rundir.checkpoint_io.X"}]}
    if not refused:
        check_nodes_started(trainer, environ)
        return
    with pytest.raises(UserError) as err:
        check_nodes_started(trainer, environ)
    assert str(err.value).startswith("trainer.num_nodes=2, but no launcher started this")
    assert str(err.value).endswith("or run on this machine alone: trainer.num_nodes=1.")
    check_nodes_started({"num_nodes": 1}, environ)
    own = {"_target_": "lightning.fabric.plugins.environments.KubeflowEnvironment"}
    check_nodes_started({"num_nodes": 2, "plugins": [own]}, environ)  # the user's launcher


def test_several_nodes_started_alone_stop_at_once(tmp_path):
    """The whole program: the line and status 1 in seconds, not a hang."""
    alone = {k: v for k, v in subprocess_env().items() if k not in LAUNCHER_VARIABLES}
    proc = subprocess.run(
        [sys.executable, "train.py", "trainer.num_nodes=2", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=ROOT, env=alone, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("trainer.num_nodes=2, but no launcher")


def test_validation_and_test_windows_are_dealt_once_while_every_process_gets_one(caplog):
    windows = TensorDataset(torch.arange(11))
    sampler = each_window_once(windows, SimpleNamespace(world_size=2, global_rank=1))
    assert list(sampler) == [1, 3, 5, 7, 9]  # rank 1's share, none repeated
    with caplog.at_level(logging.WARNING):
        padded = each_window_once(TensorDataset(torch.arange(3)), SimpleNamespace(world_size=4))
    assert padded is None  # Lightning's sampler: every process needs a batch
    assert len(caplog.records) == 1 and "3 windows for 4 processes" in caplog.text


def test_a_validation_limit_counts_windows_dealt_once():
    """11 validation windows, 2 batches of 8 per process: one process validates 11, two
    validate 6 + 5, every window once; nothing to warn about. Training pads: 2 x 16."""
    windows = {"val": 11, "train": 20}
    assert per_process_limits({"val": 2}, windows, 8, 2) is None
    said = per_process_limits({"train": 2}, windows, 8, 2)
    assert said is not None and "20 training windows per epoch in all (16 in one process)" in said
