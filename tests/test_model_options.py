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

from cloudlstm.errors import UserError
from cloudlstm.models.build import build_model, data_sizes
from cloudlstm.models.options import check_option_types
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
