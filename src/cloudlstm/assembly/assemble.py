"""One way to put a run together, and one way to take a trained one back.

:func:`assemble` turns a composed config into everything a job runs: the data (set up, its
summary written), the data's description, the model sized from it inside the training
module, the loggers and the Trainer. ``train.py`` assembles a new run; ``eval.py``
assembles one around a checkpoint, whose scaler, points and weights are checked and
loaded on the way. :func:`restore` takes a trained model back from its run directory alone
(``predict.py``, :class:`cloudlstm.Forecaster`): the description stored in the checkpoint
replaces the data.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from torch import nn

from cloudlstm.assembly.batch_limits import (
    check_accumulation,
    check_batch_limits,
    check_validation_interval,
    splits_run,
    warn_batch_above_windows,
    warn_few_windows,
    warn_no_validation_in_budget,
    warn_schedule_cut_short,
)
from cloudlstm.assembly.build import (
    build_loggers,
    build_module,
    build_trainer,
    check_accelerator,
    check_trainer_settings,
    instantiate_datamodule,
    save_job_config,
    set_up_datamodule,
    write_data_summary,
)
from cloudlstm.assembly.calibration_split import check_calibration_split
from cloudlstm.assembly.checkpoint_fit import (
    TrainedCheckpoint,
    check_points,
    check_same_clock,
    check_same_graph,
    check_same_outputs,
    check_same_step,
    check_trained_neighbours,
    check_trained_sizes,
    load_weights,
    restore_scaling,
)
from cloudlstm.assembly.config import describe_run
from cloudlstm.assembly.held_out import check_model_forecasts_held_out, check_same_held_out
from cloudlstm.assembly.memory_fit import check_model_fits, trains_in_host_memory
from cloudlstm.assembly.run_checkpoint import check_run_checkpoint
from cloudlstm.data.spec import DataSpec
from cloudlstm.engine.distributed import per_process_limits
from cloudlstm.engine.forecast_columns import check_forecast_columns
from cloudlstm.engine.loggers import finish_wandb
from cloudlstm.engine.module import ForecastModule
from cloudlstm.models.build import build_model, with_sizes
from cloudlstm.report.dashboard import define_wandb_metrics
from cloudlstm.rundir.checkpoints import Remedy
from cloudlstm.rundir.layout import (
    check_run_dir,
    find_checkpoint,
    other_chosen,
    other_sound,
    read_run_config,
)

log = logging.getLogger(__name__)


@dataclass
class Assembly:
    """A run, put together: see :func:`assemble`."""

    cfg: DictConfig
    job_cfg: DictConfig  # what config.yaml holds: the composed config without ``hydra``
    output_dir: Path
    datamodule: L.LightningDataModule
    summary: dict[str, Any]
    spec: DataSpec
    module: ForecastModule
    loggers: list[Any]
    trainer: L.Trainer
    run: dict[str, Any]  # name, group, tags (describe_run)
    # the checkpoint's training points (None: no checkpoint, or one that did not store them)
    trained_points: list[str] | None = None

    @property
    def model(self) -> nn.Module:
        return self.module.model


def assemble(
    cfg: DictConfig,
    output_dir: Path,
    checkpoint: Path | TrainedCheckpoint | None = None,
    with_loggers: bool = True,
) -> Assembly:
    """Data, description, model, training module, loggers and Trainer of ``cfg``.

    Writes ``data_summary.json`` and ``config.yaml`` into ``output_dir``; ``cfg`` itself is
    never changed (an older run's config is brought to today's form before, as a copy:
    :func:`~cloudlstm.rundir.old_configs.current_config`). With ``checkpoint`` (evaluating
    a trained run: a path, or the checkpoint :func:`read_evaluated` read), read once, the
    data are normalised with its training scaler, and its weights are loaded into the
    module after checking that they fit the data's points and the model.

    Raises:
        UserError: the Trainer asks for GPUs torch does not see or has a setting Lightning
            refuses (:func:`~cloudlstm.assembly.build.check_trainer_settings`, both before
            the data are read), a data key is missing,
            the checkpoint cannot be read or does not fit, or the model cannot forecast the
            points held out of training (:mod:`~cloudlstm.assembly.held_out`).
    """
    check_accelerator(cfg.get("trainer") or {})
    check_trainer_settings(cfg.get("trainer"))
    trained = read_evaluated(checkpoint) if isinstance(checkpoint, Path) else checkpoint
    datamodule = instantiate_datamodule(cfg)
    datamodule.prepare_data()
    if trained is not None:
        _use_training_order(datamodule, trained)
        restore_scaling(datamodule, trained)
    summary = set_up_datamodule(datamodule)
    batch_size = int(getattr(datamodule, "batch_size", 1))
    check_batch_limits(cfg, summary.get("windows", {}), batch_size)
    check_calibration_split(cfg, summary.get("windows", {}), batch_size)
    warn_schedule_cut_short(cfg, summary.get("windows", {}), batch_size)
    warn_few_windows(cfg, summary)
    warn_batch_above_windows(cfg, summary.get("windows", {}), batch_size)
    warn_no_validation_in_budget(cfg, summary.get("windows", {}))
    check_validation_interval(cfg, summary.get("windows", {}), batch_size)
    check_accumulation(cfg, summary.get("windows", {}), batch_size)
    write_data_summary(output_dir, summary)
    job_cfg = save_job_config(cfg, output_dir)
    spec = datamodule.spec
    model_config = _as_trained(cfg.model, trained)
    # the config the model is built from: the run's, or the job's where it trains anew
    built_model = cfg.model if model_config is None else model_config
    if model_config is not None:
        check_trained_sizes(model_config, spec, trained)
    if trained is not None:
        check_trained_neighbours(built_model, spec, trained)
        check_same_step(spec, trained)
        check_same_clock(spec, trained)
        check_same_graph(built_model, spec, trained)
        check_same_outputs(cfg.get("module") or {}, trained)
    check_model_fits(built_model, spec, trains_in_host_memory(cfg))
    module = build_module(cfg, spec, model_config)
    check_forecast_columns(spec, module.quantile_levels)
    if trained is not None:
        check_points(module.model, datamodule, trained)
        check_same_held_out(datamodule, trained)
        load_weights(module, trained, _model_overrides())
    run = describe_run(cfg)
    check_model_forecasts_held_out(module.model, datamodule, run["model"])
    loggers = build_loggers(cfg, run, output_dir) if with_loggers else []
    try:
        define_wandb_metrics(loggers)  # starts the W&B run
        trainer = build_trainer(cfg, loggers)
        warn_per_process_limits(cfg, trainer, summary, datamodule)
    except BaseException:
        # closed as failed: the next job of this process gets a run of its own
        finish_wandb(loggers, quietly=True, exit_code=1)
        raise
    trained_spec = None if trained is None else trained.spec
    return Assembly(
        cfg,
        job_cfg,
        output_dir,
        datamodule,
        summary,
        spec,
        module,
        loggers,
        trainer,
        run,
        None if trained_spec is None else list(trained_spec.point_ids),
    )


# the way on from a checkpoint that cannot be read, ``ways`` the run's others
EVALUATE_ANOTHER = "Evaluate another checkpoint: {ways} or a .ckpt written by training."


def read_evaluated(path: Path, ckpt: object = None, run: Path | None = None) -> TrainedCheckpoint:
    """The checkpoint at ``path`` (``ckpt=`` as given, where it was, of run directory
    ``run``), read once for an evaluation.

    Raises:
        UserError: it cannot be read, naming the other checkpoints of ``run`` an evaluation
            can take instead (those sound), or that none is.
    """
    if run is None:  # no run to look in: the names it would take
        return TrainedCheckpoint.read(path, EVALUATE_ANOTHER.format(ways=other_chosen(ckpt)))
    return TrainedCheckpoint.read(path, lambda: other_sound(run, ckpt, EVALUATE_ANOTHER))


def _model_overrides() -> list[str]:
    """The command's overrides of ``model.*`` keys (none outside a Hydra job)."""
    if not HydraConfig.initialized():
        return []
    overrides = OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False)
    return [o for o in overrides if str(o).lstrip("+~").startswith("model.")]


