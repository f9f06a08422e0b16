"""Helpers that turn config groups into objects and describe a run for the loggers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.types import RunMode
from omegaconf import DictConfig

from cloudlstm.errors import UserError

# Short forms of keys in run names; a key not listed keeps its own name.
NAME_ALIASES = {
    "attention": "att",
    "hidden_channels": "h",
    "num_layers": "l",
    "num_points": "n",
    "num_channels": "c",
    "input_steps": "m",
    "output_steps": "j",
    "outlier_shift": "shift",
}
# Keys whose value alone names the setting (`model.cell=gru` -> "gru", `data.source.city=city1`
# -> "city1").
VALUE_ONLY = {"cell", "city"}
# Model keys that change how a model computes, not what: its forecasts are the same (to float
# tolerance), so they name no run and split no row of a comparison.
EXECUTION_OPTIONS = ("compile", "checkpointing")
# Settings worth a tag of their own on the dashboard.
TAG_KEYS = ("k", "cell", "attention")


@contextmanager
def user_errors_unwrapped() -> Iterator[None]:
    """Let a :class:`UserError` raised by a constructor out as itself: Hydra would wrap it
    in an ``InstantiationException`` of several lines."""
    try:
        yield
    except InstantiationException as err:
        cause = err.__cause__
        while cause is not None and not isinstance(cause, UserError):
            cause = cause.__cause__  # nested: a data source built by its datamodule
        if cause is None:
            raise
        raise cause from None


def instantiate_group(configs: DictConfig | None, **overrides: Any) -> list[Any]:
    """Instantiate every ``_target_`` entry of a dict-of-configs group (callbacks, loggers).

    ``overrides`` fill keys the entries declare with a null value (e.g. a logger's run
    name), so a logger that has no such key is left untouched. A constructor's own
    refusal (``callbacks.ema_weights.decay=1.5``) leaves as its :class:`UserError`.
    """
    objects = []
    for conf in (configs or {}).values():
        if not isinstance(conf, DictConfig) or "_target_" not in conf:
            continue
        fill = {k: v for k, v in overrides.items() if k in conf and conf[k] is None}
        with user_errors_unwrapped():
            objects.append(hydra.utils.instantiate(conf, **fill))
    return objects


def describe_run(cfg: DictConfig) -> dict[str, Any]:
    """Name, group and tags of a run for the experiment loggers.

    * name: ``<model>-<data>`` followed by every ``model.*`` / ``data.*`` key set on the
      command line or swept, then the seed, e.g. ``cloudlstm-airq-k3-gru-att-s0``;
    * group: the multirun sweep (one sweep is one group, whichever models or data its jobs
      run): ``[<experiment>-]sweep-<date>_<time>``; else the experiment, else
      ``<model>-<data>``;
    * tags: model, data, ``k=``/``cell=``/``attention=`` when the model has them,
      ``seed=``, and the config's ``tags``.
    """
    hydra_cfg = HydraConfig.get() if HydraConfig.initialized() else None
    choices = hydra_cfg.runtime.choices if hydra_cfg else {}
    model_name = choices.get("model") or cfg.model.get("_target_", "model").rsplit(".", 1)[-1]
    data_name = choices.get("data") or "data"
    experiment = choices.get("experiment")
    overrides = list(hydra_cfg.overrides.task) if hydra_cfg else []

    tokens = [_name_token(o) for o in overrides]
    name = "-".join([model_name, data_name, *(t for t in tokens if t), f"s{cfg.seed}"])
    if hydra_cfg and hydra_cfg.mode == RunMode.MULTIRUN:
        # after the sweep alone: its jobs may differ in model or data (model=a,b), and a
        # group per model split one sweep and left its comparison run without a group
        sweep = Path(hydra_cfg.sweep.dir)
        stamp = f"sweep-{sweep.parent.name}_{sweep.name}"
        group = f"{experiment}-{stamp}" if experiment else stamp
    else:
        group = experiment or f"{model_name}-{data_name}"
    tags = [model_name, data_name]
    tags += [f"{key}={cfg.model[key]}" for key in TAG_KEYS if key in cfg.model]
    tags += [f"seed={cfg.seed}", *cfg.get("tags", [])]
    return {"name": name, "group": group, "tags": tags, "model": model_name, "data": data_name}


def _name_token(override: str) -> str:
    """``model.k=3`` -> ``k3``; ``model.attention=true`` -> ``att``; others -> ``""``."""
    key, sep, value = override.lstrip("+").partition("=")
    if not sep or not key.startswith(("model.", "data.")):  # `~model.x` deletions too
        return ""
    leaf = key.rsplit(".", 1)[-1]
    if key.startswith("model.") and leaf in EXECUTION_OPTIONS:
        return ""
    alias = NAME_ALIASES.get(leaf, leaf)
    if value.lower() in ("true", "false"):
        return alias if value.lower() == "true" else f"no{alias}"
    if leaf in VALUE_ONLY:
        return value
    if leaf == "path":  # a file: its name, not the whole path
        return Path(value).stem
    return f"{alias}{value}"
