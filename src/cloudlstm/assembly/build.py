"""Build what every entry point needs from a composed config: data, model, loggers, trainer."""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from lightning.fabric.accelerators import CUDAAccelerator
from lightning.pytorch.callbacks import LearningRateMonitor, ModelSummary, ProgressBar
from omegaconf import DictConfig, ListConfig, OmegaConf

from cloudlstm.assembly.batch_limits import processes
from cloudlstm.assembly.compile import compile_for_run
from cloudlstm.assembly.config import instantiate_group, user_errors_unwrapped
from cloudlstm.assembly.devices import (
    run_accelerator,
    user_accelerator,
    user_cpu_devices,
    user_devices,
    user_nodes,
)
from cloudlstm.assembly.source_options import check_read_source_options
from cloudlstm.data.spec import DataSpec
from cloudlstm.engine.declared_metrics import monitor_mode
from cloudlstm.engine.host_memory import (
    keep_freed_memory,
    keeps_freed_memory,
    malloc_defaults,
)
from cloudlstm.engine.module import make_optimizer
from cloudlstm.engine.objective import validation_keys
from cloudlstm.engine.parent_watch import name_the_launching_process
from cloudlstm.engine.signals import SignalsTogether
from cloudlstm.errors import UserError, no_gpu, replacing
from cloudlstm.models.build import build_model
from cloudlstm.rundir.layout import CONFIG_FILE, DATA_SUMMARY_FILE, config_text, wandb_run_id
from cloudlstm.rundir.preemption import CheckpointOnSigterm


def instantiate(config: Any, **kwargs: Any) -> Any:
    """``hydra.utils.instantiate`` with :func:`user_errors_unwrapped`."""
    with user_errors_unwrapped():
        return hydra.utils.instantiate(config, **kwargs)


def configure_process(cfg: DictConfig) -> None:
    """A job's process-wide settings: torch's intra-op threads (``torch_threads``), freed
    memory kept for the next step (``keep_freed_memory``, see
    :mod:`cloudlstm.engine.host_memory`), and cuDNN's search for the fastest kernels at the
    process's own setting, which the Trainer then sets where ``trainer.benchmark`` is given
    (Lightning leaves it as it finds it where that is null); torch's deterministic mode and
    ``CUBLAS_WORKSPACE_CONFIG`` as before the first job
    (:func:`restore_deterministic_settings`), and dynamo's caches and CUDA graphs emptied.

    ``keep_freed_memory: auto`` (the default, also for runs saved before the key) keeps it
    unless ``model.checkpointing`` is on: a run that checkpoints has chosen memory over
    speed, and kept memory raised its peak at N = 13,000 from 1.9 to 2.4 GB.
    ``torch_threads`` is checked already (:func:`check_process_settings`). Each is set for
    every job, to the defaults too: a job after another in one process (a sweep's) would
    otherwise run with the earlier job's.
    """
    set_torch_threads(cfg)
    torch.backends.cudnn.benchmark = _before_jobs("cudnn.benchmark", torch.backends.cudnn.benchmark)
    restore_deterministic_settings()
    # dynamo's caches live as long as the process: a compiled job of a sweep would add its
    # graphs to an earlier job's of the same forward (recompile_limit, 8) and fall back to
    # eager, and an eager job would hold them (and the CUDA graphs' memory pool of
    # reduce-overhead) for nothing; emptying them takes a fraction of a millisecond
    torch._dynamo.reset()
    checkpointing = (cfg.get("model") or {}).get("checkpointing", False)
    if keeps_freed_memory(cfg.get("keep_freed_memory", "auto"), checkpointing):
        keep_freed_memory()
    else:
        malloc_defaults()


# torch's settings before a job of this process changed them: what a job that leaves one
# at its default gets
_settings_before_jobs: dict[str, Any] = {}


def _before_jobs(name: str, now: Any) -> Any:
    """Setting ``name`` as it was before the first job of this process (``now`` at that
    job)."""
    return _settings_before_jobs.setdefault(name, now)


# what Lightning sets in the environment for trainer.deterministic=true
CUBLAS_WORKSPACE = "CUBLAS_WORKSPACE_CONFIG"


