"""cloudlstm: forecasting point-cloud streams with CloudLSTM and its baselines."""

import logging
import os
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("cloudlstm")
except PackageNotFoundError:  # run from a checkout that was never installed (PYTHONPATH=src)
    __version__ = "0+unknown"

# Each training step allocates several tens-of-MB tensors (gathered neighbourhoods and
# their gradients); with transparent huge pages torch's CPU allocator avoids most of the
# page faults (measured: allocate-and-fill of 68 MB 67 ms -> 13 ms on the dev VM).
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

# After each parallel op torch's OpenMP threads spin 300,000 times before they sleep, long
# enough to take the cores from the numba kernels' threads that run next (nn/threads.py);
# asleep (OMP_WAIT_POLICY=PASSIVE), they take ~0.1 ms to wake for every op of a small
# step. A short spin keeps both fast: a Beijing-size CloudLSTM step 177 ms against 210-228
# (PASSIVE) and 179 (default), at N = 100 1.39-1.58 s against 1.50 and 2.03-2.11 s, and
# ConvLSTM's 57 ms against 106-132 and 55 (benchmarks/bench_step.py, 2-vCPU dev machine,
# 2026-11-27, at f4a0dcd; docs/performance.md).
# Read once, when torch loads its OpenMP runtime: so only if cloudlstm is imported first.
os.environ.setdefault("GOMP_SPINCOUNT", "10000")

# numexpr, imported by pandas, logs its default thread count at INFO: a line of every
# program's output that says nothing to the user, and before a program's one-line error
# a second line. Its default is kept; only the line is not said.
logging.getLogger("numexpr.utils").setLevel(logging.WARNING)


def _metric_mode(key: str) -> str:
    """``${metric_mode:<key>}`` in the configs: ``min`` or ``max``, the direction declared
    with the metric (``cloudlstm.engine.declared_metrics.monitor_mode``)."""
    from cloudlstm.engine.declared_metrics import monitor_mode

    return str(monitor_mode(str(key)))


def _gpus_per_node(accelerator: object, devices: object) -> int | None:
    """``${gpus_per_node:${trainer.accelerator},${trainer.devices}}`` in the SLURM
    launcher's config: the number of devices the trainer names per node, or None (no
    ``--gpus-per-node``) for a CPU trainer, whose processes are tasks without GPUs
    (:func:`cloudlstm.assembly.devices.slurm_gpus_per_node`)."""
    from cloudlstm.assembly.devices import slurm_gpus_per_node

    return slurm_gpus_per_node(accelerator, devices)


def _tasks_per_node(accelerator: object, devices: object) -> int:
    """``${tasks_per_node:${trainer.accelerator},${trainer.devices}}`` in the SLURM
    launcher's config: one task per device the trainer names per node
    (:func:`cloudlstm.assembly.devices.slurm_tasks_per_node`)."""
    from cloudlstm.assembly.devices import slurm_tasks_per_node

    return slurm_tasks_per_node(accelerator, devices)


def _num_nodes(nodes: object) -> int:
    """``${num_nodes:${trainer.num_nodes}}`` in the SLURM launcher's config: the nodes a job
    asks for, a number Lightning takes (:func:`cloudlstm.assembly.devices.user_nodes`), so
    that ``0``, ``-1`` or ``"2"`` is refused in one line before it is submitted."""
    from cloudlstm.assembly.devices import user_nodes

    return user_nodes(nodes)


def _warmup_within(steps: int, budget: int) -> int:
    """``${warmup_within:250,${trainer.max_steps}}`` in the strong recipe: ``steps`` of
    warm-up, or a sixth of a step budget too short to hold them (the demo's 150 steps warm
    up for 25), so that a short run needs no schedule setting of its own and any recipe
    runs at any budget. A budget of no steps (-1: epochs) keeps ``steps``, which the
    schedule then refuses with the reason."""
    steps, budget = int(steps), int(budget)
    return steps if budget <= 0 or steps < budget else budget // 6


def _register_resolver() -> None:
    # Here, because every program (train.py, eval.py, the sweeper, a SLURM job unpickling
    # its task) imports this package before Hydra resolves a config; the metric
    # declarations and the reading of trainer.devices (light modules, without torch) are
    # imported only when a value is resolved.
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("metric_mode"):
        OmegaConf.register_new_resolver("metric_mode", _metric_mode)
    if not OmegaConf.has_resolver("gpus_per_node"):
        OmegaConf.register_new_resolver("gpus_per_node", _gpus_per_node)
    if not OmegaConf.has_resolver("tasks_per_node"):
        OmegaConf.register_new_resolver("tasks_per_node", _tasks_per_node)
    if not OmegaConf.has_resolver("num_nodes"):
        OmegaConf.register_new_resolver("num_nodes", _num_nodes)
    if not OmegaConf.has_resolver("warmup_within"):
        OmegaConf.register_new_resolver("warmup_within", _warmup_within)


_register_resolver()


def __getattr__(name: str) -> object:
    # `from cloudlstm import Forecaster, TimeReading` without importing torch, Lightning and
    # Hydra on `import cloudlstm`
    if name in ("Forecaster", "TimeReading"):
        from cloudlstm import forecast

        return getattr(forecast, name)
    raise AttributeError(f"module 'cloudlstm' has no attribute {name!r}")
