"""Data: point-cloud streams and where they come from, windowing, the Lightning datamodules.

Two sub-packages, one idea each:

* :mod:`cloudlstm.data.sources`: where streams come from (the Urban Air and Beijing readers,
  long-format files, the synthetic, moving and mobile generators, the stand-in clusters,
  downloads); every source is a
  :class:`~cloudlstm.data.cache.CachedSource`;
* :mod:`cloudlstm.data.pipeline`: what happens to a stream once it exists (the stream
  container, its on-disk cache, scaling, outliers, windows, the one datamodule,
  :class:`PointCloudDataModule`, which takes any source). The grid baselines'
  point-to-grid mapping is model code: :mod:`cloudlstm.models.grid_mapping`.

The names below stay importable from ``cloudlstm.data`` itself.
"""

from cloudlstm.data.cache import CachedSource
from cloudlstm.data.pipeline.datamodule import PointCloudDataModule, seasonal_offsets, split_bounds
from cloudlstm.data.pipeline.windows import WindowDataset, count_windows
from cloudlstm.data.sources.beijing import BeijingSource
from cloudlstm.data.sources.download import download_and_extract
from cloudlstm.data.sources.long_format import LongFormatSource
from cloudlstm.data.sources.mobile import SyntheticMobileTraffic, mobile_traffic
from cloudlstm.data.sources.moving import SyntheticMovingPoints
from cloudlstm.data.sources.synthetic import SyntheticAdvectionDiffusion
from cloudlstm.data.sources.urban_air import UrbanAirSource
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.data.transforms import StandardScaler, normalize_coords

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
]
