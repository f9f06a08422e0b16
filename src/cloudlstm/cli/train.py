"""Training entry point: compose config -> data -> model -> Trainer -> fit -> test -> files.

``train.py`` at the repository root wraps :func:`train` with ``@hydra.main``; tests call
:func:`train` directly with a composed config.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import LearningRateMonitor
from omegaconf import DictConfig, OmegaConf, open_dict

from cloudlstm.cli.config import describe_run, instantiate_group

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict[str, Any]:
    """Run one training job; returns what is written to ``metrics.json``."""
    if cfg.get("torch_threads"):
        torch.set_num_threads(int(cfg.torch_threads))
    L.seed_everything(cfg.seed, workers=True)
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)

    missing = sorted(OmegaConf.missing_keys(cfg.data))
    if missing:  # e.g. data=points without data.path: say so instead of a Hydra traceback
        example = " ".join(f"{k}=..." for k in missing)
        raise ValueError(
            f"The data config needs {', '.join(missing)}; give it on the "
            f"command line: `python train.py <data=...> {example}` (e.g. data.path=/my/file.csv)."
        )
    datamodule: L.LightningDataModule = hydra.utils.instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    datamodule.print_summary()
    data_summary = datamodule.summary()
    (output_dir / "data_summary.json").write_text(json.dumps(data_summary, indent=2))
    with open_dict(cfg):
        cfg.data_info = {
            "num_channels": datamodule.num_channels,
            "num_points": datamodule.num_points,
            "input_steps": data_summary["input_steps"],
            "output_steps": datamodule.output_steps,
            "coord_features": int(datamodule.coords.shape[-1]),
            "steps_per_day": data_summary["steps_per_day"],
        }
    job_cfg = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])
    OmegaConf.save(job_cfg, output_dir / "config.yaml", resolve=True)

    model = hydra.utils.instantiate(cfg.model)
    scheduler = cfg.get("scheduler")
    module = hydra.utils.instantiate(
        cfg.module,
        model=model,
        optimizer=hydra.utils.instantiate(cfg.optimizer),
        scheduler=hydra.utils.instantiate(scheduler) if scheduler else None,
    )
    run = describe_run(cfg)
    loggers = instantiate_group(
        cfg.get("logger"), name=run["name"], group=run["group"], tags=run["tags"]
    )
    callbacks = instantiate_group(cfg.get("callbacks"))
    if not loggers:  # nothing to write learning rates to; Lightning would refuse to start
        callbacks = [cb for cb in callbacks if not isinstance(cb, LearningRateMonitor)]
    trainer: L.Trainer = hydra.utils.instantiate(
        cfg.trainer, callbacks=callbacks, logger=loggers or False
    )
    num_params = sum(p.numel() for p in model.parameters())
    trainable = any(p.requires_grad for p in model.parameters())
    for lg in loggers:
        lg.log_hyperparams(
            {**OmegaConf.to_container(job_cfg, resolve=True), "num_params": num_params}
        )

    results: dict[str, Any] = {"run": run, "num_params": num_params, "data": data_summary}
    fit = bool(cfg.get("train")) and trainable
    if cfg.get("train") and not trainable:
        log.info("%s has no trainable parameters: skipping training.", type(model).__name__)
    try:
        if fit:
            start = time.perf_counter()
            trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
            results["train_time_s"] = time.perf_counter() - start
            results["epochs"] = trainer.current_epoch
        if cfg.get("test"):
            ckpt = _best_checkpoint(trainer) if fit else cfg.get("ckpt_path")
            start = time.perf_counter()
            trainer.test(module, datamodule=datamodule, ckpt_path=ckpt, weights_only=False)
            results["test_time_s"] = time.perf_counter() - start
            results["checkpoint"] = ckpt
            results["test"] = module.test_results
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


def main(cfg: DictConfig) -> float | None:
    """Hydra entry: train and return the test MAE (handy for sweepers)."""
    if not HydraConfig.initialized():  # pragma: no cover - guarded by @hydra.main
        raise RuntimeError("call through train.py")
    results = train(cfg)
    return results.get("test", {}).get("overall", {}).get("mae", {}).get("mean")
