"""A sweep's jobs that run one after another in one process (Hydra's basic launcher, a
joblib worker) each report their own cost and run with their own process settings, not
an earlier job's: the peak resident memory, torch's threads, malloc's settings, cuDNN's
kernel search."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PYTHON, ROOT, TINY, subprocess_env

# TINY's data and trainer, one short epoch, a multilayer perceptron whose width the tests set
MLP_JOB = [
    *[a for a in TINY if not a.startswith(("model.", "trainer.max_epochs"))],
    "model=mlp",
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=2",
    "trainer.val_check_interval=2",
    "logger=none",
    "print_config=false",
]


def sweep(tmp_path: Path, *args: str) -> list[dict]:
    """``train.py -m args...`` with the basic launcher (every job in this one process, one
    thread of torch's by default); each job's metrics.json, in job order."""
    folder = tmp_path / "sweep"
    done = subprocess.run(
        [*PYTHON, "train.py", "-m", *MLP_JOB, *args, f"hydra.sweep.dir={folder}"],
        cwd=ROOT,
        env={**subprocess_env(), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = sorted((p for p in folder.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    return [json.loads((job / "metrics.json").read_text()) for job in jobs]


@pytest.mark.slow  # two trainings, one of a 16-million-parameter model
@pytest.mark.skipif(sys.platform != "linux", reason="the peak is reset on Linux alone")
def test_a_small_jobs_peak_memory_after_a_large_ones_is_its_own(tmp_path):
    """The peak was the process's: the small model's row reported the large one's memory."""
    large, small = sweep(tmp_path, "model.hidden_size=2000,8", "torch_threads=1")
    assert large["cost"]["params"] > 10**7 and small["cost"]["params"] < 10**4
    # the large model's weights, gradients and Adam's two moments: 250 MB
    assert small["cost"]["peak_cpu_rss_mb"] < large["cost"]["peak_cpu_rss_mb"] - 150


@pytest.mark.slow  # two trainings
def test_a_job_of_torchs_default_threads_after_one_that_set_them_runs_on_the_default(
    tmp_path,
):
    """torch_threads=null kept the earlier job's count: the second job ran, and recorded
    that it ran, on two threads."""
    jobs = sweep(tmp_path, "model.hidden_size=8", "torch_threads=2,null")
    threads = [job["provenance"][-1]["machine"]["torch_threads"] for job in jobs]
    assert threads == [2, 1]


@pytest.mark.skipif(sys.platform != "linux", reason="malloc's settings are glibc's")
def test_a_job_that_lets_malloc_trim_after_one_that_kept_freed_memory_trims_again():
    """keep_freed_memory=false after a job that kept it: malloc kept freed memory still."""
    code = """
import re
from pathlib import Path
from omegaconf import OmegaConf
from cloudlstm.assembly.build import configure_process
from cloudlstm.engine.host_memory import keep_freed_memory

def freed_mb():
    status = lambda: Path("/proc/self/status").read_text()
    rss = lambda: int(re.search(r"VmRSS:\\s*(\\d+)", status()).group(1)) / 1024
    block = b"x" * (300 * 2**20)  # written: every page resident
    before = rss()
    del block
    return before - rss()

for keep in (True, False):  # two jobs of a sweep
    configure_process(OmegaConf.create({"keep_freed_memory": keep}))
    print(freed_mb() > 250)
"""
    done = subprocess.run(
        [*PYTHON, "-c", code], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # kept: the block's memory stays after its del; then, no longer kept, it goes
    assert done.stdout.split() == ["False", "True"]


def test_a_trainer_without_a_benchmark_setting_after_one_with_it_searches_no_kernels():
    """Lightning leaves cuDNN's kernel search as it finds it where trainer.benchmark is
    null: the job after one with trainer.benchmark=true searched too, its epochs timed so."""
    code = """
import lightning as L
import torch
from omegaconf import OmegaConf
from cloudlstm.assembly.build import configure_process

for benchmark in (True, None):  # two jobs of a sweep
    configure_process(OmegaConf.create({"keep_freed_memory": False}))
    L.Trainer(benchmark=benchmark, logger=False, enable_checkpointing=False)
    print(torch.backends.cudnn.benchmark)
"""
    done = subprocess.run(
        [*PYTHON, "-c", code], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "False"]


def test_a_job_after_a_deterministic_one_runs_as_its_own_trainer_setting_says():
    """Lightning sets torch's deterministic mode and CUBLAS_WORKSPACE_CONFIG for
    trainer.deterministic=true and resets neither: the jobs after it kept the variable
    (handed to the processes they start), and one of trainer.deterministic=null ran
    deterministic."""
    code = """
import os
import lightning as L
import torch
from omegaconf import OmegaConf
from cloudlstm.assembly.build import configure_process

for deterministic in (True, None, False):  # three jobs of a sweep
    configure_process(OmegaConf.create({"keep_freed_memory": False}))
    L.Trainer(deterministic=deterministic, logger=False, enable_checkpointing=False)
    print(os.environ.get("CUBLAS_WORKSPACE_CONFIG"), torch.are_deterministic_algorithms_enabled())
"""
    env = {k: v for k, v in subprocess_env().items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    done = subprocess.run([*PYTHON, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [":4096:8 True", "None False", "None False"]


@pytest.mark.slow  # two compiled trainings, Inductor's C++ build included
def test_compiled_jobs_of_a_sweep_each_compile_within_dynamos_limit(tmp_path):
    """dynamo's caches lived as long as the process: each compiled job added its graphs of
    the model's forward to the earlier jobs', and past torch._dynamo.config.recompile_limit
    (8; here 5, which one job's 4 fit) a later job ran eagerly. Here the limit is a failure,
    so the second job fails where it would have fallen back."""
    code = """
import runpy
import sys
import torch._dynamo.config

torch._dynamo.config.recompile_limit = 5
torch._dynamo.config.fail_on_recompile_limit_hit = True
sys.argv = ["train.py", *sys.argv[1:]]
runpy.run_path("train.py", run_name="__main__")
"""
    folder = tmp_path / "sweep"
    done = subprocess.run(
        [*PYTHON, "-c", code, "-m", *MLP_JOB, "model.compile=true", "model.hidden_size=8,16",
         "torch_threads=1", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
         f"hydra.sweep.dir={folder}"],
        cwd=ROOT,
        env={**subprocess_env(), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert (folder / "0" / "metrics.json").is_file() and (folder / "1" / "metrics.json").is_file()


def test_an_eager_job_after_a_compiled_one_holds_none_of_its_graphs():
    """dynamo's caches were emptied for a job that compiles alone: a job of
    model.compile=false after a compiled one held the earlier job's graphs (and on CUDA
    the memory pool of its CUDA graphs) as long as the process lived. The backend is
    dynamo's eager one (the graph's own forward), which the cache holds as it holds
    Inductor's code, without Inductor's C++ build."""
    code = """
import gc
import weakref
import torch
from omegaconf import OmegaConf
from cloudlstm.assembly.build import configure_process

class Net(torch.nn.Module):  # dynamo compiles no frame of torch.nn's own modules
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.layer(x).relu()

graphs = []

def eager_kept(graph, inputs):
    graphs.append(weakref.ref(graph))
    return graph.forward

for compiled in (True, False):  # two jobs of a sweep
    job = {"keep_freed_memory": False, "model": {"compile": compiled}}
    configure_process(OmegaConf.create(job))
    model = Net()
    if compiled:
        model.compile(backend=eager_kept)
    model(torch.randn(2, 4))
    del model
    gc.collect()
    print(sum(graph() is not None for graph in graphs))
"""
    done = subprocess.run(
        [*PYTHON, "-c", code], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # the compiled job's graph outlives its model; the eager job after it starts without it
    assert done.stdout.split() == ["1", "0"]
