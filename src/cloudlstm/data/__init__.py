"""Data: point-cloud streams, loaders and generators, windowing, the Lightning datamodules."""

from cloudlstm.data.beijing import BeijingDataModule, BeijingSource
from cloudlstm.data.datamodule import PointCloudDataModule, seasonal_offsets, split_bounds
from cloudlstm.data.download import download_and_extract
from cloudlstm.data.long_format import LongFormatSource, PointsDataModule
from cloudlstm.data.mobile import MobileDataModule, SyntheticMobileTraffic
from cloudlstm.data.moving import SyntheticMovingPoints
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.data.synthetic import SyntheticAdvectionDiffusion
from cloudlstm.data.transforms import StandardScaler, normalize_coords
from cloudlstm.data.urban_air import UrbanAirDataModule, UrbanAirSource
from cloudlstm.data.windows import WindowDataset, count_windows

__all__ = [
    "BeijingDataModule",
    "BeijingSource",
    "LongFormatSource",
    "MobileDataModule",
    "PointCloudDataModule",
    "PointCloudStream",
    "PointsDataModule",
    "StandardScaler",
    "SyntheticAdvectionDiffusion",
    "SyntheticMobileTraffic",
    "SyntheticMovingPoints",
    "UrbanAirDataModule",
    "UrbanAirSource",
    "WindowDataset",
    "count_windows",
    "download_and_extract",
    "normalize_coords",
    "seasonal_offsets",
    "split_bounds",
]
