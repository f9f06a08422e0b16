"""Parameter count of every model config at the paper's sizes (appendix model table).

``python -m cloudlstm.cli.models_table`` composes each ``conf/model/*.yaml`` exactly as
``train.py`` would, with the data-dependent sizes of the paper's air-quality cluster A
(N=274 stations, C=6 indicators, M=J=12, 2-D coordinates) unless given, builds the model as
every run does (:func:`~cloudlstm.models.build.build_model` on a
:meth:`~cloudlstm.data.spec.DataSpec.sized` description), counts its parameters as every run
does (:func:`~cloudlstm.models.build.count_parameters`) and prints a markdown table.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import open_dict

from cloudlstm.cli.pipes import reader_may_leave
from cloudlstm.data.spec import DataSpec
from cloudlstm.models.build import build_model, count_parameters
from cloudlstm.paths import config_dir

CONF_DIR = config_dir()


def model_names(conf_dir: Path = CONF_DIR) -> list[str]:
    return sorted(p.stem for p in (conf_dir / "model").glob("*.yaml"))


def model_parameters(name: str, **sizes: Any) -> int:
    """Parameters of ``model=<name>`` with its config defaults and the given data sizes
    (the keyword arguments of :func:`model_for_shape`)."""
    return count_parameters(model_for_shape(name, **sizes))


def model_for_shape(
    name: str,
    num_points: int = 274,
    num_channels: int = 6,
    input_steps: int = 12,
    output_steps: int = 12,
    coord_features: int = 2,
    steps_per_day: int = 24,
    conf_dir: Path = CONF_DIR,
    **model_keys: Any,
) -> torch.nn.Module:
    """``model=<name>`` as train.py builds it for data of these sizes (the Urban Air shape by
    default), with ``model_keys`` set over its config; never compiled."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        cfg = compose("train", overrides=[f"model={name}"])
    spec = DataSpec.sized(
        num_points, num_channels, input_steps, output_steps, coord_features, steps_per_day
    )
    with open_dict(cfg):
        cfg.paths.data_dir = str(Path.cwd() / "data")
        cfg.model.update(model_keys)
    return build_model(cfg.model, spec, compile=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-points", type=int, default=274)
    parser.add_argument("--num-channels", type=int, default=6)
    parser.add_argument("--input-steps", type=int, default=12)
    parser.add_argument("--output-steps", type=int, default=12)
    parser.add_argument("models", nargs="*", help="model config names (default: all)")
    args = parser.parse_args(argv)
    print(
        f"Parameters at N={args.num_points}, C={args.num_channels}, "
        f"M={args.input_steps}, J={args.output_steps}:\n"
    )
    print("| model | parameters |\n|---|---|")
    for name in args.models or model_names():
        count = model_parameters(
            name,
            num_points=args.num_points,
            num_channels=args.num_channels,
            input_steps=args.input_steps,
            output_steps=args.output_steps,
        )
        print(f"| `{name}` | {count:,} |")
    return 0


if __name__ == "__main__":
    with reader_may_leave():  # `python -m cloudlstm.cli.models_table | head`
        raise SystemExit(main())
