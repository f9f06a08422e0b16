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
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from cloudlstm.cli.arguments import at_least_one
from cloudlstm.cli.ctrl_c import ctrl_c_is_a_stop
from cloudlstm.cli.pipes import reader_may_leave
from cloudlstm.errors import UserError, one_line_errors
from cloudlstm.paths import config_dir

if TYPE_CHECKING:
    import torch

# torch, Hydra and the models are imported where they are used: as
# `python -m cloudlstm.cli.models_table`, this module's own imports run before program()
# holds a Ctrl-C until an import is done, and torch's initialisation must not be interrupted

CONF_DIR = config_dir()


def model_names(conf_dir: Path = CONF_DIR) -> list[str]:
    return sorted(p.stem for p in (conf_dir / "model").glob("*.yaml"))


def model_parameters(name: str, **sizes: Any) -> int:
    """Parameters of ``model=<name>`` with its config defaults and the given data sizes
    (the keyword arguments of :func:`model_for_shape`)."""
    from cloudlstm.models.build import count_parameters

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
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict

    from cloudlstm.data.spec import DataSpec
    from cloudlstm.models.build import build_model

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


@reader_may_leave()  # `cloudlstm-models | head`
@ctrl_c_is_a_stop()
def program() -> NoReturn:
    """``cloudlstm-models`` and ``python -m cloudlstm.cli.models_table``: :func:`main` on the
    command line, its status the program's."""
    raise SystemExit(main())


def main(argv: list[str] | None = None) -> int:
    """Print the table; 1 if a model named on the command line cannot be built at the sizes
    given (its row says why), 2 for a bad option (argparse's usage and one line). The whole
    table is 0 even where a model needs other sizes (seasonal naive a whole season of input):
    its row says so, and that row is the answer asked for."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, default in SIZES.items():
        parser.add_argument(flag, type=at_least_one, default=default)
    parser.add_argument("models", nargs="*", help="model config names (default: all)")
    args = parser.parse_args(argv)
    known = model_names()
    unknown = [name for name in args.models if name not in known]
    if unknown:
        parser.error(f"no model {unknown[0]!r}; the models: {', '.join(known)}")
    print(
        f"Parameters at N={args.num_points}, C={args.num_channels}, "
        f"M={args.input_steps}, J={args.output_steps}:\n"
    )
    print("| model | parameters |\n|---|---|")
    built = [_row(name, args) for name in args.models or known]
    return 0 if all(built) or not args.models else 1


# The table's size options and their defaults: the paper's air-quality cluster A.
SIZES = {"--num-points": 274, "--num-channels": 6, "--input-steps": 12, "--output-steps": 12}

# The settings a model's refusal names for train.py, and this program's options for them.
FLAG_OF_SETTING = {"data.input_steps": "--input-steps", "data.output_steps": "--output-steps"}


def _row(name: str, args: argparse.Namespace) -> bool:
    """Print ``name``'s row: its parameter count, or why it cannot be built at these sizes
    (a model that needs more points than given, say). True if it was built."""
    sizes = {key: value for key, value in vars(args).items() if key != "models"}
    try:
        with one_line_errors():
            count = model_parameters(name, **sizes)
    except UserError as err:
        print(f"| `{name}` | not built at these sizes: {_in_flags(str(err))} |")
        return False
    print(f"| `{name}` | {count:,} |")
    return True


def _in_flags(refusal: str) -> str:
    """A build refusal with the sizes it names as this program's options, so its fix can be
    typed here: "Set data.input_steps to at least 24" reads "Set --input-steps to ..."."""
    for setting, flag in FLAG_OF_SETTING.items():
        refusal = refusal.replace(f"{setting}=", f"{flag} ").replace(setting, flag)
    # more neighbours than points: model.k is no option here, the points and the configs are
    return re.sub(
        r"(neighbours but the data has \d+ point\(s\)): .*more points\.$",
        r"\1: give --num-points at least that many, or a config of a smaller K "
        "(e.g. cloudlstm_k3).",
        refusal,
    )


if __name__ == "__main__":
    program()
