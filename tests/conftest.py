"""Shared fixtures: Hydra configs composed exactly as `python train.py` composes them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from tests.warm_python import SOCKET_VARIABLE

ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """The warnings that the programs' console drops (``NOISY_WARNINGS``), dropped from the
    summary of the tests that train in their own process too, so that it shows the rest."""
    from cloudlstm.cli.console import NOISY_WARNINGS

    for message in NOISY_WARNINGS:
        assert ":" not in message, "a filter line's fields are separated by colons"
        config.addinivalue_line("filterwarnings", f"ignore:{message}")


os.environ.setdefault("PROJECT_ROOT", str(ROOT))
os.environ.setdefault("WANDB_SILENT", "true")


def _cores_per_worker() -> int | None:
    """The cores each of pytest-xdist's workers may use (``make test`` starts one per CPU),
    or None outside xdist: threads beyond them would only wait for each other."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return None
    return max(1, len(os.sched_getaffinity(0)) // int(workers))


if (_CORES := _cores_per_worker()) is not None:
    import torch

    torch.set_num_threads(_CORES)
    # the programs the tests start (train.py, eval.py) take the same share
    os.environ.setdefault("OMP_NUM_THREADS", str(_CORES))

# A job small enough for seconds on 2 CPU cores, through every real component.
TINY = [
    "data.source.num_points=12",
    "data.source.num_channels=2",
    "data.source.num_steps=160",
    "data.source.grid_size=16",
    "data.input_steps=4",
    "data.output_steps=3",
    "data.batch_size=8",
    "model.k=3",
    "model.hidden_channels=4",
    "trainer=cpu",
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=3",
    "trainer.val_check_interval=3",  # the recipe validates every N steps: here each epoch's end
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=3",
    "trainer.enable_progress_bar=false",
    "~callbacks.progress_bar",
    "~callbacks.model_summary",
    # drawing the report's figures takes seconds a run: tests/test_dashboard.py draws them
    "report.figures=false",
]


# Variables a library sets in this test process when a test imports it
# (os.environ.setdefault; joblib's KMP_INIT_AT_FORK): a fresh shell would not hand them to a
# program, and the warm python, whose server started before that import, would run the
# program fresh, as for an environment unlike its own.
SET_BY_IMPORTS = ("KMP_INIT_AT_FORK",)
_GIVEN_AT_START = {name for name in SET_BY_IMPORTS if name in os.environ}


def subprocess_env() -> dict[str, str]:
    """Environment for `python train.py` in a subprocess, as from a fresh shell.

    Without ``WANDB_SERVICE`` (set once this test process has used W&B), so the child starts
    its own W&B service like a new job does, instead of sharing this process's one; nor the
    variables of :data:`SET_BY_IMPORTS` that this process's imports set.
    """
    dropped = {"WANDB_SERVICE", *(set(SET_BY_IMPORTS) - _GIVEN_AT_START)}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    # the programs share the cores with the tests' processes: OpenMP threads that spin while
    # they wait would take turns from each other
    return {**env, "PROJECT_ROOT": str(ROOT), "WANDB_SILENT": "true", "OMP_WAIT_POLICY": "PASSIVE"}


# `python` for the programs the tests start (train.py, eval.py, predict.py, python -m ...): it
# runs them as `python` does, forked from a Python that has imported torch, Lightning and
# Hydra once per test worker (tests/warm_python.py), which takes seconds off each. A test
# of the interpreter's own start (-X importtime, a fresh process group) uses sys.executable;
# WARM_PYTHON=0 starts every program in a fresh Python.
PYTHON = [sys.executable, "-S", "-E", str(ROOT / "tests" / "warm_python.py")]


@pytest.fixture(scope="session", autouse=True)
def warm_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The server behind :data:`PYTHON`, for this test process's session."""
    if os.environ.get("WARM_PYTHON") == "0":
        yield
        return
    folder = tmp_path_factory.mktemp("warm_python")
    socket_path = folder / "sock"
    with open(folder / "server.log", "w") as log:
        server = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "warm_server.py"), str(socket_path)],
            cwd=ROOT, env=subprocess_env(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
        )  # fmt: skip
    while not socket_path.exists() and server.poll() is None:
        time.sleep(0.02)
    os.environ[SOCKET_VARIABLE] = str(socket_path)
    try:
        yield
    finally:
        os.environ.pop(SOCKET_VARIABLE, None)
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(autouse=True)
def no_wandb_run_left_open(request: pytest.FixtureRequest) -> Iterator[None]:
    """A W&B run that a test leaves open in this process is taken over by the next
    training's logger, which then logs into it: the test that left it fails, by name, here
    (a module's fixture that trains with W&B finishes its run before the module's tests)."""
    yield
    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None)
    if run is not None:
        run.finish()
        pytest.fail(f"{request.node.nodeid} left the W&B run {run.id} open ({run.dir})")


