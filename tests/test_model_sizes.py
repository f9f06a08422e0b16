"""A size of a model set to 0 is refused by the model's constructor naming its key, for every
model of the zoo (or taken, where 0 is a count of optional layers)."""

from __future__ import annotations

import pytest
from hydra.errors import InstantiationException
from test_anchor_heads import MODELS, SPEC, tiny_model_config

from cloudlstm.models.build import build_model

SIZES = ("hidden_channels", "hidden_size", "num_layers")
# 0 counts the optional layers of these models: none
COUNTS = {("cloudcnn", "num_layers"), ("stid", "num_layers")}


@pytest.mark.parametrize("name", MODELS)
def test_a_size_of_0_is_refused_naming_its_key(tmp_path, name: str) -> None:
    for key in SIZES:
        config = tiny_model_config(tmp_path, name)
        if key not in config:
            continue
        config[key] = 0
        if (name, key) in COUNTS:
            build_model(config, SPEC)
            continue
        with pytest.raises(InstantiationException) as err:
            build_model(config, SPEC)
        assert f"model.{key}" in str(err.value), (name, key, str(err.value))
