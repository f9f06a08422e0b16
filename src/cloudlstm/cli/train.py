"""Training entry point: compose config -> data -> model -> Trainer -> fit -> test -> files.

``train.py`` at the repository root wraps :func:`main` with ``@hydra.main``; tests call
:func:`train` directly with a composed config.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import lightning as L
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from cloudlstm.cli import report
from cloudlstm.cli.build import (
    build_datamodule,
    build_loggers,
    build_module,
    build_trainer,
    configure_process,
    save_job_config,
)
from cloudlstm.cli.config import describe_run
from cloudlstm.cli.resume import resume_checkpoint
from cloudlstm.errors import UserError

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict[str, Any]:
    """Run one training job; returns what is written to ``metrics.json``."""
    configure_process(cfg)
    L.seed_everything(cfg.seed, workers=True)
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    finished = output_dir / "metrics.json"
    if cfg.get("train") and cfg.get("resume", "auto") == "auto" and finished.is_file():
        # e.g. a sweep started again in its directory: finished jobs are not redone
        log.info("%s exists: this run has finished (resume=never trains it again).", finished)
        return json.loads(finished.read_text())

    datamodule, summary = build_datamodule(cfg, output_dir)
    job_cfg = save_job_config(cfg, output_dir)
    module = build_module(cfg)
    model = module.model
    run = describe_run(cfg)
    loggers = build_loggers(cfg, run, output_dir)
    report.define_wandb_metrics(loggers)
    trainer = build_trainer(cfg, loggers)
    num_params = sum(p.numel() for p in model.parameters())
    trainable = any(p.requires_grad for p in model.parameters())
    for lg in loggers:
        lg.log_hyperparams(
            {**OmegaConf.to_container(job_cfg, resolve=True), "num_params": num_params}
        )

    results: dict[str, Any] = {"run": run, "num_params": num_params, "data": summary}
    fit = bool(cfg.get("train")) and trainable
    if cfg.get("train") and not trainable:
        log.info("%s has no trainable parameters: skipping training.", type(model).__name__)
    try:
        if fit:
            resume_from = resume_checkpoint(cfg.get("resume", "auto"), output_dir)
            start = time.perf_counter()
            # our own checkpoints hold numpy objects (scaler, RNG states): not weights-only
            trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from, weights_only=False)
            results["train_time_s"] = time.perf_counter() - start
            results["resumed_from"] = resume_from
            results["epochs"] = trainer.current_epoch
            results["steps"] = trainer.global_step
            results["val"] = {
                key: float(value)
                for key, value in trainer.callback_metrics.items()
                if key.startswith("val/")
            }
        if cfg.get("test"):
            ckpt = _best_checkpoint(trainer) if fit else cfg.get("ckpt_path")
            start = time.perf_counter()
            trainer.test(module, datamodule=datamodule, ckpt_path=ckpt, weights_only=False)
            results["test_time_s"] = time.perf_counter() - start
            results["checkpoint"] = ckpt
            results["test"] = module.test_results
            if trainer.is_global_zero:
                report.add_test_report(
                    cfg, module, datamodule, trainer, loggers, results, output_dir
                )
        if trainer.is_global_zero:
            (output_dir / "metrics.json").write_text(json.dumps(results, indent=2))
            log.info("Run directory: %s", output_dir)
    finally:
        _finish_wandb(loggers)
    return results


def _best_checkpoint(trainer: L.Trainer) -> str | None:
    """Best checkpoint if checkpointing is on, else None (test the final weights)."""
    callback = trainer.checkpoint_callback
    if callback is None or not callback.best_model_path:
        log.warning("No best checkpoint available: testing with the final weights.")
        return None
    return callback.best_model_path


def _finish_wandb(loggers: list) -> None:
    """Close the W&B run so each multirun job gets its own run."""
    from lightning.pytorch.loggers import WandbLogger

    if any(isinstance(lg, WandbLogger) for lg in loggers):
        import wandb

        wandb.finish()


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