def restore_deterministic_settings() -> None:
    """torch's deterministic mode and ``CUBLAS_WORKSPACE_CONFIG`` as they were before this
    process's first job: Lightning sets both for ``trainer.deterministic=true`` and resets
    neither, so a later job of a sweep would run deterministic where its
    ``trainer.deterministic`` is null, and would hand the variable to the processes it
    starts (DDP's) and to torch's deterministic checks where it is false."""
    variable = _before_jobs(CUBLAS_WORKSPACE, os.environ.get(CUBLAS_WORKSPACE))
    if variable is None:
        os.environ.pop(CUBLAS_WORKSPACE, None)
    else:
        os.environ[CUBLAS_WORKSPACE] = variable
    mode = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    enabled, warn_only = _before_jobs("deterministic_algorithms", mode)
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


def set_torch_threads(cfg: DictConfig) -> None:
    """torch's intra-op threads, ``torch_threads`` (checked already,
    :func:`check_process_settings`); null, or a config without it, torch's default: the
    count the process had before its first job set one, not an earlier job's."""
    threads = cfg.get("torch_threads")
    default = _before_jobs("torch_threads", torch.get_num_threads())
    torch.set_num_threads(default if threads is None else int(threads))


def check_process_settings(cfg: DictConfig) -> None:
    """``seed`` (a whole number numpy takes, 0 to 2**32 - 1), ``torch_threads`` (null for
    torch's default, or a number of threads >= 1), the switches (``train``, ``test``,
    ``print_config``, ``report.figures``: true or false), ``tags`` (a list) and the report's
    ``window`` (an index >= 0) and ``channel`` (an index >= 0 or a name); ``ckpt_path``,
    the checkpoint to test, only with ``train=false``.

    Raises:
        UserError: one is something else (``seed=abc``, ``torch_threads=0``,
            ``train=maybe``, ``tags=5``), or a ``ckpt_path`` is given to a training.
    """
    for key in ("train", "test", "print_config", "report.figures"):
        value = OmegaConf.select(cfg, key)
        if value is not None and not isinstance(value, bool):
            raise UserError(f"{key}={value!r}: use true or false.")
    tags = cfg.get("tags")
    if tags is not None and not isinstance(tags, (list, ListConfig)):
        raise UserError(f"tags={tags!r}: give a list, e.g. tags=[baseline,first_try].")
    if cfg.get("train") and cfg.get("ckpt_path") is not None:
        raise UserError(
            f"ckpt_path={cfg.ckpt_path} is the checkpoint that train=false tests: give "
            f"train=false to test it, or resume={cfg.ckpt_path} to train on from it."
        )
    _check_report_indices(cfg.get("report") or {})

    seed = cfg.get("seed", 0)  # a job's config always has one
    if not _whole(seed) or not 0 <= seed < 2**32:
        raise UserError(f"seed={seed!r}: give a whole number from 0 to {2**32 - 1}, e.g. seed=42.")
    threads = cfg.get("torch_threads")
    if threads is not None and not (_whole(threads) and threads >= 1):
        raise UserError(
            f"torch_threads={threads!r}: give a number of threads >= 1, or null for torch's "
            "default (one per core)."
        )


def _check_report_indices(report: Mapping[str, Any]) -> None:
    """``report.window`` an index >= 0, ``report.channel`` an index >= 0 or a name: which
    window and channel exist is known once the data are read
    (:func:`cloudlstm.report.figures.figure_choice`)."""
    window, channel = report.get("window", 0), report.get("channel", 0)
    if not (_whole(window) and window >= 0):
        raise UserError(
            f"report.window={window!r}: give the index of the test window the figures draw, "
            "from 0 (the first)."
        )
    if not ((_whole(channel) and channel >= 0) or (isinstance(channel, str) and channel)):
        raise UserError(
            f"report.channel={channel!r}: give the channel the figures draw, by name or by "
            "index from 0 (the first)."
        )


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def instantiate_datamodule(cfg: DictConfig) -> L.LightningDataModule:
    """The datamodule of ``cfg.data``, not loaded yet.

    ``cfg`` is in today's form (an older run's config is brought to it first, as a copy:
    :func:`~cloudlstm.rundir.old_configs.current_config`) and is not changed.

    Raises:
        UserError: a mandatory data key (e.g. ``data.source.path``) is missing, or the
            command sets a source option that the source does not read
            (:func:`~cloudlstm.assembly.source_options.check_read_source_options`).
    """
    missing = sorted(OmegaConf.missing_keys(cfg.data))
    if missing:  # e.g. data=points without data.source.path: say so, not a Hydra traceback
        example = " ".join(f"{k}=..." for k in missing)
        raise UserError(
            f"The data config needs {', '.join(missing)}; give it on the command line: "
            f"`python train.py <data=...> {example}` (e.g. data.source.path=/my/file.csv)."
        )
    check_read_source_options(cfg.data)
    return instantiate(cfg.data)