def as_in_a_terminal() -> None:
    """``preexec_fn`` of a child that Ctrl-C (SIGINT) is sent to: SIGINT handled as in a
    terminal, even where this test process ignores or blocks it (started with ``&`` by a
    script)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def run_python(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python <args>`` in the repository, as from a fresh shell, its output captured."""
    return subprocess.run(
        [*PYTHON, *args],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_line(proc: subprocess.CompletedProcess) -> str:
    """The one line of a run that failed with a message: no traceback, and nothing else on
    stderr (neither Hydra's line repeating the overrides nor its hint of HYDRA_FULL_ERROR)."""
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


@contextmanager
def held_by_another_process(run_dir: Path) -> Iterator[subprocess.Popen]:
    """``run_dir``'s ``run.lock`` held by a live process other than this one, as a training
    holds it from its start, until the block ends (the process is then killed)."""
    code = (
        "import sys, time; from cloudlstm.rundir.lock import RunLock; "
        "RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(300)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(run_dir)],
        cwd=ROOT, env=subprocess_env(), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def doc_examples(doc: Path, heading: str) -> dict[str, str]:
    """The ```python and ```yaml blocks of the section ``## <heading>`` of ``doc``, by
    language: a worked example, which a test takes as it is written."""
    text = doc.read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"```(python|yaml)\n(.*?)```", section, re.S))


def compose_train(tmp_path: Path, overrides: list[str]) -> DictConfig:
    """Compose conf/train.yaml with overrides; run dir and data cache under tmp_path."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path / "run")
        cfg.paths.data_dir = str(tmp_path / "data")
    return cfg


@pytest.fixture
def tiny_cfg(tmp_path):
    def make(*extra: str) -> DictConfig:
        base = [o for o in TINY if not ("callbacks=none" in extra and o.startswith("~callbacks"))]
        return compose_train(tmp_path, [*base, *extra])

    return make


@contextmanager
def rebuilding_fails(owner: type, method: str) -> Iterator[None]:
    """Within the block ``owner.method`` raises, so a load there must come from the cache
    (timings would not prove that on a busy machine; ``benchmarks/bench_data_cache.py``
    measures them)."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"{owner.__name__}.{method} was called: the cache was not used")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(owner, method, refuse)
        yield


def cache_of_version(source: Any, module: Any, version: int, stream: Any) -> None:
    """Write ``stream`` where ``source`` looks for its cache, keyed as the code of cache
    ``version`` (``module._VERSION``, the source's) keyed it: the cache a run of before a
    change to the reading left, which the reading of now must not reuse."""
    from cloudlstm.data.cache import save_stream_cache

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "_VERSION", version)
        save_stream_cache(source.cache_path, stream, source.cache_key)


def compile_for_hopper(
    kernel, signature: dict[str, str], constants: dict, num_warps: int = 4, output: str = "ptx"
):
    """PTX of a Triton kernel compiled ahead for sm_90 (no GPU needed; skips without
    Triton), or its ``output="cubin"`` (bytes). ``signature``: the pointer and scalar
    arguments' types; ``constants``: the ``tl.constexpr`` ones. Without fused multiply-adds,
    as the project's kernels launch."""
    triton = pytest.importorskip("triton", reason="Triton is not installed (CPU-only setup)")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    autotuned = isinstance(kernel, triton.runtime.autotuner.Autotuner)
    fn = kernel.fn if autotuned else kernel  # the jitted function, untuned
    source = ASTSource(
        fn=fn, signature={**signature, **dict.fromkeys(constants, "constexpr")},
        constexprs=constants,
    )  # fmt: skip
    options = {"enable_fp_fusion": False, "num_warps": num_warps}
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options).asm[output]


def run_in_triton_interpreter(script: str) -> None:
    """Run ``script`` in a subprocess under Triton's CPU interpreter (the mode is read when
    a kernel is defined, so not in this process); fail with its error output."""
    pytest.importorskip("triton", reason="Triton is not installed (CPU-only setup)")
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def benchmark_module(name: str) -> Iterator[object]:
    """``benchmarks/<name>.py`` as a module, with ``benchmarks/`` on ``sys.path`` for the
    helpers beside it, for a fixture to ``yield from``; both are undone after."""
    import importlib.util
    import sys

    folder = Path(__file__).parents[1] / "benchmarks"
    sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # a dataclass of the module looks it up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
        sys.path.remove(str(folder))


def build_datamodule(cfg: DictConfig, output_dir: Path) -> tuple[Any, dict[str, Any]]:
    """The data of ``cfg`` as a run builds it: instantiated, loaded and set up, with its
    summary (also written to ``output_dir/data_summary.json``)."""
    from cloudlstm.assembly.build import (
        instantiate_datamodule,
        set_up_datamodule,
        write_data_summary,
    )

    datamodule = instantiate_datamodule(cfg)
    datamodule.prepare_data()
    summary = set_up_datamodule(datamodule)
    write_data_summary(output_dir, summary)
    return datamodule, summary


@contextmanager
def ctrl_c_as_in_a_terminal() -> Iterator[None]:
    """Within the block SIGINT raises KeyboardInterrupt, as in a program started from a
    terminal, even where this process ignores it (pytest-xdist's workers, a job started
    with `&`); the handler before is restored after."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
