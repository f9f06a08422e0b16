"""Sweeps through ``hydra/launcher=slurm`` on a real one-node SLURM cluster (submitit, sbatch,
slurmctld, slurmd: ``tests/slurm_cluster.py``): jobs run, are requeued and resume, and a
failed or cancelled job is reported, after the comparison of the finished ones. Skipped
with the reason where the cluster cannot start (no root, no apt). Run them with
``pytest -m slurm`` (``.ci/run`` does).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, TINY, subprocess_env
from tests.slurm_cluster import ClusterUnavailable, SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# One job: TINY for 4 epochs under the paper recipe (validation and checkpoints at epoch
# ends, from which a resume is bit-exact), deterministic, one thread (so that the job in
# SLURM and the reference run outside compute alike), W&B offline.
JOB = [
    *[a for a in TINY if not a.startswith(("trainer.max_epochs", "trainer.val_check", "model.k="))],
    "recipe=paper",
    "trainer.max_epochs=4",
    "trainer.deterministic=true",
    "torch_threads=1",
    "report.figures=false",
]
# Wait at the start of epoch 2 (epochs 0 and 1 checkpointed) until the test says go.
GATE = [
    "+callbacks.gate._target_=tests.kill_callback.WaitAt",
    "+callbacks.gate.epoch=2",
    "+callbacks.gate.until=${paths.output_dir}/go",
]


def launcher_args() -> list[str]:
    """``hydra/launcher=slurm`` sized for this node: one CPU, 1 GB, this venv (no GPU:
    the jobs train with ``trainer=cpu``, for which the launcher asks none).

    ``timeout_min`` is long enough (> 15) that a signal early in the job is not taken for
    the time limit by submitit.
    """
    activate = Path(sys.executable).parent / "activate"
    setup = f"source {activate}" if activate.is_file() else f"cd {ROOT}"
    return [
        "hydra/launcher=slurm",
        "hydra.launcher.timeout_min=20",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.mem_gb=1",
        f"hydra.launcher.setup=[{setup}]",
    ]


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    slurm = SlurmCluster()
    try:
        slurm.start()
    except ClusterUnavailable as err:
        slurm.stop()
        pytest.skip(f"no SLURM cluster on this machine: {err}")
    yield slurm
    slurm.stop()


def start_sweep(cluster: SlurmCluster, sweep: Path, *args: str) -> subprocess.Popen:
    """``python train.py -m hydra/launcher=slurm ...`` in the background, logs in the sweep."""
    sweep.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "train.py", "-m", *launcher_args(), *JOB, *args,
        f"hydra.sweep.dir={sweep}", f"paths.data_dir={sweep.parent / 'data'}",
    ]  # fmt: skip
    env = {**subprocess_env(), "SLURM_CONF": str(cluster.conf)}
    with (sweep.parent / f"{sweep.name}.log").open("w") as log:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def finish(proc: subprocess.Popen, sweep: Path, cluster: SlurmCluster) -> tuple[int, str]:
    """Wait for the sweep command; its exit status and output."""
    try:
        code = proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the sweep did not end: {output(sweep)[-3000:]}\n{cluster.log_tail()}")
    return code, output(sweep)


def output(sweep: Path) -> str:
    return (sweep.parent / f"{sweep.name}.log").read_text()


def wait_for(what: Callable[[], object], message: str, timeout_s: float = 180) -> object:
    """Poll ``what`` until it returns something true; fail with ``message`` after a while."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if got := what():
            return got
        time.sleep(0.25)
    pytest.fail(f"{message} within {timeout_s} s")


def slurm_id(sweep: Path, job: int) -> str:
    """SLURM's id of job ``job`` of the sweep, from submitit's folder of it: ``<array>_<job>``,
    or the plain job id where the sweep has one job (submitit submits no array then)."""

    def find() -> str | None:
        names = [p.name for p in (sweep / ".submitit").glob("*") if p.is_dir()]
        mine = [n for n in names if n.endswith(f"_{job}") or (job == 0 and n.isdigit())]
        return mine[0] if mine else None

    return wait_for(find, "submitit wrote no folder for the job")


