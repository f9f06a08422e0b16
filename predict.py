"""Forecast new data with a trained run: `python predict.py run=<run dir> data.path=<file>`.

See README.md ("Forecasting with a trained model") and conf/predict.yaml. The same program
is installed as `cloudlstm-predict` (src/cloudlstm/cli/scripts.py).
"""

import os
from pathlib import Path

os.environ.setdefault("PROJECT_ROOT", str(Path(__file__).resolve().parent))

from cloudlstm.cli.scripts import predict  # noqa: E402

if __name__ == "__main__":
    predict()
