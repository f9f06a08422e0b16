"""An older run's config in today's form: what ``eval.py`` builds from it, and what
``compare`` groups it by.

Class paths that moved are renamed (:func:`rename_old_targets`), a Beijing config from
before ``co_units`` keeps the files' µg/m³ (:func:`keep_old_co_units`), and a datamodule
that took its source's arguments itself becomes today's datamodule with a ``source`` node
(:func:`move_source_keys`). Only :mod:`omegaconf` is needed: ``compare`` reads configs
without building anything.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

# Modules that lived directly in cloudlstm.data before the sources / pipeline split: the
# config.yaml of an older run names them in its ``_target_`` entries (eval.py rebuilds its data).
_MOVED = {
    **dict.fromkeys(
        (
            "beijing",
            "urban_air",
            "mobile",
            "synthetic",
            "moving",
            "long_format",
            "stand_in",
            "download",
            "bad_values",
        ),
        "sources",
    ),
    **dict.fromkeys(("windows", "datamodule", "outliers"), "pipeline"),
}


# Modules renamed since: old name -> new name. The training engine's modules and a run
# directory's lifecycle lived at the package root, and the data's shared contract (stream,
# cache, scaling) in the pipeline.
_RENAMED = {
    "cloudlstm.lit": "cloudlstm.engine.module",
    "cloudlstm.training": "cloudlstm.engine.module",
    **{
        f"cloudlstm.{name}": f"cloudlstm.engine.{name}"
        for name in ("callbacks", "schedules", "loggers", "pruning", "metrics")
    },
    "cloudlstm.checkpoint_io": "cloudlstm.rundir.checkpoint_io",
    "cloudlstm.preemption": "cloudlstm.rundir.preemption",
    "cloudlstm.cli.config_changes": "cloudlstm.rundir.config_changes",
    "cloudlstm.data.grid": "cloudlstm.models.grid_mapping",
    "cloudlstm.data.pipeline.grid": "cloudlstm.models.grid_mapping",
    **{
        f"cloudlstm.data{place}.{name}": f"cloudlstm.data.{name}"
        for place in ("", ".pipeline")
        for name in ("stream", "transforms", "cache")
    },
}


def current_target(target: str) -> str:
    """``target`` (a dotted ``_target_``) of an older run's config, with its module renamed to
    its place now: a module of the old flat ``cloudlstm.data`` layout, e.g.
    ``cloudlstm.data.datamodule.X`` -> ``cloudlstm.data.pipeline.datamodule.X``, or one of
    ``_RENAMED`` (``cloudlstm.lit.ForecastModule`` -> ``cloudlstm.engine.module.ForecastModule``);
    any other target unchanged."""
    module, _, name = target.rpartition(".")
    if module in _RENAMED:
        return f"{_RENAMED[module]}.{name}"
    parts = target.split(".")
    if len(parts) > 3 and parts[:2] == ["cloudlstm", "data"] and parts[2] in _MOVED:
        return ".".join([*parts[:2], _MOVED[parts[2]], *parts[2:]])
    return target


def upgrade_data(data: DictConfig) -> None:
    """Rewrite an older run's ``data`` node, in place, into today's form."""
    rename_old_targets(data)
    keep_old_co_units(data)
    move_source_keys(data)


DATAMODULE = "cloudlstm.data.pipeline.datamodule.PointCloudDataModule"
# Datamodules of older runs that took their source's arguments at the top of ``data``:
# old target -> (the source's target, the keys of ``data`` that are the source's).
OLD_DATAMODULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "cloudlstm.data.sources.beijing.BeijingDataModule": (
        "cloudlstm.data.sources.beijing.BeijingSource",
        ("root", "stations", "cache_dir", "co_units"),
    ),
    "cloudlstm.data.sources.urban_air.UrbanAirDataModule": (
        "cloudlstm.data.sources.urban_air.UrbanAirSource",
        ("root", "cluster", "download", "url", "sha256", "cache_dir"),
    ),
    "cloudlstm.data.sources.long_format.PointsDataModule": (
        "cloudlstm.data.sources.long_format.LongFormatSource",
        (
            "path",
            "time_col",
            "id_col",
            "coord_cols",
            "value_cols",
            "freq",
            "moving",
            "name",
            "bad_values",
        ),
    ),
    "cloudlstm.data.sources.mobile.MobileDataModule": (
        "cloudlstm.data.sources.mobile.mobile_traffic",
        (
            "path",
            "city",
            "num_antennas",
            "num_services",
            "num_days",
            "seed",
            "cache_dir",
            "time_col",
            "id_col",
            "coord_cols",
        ),
    ),
    # its ``source`` node held the generator's arguments: they join the cluster's
    "cloudlstm.data.sources.stand_in.SyntheticClusters": (
        "cloudlstm.data.sources.stand_in.SyntheticClusters",
        ("cluster", "clusters"),
    ),
}


def move_source_keys(data: DictConfig) -> None:
    """Rewrite, in place, an older run's data node whose ``_target_`` is one of
    :data:`OLD_DATAMODULES` into today's form: ``_target_: PointCloudDataModule`` and a
    ``source`` node with the source's target and keys. Interpolations are kept as they
    are (not resolved); any other node is left alone."""
    entry = OLD_DATAMODULES.get(str(data.get("_target_", "")))
    if entry is None:
        return
    target, keys = entry
    tree = OmegaConf.to_container(data, resolve=False)
    source = {"_target_": target}
    generator = tree.pop("source", None)  # SyntheticClusters': the generator's arguments
    if isinstance(generator, dict):
        source.update({k: v for k, v in generator.items() if k != "_target_"})
    source.update({key: tree.pop(key) for key in keys if key in tree})
    tree.pop("_recursive_", None)  # the stand-in built its own source
    with open_dict(data):
        for key in list(data.keys()):
            if key not in tree:
                del data[key]
        data._target_ = DATAMODULE
        data.source = source


def keep_old_co_units(data: DictConfig) -> None:
    """A Beijing run saved before ``co_units`` existed loaded CO in µg/m³, and its
    checkpoint's scaler and weights are in those units: its config gets ``ug/m3``, not the
    mg/m3 default (which would feed the model CO values 1000 times too small). Such a run
    names the old ``BeijingDataModule``: runs of the ``source`` form always have the key."""
    target = str(data.get("_target_", ""))
    if target.endswith(".BeijingDataModule") and "co_units" not in data:
        with open_dict(data):
            data.co_units = "ug/m3"


def rename_old_targets(node: Any) -> None:
    """Point ``_target_`` entries of an older run's config (``eval.py``) at the modules'
    places now (:func:`current_target`)."""
    if isinstance(node, ListConfig):
        for i in range(len(node)):
            rename_old_targets(node._get_node(i))
    elif isinstance(node, DictConfig):
        for key in list(node.keys()):
            child = node._get_node(key)  # not resolved: interpolations stay as they are
            if key == "_target_" and isinstance(child._value(), str):
                if current_target(child._value()) != child._value():
                    node[key] = current_target(child._value())
            else:
                rename_old_targets(child)


def current_config(cfg: DictConfig) -> DictConfig:
    """A copy of a run's config in today's form: the class paths of every node renamed
    (:func:`rename_old_targets`) and the data node upgraded (:func:`upgrade_data`).
    Interpolations stay as they are; ``cfg`` itself is not changed, and a config of today
    comes back equal."""
    return _upgraded(copy.deepcopy(cfg))


def _upgraded(cfg: DictConfig) -> DictConfig:
    """``cfg`` itself, upgraded in place as :func:`current_config` says."""
    rename_old_targets(cfg)  # the data node's too: upgrade_data's own renaming finds none left
    if isinstance(cfg.get("data"), DictConfig):
        upgrade_data(cfg.data)
    return cfg


def current_form(config: dict[str, Any]) -> dict[str, Any]:
    """A run's whole ``config.yaml`` (a plain tree), in today's form: its class paths
    renamed, its data node upgraded (:func:`upgrade_data`), and the model sizes an older
    config copied from its ``data_info`` node (``model.num_channels: 6``) left out, as
    today's configs leave them for the data to give. A config of today comes back equal."""
    if _already_current(config):
        return config  # compare reads many; building each as a DictConfig took most its time
    cfg = _upgraded(OmegaConf.create(config))  # a tree of its own: no copy to make
    sizes = config.get("data_info") or {}
    model = cfg.get("model")
    if isinstance(model, DictConfig):
        with open_dict(model):
            for key in [k for k, value in sizes.items() if model.get(k) == value]:
                del model[key]
    return OmegaConf.to_container(cfg, resolve=False)


def _already_current(config: dict[str, Any]) -> bool:
    """Whether :func:`current_form` would change nothing in ``config``, told from the plain
    tree: every ``_target_`` is today's, the data node is not an older datamodule, and the
    model shares no key with ``data_info`` (where an older config copied its sizes). Any
    doubt answers False, and the full upgrade runs."""
    data = config.get("data")
    data_target = str(data.get("_target_", "")) if isinstance(data, dict) else ""
    if data_target in OLD_DATAMODULES or data_target.endswith(".BeijingDataModule"):
        return False
    model, sizes = config.get("model"), config.get("data_info")
    if isinstance(model, dict) and isinstance(sizes, dict) and model.keys() & sizes.keys():
        return False
    return all(current_target(target) == target for target in _targets(config))


def _targets(node: Any) -> Iterator[str]:
    """Every string ``_target_`` in a plain tree of dicts and lists."""
    if isinstance(node, dict):
        for key, child in node.items():
            if key == "_target_" and isinstance(child, str):
                yield child
            else:
                yield from _targets(child)
    elif isinstance(node, list):
        for child in node:
            yield from _targets(child)
