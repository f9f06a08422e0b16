"""Train and evaluate a forecaster: `python train.py [group=option ...] [key=value ...]`.

See README.md and `python train.py --help` for the configuration groups. The same program
is installed as `cloudlstm-train` (src/cloudlstm/cli/scripts.py).
"""

import os
import sys
from pathlib import Path

# runs go under this repository's outputs/, wherever the command is started
os.environ.setdefault("PROJECT_ROOT", str(Path(__file__).resolve().parent))

try:
    from cloudlstm.cli.scripts import train  # noqa: E402
except KeyboardInterrupt:  # Ctrl-C while the package loads: the program's stop, as later on
    sys.stderr.write(f"{Path(__file__).name}: stopped by Ctrl-C.\n")
    raise SystemExit(130) from None

if __name__ == "__main__":
    train()
