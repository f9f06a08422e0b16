"""Figures of one test window (maps, worst series, error by horizon), written as PNGs.

Pure functions of numpy arrays in real (de-normalised) units; see each module.
"""

from cloudlstm.viz.curves import plot_horizon_curve
from cloudlstm.viz.maps import default_horizons, plot_forecast_maps
from cloudlstm.viz.series import plot_worst_series, point_mae, worst_points

__all__ = [
    "default_horizons",
    "plot_forecast_maps",
    "plot_horizon_curve",
    "plot_worst_series",
    "point_mae",
    "worst_points",
]
