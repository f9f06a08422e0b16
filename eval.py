"""Test a trained run again: `python eval.py run=<run dir> [ckpt=best|last|<path>] [key=value ...]`.

The run's config.yaml is the base of conf/eval.yaml; see README.md ("Evaluating a trained run").
The same program is installed as `cloudlstm-eval` (src/cloudlstm/cli/scripts.py).
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("PROJECT_ROOT", str(Path(__file__).resolve().parent))

try:
    from cloudlstm.cli.scripts import evaluate  # noqa: E402
except KeyboardInterrupt:  # Ctrl-C while the package loads: the program's stop, as later on
    sys.stderr.write(f"{Path(__file__).name}: stopped by Ctrl-C.\n")
    raise SystemExit(130) from None

if __name__ == "__main__":
    evaluate()