def job_state(cluster: SlurmCluster, job_id: str) -> str:
    out = cluster.run("squeue", "-h", "-t", "all", "-o", "%T", "-j", job_id, check=False)
    return out.stdout.strip()


def wandb_ids(run_dir: Path) -> list[str]:
    return [p.name.rsplit("-", 1)[-1] for p in sorted((run_dir / "wandb").glob("offline-run-*"))]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """metrics.json of the job trained without a break, by ``python train.py`` outside SLURM."""
    return _metrics_outside_slurm(tmp_path_factory.mktemp("reference"))


def _metrics_outside_slurm(run: Path, *extra: str) -> dict:
    """metrics.json of ``python train.py`` of :data:`JOB` (and ``extra``) in ``run/run``."""
    cmd = [
        sys.executable, "train.py", *JOB, *extra, "logger=csv",
        f"hydra.run.dir={run / 'run'}", f"paths.data_dir={run / 'data'}",
    ]  # fmt: skip
    done = subprocess.run(
        cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((run / "run" / "metrics.json").read_text())


def test_two_job_sweep_runs_on_the_cluster(cluster, tmp_path):
    sweep = tmp_path / "sweep"
    proc = start_sweep(cluster, sweep, "model.k=2,3", "trainer.max_epochs=1", "logger=csv")
    code, out = finish(proc, sweep, cluster)
    assert code == 0, out[-3000:]
    for job, k in (("0", 2), ("1", 3)):
        metrics = json.loads((sweep / job / "metrics.json").read_text())
        assert f"-k{k}-" in metrics["run"]["name"]
        assert metrics["test"]["overall"]["mae"]["mean"] > 0
    assert len(list((sweep / ".submitit").glob("*_[01]"))) == 2, "one array task per job"


def requeue_and_resume(
    cluster: SlurmCluster, sweep: Path, interrupt: Callable[[str], None], *gate: str
) -> tuple[dict, float]:
    """Run one gated job, ``interrupt`` it at the gate, let the requeued job through.

    Returns the job's metrics.json and the seconds from the interruption to the requeued
    job running again.
    """
    proc = start_sweep(cluster, sweep, "logger=wandb", *GATE, *gate)
    run = sweep / "0"
    wait_for((run / "go.waiting").exists, f"the job did not reach its gate: {output(sweep)}")
    job_id = slurm_id(sweep, 0)
    interrupted = time.monotonic()
    interrupt(job_id)
    wait_for(lambda: job_state(cluster, job_id) == "PENDING", "the job was not requeued")
    (run / "go").touch()  # the requeued job passes the gate
    wait_for(lambda: job_state(cluster, job_id) == "RUNNING", "the requeued job did not start")
    restart_s = time.monotonic() - interrupted
    code, out = finish(proc, sweep, cluster)
    assert code == 0, out[-3000:]
    return json.loads((run / "metrics.json").read_text()), restart_s


def test_requeue_signal_resumes_from_the_hpc_checkpoint(cluster, tmp_path, reference):
    """SIGUSR1 (what SLURM sends before the time limit) in the middle of an epoch: at the
    end of that step Lightning's requeue saves hpc_ckpt_1.ckpt and requeues the job, which
    resumes from it in the same directory and W&B run, and loses no step."""

    def signal_usr1(job_id: str) -> None:
        cluster.run("scancel", "--signal=USR1", job_id)

    sweep = tmp_path / "sweep"
    got, restart_s = requeue_and_resume(cluster, sweep, signal_usr1, "+callbacks.gate.batch=1")
    run = sweep / "0"
    print(f"requeue after SIGUSR1: running again after {restart_s:.1f} s")
    assert got["resumed_from"] == "hpc_ckpt_1.ckpt"
    assert (run / "hpc_ckpt_1.ckpt.checksum").is_file()
    ids = wandb_ids(run)
    assert len(ids) == 2 and len(set(ids)) == 1, "the requeued job continues the W&B run"
    assert (got["epochs"], got["steps"]) == (reference["epochs"], reference["steps"]) == (4, 12)
    # Not bit-exact: resumed in the middle of an epoch, the epoch's batches are drawn again
    # (the data loader keeps no position), so the metrics differ from the reference's.
    assert got["test"]["overall"]["mae"]["mean"] > 0


def test_scontrol_requeue_resumes_from_the_last_checkpoint(cluster, tmp_path, reference):
    """A requeue without a signal (preemption, `scontrol requeue`) resumes from last.ckpt."""
    sweep = tmp_path / "sweep"
    got, restart_s = requeue_and_resume(
        cluster, sweep, lambda job_id: cluster.run("scontrol", "requeue", job_id)
    )
    run = sweep / "0"
    print(f"scontrol requeue: running again after {restart_s:.1f} s")
    assert got["resumed_from"] == "checkpoints/last.ckpt"
    assert not list(run.glob("hpc_ckpt_*.ckpt"))
    assert len(set(wandb_ids(run))) == 1
    assert got["test"] == reference["test"]  # resumed from epoch 1's end: bit-exact
    assert got["val"] == reference["val"]


def test_cancelled_job_is_reported_in_one_line_and_the_sweep_fails(cluster, tmp_path):
    sweep = tmp_path / "sweep"
    (sweep / "0").mkdir(parents=True)
    (sweep / "0" / "go").touch()  # job 0 passes its gate, job 1 waits at it
    gate0 = [g.replace("epoch=2", "epoch=0") for g in GATE]
    proc = start_sweep(cluster, sweep, "model.k=2,3", "trainer.max_epochs=1", "logger=csv", *gate0)
    wait_for((sweep / "1" / "go.waiting").exists, f"job 1 did not start: {output(sweep)}")
    cluster.run("scancel", slurm_id(sweep, 1))
    code, out = finish(proc, sweep, cluster)
    assert code != 0
    assert "Traceback" not in out
    assert (sweep / "0" / "metrics.json").is_file()
    lines = [line for line in out.splitlines() if line.strip().startswith("job 1 (")]
    assert len(lines) == 1, out[-3000:]
    assert "model.k=3" in lines[0] and "CANCELLED" in lines[0]
    report = out.index(lines[0])
    assert "| cloudlstm | synthetic |" in out[:report], "the finished job's comparison first"
    assert f"run dir {sweep / '1'};" in lines[0]
    assert "1 of 2 jobs of the sweep did not finish" in out


def test_a_failed_job_is_named_after_the_comparison_of_the_finished_one(cluster, tmp_path):
    """The launcher reports the failed jobs itself once all have ended; the sweep still
    prints the comparison of the finished ones first, as with hydra/launcher=basic."""
    sweep = tmp_path / "sweep"
    # job 1 refuses its learning rate as it starts; job 0 trains and is tested
    proc = start_sweep(cluster, sweep, "optimizer.lr=1e-3,-1", "trainer.max_epochs=1", "logger=csv")
    code, out = finish(proc, sweep, cluster)
    assert code != 0, out[-3000:]
    assert "Traceback" not in out
    assert (sweep / "0" / "metrics.json").is_file()
    lines = out.splitlines()
    rows = [n for n, line in enumerate(lines) if line.startswith("| cloudlstm | synthetic |")]
    assert len(rows) == 1, f"the finished job's comparison row: {out[-3000:]}"
    named = [n for n, line in enumerate(lines) if line.strip().startswith("job 1 (")]
    assert len(named) == 1, out[-3000:]
    line = lines[named[0]].strip()
    assert line.startswith("job 1 (optimizer.lr=-1): failed: "), line
    assert ".; run dir " not in line, "the error's own full stop is left out"
    assert re.search(rf"; log {re.escape(str(sweep))}/\.submitit/\d+_1/\d+_1_0_log\.err$", line)
    assert rows[0] < named[0], "the comparison comes before the report"
    assert "1 of 2 jobs of the sweep did not finish" in out


def test_sigterm_to_the_waiting_sweep_says_its_jobs_still_run_and_how_to_cancel_them(
    cluster, tmp_path
):
    """submitit leaves a sweep's SLURM jobs running when the sweep's own process ends: the
    line says so, with the ids that squeue and scancel take."""
    sweep = tmp_path / "sweep"
    gate0 = [g.replace("epoch=2", "epoch=0") for g in GATE]
    proc = start_sweep(cluster, sweep, "trainer.max_epochs=1", "logger=csv", *gate0)
    wait_for((sweep / "0" / "go.waiting").exists, f"the job did not start: {output(sweep)}")
    job = slurm_id(sweep, 0)
    proc.terminate()
    code, out = finish(proc, sweep, cluster)
    try:
        assert code == 143, out[-3000:]
        assert "Traceback" not in out
        line = [x for x in out.splitlines() if "stopped by SIGTERM" in x]
        assert len(line) == 1, out[-3000:]
        assert "still run on the cluster" in line[0]
        assert f"squeue -j {job} " in line[0] and f"scancel {job} stops them" in line[0]
        assert job_state(cluster, job) == "RUNNING", "the job runs on"
    finally:
        cluster.run("scancel", job, check=False)


@pytest.fixture(scope="module")
def ddp_reference(tmp_path_factory) -> dict:
    """metrics.json of the job on one node of two processes started by Lightning, outside
    SLURM, never stopped."""
    return _metrics_outside_slurm(tmp_path_factory.mktemp("ddp_reference"), "trainer=ddp_cpu")


def test_a_ddp_job_of_two_tasks_is_requeued_together_and_resumes_exactly(
    cluster, tmp_path, ddp_reference
):
    """``trainer=ddp_cpu``: SLURM runs the job as two tasks on the node (the layout of a
    multi-node job, one task per process), which Lightning's SLURM environment joins into
    one DDP run. SIGUSR1 reaches both in the middle of an epoch: they save
    hpc_ckpt_1.ckpt together at the end of that step and requeue the job, which resumes
    and ends as the run never stopped."""
    sweep = tmp_path / "sweep"
    proc = start_sweep(
        cluster, sweep, "trainer=ddp_cpu", "logger=csv", *GATE, "+callbacks.gate.batch=1"
    )
    run = sweep / "0"
    wait_for((run / "go.waiting").exists, f"the job did not reach its gate: {output(sweep)}")
    job_id = slurm_id(sweep, 0)
    (script,) = (sweep / ".submitit" / job_id).glob("*_submission.sh")
    options = set(script.read_text().splitlines())
    assert {"#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=2"} <= options
    assert not any(x.startswith("#SBATCH --gpus") for x in options)

    cluster.run("scancel", "--signal=USR1", job_id)  # to every task
    (run / "go").touch()  # the step runs; at its end both processes act on the signal
    wait_for(lambda: job_state(cluster, job_id) == "PENDING", "the job was not requeued")
    code, out = finish(proc, sweep, cluster)
    assert code == 0, out[-3000:]

    got = json.loads((run / "metrics.json").read_text())
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in (run / "train.log").read_text()
    assert (run / "hpc_ckpt_1.ckpt.checksum").is_file()
    hpc = torch.load(run / "hpc_ckpt_1.ckpt", weights_only=False, map_location="cpu")
    assert hpc["global_step"] % 3  # saved at the end of a step, mid-epoch (3 per epoch)
    # resumed from it, or from the validation's last.ckpt the processes stopped after
    assert Path(got["resumed_from"]).name in ("hpc_ckpt_1.ckpt", "last.ckpt")
    assert (got["epochs"], got["steps"]) == (ddp_reference["epochs"], ddp_reference["steps"])
    assert got["test"] == ddp_reference["test"]  # bit for bit
    assert got["val"] == ddp_reference["val"]
