"""An allocation that finds no memory (a batch or a model too large for the machine) stops
the program with one line saying what could not be allocated, the memory there and what to
make smaller; no traceback. The machine's memory is a limit on the child's address space
(``RLIMIT_AS``, ``ulimit -v``), so the allocation fails where a run asks for more than it
allows, as on a machine of that size; CUDA's message is torch's own, as its allocator
writes it."""

from __future__ import annotations

import re
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from cloudlstm.errors import OutOfMemoryError, one_line_errors, out_of_memory
from tests.conftest import ROOT, TINY, subprocess_env

LIMIT = 4 * 2**30  # bytes of address space: the programs need about 2 GB at these sizes


def memory_limit(limit: int) -> Callable[[], None]:
    """``preexec_fn``: at most ``limit`` bytes of address space in the child."""

    def set_limit() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))

    return set_limit


def train_py(run: Path, *overrides: str, tiny: list[str] = TINY) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "train.py",
            *tiny,
            "logger=none",
            "report.figures=false",
            f"hydra.run.dir={run}",
            *overrides,
        ],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=memory_limit(LIMIT),
    )


def the_line(proc: subprocess.CompletedProcess, start: str = "Out of memory") -> str:
    """The program's one error line; no traceback."""
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "RuntimeError" not in proc.stderr, proc.stderr[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith(start)]
    return line


def test_a_run_too_large_for_the_memory_stops_with_one_line(tmp_path):
    # CloudLSTM with 256 hidden channels at 200 points: its weights (200 MB) fit, but a
    # step's gathered neighbourhoods ask for more at once than the 4 GiB address space leaves
    proc = train_py(
        tmp_path / "run",
        "model=cloudlstm",
        "data.source.num_points=200",
        "model.hidden_channels=256",
    )
    line = the_line(proc)
    assert line.startswith("Out of memory: the CPU could not allocate ")
    assert "this process may use at most 4.3 GB: `ulimit -v`" in line
    assert "fewer windows a batch (data.batch_size)" in line


def test_a_model_whose_weights_exceed_the_address_space_is_refused_before_they_are_made(
    tmp_path,
):
    # an LSTM of 8,000 hidden units: 6.1 GB of weights, more than the 4 GiB address space
    # holds: weighed on the meta device before any is allocated
    tiny = [o for o in TINY if not o.startswith("model.")]
    proc = train_py(tmp_path / "run", "model=lstm", "model.hidden_size=8000", tiny=tiny)
    line = the_line(proc, start="The model")
    assert re.fullmatch(
        r"The model \(SeqLSTM\) has 1,5\d\d,\d{3},\d{3} parameters: its weights and "
        r"their gradients alone need 12\.\d GB, and [\d.]+ [MG]B of memory is left under "
        r"this process's `ulimit -v`\. Make the model smaller \(its hidden channels, layers "
        r"or K\), or run it where more memory is free\.",
        line,
    ), line
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_model_beyond_the_machine_s_memory_is_refused_before_its_weights_are_made(tmp_path):
    # no address-space limit: 3.8 T parameters, 15 TB of weights, which no machine this
    # runs on has (where Linux lets allocations take less than the memory piece by piece,
    # the kernel kills the program once their pages are written, with no line)
    tiny = [o for o in TINY if not o.startswith("model.")]
    proc = subprocess.run(
        [sys.executable, "train.py", *tiny, "logger=none", f"hydra.run.dir={tmp_path / 'run'}"]
        + ["model=lstm", "model.hidden_size=400000"],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = the_line(proc, start="The model")
    assert line.startswith("The model (SeqLSTM) has 3,840,099,200,024 parameters: its weights ")
    assert "and their gradients alone need 30.7 TB, and " in line


def test_torch_and_numpy_allocations_beyond_any_machine_are_one_line():
    # 256 TB: more than a 64-bit process can address, refused whatever the machine
    torch_line = r"^Out of memory: the CPU could not allocate 281\.5 TB"
    with pytest.raises(OutOfMemoryError, match=torch_line), one_line_errors():
        torch.empty(2**46)
    numpy_line = r"^Out of memory: Unable to allocate 256\. TiB"
    with pytest.raises(OutOfMemoryError, match=numpy_line), one_line_errors():
        np.empty(2**45)


def test_a_gpu_out_of_memory_names_the_gpu_its_free_memory_and_the_allocation():
    # the message of torch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp)
    err = torch.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.55 GiB is free. Including non-PyTorch memory, this process has "
        "77.63 GiB memory in use. Of the allocated memory 76.90 GiB is allocated by PyTorch, "
        "and 123.00 MiB is reserved by PyTorch but unallocated. If reserved but unallocated "
        "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
        "avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
    line = str(out_of_memory(err))
    assert line.startswith(
        "Out of memory: GPU 0 could not allocate 20.00 GiB (1.55 GiB free of 79.19 GiB). "
    )
    assert "trainer.precision=bf16-mixed" in line and "\n" not in line


def test_other_runtime_errors_keep_their_traceback():
    # a bug is not a user's error: left as it is
    assert out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied")) is None
    assert out_of_memory(ValueError("out of memory")) is None
    with pytest.raises(RuntimeError, match="shapes"), one_line_errors():
        torch.ones(2, 3) @ torch.ones(2, 3)