def set_up_datamodule(datamodule: L.LightningDataModule) -> dict[str, Any]:
    """Set up a loaded datamodule, print its summary and return it."""
    datamodule.setup("fit")
    datamodule.print_summary()
    return datamodule.summary()


def write_data_summary(output_dir: Path, summary: dict[str, Any]) -> None:
    """``<output_dir>/data_summary.json``.

    Raises:
        OutOfSpaceError: no room for it, naming it (:func:`~cloudlstm.errors.replacing`).
    """
    with replacing(output_dir / DATA_SUMMARY_FILE) as part:
        part.write_text(json.dumps(summary, indent=2))


def build_module(
    cfg: DictConfig, spec: DataSpec, model_config: DictConfig | None = None
) -> L.LightningModule:
    """The forecaster (``model_config``, by default ``cfg.model``, sized for ``spec``) in the
    training module (``cfg.module``), which carries ``spec``."""
    model_config = cfg.model if model_config is None else model_config
    with user_errors_unwrapped():
        taught = bool((cfg.get("module") or {}).get("scheduled_sampling"))
        model = compile_for_run(
            build_model(model_config, spec), model_config, cfg.get("trainer"), spec, taught
        )
    scheduler = cfg.get("scheduler")
    # partial, then called: Hydra would turn the spec (a dataclass) into a config
    make_module = instantiate(cfg.module, _partial_=True)
    with user_errors_unwrapped():
        return make_module(
            model=model,
            spec=spec,
            optimizer=hydra.utils.instantiate(cfg.optimizer),
            scheduler=hydra.utils.instantiate(scheduler) if scheduler else None,
        )


def build_loggers(cfg: DictConfig, run: dict[str, Any], output_dir: Path) -> list[Any]:
    """Experiment loggers named, grouped and tagged after ``run`` (see ``describe_run``).

    A W&B logger gets the run id stored in ``<run dir>/wandb_run_id.txt`` (created on first
    use) and ``resume="allow"``, so a job started again in the same run directory, such as
    a requeued SLURM job, continues the same W&B run instead of opening a second one. With
    ``resume=never`` the run starts afresh, and so does its W&B run (a new id).
    """
    fill = {"name": run["name"], "group": run["group"], "tags": run["tags"]}
    wandb_conf = (cfg.get("logger") or {}).get("wandb")
    if wandb_conf is not None and "id" in wandb_conf:
        fill["id"] = wandb_run_id(output_dir, new=cfg.get("resume") == "never")
    return instantiate_group(cfg.get("logger"), **fill)


