"""Forecast new data with a trained run: `python predict.py run=<run dir> data.path=<file>`.

See README.md ("Forecasting with a trained model") and conf/predict.yaml. The same program
is installed as `cloudlstm-predict` (src/cloudlstm_programs.py).
"""

import os
from pathlib import Path

os.environ.setdefault("PROJECT_ROOT", str(Path(__file__).resolve().parent))

from cloudlstm_programs import predict  # noqa: E402  (a Ctrl-C as it loads: its docstring)

if __name__ == "__main__":
    predict()
