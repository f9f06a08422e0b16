"""A model option of another type than its constructor declares is refused in one line
before the model is built, for every model (cloudlstm.models.options)."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path
from types import SimpleNamespace

import hydra
import pytest
import yaml
from omegaconf import OmegaConf

from cloudlstm.data.spec import DataSpec
from cloudlstm.errors import UserError, one_line_errors
from cloudlstm.models.build import build_model, data_sizes
from cloudlstm.models.options import _declared, check_option_types, parameters_of
from tests.conftest import PYTHON, ROOT, TINY, one_line, subprocess_env

CLOUD = "cloudlstm.models.CloudSeq2Seq"


@pytest.mark.parametrize(
    ("target", "option", "said"),
    [
        (CLOUD, {"attention": "maybe"}, "attention='maybe': use true or false."),
        (CLOUD, {"residual": 1}, "residual=1: use true or false."),
        (CLOUD, {"forget_bias": math.nan}, "forget_bias=nan: use a finite number."),
        (CLOUD, {"hidden_channels": 4.5}, "hidden_channels=4.5: use a whole number."),
        (CLOUD, {"num_layers": True}, "num_layers=True: use a whole number."),
        (CLOUD, {"k": None}, "k=None: give a value (null is not one here)."),
        (
            "cloudlstm.models.linear.TimeLinear",
            {"share_channels": "yes"},
            "share_channels='yes': use true or false.",
        ),
        (
            "cloudlstm.models.stgcn.STGCN",
            {"dropout": 1.5},
            "dropout=1.5: use a probability in [0, 1) (0: no dropout).",
        ),
        ("cloudlstm.models.stgcn.STGCN", {"epsilon": "0.5"}, "epsilon='0.5': use a"),
    ],
)  # fmt: skip
def test_an_option_of_another_type_than_declared_is_refused_before_the_model_is_built(
    target, option, said
):
    with pytest.raises(UserError) as refused:
        build_model({"_target_": target, **option})
    assert str(refused.value).startswith(f"{target.rsplit('.', 1)[-1]}: model.{said}")


@pytest.mark.parametrize(
    ("annotation", "declared"),
    [
        ("float | None", ("float", True)),
        ("Optional[int]", ("int", True)),
        ("typing.Optional[int]", ("int", True)),
        ("Union[int, float, NoneType]", ("number", True)),
        ("float | torch.Tensor", ("float", False)),  # no config gives a tensor
        ("Union[int, float, str, datetime.timedelta, dict[str, int], NoneType]", (None, True)),
        ("tuple[float | torch.Tensor, float | torch.Tensor]", (None, False)),
        ("bool", ("bool", False)),
    ],
)
def test_the_declared_kind_is_read_from_every_way_of_writing_an_annotation(annotation, declared):
    from cloudlstm.models.options import _declared

    assert _declared(annotation) == declared


def test_every_model_config_passes_and_null_goes_where_it_is_declared():
    """The shipped configs are of the declared types; ``sigma: float | None`` takes null."""
    for path in sorted((ROOT / "conf" / "model").glob("*.yaml")):
        config = yaml.safe_load(path.read_text())
        if "_target_" not in config:  # a variant that takes its model from a defaults list
            continue
        check_option_types(hydra.utils.get_class(config["_target_"]), config)
    check_option_types(hydra.utils.get_class("cloudlstm.models.stgcn.STGCN"), {"sigma": None})


def test_train_py_refuses_a_non_boolean_switch_in_one_line(tmp_path: Path):
    done = subprocess.run(
        [*PYTHON, "train.py", *TINY, "logger=none", "model.attention=maybe",
         f"hydra.run.dir={tmp_path / 'run'}", f"paths.data_dir={tmp_path / 'data'}"],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1
    assert one_line(done) == "CloudSeq2Seq: model.attention='maybe': use true or false."


def test_a_size_set_against_the_data_is_refused_naming_the_key():
    """A saved run built for 12 forecast steps, evaluated on windows of 5."""
    config = OmegaConf.create(
        {"_target_": "cloudlstm.models.linear.TimeLinear", "output_steps": 12}
    )
    with pytest.raises(UserError) as refused:
        data_sizes(config, SimpleNamespace(sizes={"output_steps": 5}))
    assert str(refused.value) == (
        "The model was built for output_steps=12 (model.output_steps), but the data give "
        "output_steps=5. Keep the data.* settings that sized the model (e.g. data.input_steps, "
        "data.output_steps), or leave model.output_steps out."
    )


def _model_config(name: str) -> dict:
    """``conf/model/<name>.yaml`` with the configs of its defaults list under it, and its
    interpolated values (a cache folder under ``paths``) left to their defaults."""
    config = yaml.safe_load((ROOT / "conf" / "model" / f"{name}.yaml").read_text())
    merged: dict = {}
    for parent in (d for d in config.pop("defaults", []) if d != "_self_"):
        merged |= _model_config(parent)
    merged |= config
    return {k: v for k, v in merged.items() if not (isinstance(v, str) and "${" in v)}


@pytest.mark.parametrize(
    "name", sorted(p.stem for p in (ROOT / "conf" / "model").glob("*.yaml")
                   if "_global_" not in p.read_text())
)  # fmt: skip
def test_every_size_of_every_model_below_zero_is_one_line_naming_it(name):
    """A whole-number setting at -1 was torch's 'negative dimension' traceback for some
    models (CloudCNN's, the CNNs' hidden_channels) or was taken as none (CloudCNN's
    num_layers), and Hydra's two-line wrapper of torch's own check for the kNN-LSTM's
    hidden_size. At 0 a setting is refused the same way, or builds where none is a
    choice (DCRNN's diffusion_steps, STAEformer's embeddings, CloudCNN's hidden layers);
    it was a ZeroDivisionError for CloudCNN's hidden_channels."""
    spec = DataSpec.sized(num_points=16, num_channels=2, input_steps=6, output_steps=3,
                          steps_per_day=24)  # fmt: skip
    config = _model_config(name)
    sizes = [k for k, v in config.items() if isinstance(v, int) and not isinstance(v, bool)]
    for key in sizes:
        with pytest.raises(UserError) as refused, one_line_errors():
            build_model({**config, key: -1}, spec)
        assert key in str(refused.value), (name, key, str(refused.value))
        try:
            with one_line_errors():
                build_model({**config, key: 0}, spec)
        except UserError as err:
            assert key in str(err), (name, key, str(err))
    # A whole number that defaults to null (STGCN's spatial_channels, PointCNN's
    # lifted_channels) at 0 was read as null, silently: its default built instead.
    target = hydra.utils.get_class(config["_target_"])
    for key, parameter in parameters_of(target).items():
        if config.get(key, 0) is None and _declared(parameter.annotation)[0] == "int":
            for value in (-1, 0):
                with pytest.raises(UserError) as refused, one_line_errors():
                    build_model({**config, key: value}, spec)
                assert f"model.{key}" in str(refused.value), (name, key, str(refused.value))
