"""Data: point-cloud streams and where they come from, windowing, the Lightning datamodules.

Two sub-packages, one idea each:

* :mod:`cloudlstm.data.sources`: where streams come from (the Urban Air and Beijing readers,
  long-format files, the synthetic, moving and mobile generators, the stand-in clusters,
  downloads); every source is a
  :class:`~cloudlstm.data.pipeline.cache.CachedSource`;
* :mod:`cloudlstm.data.pipeline`: what happens to a stream once it exists (the stream
  container, its on-disk cache, scaling, outliers, windows, the one datamodule,
  :class:`PointCloudDataModule`, which takes any source). The grid baselines'
  point-to-grid mapping is model code: :mod:`cloudlstm.models.grid_mapping`.

The names below stay importable from ``cloudlstm.data`` itself.
"""

from cloudlstm.data.pipeline.cache import CachedSource
from cloudlstm.data.pipeline.datamodule import PointCloudDataModule, seasonal_offsets, split_bounds
from cloudlstm.data.pipeline.stream import PointCloudStream
from cloudlstm.data.pipeline.transforms import StandardScaler, normalize_coords
from cloudlstm.data.pipeline.windows import WindowDataset, count_windows
from cloudlstm.data.sources.beijing import BeijingSource
from cloudlstm.data.sources.download import download_and_extract
from cloudlstm.data.sources.long_format import LongFormatSource
from cloudlstm.data.sources.mobile import SyntheticMobileTraffic, mobile_traffic
from cloudlstm.data.sources.moving import SyntheticMovingPoints
from cloudlstm.data.sources.synthetic import SyntheticAdvectionDiffusion
from cloudlstm.data.sources.urban_air import UrbanAirSource

__all__ = [
    "BeijingSource",
    "CachedSource",
    "LongFormatSource",
    "PointCloudDataModule",
    "PointCloudStream",
    "StandardScaler",
    "SyntheticAdvectionDiffusion",
    "SyntheticMobileTraffic",
    "SyntheticMovingPoints",
    "UrbanAirSource",
    "WindowDataset",
    "count_windows",
    "download_and_extract",
    "mobile_traffic",
    "normalize_coords",
    "seasonal_offsets",
    "split_bounds",
    "current_target",
]

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
    **dict.fromkeys(
        ("stream", "windows", "transforms", "datamodule", "cache", "outliers"),
        "pipeline",
    ),
}


# Modules renamed since: old name -> new name.
_RENAMED = {
    "cloudlstm.lit": "cloudlstm.training",
    "cloudlstm.data.grid": "cloudlstm.models.grid_mapping",
    "cloudlstm.data.pipeline.grid": "cloudlstm.models.grid_mapping",
}


def current_target(target: str) -> str:
    """``target`` (a dotted ``_target_``) of an older run's config, with its module renamed to
    its place now: a module of the old flat ``cloudlstm.data`` layout, e.g.
    ``cloudlstm.data.datamodule.X`` -> ``cloudlstm.data.pipeline.datamodule.X``, or one of
    ``_RENAMED`` (``cloudlstm.lit.ForecastModule`` -> ``cloudlstm.training.ForecastModule``);
    any other target unchanged."""
    module, _, name = target.rpartition(".")
    if module in _RENAMED:
        return f"{_RENAMED[module]}.{name}"
    parts = target.split(".")
    if len(parts) > 3 and parts[:2] == ["cloudlstm", "data"] and parts[2] in _MOVED:
        return ".".join([*parts[:2], _MOVED[parts[2]], *parts[2:]])
    return target
