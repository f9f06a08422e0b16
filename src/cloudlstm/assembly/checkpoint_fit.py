"""Does a checkpoint fit the data and the model it is evaluated with? One-line answers.

``eval.py`` may pair a run's model with other data (``data.*`` overrides) or another
checkpoint (``ckpt=<path>``). Each check here names the mismatch as a
:class:`~cloudlstm.errors.UserError` before anything fails obscurely: the training scaler
(restored before the data are normalised), the points of models tied to theirs, the weights
themselves (the sizes the model was built for are checked when it is built).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import numpy as np

from cloudlstm.data.spec import stored_spec
from cloudlstm.data.transforms import StandardScaler
from cloudlstm.errors import UserError


def restore_scaler(datamodule: Any, checkpoint: dict[str, Any], path: Path) -> None:
    """Load the training scaler of ``checkpoint`` into a loaded, not yet set-up datamodule.

    Before ``setup``: Lightning restores datamodule state only after it, when the data have
    already been normalised with a scaler refitted on them.

    Raises:
        UserError: the checkpoint holds no scaler, or one of other channels than the data's.
    """
    # checkpoints written before the data description held the scaler kept it in the
    # datamodule's Lightning state
    state = checkpoint.get(type(datamodule).__qualname__) or {}
    info = stored_spec(checkpoint) or {}
    scaler = info.get("scaler") or state.get("scaler")
    if scaler is None:
        raise UserError(
            f"{path} holds no value scaler for {type(datamodule).__name__}: it was written by "
            "a run on another kind of data. Evaluate it with its own run (run=<its run dir>)."
        )
    trained = info.get("channel_names")
    if trained is not None:  # the scaler's channels: the targets, then the covariates
        trained = [*trained, *info.get("covariate_names", [])]
    count = StandardScaler.from_dict(scaler).num_channels
    have = [*datamodule.channel_names, *datamodule.covariate_names]
    if count != len(have) or (trained is not None and trained != have):
        names = f" ({', '.join(trained)})" if trained else ""
        raise UserError(
            f"{path} was trained on {count} channels{names}, but the data has {len(have)} "
            f"({', '.join(have)}). Evaluate it on data with its training channels."
        )
    datamodule.use_scaler(scaler)


def check_points(model: Any, datamodule: Any, checkpoint: dict[str, Any], path: Path) -> None:
    """Refuse other points than the training ones for a model tied to them (grid models,
    MLP, LSTM: ``model.fixed_points`` says why); point models take any points.

    Checkpoints written before they stored their points are checked by size alone (the
    model's sizes against the data's, :func:`cloudlstm.models.build.build_model`).

    Raises:
        UserError: the data's points (ids or coordinates) are not the training points.
    """
    reason = getattr(model, "fixed_points", None)
    info = stored_spec(checkpoint)
    if reason is None or info is None:
        return
    stream = datamodule.stream
    coords = np.asarray(stream.coords, dtype=np.float64)
    trained = np.asarray(info["coords"], dtype=np.float64)
    same = list(stream.point_ids) == info["point_ids"] and coords.shape == trained.shape
    if not (same and np.allclose(coords, trained)):
        raise UserError(
            f"{path} ({info['model']}) can only be evaluated on its {len(info['point_ids'])} "
            f"training points, and the data has other points ({stream.num_points}): "
            f"{reason}. Drop the data.* overrides that change the points, or evaluate a point "
            "model (CloudLSTM, ...)."
        )


def load_weights(module: L.LightningModule, checkpoint: dict[str, Any], path: Path) -> None:
    """Load the checkpoint's weights (and what ``on_load_checkpoint`` restores) into ``module``.

    Raises:
        UserError: the checkpoint holds another model, or weights of other shapes.
    """
    built = type(module.model).__name__
    stored = (stored_spec(checkpoint) or {}).get("model")
    if stored is not None and stored != built:
        raise UserError(
            f"{path} holds a {stored} model, but the run's config builds a {built}. Give a "
            "checkpoint of this run, or run=<the checkpoint's run directory>."
        )
    differences = weight_differences(module, checkpoint["state_dict"])
    if differences:
        raise UserError(
            f"{path} does not fit the run's {built} model ({differences}). Give a checkpoint "
            "of this run, or run=<the checkpoint's run directory>."
        )
    module.load_state_dict(checkpoint["state_dict"])
    module.on_load_checkpoint(checkpoint)


def check_resume_fits(module: L.LightningModule, checkpoint: dict[str, Any], path: Path) -> None:
    """Refuse to resume training from weights the model built now cannot take: a setting
    that shapes the weights (``model.k``, ``model.hidden_channels``, ...) changed since the
    checkpoint, which ``allow_changes`` lets through the config check.

    Raises:
        UserError: the checkpoint's weights differ in names or shapes from the module's.
    """
    differences = weight_differences(module, checkpoint["state_dict"])
    if differences:
        raise UserError(
            f"{path} holds weights that the model built by these settings cannot take "
            f"({differences}): a changed setting reshapes the model, and a resumed run keeps "
            "its weights. Start fresh with resume=never (better in a new directory), or "
            "drop that change."
        )


def weight_differences(
    module: L.LightningModule, state_dict: dict[str, Any], shown: int = 2
) -> str:
    """The first ``shown`` weights that ``state_dict`` lacks, has in excess or holds in
    another shape than ``module``, in words, and how many more; "" where it fits."""
    own = module.state_dict()
    lines = [f"{key} missing" for key in own if key not in state_dict]
    lines += [f"{key} unexpected" for key in state_dict if key not in own]
    lines += [
        f"{key} {tuple(state_dict[key].shape)} in the checkpoint, {tuple(value.shape)} in the model"
        for key, value in own.items()
        if key in state_dict and _shape(state_dict[key]) != _shape(value)
    ]
    more = f"; {len(lines) - shown} more" if len(lines) > shown else ""
    return "; ".join(lines[:shown]) + more


def _shape(value: Any) -> tuple[int, ...] | None:
    """A tensor's shape; None for the extra state a module may keep beside its tensors."""
    return tuple(value.shape) if hasattr(value, "shape") else None
