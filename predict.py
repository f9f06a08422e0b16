"""Forecast new data with a trained run: `python predict.py run=<run dir> data.path=<file>`.

See README.md ("Forecasting with a trained model") and conf/predict.yaml.
"""

import os
from pathlib import Path

import hydra
from omegaconf import DictConfig

os.environ.setdefault("PROJECT_ROOT", str(Path(__file__).resolve().parent))


@hydra.main(version_base="1.3", config_path="conf", config_name="predict")
def main(cfg: DictConfig) -> None:
    from cloudlstm.cli.predict import main as run

    run(cfg)


if __name__ == "__main__":
    main()
