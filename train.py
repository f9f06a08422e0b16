"""Train and evaluate a forecaster: `python train.py [group=option ...] [key=value ...]`.

See README.md and `python train.py --help` for the configuration groups. The same program
is installed as `cloudlstm-train` (src/cloudlstm_programs.py).
"""

import os

# runs go under this repository's outputs/, wherever the command is started; os.path, not
# pathlib: pathlib imports re (40 ms), a moment before the program's guard where a Ctrl-C
# is a traceback (src/cloudlstm_programs.py)
os.environ.setdefault("PROJECT_ROOT", os.path.dirname(os.path.realpath(__file__)))

from cloudlstm_programs import train  # noqa: E402  (a Ctrl-C as it loads: its docstring)

if __name__ == "__main__":
    train()
