"""Training entry point: compose config -> data -> model -> Trainer -> fit -> test -> files.

``train.py`` at the repository root wraps :func:`main` with ``@hydra.main``; tests call
:func:`train` directly with a composed config.
"""

from __future__ import annotations

import logging
import shlex
import time
from pathlib import Path
from typing import Any

import lightning as L
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf

from cloudlstm.assembly.assemble import Assembly, assemble
from cloudlstm.assembly.build import (
    check_metric_modes,
    check_monitored,
    check_optimizer,
    check_process_settings,
    configure_process,
)
from cloudlstm.assembly.checkpoint_fit import check_resume_fits
from cloudlstm.assembly.known_keys import check_known_keys
from cloudlstm.assembly.resume_data import check_resume_data
from cloudlstm.assembly.resume_shapes import check_resume
from cloudlstm.cli.invoked import command
from cloudlstm.cli.override_text import shell_override
from cloudlstm.cli.sigterm_at_start import Terminated
from cloudlstm.engine.callbacks import EpochTimer
from cloudlstm.engine.ddp_launch import ddp_launch_undone
from cloudlstm.engine.loggers import finish_wandb
from cloudlstm.engine.module import TrainingDivergedError, validation_metrics
from cloudlstm.engine.objective import check_optimized_metric
from cloudlstm.engine.progress_log import persistence_warning
from cloudlstm.engine.results import results_from
from cloudlstm.engine.signals import ctrl_c_kept
from cloudlstm.errors import UserError
from cloudlstm.models.build import count_parameters
from cloudlstm.report import add_test_report
from cloudlstm.report.cost import reset_cpu_peak, reset_gpu_peak
from cloudlstm.report.figures import figure_choice
from cloudlstm.rundir.checkpoints import check_checkpoint
from cloudlstm.rundir.config_changes import (
    check_config_changes,
    record_changes,
    settings_changed,
)
from cloudlstm.rundir.divergence import clear_divergence, record_divergence
from cloudlstm.rundir.layout import (
    DEBUG_TASK,
    METRICS_FILE,
    checkpoint_step,
    in_run,
    last_checkpoint,
    load_metrics,
    write_metrics,
)
from cloudlstm.rundir.lock import is_rank_zero, owns_run_dir
from cloudlstm.rundir.preemption import interrupted, stopped_by_ctrl_c
from cloudlstm.rundir.provenance import record_process, this_process, training_processes
from cloudlstm.rundir.replaced import put_back, retire_earlier_training
from cloudlstm.rundir.resume import resume_checkpoint, starts_anew
from cloudlstm.rundir.stops import RunInterrupted
from cloudlstm.rundir.sweep_sigterm import stopped_before_training

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict[str, Any]:
    """Run one training job; returns what is written to ``metrics.json``.

    Raises:
        UserError: it resumes a run of other settings (:mod:`cloudlstm.rundir.config_changes`)
            or with an allowed change that reshapes its weights
            (:mod:`cloudlstm.assembly.resume_shapes`), or a ``mode`` contradicts its
            metric's direction (:func:`check_metric_modes`), a ``monitor`` is no metric a
            validation logs (:func:`check_monitored`), or an optimizer value, the seed
            or the thread count is invalid (:func:`check_optimizer`,
            :func:`check_process_settings`), or a key is one that nothing reads
            (:func:`check_known_keys`), checked before anything is written to the run
            directory.
    """
    check_process_settings(cfg)  # first: data.holdout_seed and others interpolate the seed
    check_known_keys(cfg)
    check_metric_modes(cfg)
    check_monitored(cfg)
    check_optimized_metric(
        cfg.get("optimized_metric"), bool((cfg.get("module") or {}).get("quantiles"))
    )
    check_optimizer(cfg)
    check_resume(cfg, Path(cfg.paths.output_dir))
    with ctrl_c_kept(), ddp_launch_undone():  # the next job of this Python starts afresh
        return _train(cfg)


