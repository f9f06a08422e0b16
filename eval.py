"""Test a trained run again: `python eval.py run=<run dir> [ckpt=best|last|<path>] [key=value ...]`.

The run's config.yaml is the base of conf/eval.yaml; see README.md ("Evaluating a trained run").
The same program is installed as `cloudlstm-eval` (src/cloudlstm_programs.py).
"""

import os

# os.path, not pathlib: pathlib imports re (40 ms), a moment before the program's guard
# where a Ctrl-C is a traceback (src/cloudlstm_programs.py)
os.environ.setdefault("PROJECT_ROOT", os.path.dirname(os.path.realpath(__file__)))

from cloudlstm_programs import evaluate  # noqa: E402  (a Ctrl-C as it loads: its docstring)

if __name__ == "__main__":
    evaluate()
