"""Train and evaluate a forecaster: `python train.py [group=option ...] [key=value ...]`.

See README.md and `python train.py --help` for the configuration groups. The same program
is installed as `cloudlstm-train` (src/cloudlstm_programs.py).
"""

import os
from pathlib import Path

# runs go under this repository's outputs/, wherever the command is started
os.environ.setdefault("PROJECT_ROOT", str(Path(__file__).resolve().parent))

from cloudlstm_programs import train  # noqa: E402  (a Ctrl-C as it loads: its docstring)

if __name__ == "__main__":
    train()
