"""Data: point-cloud streams, scaling, windowing, the Lightning datamodule, synthetic data."""

from cloudlstm.data.datamodule import PointCloudDataModule, split_bounds
from cloudlstm.data.stream import PointCloudStream
from cloudlstm.data.synthetic import SyntheticAdvectionDiffusion
from cloudlstm.data.transforms import StandardScaler, normalize_coords
from cloudlstm.data.windows import WindowDataset, count_windows

__all__ = [
    "PointCloudDataModule",
    "PointCloudStream",
    "StandardScaler",
    "SyntheticAdvectionDiffusion",
    "WindowDataset",
    "count_windows",
    "normalize_coords",
    "split_bounds",
]