@owns_run_dir  # one run at a time in a run directory (run.lock)
def _train(cfg: DictConfig) -> dict[str, Any]:
    configure_process(cfg)
    reset_cpu_peak()  # the cost's peak RSS is this run's, its data's load included
    L.seed_everything(cfg.seed, workers=True)
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    changes = check_config_changes(cfg, output_dir)  # again, now holding the directory
    finished = output_dir / METRICS_FILE
    if cfg.get("train") and cfg.get("resume", "auto") == "auto" and finished.is_file():
        # e.g. a sweep started again in its directory: finished jobs are not redone
        log.info("%s exists: this run has finished (resume=never trains it again).", finished)
        if allowed := [c for c in changes if c.allowed_by == "allow_changes"]:
            log.warning(
                "allow_changes lets %s through, but changes nothing: a finished run is not "
                "trained again. Train these settings in a new directory (or here, anew, with "
                "resume=never).",
                ", ".join(map(str, allowed)),
            )
        return load_metrics(finished)  # a damaged one: one line naming it
    aside = None
    if cfg.get("train") and is_rank_zero() and starts_anew(cfg.get("resume", "auto"), output_dir):
        aside = retire_earlier_training(output_dir)  # before this training writes its config
    try:
        job = assemble(cfg, output_dir)
        resume = _resume_point(job) if _fits(job) else None
    except BaseException:
        if aside is not None:  # refused before it trained: the directory as it was
            put_back(aside, output_dir)
        raise
    record_changes(output_dir, changes, cfg)  # only once they are taken: no resume refused
    try:
        return _train_assembled(job, resume)
    except BaseException as err:
        # Lightning's stop on SIGTERM is a SystemExit without a code (status 0), and its
        # shutdown after a KeyboardInterrupt (a second Ctrl-C; one as the fit ends or the
        # test begins, outside SignalsTogether's hold) ends in sys.exit(1): the run is not
        # finished, its line says where it stands (src/cloudlstm/rundir/preemption.py)
        if isinstance(err, SIGTERMException) or (
            isinstance(err, SystemExit) and stopped_by_ctrl_c(job.trainer)
        ):
            raise _stopped(job) from None
        if isinstance(err, (Terminated, KeyboardInterrupt)) and job.trainer.state.fn is not None:
            # between the Trainer's calls (after the fit, before the test), where its
            # handler is not in place: a stop of the run that has trained all the same
            raise _stopped(job, "Ctrl-C" if isinstance(err, KeyboardInterrupt) else None) from None
        if isinstance(err, TrainingDivergedError):
            # so that a rerun with other settings is told what happened (rundir/divergence.py)
            record_divergence(output_dir, job.trainer.global_step, str(err))
        # the run's own error (or signal) is what the user must see: closing W&B after it,
        # e.g. with its service already killed by SLURM's SIGTERM, must not replace it. A
        # refusal before training closes it too: the next job of this process (a sweep's
        # worker, a notebook) gets a run of its own. W&B shows it as failed
        finish_wandb(job.loggers, quietly=True, exit_code=1)
        raise


def _fits(job: Assembly) -> bool:
    """Whether the run trains: ``train=true`` and a model with parameters to train."""
    return bool(job.cfg.get("train")) and any(p.requires_grad for p in job.model.parameters())


def _train_assembled(job: Assembly, resume: ResumePoint | None) -> dict[str, Any]:
    """Train (from ``resume``, :func:`_resume_point`) and test the assembled run (as its
    config says), write ``metrics.json`` and close its W&B run; returns the results."""
    cfg, output_dir = job.cfg, job.output_dir
    report = cfg.get("report") or {}
    if cfg.get("test") and report.get("figures", True):  # refused now, not after training
        figure_choice(job.datamodule, report.get("window", 0), report.get("channel", 0))
    num_params = count_parameters(job.model)
    for lg in job.loggers:
        lg.log_hyperparams(
            {**OmegaConf.to_container(job.job_cfg, resolve=True), "num_params": num_params}
        )
    results: dict[str, Any] = {"run": job.run, "num_params": num_params, "data": job.summary}
    reset_gpu_peak()  # the cost's peak GPU memory is this run's, not an earlier job's
    fit = _fits(job)
    if cfg.get("train") and not fit:
        log.info("%s has no trainable parameters: skipping training.", type(job.model).__name__)
    if fit:
        results.update(_fit(job, resume))
    else:  # a test of a given checkpoint: this process made the numbers
        results["provenance"] = [this_process(job.trainer)]
    if cfg.get("test"):
        tested = _best_checkpoint(job.trainer, output_dir) if fit else cfg.ckpt_path
        results.update(_test(job, tested))
    if job.trainer.is_global_zero:
        write_metrics(output_dir, results)
        log.info("Run directory: %s", output_dir)
        if any(last_checkpoint(output_dir).parent.glob("*.ckpt")):  # none after debug=fdr
            log.info(next_steps(output_dir, debug=cfg.get("task_name") == DEBUG_TASK))
    finish_wandb(job.loggers)
    return results


