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

from cloudlstm.errors import UserError

BUILD_OPTIONS = ("compile",)
# torch.compile's modes; "reduce-overhead" replays CUDA graphs (one launch per compiled
# region instead of one per kernel), which is what a launch-bound GPU step needs
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def build_model(
    config: DictConfig | dict[str, Any], compile: bool | str | None = None
) -> nn.Module:
    """Instantiate ``config`` (a ``model`` node) without its build options, then apply them.

    Args:
        config: the ``model`` config: ``_target_``, constructor arguments and optionally
            ``compile``.
        compile: overrides ``config.compile`` (``False`` when loading a model for a quick
            forecast, where compiling would cost more than it saves).

    ``compile``: ``torch.compile`` the model in place (``nn.Module.compile``: the parameter
    names, so checkpoints, stay as they are): ``true`` in the default mode, or one of
    :data:`COMPILE_MODES`. A CloudLSTM forward compiles to one graph, its neighbour searches
    operators in it (:func:`cloudlstm.nn.knn.knn`); docs/design.md has the details.

    Raises:
        UserError: ``compile`` is neither a boolean nor a mode.
    """
    config = OmegaConf.create(OmegaConf.to_container(config, resolve=True))
    options = {key: config.pop(key, None) for key in BUILD_OPTIONS}
    mode = compile_mode(compile if compile is not None else options["compile"])
    model = hydra.utils.instantiate(config)
    if mode is not None:
        model.compile(mode=None if mode == "default" else mode)
    return model


def compile_mode(value: bool | str | None) -> str | None:
    """``model.compile`` -> the torch.compile mode, or None for no compilation."""
    if value is None or value is False:
        return None
    if value is True:
        return "default"
    if isinstance(value, str) and value in COMPILE_MODES:
        return value
    raise UserError(
        f"model.compile={value!r} is not a boolean or a torch.compile mode. Use "
        f"model.compile=true (the default mode), false, or one of {list(COMPILE_MODES)}."
    )
