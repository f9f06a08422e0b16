"""A forecaster from its ``model`` config, with the options that are not constructor arguments.

``model.compile`` (default false) is such an option: it belongs to every model, so it lives
once in ``conf/train.yaml`` instead of in each model's config, and is taken out before
Hydra instantiates the ``_target_``.
"""

from __future__ import annotations

from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf
from torch import nn

BUILD_OPTIONS = ("compile",)


def build_model(config: DictConfig | dict[str, Any], compile: bool | None = None) -> nn.Module:
    """Instantiate ``config`` (a ``model`` node) without its build options, then apply them.

    Args:
        config: the ``model`` config: ``_target_``, constructor arguments and optionally
            ``compile``.
        compile: overrides ``config.compile`` (``False`` when loading a model for a quick
            forecast, where compiling would cost more than it saves).

    ``compile``: ``torch.compile`` the model in place (``nn.Module.compile``: the parameter
    names, so checkpoints, stay as they are). The neighbour search and the numba kernels are
    excluded from the graph (``torch.compiler.disable``); what is compiled is the dense
    work between them.
    """
    config = OmegaConf.create(OmegaConf.to_container(config, resolve=True))
    options = {key: config.pop(key, None) for key in BUILD_OPTIONS}
    model = hydra.utils.instantiate(config)
    if compile if compile is not None else bool(options["compile"]):
        model.compile()
    return model