def check_accelerator(trainer: DictConfig | dict[str, Any]) -> None:
    """Refuse a GPU Trainer where Lightning finds no GPU, or fewer CUDA GPUs than it asks,
    before the data are loaded (Lightning would say only "No supported gpu backend found!"),
    and a ``trainer.accelerator`` Lightning does not take. ``gpu`` is Apple's GPU where
    there is one, as Lightning maps it (:func:`~cloudlstm.assembly.devices.run_accelerator`),
    one device that no CUDA count limits.

    Raises:
        UserError: names the setting, what torch sees and the way out; or ``accelerator``
            is no name Lightning takes (:func:`~cloudlstm.assembly.devices.user_accelerator`);
            or ``devices`` names no device
            (:func:`~cloudlstm.assembly.devices.user_devices`).
    """
    accelerator = user_accelerator(trainer.get("accelerator", "auto"))
    if accelerator not in ("gpu", "cuda") or run_accelerator(accelerator) == "mps":
        return
    if not CUDAAccelerator.is_available():
        if str(trainer.get("strategy", "")).startswith("ddp"):  # trainer=ddp's processes
            raise no_gpu(
                f"trainer.accelerator={accelerator} (trainer=ddp)",
                "run its processes on the CPU: trainer=ddp_cpu",
            )
        raise no_gpu(
            f"trainer.accelerator={accelerator} (trainer=gpu)",
            "run on the CPU: trainer.accelerator=cpu",
        )
    devices, visible = trainer.get("devices", "auto"), CUDAAccelerator.auto_device_count()
    count = user_devices(devices)  # "4" and "0,1,2" name as many as 4 and [0, 1, 2]
    if count is not None and count > visible:
        raise UserError(
            f"trainer.devices={devices}, but torch sees {visible} GPU(s): set "
            f"trainer.devices={visible} (or auto), or run where {count} GPUs are visible."
        )


def check_trainer_settings(trainer: DictConfig | None) -> None:
    """Build the configured Trainer once, quietly and without callbacks or loggers, so that
    a setting Lightning refuses (``trainer.precision=17``, ``trainer.devices=0``) is
    reported before the data are read, not after, as is one it would run as another
    (``16-mixed`` on the CPU, which it trains in bfloat16); and refuse a negative
    ``trainer.log_every_n_steps``, which Lightning takes for "every step", and a fraction
    of an epoch as ``val_check_interval`` under a recipe that validates by steps (Lightning
    refuses it without saying that the recipe set ``check_val_every_n_epoch=null``).

    Raises:
        UserError: ``log_every_n_steps`` is not a whole number >= 0, ``val_check_interval``
            is a fraction where steps are counted, ``devices`` names no device or is of
            no form Lightning takes (:func:`~cloudlstm.assembly.devices.named_devices`:
            0, -2, ``"two"``, ``[0, 0]``; on the CPU device indices and -1), or
            ``num_nodes`` is no whole number >= 1
            (:func:`~cloudlstm.assembly.devices.named_nodes`). Lightning's own
            refusals leave as Hydra's ``InstantiationException``, which
            :func:`cloudlstm.errors.user_error_of` turns into one line.
    """
    if trainer is None:
        return
    every = trainer.get("log_every_n_steps")
    if every is not None and not (_whole(every) and every >= 0):
        raise UserError(
            f"trainer.log_every_n_steps={every!r}: give a whole number of steps >= 1 (0: no "
            "training metrics logged within an epoch), e.g. trainer.log_every_n_steps=50."
        )
    interval = trainer.get("val_check_interval")
    if isinstance(interval, float) and trainer.get("check_val_every_n_epoch", 1) is None:
        raise UserError(
            f"trainer.val_check_interval={interval}: a fraction of an epoch, but the recipe "
            "validates every N training steps across epochs (trainer.check_val_every_n_epoch"
            "=null): give a number of steps, e.g. trainer.val_check_interval=250, or validate "
            "within each epoch with trainer.check_val_every_n_epoch=1."
        )
    if trainer.get("devices") is not None:  # Lightning's lines name no way out
        check_devices(trainer)
    _check_minimum_below_maximum(trainer)
    check_nodes_started(trainer, os.environ)
    with _lightning_quiet():
        built = instantiate(trainer, callbacks=[], logger=False)
    asked = str(trainer.get("precision"))
    if asked in ("16", "16-mixed") and built.precision == "bf16-mixed":
        # Lightning runs it as bf16 with a warning; the run's config would say float16
        raise UserError(
            f"trainer.precision={asked}: float16 autocast does not run on the CPU, where "
            "Lightning would train in bfloat16 instead: give trainer.precision=bf16-mixed "
            "(or 32) on the CPU, or train on a GPU."
        )