def warn_per_process_limits(
    cfg: DictConfig, trainer: L.Trainer, summary: dict[str, Any], datamodule: Any
) -> None:
    """Warn once (rank 0) when ``trainer.limit_*_batches`` of the splits this job runs
    count per process, so that several processes use more windows than one would
    (:func:`cloudlstm.engine.distributed.per_process_limits`)."""
    if not trainer.is_global_zero:
        return
    limits = {split: getattr(trainer, f"limit_{split}_batches", None) for split in splits_run(cfg)}
    batch_size = int(getattr(datamodule, "batch_size", 1))
    note = per_process_limits(limits, summary.get("windows", {}), batch_size, trainer.world_size)
    if note:
        log.warning(note)


def _use_training_order(datamodule: Any, trained: TrainedCheckpoint) -> None:
    """Evaluate the training points given in another order (a wide table's columns
    reordered) in the training order, as ``predict.py`` reads them by id: a model tied to
    its points would otherwise refuse them as other points."""
    spec = trained.spec
    if spec is None or not hasattr(datamodule, "use_point_order"):
        return
    if datamodule.use_point_order(spec.point_ids):
        log.info(
            "The data hold the run's %d training points in another order: they are "
            "evaluated in the training order.",
            len(spec.point_ids),
        )


def _as_trained(model: DictConfig, trained: TrainedCheckpoint | None) -> DictConfig | None:
    """The model config with the sizes the checkpoint's model was built with (None without
    a checkpoint, or one from before checkpoints stored them: the config's own then), so
    that data of other sizes are refused by name rather than loaded into the weights."""
    spec = None if trained is None else trained.spec
    return None if spec is None else with_sizes(model, spec)


