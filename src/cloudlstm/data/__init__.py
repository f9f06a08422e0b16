"""Data: point-cloud streams and where they come from, windowing, the Lightning datamodules.

The data's shared contract sits here: the stream container (``stream``), its on-disk cache
and :class:`~cloudlstm.data.cache.CachedSource`, the base of every source and the
data-source protocol (``cache``), time chunks (``chunks``), covariates (``covariates``),
scaling (``transforms``) and the data's description (``spec``). Two sub-packages, one idea
each:

* :mod:`cloudlstm.data.sources`: where streams come from (the Urban Air, Beijing and Telecom
  Italia readers, long-format and wide-table files with a graph of the points, the
  synthetic, moving and mobile generators, the stand-in clusters, downloads); every source
  is a :class:`~cloudlstm.data.cache.CachedSource`;
* :mod:`cloudlstm.data.pipeline`: what happens to a stream once it exists (preparation,
  splits, coordinates and outliers, the model-input rule, windows, loaders, the one
  datamodule, :class:`PointCloudDataModule`, which takes any source, and a forecast's
  input). The grid baselines' point-to-grid mapping is model code:
  :mod:`cloudlstm.models.grid_mapping`.

The names below stay importable from ``cloudlstm.data`` itself.
"""

from cloudlstm.data.cache import CachedSource
from cloudlstm.data.pipeline.datamodule import PointCloudDataModule
from cloudlstm.data.pipeline.splits import seasonal_offsets, split_bounds
from cloudlstm.data.pipeline.windows import WindowDataset, count_windows
from cloudlstm.data.sources.beijing import BeijingSource
from cloudlstm.data.sources.download import download_and_extract
from cloudlstm.data.sources.long_format import LongFormatSource
from cloudlstm.data.sources.mobile import SyntheticMobileTraffic, mobile_traffic
from cloudlstm.data.sources.moving import SyntheticMovingPoints
from cloudlstm.data.sources.synthetic import SyntheticAdvectionDiffusion
from cloudlstm.data.sources.telecom_italia import TelecomItaliaSource
from cloudlstm.data.sources.urban_air import UrbanAirSource
from cloudlstm.data.sources.wide_table import WideTableSource
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
    "TelecomItaliaSource",
    "UrbanAirSource",
    "WideTableSource",
    "WindowDataset",
    "count_windows",
    "download_and_extract",
    "mobile_traffic",
    "normalize_coords",
    "seasonal_offsets",
    "split_bounds",
]