def check_devices(trainer: Mapping[str, Any]) -> None:
    """Refuse a ``trainer.devices`` that names no device, or that Lightning refuses on the
    accelerator the Trainer runs on: on the CPU a number of processes alone
    (:func:`~cloudlstm.assembly.devices.user_cpu_devices`).

    Raises:
        UserError: one line naming the value and what to give.
    """
    devices, cpu = trainer["devices"], _cpu_accelerator(trainer)
    if cpu is None:
        user_devices(devices)
    else:
        user_cpu_devices(devices, cpu)


def _cpu_accelerator(trainer: Mapping[str, Any]) -> str | None:
    """How ``trainer.accelerator`` comes to mean the CPU, for a line, or None for another
    accelerator: ``cpu``, or ``auto`` where Lightning picks the CPU, finding neither a TPU
    nor a GPU (:func:`~cloudlstm.assembly.devices.run_accelerator`)."""
    accelerator = trainer.get("accelerator", "auto")
    if run_accelerator(accelerator) != "cpu":
        return None
    if accelerator == "cpu":
        return "trainer.accelerator=cpu"
    return "trainer.accelerator=auto, and torch sees no GPU"


def _check_minimum_below_maximum(trainer: Mapping[str, Any]) -> None:
    """Refuse ``min_epochs`` above ``max_epochs`` (or ``min_steps`` above ``max_steps``):
    Lightning stops at the maximum without a word, so the minimum asked for is not run."""
    for unit in ("epochs", "steps"):
        low, high = trainer.get(f"min_{unit}"), trainer.get(f"max_{unit}")
        if _whole(low) and _whole(high) and high >= 0 and low > high:
            raise UserError(
                f"trainer.min_{unit}={low}: above trainer.max_{unit}={high}, where Lightning "
                f"stops without a word: lower it, or raise trainer.max_{unit} (-1: no limit)."
            )


# What a launcher of one process per node (or per task) leaves in each process's environment:
# torchrun, SLURM, LSF, MPI, and Lightning's own variables for a launch by hand
LAUNCHER_VARIABLES = (
    "WORLD_SIZE", "TORCHELASTIC_RUN_ID", "NODE_RANK", "MASTER_ADDR", "SLURM_NTASKS",
    "LSB_JOBID", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
)  # fmt: skip


def check_nodes_started(trainer: Mapping[str, Any], environ: Mapping[str, str]) -> None:
    """Refuse ``trainer.num_nodes`` above 1 in a process that no launcher started as one
    node of several: it would wait for nodes that never come (torch's rendezvous gives up
    after 30 minutes), as on a laptop evaluating a run trained on two nodes. A cluster
    environment given as a plugin is the user's own launcher, and is trusted.

    Raises:
        UserError: names the setting, the ways to start the nodes and the way out; or
            ``num_nodes`` is no whole number >= 1
            (:func:`~cloudlstm.assembly.devices.user_nodes`).
    """
    nodes = user_nodes(trainer.get("num_nodes", 1))
    if nodes == 1 or any(v in environ for v in LAUNCHER_VARIABLES):
        return
    plugins = trainer.get("plugins") or []
    if any("environments" in str(p.get("_target_", "")) for p in plugins if hasattr(p, "get")):
        return
    raise UserError(
        f"trainer.num_nodes={nodes}, but no launcher started this process as one of "
        f"{nodes} nodes: it would wait for the others for 30 minutes, then fail. Start it "
        f"on every node (srun in a job of --nodes={nodes}, torchrun --nnodes {nodes}, "
        "hydra/launcher=slurm, or by hand with MASTER_ADDR, MASTER_PORT and NODE_RANK: "
        "docs/cluster.md#several-nodes), or run on this machine alone: trainer.num_nodes=1."
    )


@contextmanager
def _lightning_quiet() -> Iterator[None]:
    """No log line or warning from Lightning: the Trainer built in earnest says them."""
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _may_start_processes(trainer: Any) -> bool:
    """Whether a Trainer of these settings may start DDP processes: its strategy is DDP, or
    Lightning's choice (``auto``, the default) for more than one device or node, which is
    DDP (``trainer.devices=2``)."""
    strategy = trainer.get("strategy", "auto")
    if isinstance(strategy, str) and strategy.startswith("ddp"):
        return True
    return strategy in (None, "auto") and processes(trainer) > 1


