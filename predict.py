"""Forecast new data with a trained run: `python predict.py run=<run dir> data.path=<file>`.

See README.md ("Forecasting with a trained model") and conf/predict.yaml. The same program
is installed as `cloudlstm-predict` (src/cloudlstm_programs.py).
"""

import os

# os.path, not pathlib: pathlib imports re (40 ms), a moment before the program's guard
# where a Ctrl-C is a traceback (src/cloudlstm_programs.py)
os.environ.setdefault("PROJECT_ROOT", os.path.dirname(os.path.realpath(__file__)))

from cloudlstm_programs import predict  # noqa: E402  (a Ctrl-C as it loads: its docstring)

if __name__ == "__main__":
    predict()
