"""A forecaster from its ``model`` config, with the options that are not constructor arguments.

``model.compile`` (default ``auto``) is such an option: it belongs to every model, so it lives
once in ``conf/train.yaml`` instead of in each model's config, and is taken out before
Hydra instantiates the ``_target_``.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

import hydra
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf
from torch import nn

from cloudlstm.data.spec import DataSpec
from cloudlstm.errors import UserError, locate
from cloudlstm.models.capture import AUTO
from cloudlstm.models.options import check_option_types
from cloudlstm.nn.knn_checks import NeighbourCountError

log = logging.getLogger(__name__)

BUILD_OPTIONS = ("compile",)
# torch.compile's modes; "reduce-overhead" replays CUDA graphs (one launch per compiled
# region instead of one per kernel), which is what a launch-bound GPU step needs
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def build_model(
    config: DictConfig | dict[str, Any],
    spec: DataSpec | None = None,
    compile: bool | str | None = None,
) -> nn.Module:
    """Instantiate ``config`` (a ``model`` node) sized for ``spec``, then apply the build
    options.

    Args:
        config: the ``model`` config: ``_target_``, constructor arguments and optionally
            ``compile``.
        spec: the data's description: each of its sizes (:data:`SIZE_KEYS`:
            ``num_points``, ``num_channels``, ``input_steps``, ``output_steps``,
            ``coord_features``, ``steps_per_day``) that the constructor takes is passed, so
            model configs name none of them. A size the config sets must agree with it
            (a run's saved config holds the sizes it was built with). Its graph of the
            points (``spec.adjacency``, from ``data.source.graph``) is passed as the
            constructor argument ``adjacency`` (:func:`graph_argument`).
        compile: overrides ``config.compile`` (``False`` when loading a model for a quick
            forecast, where compiling would cost more than it saves).

    ``compile``: ``torch.compile`` the model in place (``nn.Module.compile``: the parameter
    names, so checkpoints, stay as they are): ``true`` in the default mode, or one of
    :data:`COMPILE_MODES`; ``auto`` builds it uncompiled, for the run to decide. A CloudLSTM
    forward compiles to one graph, its neighbour searches operators in it
    (:func:`cloudlstm.nn.knn.knn`); docs/design.md has the details.

    Raises:
        UserError: ``compile`` is neither a boolean nor a mode, an option is not of the
            type its constructor declares (:mod:`cloudlstm.models.options`), the config sets a size
            the data does not have, asks more neighbours than the data has points, the
            data has a graph that the model cannot take, or points that move where the model
            takes only points that stay (its ``static``:
            :class:`~cloudlstm.nn.graph.StaticPositions`).
    """
    config = resolved(config)
    options = {key: config.pop(key, None) for key in BUILD_OPTIONS}
    mode = compile_mode(compile if compile is not None else options["compile"])
    check_option_types(locate(config._target_, "model._target_"), config)
    sizes = data_sizes(config, spec) if spec is not None else {}
    graph = graph_argument(config, spec) if spec is not None else {}
    if spec is not None:
        check_neighbours_fit(config, spec.num_points)
        if not graph:
            warn_idle_kernel_neighbours(config, spec.num_points)
    if graph:
        model = _instantiate_with(config, sizes, graph)
    else:
        model = hydra.utils.instantiate(config, **sizes)
    static = getattr(model, "static", None)
    if spec is not None and spec.moving and static is not None:
        static.refuse_moving()
    if mode is not None:
        model.compile(mode=None if mode == "default" else mode)
    return model


def _instantiate_with(
    config: DictConfig, sizes: dict[str, Any], objects: dict[str, Any]
) -> nn.Module:
    """``config`` instantiated with ``sizes`` and the constructor arguments ``objects``,
    which are passed as they are: Hydra would turn an N x N matrix into a config node, one
    node per weight. A constructor's error is wrapped as Hydra wraps it, so that the entry
    points report a bad option in one line all the same
    (:func:`cloudlstm.errors.one_line_errors`)."""
    make = hydra.utils.instantiate(config, _partial_=True, **sizes)
    try:
        return make(**objects)
    except UserError:
        raise
    except Exception as err:
        raise InstantiationException(
            f"Error in call to target '{config._target_}':\n{err!r}"
        ) from err


def check_neighbours_fit(config: DictConfig, num_points: int) -> None:
    """Refuse, before the model is built, a ``model.k`` (times ``model.dilation``) that the
    data's points cannot give: otherwise the first forward pass, after the data are loaded
    and the Trainer started, would be the first to tell. A ``k`` that is no number of
    neighbours at all is left to the constructor (:func:`~cloudlstm.nn.knn_checks.check_k_option`).

    Raises:
        NeighbourCountError: (a :class:`UserError`) more neighbours than points.
    """
    k, dilation = config.get("k"), config.get("dilation", 1)
    needed = neighbours_needed(k, dilation)
    if needed is None or needed <= num_points:
        return
    asked = neighbours_setting(k, dilation)
    fix = f"set model.k <= {num_points // dilation}"
    if num_points < dilation:
        fix = f"set model.dilation=1 and model.k <= {num_points}"
    raise NeighbourCountError(
        f"{asked} neighbours but the data has {num_points} point(s): {fix} (model.k=1: "
        "each point alone), or give the data more points."
    )


def warn_idle_kernel_neighbours(config: DictConfig, num_points: int) -> None:
    """Warn where a graph model's ``model.neighbours`` (the automatic kernel width's
    neighbour: :func:`~cloudlstm.nn.graph.neighbour_scale`) is not what the model reads:
    more than the other points there are, where it takes the farthest one, or beside a
    ``model.sigma``, which sets the width instead."""
    model_cls = locate(config._target_, "model._target_")
    params = inspect.signature(model_cls).parameters
    neighbours = config.get("neighbours")
    if "neighbours" not in params or not isinstance(neighbours, int) or neighbours < 1:
        return  # a model without the kernel, or a value its constructor refuses
    name = model_cls.__name__
    if config.get("sigma") is not None:
        if neighbours != params["neighbours"].default:
            log.warning(
                "model.neighbours=%d changes nothing: model.sigma=%s sets %s's kernel width. "
                "Leave model.neighbours out, or give model.sigma=null for the automatic width.",
                neighbours,
                config.sigma,
                name,
            )
    elif neighbours > num_points - 1:
        others = num_points - 1
        log.warning(
            "model.neighbours=%d: the data's points have %d other point(s) each, so %s's "
            "kernel width is the mean distance to the farthest one. Set model.neighbours<=%d "
            "to say so, or give model.sigma.",
            neighbours,
            others,
            name,
            max(1, others),
        )


def neighbours_needed(k: Any, dilation: Any = 1) -> int | None:
    """The points a model reads around each point: ``model.k`` x ``model.dilation``; None
    where either is no whole number >= 1 (a model without neighbours, or a value its
    constructor refuses in its own words)."""
    whole = [isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (k, dilation)]
    return k * dilation if all(whole) else None


def neighbours_setting(k: int, dilation: int = 1) -> str:
    """The settings behind :func:`neighbours_needed`, as a user writes them."""
    return f"model.k={k}" if dilation == 1 else f"model.k={k} x model.dilation={dilation}"


def with_sizes(config: DictConfig | dict[str, Any], spec: DataSpec) -> DictConfig:
    """A copy of ``config`` with the sizes of ``spec`` its constructor takes written in:
    a trained model's config as it was built (its checkpoint's description)."""
    config = resolved(config)
    config.update(data_sizes(config, spec))
    return config


def resolved(config: DictConfig | dict[str, Any]) -> DictConfig:
    """A resolved copy of a model config (a DictConfig, resolved against its root
    config, or a plain dict)."""
    if not OmegaConf.is_config(config):
        config = OmegaConf.create(config)
    return OmegaConf.create(OmegaConf.to_container(config, resolve=True))


def data_sizes(config: DictConfig, spec: DataSpec) -> dict[str, Any]:
    """The sizes of ``spec`` that the constructor of ``config._target_`` takes and the
    config leaves out.

    Raises:
        UserError: the config sets one to another value than the data's, e.g. a saved run
            built for 12 forecast steps evaluated on windows of 6.
    """
    model_cls = locate(config._target_, "model._target_")
    accepted = inspect.signature(model_cls).parameters
    sizes = {}
    for key, value in spec.sizes.items():
        if key not in accepted:
            check_refused(model_cls, key, spec)
            continue
        if config.get(key) is None:
            sizes[key] = value
        elif config[key] != value:
            raise UserError(
                f"The model was built for {key}={config[key]} (model.{key}), but the data give "
                f"{key}={value}. Keep the data.* settings that sized the model (e.g. "
                f"data.input_steps, data.output_steps), or leave model.{key} out."
            )
    return sizes


# The options of a model's own graph of the coordinates (a Gaussian kernel), which a graph
# given with the data replaces
GRAPH_KERNEL_OPTIONS = ("sigma", "epsilon", "neighbours")


def graph_argument(config: DictConfig, spec: DataSpec) -> dict[str, Any]:
    """``{"adjacency": spec.adjacency}`` for a model whose constructor takes a parameter
    ``adjacency`` and data with a graph (``data.source.graph``); ``{}`` without a graph,
    where such a model builds its own (STGCN: from the coordinates). The weights are the
    ``(N, N)`` nested list of :attr:`DataSpec.adjacency`, in the data's point order. Never
    written into a run's config (:func:`with_sizes` writes sizes only): the checkpoint's
    description carries it.

    A model that reads no graph (``linear``, the CloudLSTM family) or learns its own (AGCRN,
    STAEformer) is built without it, and the log says so: the graph belongs to the data set
    (METR-LA's road graph), as its positions do, and every model of a comparison on it is
    given the same data.
    """
    if spec.adjacency is None:
        return {}
    model_cls = locate(config._target_, "model._target_")
    if not reads_given_graph(config):
        log.info(
            "%s reads no given graph: the data's graph (data.source.graph) is not used",
            model_cls.__name__,
        )
        return {}
    params = inspect.signature(model_cls).parameters
    idle = {
        key: config[key]
        for key in GRAPH_KERNEL_OPTIONS
        if key in params and key in config and config[key] != params[key].default
    }
    if idle:
        one = len(idle) == 1
        log.warning(
            "%s %s nothing: the data's graph (data.source.graph) replaces the graph %s "
            "builds from the coordinates. Leave %s out, or give data.source.graph=null for "
            "the coordinates' graph.",
            ", ".join(f"model.{k}={v}" for k, v in idle.items()),
            "changes" if one else "change",
            model_cls.__name__,
            "it" if one else "them",
        )
    return {"adjacency": spec.adjacency}


def reads_given_graph(config: DictConfig) -> bool:
    """Whether the model of ``config`` (its ``_target_``) reads a graph given with the data:
    its constructor takes ``adjacency`` (STGCN, DCRNN, Graph WaveNet)."""
    model_cls = locate(config._target_, "model._target_")
    return "adjacency" in inspect.signature(model_cls).parameters


def check_refused(model_cls: type, key: str, spec: DataSpec) -> None:
    """Refuse data with input-only channels for a model whose constructor does not take
    ``key`` (``input_channels``: covariates; ``future_channels``: time features), and
    points of other dimensions than a model that takes no ``coord_features`` places
    (its class's ``coordinate_dims``: a grid model's 2).

    Raises:
        UserError: the data has them; says why the model takes none (its class's
            ``covariates_refused``) and how to drop them; or names both dimensions.
    """
    dims = getattr(model_cls, "coordinate_dims", None)
    if key == "coord_features" and dims is not None and spec.coord_features != dims:
        raise UserError(
            f"{model_cls.__name__} places points on a {dims}-D grid, and the data's points "
            f"have {spec.coord_features} coordinate(s): give {dims} coordinate columns "
            "(data.source.coord_cols), or choose a point-cloud model (e.g. model=cloudlstm)."
        )
    if key == "input_channels" and spec.input_channels != spec.num_channels:
        what = f"input-only channels {[*spec.covariate_names, *spec.future_names]}"
    elif key == "future_channels" and spec.future_channels:
        what = f"time features {spec.time_features}"
    else:
        return
    why = (
        getattr(model_cls, "covariates_refused", None) or "it reads only the channels it forecasts"
    )
    raise UserError(
        f"{model_cls.__name__} takes no {what}: {why}. Drop them (data.time_features=[], "
        "and no covariates in data.source) or choose a model that takes them."
    )


def compile_mode(value: bool | str | None) -> str | None:
    """``model.compile`` -> the torch.compile mode, or None for no compilation.

    ``auto`` is None here: a run decides it once it knows its device
    (:func:`cloudlstm.models.capture.auto_compile`); a model built elsewhere (a forecast,
    the models table) runs eagerly."""
    if value is None or value is False or value == AUTO:
        return None
    if value is True:
        return "default"
    if isinstance(value, str) and value in COMPILE_MODES:
        return value
    raise UserError(
        f"model.compile={value!r} is not a boolean, auto or a torch.compile mode. Use "
        f"model.compile=auto (captured steps on one GPU, else eager), true (the default "
        f"mode), false, or one of {list(COMPILE_MODES)}."
    )


def count_parameters(model: nn.Module) -> int:
    """All parameters of ``model``, trainable or not."""
    return sum(p.numel() for p in model.parameters())