def build_trainer(cfg: DictConfig, loggers: list[Any]) -> L.Trainer:
    """The Lightning Trainer with the configured callbacks and these loggers.

    Callbacks the trainer's own switches turn off are left out, where Lightning would
    refuse to start: the progress bar with ``trainer.enable_progress_bar=false``, the model
    summary with ``trainer.enable_model_summary=false``, the learning-rate monitor without
    a logger.
    """
    callbacks = instantiate_group(cfg.get("callbacks"))
    trainer = cfg.get("trainer") or {}
    if not loggers:  # nothing to write learning rates to
        callbacks = [cb for cb in callbacks if not isinstance(cb, LearningRateMonitor)]
    if trainer.get("enable_progress_bar", True) is False:
        callbacks = [cb for cb in callbacks if not isinstance(cb, ProgressBar)]
    if trainer.get("enable_model_summary", True) is False:
        callbacks = [cb for cb in callbacks if not isinstance(cb, ModelSummary)]
    # first: under DDP its step-end hook decides, for every process at once, whether a
    # signal stops the run, before CheckpointOnSigterm's saves (engine/signals.py); those
    # come after the other callbacks' step-end hooks (a weight average's update, the step
    # counts), so that the step they save is whole (Lightning puts checkpoints after them)
    sigterm = [cb for cb in callbacks if isinstance(cb, CheckpointOnSigterm)]
    others = [cb for cb in callbacks if not isinstance(cb, CheckpointOnSigterm)]
    callbacks = [SignalsTogether(), *others, *sigterm]
    if _may_start_processes(trainer):
        name_the_launching_process()  # to the processes the Trainer may start
    return hydra.utils.instantiate(
        cfg.trainer,
        callbacks=callbacks,
        logger=loggers or False,
        **validation_in_optimizer_steps(trainer),
    )


def validation_in_optimizer_steps(trainer: Mapping[str, Any]) -> dict[str, int]:
    """The ``val_check_interval`` Lightning is given where the recipe validates every N
    optimizer steps across epochs (``check_val_every_n_epoch=null``) and gradients are
    accumulated over A batches: N x A batches, which Lightning counts; empty where nothing
    changes.

    Why: Lightning counts that interval in training batches, while ``max_steps``, the
    schedules and the step checkpoints count optimizer steps. Given as it is, A = 4 would
    validate the recipe's "every 250 steps" every 62.5 steps, and early stopping, whose
    patience counts validations, would act after a quarter of the steps it is meant to.
    """
    interval = trainer.get("val_check_interval")
    accumulate = trainer.get("accumulate_grad_batches", 1)
    by_steps = trainer.get("check_val_every_n_epoch", 1) is None
    if not (by_steps and _whole(interval) and _whole(accumulate) and accumulate > 1):
        return {}
    return {"val_check_interval": interval * accumulate}


def check_optimizer(cfg: DictConfig) -> None:
    """Build the configured optimizer over one stand-in weight, and its learning-rate
    schedule: an invalid value (``optimizer.lr=-1``, ``scheduler.warmup_steps`` beyond
    ``trainer.max_steps``) is refused before the data are read and a logger starts, not at
    the first step. (The gradient clipping of its steps is checked with the Trainer's other
    values, :func:`~cloudlstm.models.options.check_option_types`.)

    Raises:
        UserError: one of the optimizer's or the schedule's values is invalid.
    """
    if cfg.get("optimizer") is not None:
        weight = torch.nn.Parameter(torch.zeros(1))
        optimizer = make_optimizer(hydra.utils.instantiate(cfg.optimizer), [weight])
        check_half_weights(optimizer, (cfg.get("trainer") or {}).get("precision"))
        if cfg.get("scheduler") is not None:  # its budget against trainer.max_steps
            hydra.utils.instantiate(cfg.scheduler)(optimizer=optimizer)


