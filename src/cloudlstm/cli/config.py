"""Helpers that turn config groups into objects and describe a run for the loggers."""

from __future__ import annotations

from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig


def instantiate_group(configs: DictConfig | None, **overrides: Any) -> list[Any]:
    """Instantiate every ``_target_`` entry of a dict-of-configs group (callbacks, loggers).

    ``overrides`` fill keys the entries declare with a null value (e.g. a logger's run
    name), so a logger that has no such key is left untouched.
    """
    objects = []
    for conf in (configs or {}).values():
        if not isinstance(conf, DictConfig) or "_target_" not in conf:
            continue
        fill = {k: v for k, v in overrides.items() if k in conf and conf[k] is None}
        objects.append(hydra.utils.instantiate(conf, **fill))
    return objects


def describe_run(cfg: DictConfig) -> dict[str, Any]:
    """Name, group and tags of a run, from the chosen model and data and key settings."""
    choices = HydraConfig.get().runtime.choices if HydraConfig.initialized() else {}
    model_name = choices.get("model", cfg.model.get("_target_", "model").rsplit(".", 1)[-1])
    data_name = choices.get("data", "data")
    tags = [model_name, data_name, *cfg.get("tags", [])]
    name = f"{model_name}-{data_name}"
    for key in ("k", "cell", "attention"):
        if key in cfg.model:
            tags.append(f"{key}={cfg.model[key]}")
    if "k" in cfg.model:
        name += f"-k{cfg.model.k}"
    return {
        "name": name,
        "group": f"{model_name}-{data_name}",
        "tags": tags,
        "model": model_name,
        "data": data_name,
    }
