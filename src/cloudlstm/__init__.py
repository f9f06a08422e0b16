"""cloudlstm: forecasting point-cloud streams with CloudLSTM and its baselines."""

import os
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("cloudlstm")
except PackageNotFoundError:  # run from a checkout that was never installed (PYTHONPATH=src)
    __version__ = "0+unknown"

# Each training step allocates several tens-of-MB tensors (gathered neighbourhoods and
# their gradients); with transparent huge pages torch's CPU allocator avoids most of the
# page faults (measured: allocate-and-fill of 68 MB 67 ms -> 13 ms on the dev VM).
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def __getattr__(name: str) -> object:
    # `from cloudlstm import Forecaster` without importing torch, Lightning and Hydra on
    # `import cloudlstm`
    if name == "Forecaster":
        from cloudlstm.forecast import Forecaster

        return Forecaster
    raise AttributeError(f"module 'cloudlstm' has no attribute {name!r}")