def next_steps(run_dir: Path, debug: bool = False) -> str:
    """What a user can do with a finished run, as commands to copy; that of a ``debug``
    run (``debug=...``) compares with ``--include-debug``, without which compare leaves it
    out."""
    run = shell_override("run", str(run_dir))
    include = " --include-debug" if debug else ""
    return (
        f"Next: evaluate it again `{command('eval')} {run}`, forecast new data "
        f"`{command('predict')} {run} data.path=<recent.csv>`, or compare it with "
        f"other runs `{command('compare')} {shlex.quote(str(run_dir.parent))}{include}`."
    )


# the checkpoint a training resumes from (None: from scratch) and its global step
ResumePoint = tuple[str | None, int | None]


def _resume_point(job: Assembly) -> ResumePoint:
    """The checkpoint to resume from (``resume``: the run directory's, or one named), checked
    to exist, be sound and fit the module and the data, before anything of the run
    directory is written or moved for good; and its step, kept: the fit overwrites
    last.ckpt, often that checkpoint."""
    resume_from = resume_checkpoint(job.cfg.get("resume", "auto"), job.output_dir)
    if resume_from is None:
        return None, None
    return resume_from, _checked_resume(job, Path(resume_from))


def _fit(job: Assembly, resume: ResumePoint | None) -> dict[str, Any]:
    """Train, from ``resume`` (:func:`_resume_point`) where it names a checkpoint."""
    resume_from, resumed_step = resume or (None, None)
    stopped = stopped_before_training(job.cfg, job.output_dir)  # a sweep got SIGTERM
    if stopped is not None:
        raise stopped
    clear_divergence(job.output_dir)  # a new training: no longer the diverged one alone
    if job.trainer.is_global_zero:
        # this process's code, packages, machine and command, after those it continues
        record_process(job.output_dir, this_process(job.trainer, resumed_step or 0), resume_from)
    start = time.perf_counter()
    # our own checkpoints hold numpy objects (RNG states): not weights-only
    job.trainer.fit(
        job.module, datamodule=job.datamodule, ckpt_path=resume_from, weights_only=False
    )
    val = _validation_metrics(job, resumed_step)
    warning = persistence_warning(val or {}, job.trainer.max_steps)
    if warning is not None and job.trainer.is_global_zero:
        log.warning(warning)
    timer = EpochTimer.of(job.trainer)  # the whole run's time, earlier processes included
    return {
        "train_time_s": timer.fit_time_s if timer else time.perf_counter() - start,
        # relative where it lies inside the run, as "checkpoint": true wherever it is moved
        "resumed_from": in_run(resume_from, job.output_dir),
        "epochs": _epochs(job.trainer),
        "steps": job.trainer.global_step,
        "val": val,
        "selection": _selection(job.trainer),
        "provenance": training_processes(job.output_dir),
        "settings_changed": settings_changed(job.output_dir),
    }


def _epochs(trainer: L.Trainer) -> int:
    """The training epochs begun, the last one ended by the step budget too: Lightning's
    ``current_epoch`` counts that one only where the fit itself ran it to the budget, not
    where a resume restored a checkpoint already at it (one short)."""
    progress = getattr(getattr(trainer.fit_loop, "epoch_progress", None), "current", None)
    return max(trainer.current_epoch, int(getattr(progress, "started", 0)))


def _stopped(job: Assembly, by: str | None = None) -> RunInterrupted:
    """The run's stop by SIGTERM or Ctrl-C (``by``, where no Trainer noted it), its line
    logged, with the W&B run closed as failed with the signal's status."""
    stop = interrupted(job.trainer, job.output_dir, job.cfg, by)
    finish_wandb(job.loggers, quietly=True, exit_code=stop.exit_code)
    return stop


def _selection(trainer: L.Trainer) -> dict[str, Any] | None:
    """The validation score of the checkpoint that is tested, and its metric
    (``{"monitor": "val/mae", "score": 50.4}``); None without a monitored checkpoint."""
    callback = trainer.checkpoint_callback
    score = None if callback is None else callback.best_model_score
    if score is None or not callback.monitor:
        return None
    return {"monitor": callback.monitor, "score": float(score)}