def check_half_weights(optimizer: torch.optim.Optimizer, precision: Any) -> None:
    """Refuse float16 weights (``trainer.precision=16-true``) under an optimizer that
    divides by a running root mean square plus ``eps`` (the Adam family, the recipe's
    AdamW): float16 rounds its ``eps`` of 1e-8 to 0 and a small gradient's square to 0, so
    the first update divides 0 by 0 and the run stops as diverged, blaming the learning rate.

    Raises:
        UserError: names the setting and the precisions that train.
    """
    eps = optimizer.param_groups[0].get("eps")
    if str(precision) != "16-true" or not isinstance(eps, float):
        return
    raise UserError(
        f"trainer.precision=16-true keeps the weights in float16, where "
        f"{type(optimizer).__name__}'s update divides by zero at the first step (its eps="
        f"{eps:g} is 0 in float16): train with trainer.precision=16-mixed (float16 "
        "arithmetic, float32 weights; a GPU), bf16-mixed or bf16-true."
    )


def check_metric_modes(cfg: DictConfig) -> None:
    """Refuse a ``mode`` contrary to the direction declared with its monitored metric.

    The configs take each mode from the metric (``${metric_mode:${monitor}}``): ``min`` for
    ``val/mae`` and ``val/loss``, ``max`` for ``val/psnr`` and ``val/ssim``. A mode given on
    the command line or in a config (``callbacks.model_checkpoint.mode=min`` with
    ``monitor=val/ssim``) would keep the worst checkpoint, stop early on the wrong trend or
    halve the learning rate while the metric improves. A key this package does not declare
    (its direction unknown here) takes the mode given.

    Raises:
        UserError: a callback's or the scheduler's ``mode`` is the other one.
    """
    settings = _callback_nodes(cfg)
    scheduler = cfg.get("scheduler")
    if isinstance(scheduler, DictConfig) and "mode" in scheduler:  # a plateau scheduler
        module = cfg.get("module") or {}
        settings.append(("scheduler", {"mode": scheduler.mode, "monitor": module.get("monitor")}))
    for where, node in settings:
        mode, monitor = node.get("mode"), node.get("monitor")
        declared = monitor_mode(str(monitor), default=None) if monitor else None
        if mode is None or declared is None or str(mode) == declared:
            continue
        raise UserError(
            f"{where}.mode={mode} contradicts monitor={monitor}, which improves as it gets "
            f"{'higher' if declared == 'max' else 'lower'} (mode {declared}, declared with the "
            f"metric): leave {where}.mode out, it follows the metric."
        )


def check_monitored(cfg: DictConfig) -> None:
    """Refuse a ``monitor`` (the top-level one, the training module's, a callback's) that
    no validation logs: Lightning would find out at the end of the first validation, after
    the steps before it had trained, with a traceback.

    Raises:
        UserError: the key is not ``val/loss``, ``val/mae_best``, ``val/<a declared
            metric>``, or ``val/crps`` for a run of quantile forecasts.
    """
    module = cfg.get("module") or {}
    logged = validation_keys(bool(module.get("quantiles")))
    settings = [("monitor", cfg.get("monitor")), ("module.monitor", module.get("monitor"))]
    for where, node in _callback_nodes(cfg):
        settings.append((f"{where}.monitor", node.get("monitor")))
    for where, key in settings:
        if key is None or str(key) in logged:
            continue
        quantile = "" if module.get("quantiles") else " (val/crps with module.quantiles)"
        raise UserError(
            f"{where}={key} is no metric a validation logs: name one of {', '.join(logged)}"
            f"{quantile}, e.g. monitor=val/mae."
        )


def _callback_nodes(cfg: DictConfig) -> list[tuple[str, DictConfig]]:
    """``(callbacks.<name>, node)`` of each callback entry the config builds or sets."""
    return [
        (f"callbacks.{name}", node)
        for name, node in (cfg.get("callbacks") or {}).items()
        if isinstance(node, DictConfig)
    ]


def save_job_config(cfg: DictConfig, output_dir: Path) -> DictConfig:
    """Write the resolved job config (without ``hydra``) to ``config.yaml``
    (:func:`~cloudlstm.rundir.layout.config_text`, marked whole); return it."""
    job_cfg = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])
    with replacing(output_dir / CONFIG_FILE) as part:  # whole, or the old file left as it was
        part.write_text(config_text(job_cfg), encoding="utf-8")
    return job_cfg