def restore(
    run_dir: str | Path,
    ckpt: str | Path = "best",
    device: str | None = None,
    remedy: Remedy = None,
) -> tuple[ForecastModule, Path]:
    """A trained run's training module, from its directory alone, in eval mode on ``device``
    (None: a GPU when there is one); and the checkpoint it came from. ``remedy`` ends the
    message of a checkpoint that cannot be read (by default one about ``resume=``).

    The model is rebuilt from the run's ``config.yaml``, sized from the description stored
    in the checkpoint, anchored as it was trained (the module's ``anchor`` hyperparameter),
    with the quantile forecasts it was trained for (``quantiles``, ``calibrate``).

    Raises:
        UserError: no such run directory or checkpoint, a checkpoint that cannot be read,
            was written before checkpoints stored the data's description, is of another
            run's training (:func:`~cloudlstm.assembly.run_checkpoint.check_run_checkpoint`),
            or does not fit the run's model.
    """
    run = check_run_dir(run_dir)
    trained = TrainedCheckpoint.read(find_checkpoint(run, ckpt), remedy)
    spec = trained.forecasting_spec()
    cfg = read_run_config(run)
    check_run_checkpoint(run, cfg, trained)
    model = build_model(cfg.model, spec, compile=False)
    hparams = trained.contents.get("hyper_parameters", {})
    module = ForecastModule(
        model,
        optimizer=None,
        spec=spec,
        anchor=hparams.get("anchor", "none"),
        # and their calibration, as trained; [] is how runs trained before it was refused
        # stored point forecasts
        quantiles=hparams.get("quantiles") or None,
        calibrate=hparams.get("calibrate", "none"),
    )
    load_weights(module, trained)
    check_forecast_columns(spec, module.quantile_levels)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return module.to(device).eval(), trained.path