def _checked_resume(job: Assembly, path: Path) -> int | None:
    """Check that the checkpoint to resume from is sound and fits the module and the data;
    its step."""
    resumed = check_checkpoint(path)
    check_resume_fits(job.module, resumed, path)
    check_resume_data(job.spec, resumed, path, list(job.cfg.get("allow_changes") or []))
    return resumed.get("global_step")


def _validation_metrics(job: Assembly, resumed_step: int | None) -> dict[str, float] | None:
    """The ``val/`` metrics of the run's last validation, as the uninterrupted run reports
    them (``resumed_step``: the global step of the checkpoint the fit resumed from, None
    for a fresh one); None where they cannot be known.

    A fit resumed after the run's last validation (the process ended between it and the
    test, or the steps left hold none) validates nothing: the metrics are then those the
    checkpoint recorded (``ForecastModule.restored_validation``), so that ``metrics.json``
    and a sweeper's objective get the uninterrupted run's values. A checkpoint written
    before that record has the restored weights validated again where training had
    finished (exact where it ended with a validation, as the recipes' budgets do); with
    steps left but no validation among them, the metrics are not known: None, said in a
    warning, rather than an empty ``val`` read as a run that never validated.
    """
    trainer = job.trainer
    validated = validation_metrics(trainer)  # a resumed validation (rundir/pending_validation.py)
    if validated or resumed_step is None:
        return validated
    if job.module.restored_validation is not None:
        return job.module.restored_validation
    if trainer.global_step == resumed_step:
        log.info("Training had finished before this resume: validating the restored weights.")
        trainer.validate(job.module, datamodule=job.datamodule, verbose=False)
        return validation_metrics(trainer)
    if trainer.is_global_zero:
        log.warning(
            "The validation metrics of the training before step %d are not in its checkpoint "
            "(written by an older version) and no validation came after it: metrics.json "
            "records val as null (unknown).",
            resumed_step,
        )
    return None


def _test(job: Assembly, ckpt: str | None) -> dict[str, Any]:
    """Test ``ckpt`` (None: the module's weights as they are), then the report."""
    start = time.perf_counter()
    returned = job.trainer.test(
        job.module, datamodule=job.datamodule, ckpt_path=ckpt, weights_only=False, verbose=False
    )
    results = {
        "test_time_s": time.perf_counter() - start,
        "checkpoint": in_run(ckpt, job.output_dir),  # relative: the run may be moved
        "test": results_from(returned),
    }
    if job.trainer.is_global_zero:
        add_test_report(
            job.cfg,
            job.run["model"],
            job.module,
            job.datamodule,
            job.trainer,
            job.loggers,
            results,
            job.output_dir,
        )
    return results


def _best_checkpoint(trainer: L.Trainer, run_dir: Path) -> str | None:
    """The best checkpoint if checkpointing is on; else ``last.ckpt`` where it holds the
    final weights (a training shorter than one validation), so that the run names a file
    that ``eval.py`` and ``predict.py`` load; else None (test the final weights)."""
    callback = trainer.checkpoint_callback
    if callback is not None and callback.best_model_path:
        return callback.best_model_path
    last = last_checkpoint(run_dir)
    if last.is_file() and checkpoint_step(last) == trainer.global_step:
        log.warning("No best checkpoint (no validation): testing the final weights, %s.", last)
        return str(last)
    log.warning("No best checkpoint available: testing with the final weights.")
    return None


def objective(cfg: DictConfig, results: dict[str, Any]) -> float | None:
    """The value a sweeper optimises: ``cfg.optimized_metric`` from the validation metrics.

    Raises:
        UserError: the key names no validation metric of this run.
    """
    key = cfg.get("optimized_metric")
    if not key:
        return None
    val = results.get("val")
    if not val:  # nothing trained (parameter-free model, train=false) or never validated
        return None
    if key not in val:
        raise UserError(
            f"optimized_metric={key} is not a validation metric of this run; "
            f"choose one of {', '.join(sorted(val))}."
        )
    return val[key]  # NaN when validation diverged: Optuna then marks the trial failed


def main(cfg: DictConfig) -> float | None:
    """Hydra entry: train, and return the objective (``optimized_metric``) for sweepers."""
    if not HydraConfig.initialized():  # pragma: no cover - guarded by @hydra.main
        raise RuntimeError("call through train.py")
    return objective(cfg, train(cfg))
