"""Test a trained run again: `python eval.py run=<run dir> [ckpt=best|last|<path>] [key=value ...]`.

The run's config.yaml is the base of conf/eval.yaml; see README.md ("Evaluating a trained run").
"""

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

os.environ.setdefault("PROJECT_ROOT", str(Path(__file__).resolve().parent))


@hydra.main(version_base="1.3", config_path="conf", config_name="eval")
def main(cfg: DictConfig) -> None:
    from cloudlstm.cli.evaluate import evaluate

    evaluate(cfg)


if __name__ == "__main__":
    from cloudlstm.cli.evaluate import with_run_config
    from cloudlstm.errors import UserError

    try:
        sys.argv = with_run_config(sys.argv)
    except UserError as err:  # before Hydra, which would print it the same way
        sys.exit(str(err))
    main()
