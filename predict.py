"""Forecast new data with a trained run: `python predict.py run=<run dir> data.path=<file>`.

See README.md ("Forecasting with a trained model") and conf/predict.yaml. The same program
is installed as `cloudlstm-predict` (src/cloudlstm/cli/scripts.py).
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("PROJECT_ROOT", str(Path(__file__).resolve().parent))

try:
    from cloudlstm.cli.scripts import predict  # noqa: E402
except KeyboardInterrupt:  # Ctrl-C while the package loads: the program's stop, as later on
    sys.stderr.write(f"{Path(__file__).name}: stopped by Ctrl-C.\n")
    raise SystemExit(130) from None

if __name__ == "__main__":
    predict()
