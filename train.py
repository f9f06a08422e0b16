"""Train and evaluate a forecaster: `python train.py [group=option ...] [key=value ...]`.

See README.md and `python train.py --help` for the configuration groups.
"""

import os
from pathlib import Path

import hydra
from omegaconf import DictConfig

os.environ.setdefault("PROJECT_ROOT", str(Path(__file__).resolve().parent))


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    from cloudlstm.cli.train import main as run

    return run(cfg)


if __name__ == "__main__":
    main()
