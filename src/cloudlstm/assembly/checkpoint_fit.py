"""Does a checkpoint fit the data and the model it is evaluated with? One-line answers.

``eval.py`` may pair a run's model with other data (``data.*`` overrides) or another
checkpoint (``ckpt=<path>``). Each check here names the mismatch as a
:class:`~cloudlstm.errors.UserError` before anything fails obscurely: the training scaler
(restored before the data are normalised), the sizes the model was built for (a horizon, a
channel count), the sampling interval, the graph of models that read one, the points of
models tied to theirs, the weights themselves.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np

from cloudlstm.data.sources.tables import step_text
from cloudlstm.data.spec import DataSpec, stored_spec
from cloudlstm.errors import UserError, locate
from cloudlstm.models.build import neighbours_needed, neighbours_setting, reads_given_graph
from cloudlstm.models.options import parameters_of
from cloudlstm.rundir.checkpoints import Remedy, check_checkpoint, file_sha256, kept_sha256
from cloudlstm.rundir.layout import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    REPLACED_DIR,
    checkpoint_run,
    read_run_config,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainedCheckpoint:
    """A checkpoint read, checked and parsed once, then passed to every check and load.

    Attributes:
        path: the ``.ckpt`` file.
        contents: what ``torch.load`` gave (weights, optimiser and callback states, ...).
        spec: the description of its training data; None in checkpoints written before
            checkpoints stored it (they are then checked by sizes alone).
    """

    path: Path
    contents: dict[str, Any]
    spec: DataSpec | None

    @classmethod
    def read(cls, path: Path, remedy: Remedy = None) -> TrainedCheckpoint:
        """Verify and load ``path`` (:func:`~cloudlstm.rundir.checkpoints.check_checkpoint`;
        ``remedy`` ends its messages) and parse its data description.

        Raises:
            UserError: the file is truncated, corrupted or no Lightning checkpoint.
        """
        contents = check_checkpoint(path, remedy)
        state = stored_spec(contents)
        return cls(path, contents, None if state is None else DataSpec.from_dict(state))

    def forecasting_spec(self) -> DataSpec:
        """The data description, which forecasting cannot do without.

        Raises:
            UserError: the checkpoint was written before checkpoints stored it.
        """
        if self.spec is None:
            raise UserError(
                f"{self.path} lacks what forecasting needs (scaler, points, sampling step, "
                "...): it was written before checkpoints stored it. Retrain the run "
                "(`python train.py ...` with the same settings) to forecast with it."
            )
        return self.spec

    def trained_in(self) -> str | None:
        """The run directory the checkpoint's training wrote to, as its hyperparameters
        name it (where it trained: a run moved since is elsewhere); None where it names
        none."""
        stored = self.contents.get("hyper_parameters") or {}
        run = stored.get("output_dir")
        return None if run is None else str(run)

    def trained_run(self, refused: Path | None = None) -> Path | None:
        """The run directory of the checkpoint's training, where one still holds it: the
        earlier training moved aside (``.replaced/<time>/``, :mod:`cloudlstm.rundir.replaced`)
        that the file lies in; else, of the trainings of the folder it trained in that may
        have written it (:meth:`trainings`), the one whose ``checkpoints/`` hold a file of
        its bytes (:meth:`holding`), or that folder where it is the only one and was never
        trained anew (a copy of a ``last.ckpt`` written over since is its training's). None
        where none or several may be: no bytes tell them apart (:meth:`its_run` says
        which)."""
        if self.trained_in() is None:
            return None
        here = checkpoint_run(self.path)
        if here is not None and here.parent.name == REPLACED_DIR:
            return here  # the file lies in an earlier training moved aside, a run of its own
        trained = Path(str(self.trained_in()))
        candidates = self.trainings(trained, refused)
        holding = self.holding(candidates)
        if len(holding) == 1:
            return holding[0]
        if candidates == [trained] and not self.earlier_trainings(trained, every_model=True):
            return trained  # the one training the folder ever held
        return None

    def trainings(self, trained: Path, refused: Path | None = None) -> list[Path]:
        """The trainings of run directory ``trained`` (where the checkpoint trained) that
        may have written it, newest first: the folder itself where its config builds the
        checkpoint's model class, and the file does not lie in it (nor is it ``refused``,
        the run a refusal is about) and fail to fit it (trained anew since); then its
        earlier trainings kept aside (:meth:`earlier_trainings`)."""
        here = checkpoint_run(self.path)
        itself = self._built_by(trained) and not (_same(trained, here) or _same(trained, refused))
        return [trained] * itself + self.earlier_trainings(trained)

    def earlier_trainings(self, trained: Path, every_model: bool = False) -> list[Path]:
        """The earlier trainings of run directory ``trained``, moved aside into its
        ``.replaced/``, whose config builds the checkpoint's model class (``every_model``:
        all of them), newest first. Nothing in a checkpoint names its training (every
        training of the folder stores the folder's path): :meth:`holding` tells them
        apart by the files they hold."""
        configs = sorted((trained / REPLACED_DIR).glob(f"*/{CONFIG_FILE}"), reverse=True)
        return [c.parent for c in configs if every_model or self._built_by(c.parent)]

    def holding(self, runs: list[Path]) -> list[Path]:
        """Those of ``runs`` whose ``checkpoints/`` hold a file of this checkpoint's bytes
        (it is a copy of one of their files): of its size, then of its SHA-256
        (:func:`_copy_sha256`)."""
        size = self.path.stat().st_size
        return [
            run
            for run in runs
            if any(
                _size(kept) == size and _copy_sha256(kept) == self._sha256
                for kept in (run / CHECKPOINT_DIR).glob("*.ckpt")
            )
        ]

    @cached_property
    def _sha256(self) -> str:
        """This checkpoint's SHA-256, read or computed once."""
        return kept_sha256(self.path)

    def its_run(self, holder: Path | None = None, refused: Path | None = None) -> str:
        """How a message names the run to give for this checkpoint (after "Give" or "or"):
        ``run=<dir> (the checkpoint's run)`` for ``holder`` (another run directory that
        holds the file, where the caller found one), else for the run of its training
        (:meth:`trained_run`; ``refused``: the run the message refuses it for); else a
        placeholder, saying where it trained and what its folder's trainings tell
        (:meth:`_which_training`)."""
        run = holder or self.trained_run(refused)
        if run is not None:
            aside = run.parent.name == REPLACED_DIR
            kept = ", kept aside when its folder was trained anew" if aside else ""
            return f"run={run} (the checkpoint's run{kept})"
        trained = self.trained_in()
        where = "" if trained is None else f" ({self._which_training(Path(trained), refused)})"
        return f"the checkpoint's run as run=<its run directory>{where}"

    def _which_training(self, trained: Path, refused: Path | None) -> str:
        """Where the checkpoint trained (``trained``), and which of that folder's trainings
        may be its, where :meth:`trained_run` names none: several hold a file of its bytes
        (a rerun of the same settings and seed, a copy), none does (a copy of a file written
        over since, of a training no longer kept, a file saved again), or none builds its
        model (trained anew since, or no run directory now)."""
        candidates = self.trainings(trained, refused)
        holding = self.holding(candidates)
        anew = f"it trained in {trained}, which was trained anew since"
        if len(holding) > 1:
            both = "both" if len(holding) == 2 else "all"
            return (
                f"{anew}; {_listed(holding)} {both} hold a file of its bytes (a rerun of the "
                "same settings and seed, or a copy), and nothing in the file tells which "
                "trained it: give either"
            )
        if len(candidates) == 1:
            return (
                f"{anew}; {candidates[0]}, its one training that builds its model, holds no "
                "file of its bytes: give it where the file is a copy of its checkpoint made "
                "before a later save wrote over it, not of a training no longer kept"
            )
        if candidates:
            return (
                f"{anew}; none of its {len(candidates)} trainings that build its model "
                f"({_listed(candidates)}) holds a file of its bytes, so nothing tells which, "
                "if any, wrote it"
            )
        if (trained / CONFIG_FILE).is_file():
            return anew
        return f"it trained in {trained}, no run directory now"

    def _built_by(self, run: Path) -> bool:
        """Whether the config of run directory ``run`` builds the checkpoint's model class
        (a checkpoint that does not name it: any run directory)."""
        try:
            target = str(read_run_config(run).model.get("_target_", ""))
        except UserError:
            return False  # no run directory, or one whose config cannot be read
        return self.spec is None or target.rpartition(".")[2] == self.spec.model


def _same(folder: Path, other: Path | None) -> bool:
    """Whether ``other`` is the folder ``folder`` (by the file system, wherever named)."""
    return other is not None and folder.is_dir() and other.is_dir() and folder.samefile(other)


def _listed(runs: list[Path]) -> str:
    """Run directories in words: ``A``, ``A and B``, ``A, B and C``."""
    names = [str(run) for run in runs]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _copy_sha256(path: Path) -> str:
    """The SHA-256 of another run's checkpoint ``path``, to tell a copy of this one by: its
    kept one, or its bytes' where that cannot be read. Not loaded, so not verified: a
    ``.checksum`` of that run that cannot be read must not stop a message about this one."""
    try:
        return kept_sha256(path)
    except UserError:
        return file_sha256(path)


def _size(path: Path) -> int:
    """The size of ``path``; -1 where it is gone or cannot be read (no copy to tell)."""
    try:
        return path.stat().st_size
    except OSError:
        return -1


def restore_scaling(datamodule: Any, trained: TrainedCheckpoint) -> None:
    """Load the training scaler of ``trained``, and its coordinate scale, into a loaded, not
    yet set-up datamodule: evaluation data are normalised, and their positions placed, as
    the training data's were (refitted on other data they would feed the model values and
    a geometry it never learned).

    Before ``setup``: Lightning restores datamodule state only after it, when the data have
    already been normalised with a scaler refitted on them.

    Raises:
        UserError: the checkpoint holds no scaler, or one of other channels than the data's.
    """
    spec, path = trained.spec, trained.path
    # checkpoints written before the data description held the scaler kept it in the
    # datamodule's Lightning state
    state = trained.contents.get(type(datamodule).__qualname__) or {}
    scaler = (spec.scaler if spec is not None else None) or state.get("scaler")
    if scaler is None:
        raise UserError(
            f"{path} holds no value scaler for {type(datamodule).__name__}: it was written by "
            "a run on another kind of data. Evaluate it with its own run (run=<its run dir>)."
        )
    # the scaler's channels: the targets, then the covariates
    names = None if spec is None else spec.scaled_channels
    count = len(scaler["mean"])  # made a scaler once, by use_scaler
    have = [*datamodule.channel_names, *datamodule.covariate_names]
    if names is not None and names != have and sorted(names) == sorted(have):
        raise UserError(_channels_reordered(path, names, have, datamodule))
    if count != len(have) or (names is not None and names != have):
        listed = f" ({', '.join(names)})" if names else ""
        raise UserError(
            f"{path} was trained on {count} channels{listed}, but the data has {len(have)} "
            f"({', '.join(have)}). {_training_channels_only(names, have, datamodule)}"
        )
    datamodule.use_scaler(scaler)
    if spec is not None and spec.coord_lo and hasattr(datamodule, "use_coord_scale"):
        datamodule.use_coord_scale(spec.coord_lo, spec.coord_span, spec.coord_degenerate)


def _value_cols(trained: list[str], datamodule: Any) -> tuple[list[str], bool]:
    """The training channels that are the data's targets, in the training order, and
    whether the data's source takes ``value_cols`` (a setting that reads them so)."""
    source = getattr(datamodule, "source", None)
    takes_them = source is not None and "value_cols" in parameters_of(type(source))
    return [name for name in trained if name in datamodule.channel_names], takes_them


def _training_channels_only(trained: list[str] | None, have: list[str], datamodule: Any) -> str:
    """How to evaluate on the training channels: where the data hold them and more, and
    the source takes ``value_cols``, the setting that reads them alone."""
    targets, takes_them = _value_cols(trained or [], datamodule)
    if takes_them and trained and set(trained) < set(have):
        return f"Read its training channels alone: data.source.value_cols=[{','.join(targets)}]."
    return "Evaluate it on data with its training channels."


def _channels_reordered(path: Path, trained: list[str], have: list[str], datamodule: Any) -> str:
    """The message for data with the training channels in another order (``have``: the
    data's channels, then its covariates), and how to give them in the trained order: the
    source's ``value_cols`` where it takes them."""
    targets, takes_them = _value_cols(trained, datamodule)
    if takes_them and list(datamodule.channel_names) != targets:
        way = f"data.source.value_cols=[{','.join(targets)}]"
    else:
        way = "write the data's columns in that order"
    return (
        f"{path} was trained on the channels {', '.join(trained)} in this order, and the data "
        f"has them in another ({', '.join(have)}): each channel would be read as another. "
        f"Give them in the training order: {way}."
    )


def check_trained_sizes(model_config: Any, spec: DataSpec, trained: TrainedCheckpoint) -> None:
    """Refuse data of other sizes than the trained model was built for (``model_config``:
    the run's model config with the checkpoint's sizes), naming the data setting to keep:
    ``eval.py data.output_steps=6`` on a run trained to forecast 3 steps.

    Raises:
        UserError: a size the model was built with differs from the data's.
    """
    for key, value in spec.sizes.items():
        built = model_config.get(key)
        if built is None or built == value:
            continue
        keep = (
            f"data.{key}={built}"
            if key in ("input_steps", "output_steps")
            else _inputs_to_keep(spec, trained.spec)
        )
        raise UserError(
            f"{trained.path} holds a model built for {key}={built}, and the data give "
            f"{key}={value}: evaluate it with {keep}, or train a model for these data."
        )


def check_trained_neighbours(model_config: Any, spec: DataSpec, trained: TrainedCheckpoint) -> None:
    """Refuse data of fewer points than the neighbours the trained model reads per point
    (``model_config``: the run's model config), before the model is built: the build's own
    refusal (:func:`~cloudlstm.models.build.check_neighbours_fit`) advises a smaller
    ``model.k``, which a trained model cannot take. As ``predict.py`` says it: more points.

    Raises:
        UserError: ``model.k`` (x ``model.dilation``) more than the data's points.
    """
    k, dilation = model_config.get("k"), model_config.get("dilation", 1)
    needed = neighbours_needed(k, dilation)
    if needed is None or needed <= spec.num_points:
        return
    raise UserError(
        f"{trained.path} was trained with {neighbours_setting(k, dilation)} neighbours per "
        f"point, and the data has {spec.num_points} point(s): evaluate it on data of at "
        f"least {needed} points, or train a model for these data."
    )


def _inputs_to_keep(spec: DataSpec, trained: DataSpec | None) -> str:
    """The data settings that give the trained model its input channels back: the time
    features or the measured covariates it was trained with, where they differ."""
    if trained is not None and trained.time_features != spec.time_features:
        return f"data.time_features=[{','.join(trained.time_features)}]"
    if trained is not None and trained.covariate_names != spec.covariate_names:
        names = ", ".join(trained.covariate_names)
        return f"the measured covariates it was trained with ({names or 'none'})"
    return "the data settings it was trained with (its config.yaml)"


def check_same_step(spec: DataSpec, trained: TrainedCheckpoint) -> None:
    """Refuse data sampled at another interval than the training data (``eval.py`` with a
    ``data.path`` of 2-hour steps on a model trained on hourly ones): its input would span
    other hours, its forecast steps other lead times, as ``predict.py`` refuses such a
    history. Nothing to check where either step is unknown (data without a clock, or a
    checkpoint without a data description).

    Raises:
        UserError: naming both steps.
    """
    then = None if trained.spec is None else trained.spec.step
    now = spec.step
    if then is None or now is None or then == now:
        return
    raise UserError(
        f"{trained.path} was trained on data every {step_text(then)}, and these data are "
        f"sampled every {step_text(now)}: evaluate it on data every {step_text(then)} "
        "(resample them), or train a model for these data."
    )


def check_same_clock(spec: DataSpec, trained: TrainedCheckpoint) -> None:
    """Refuse time features on another clock than the training data's (``eval.py
    data.time_zone=Europe/Rome`` on a run trained without it): the channels keep their names
    and sizes, so the model would read every hour shifted. Nothing to check without time
    features, or for a checkpoint without a data description.

    Raises:
        UserError: naming both zones.
    """
    if trained.spec is None or not spec.time_features:
        return
    then, now = trained.spec.time_zone, spec.time_zone
    if then != now:
        raise UserError(
            f"{trained.path} was trained with its time features on data.time_zone="
            f"{then or 'null'}, and these data give data.time_zone={now or 'null'}: the "
            f"model would read every hour shifted. Evaluate it with data.time_zone="
            f"{then or 'null'}, or train a model for this clock."
        )


def check_same_graph(model_config: Any, spec: DataSpec, trained: TrainedCheckpoint) -> None:
    """Refuse data whose graph of the points is not the one the trained model convolved
    over, for a model that reads a given graph
    (:func:`~cloudlstm.models.build.reads_given_graph`): ``eval.py data.source.graph=null``
    on an STGCN trained on METR-LA's road graph would score it on the distance graph of
    the positions, another file on other roads, where ``predict.py`` forecasts with the
    checkpoint's graph. Nothing to check for a model that reads none, or a checkpoint
    without a data description. ``model_config``: the run's model config.

    Raises:
        UserError: naming both graphs and the setting to keep.
    """
    # a checkpoint written before it stored the graph was trained without one: given
    # graphs came with that field
    if trained.spec is None or not reads_given_graph(model_config):
        return
    then, now = trained.spec, spec
    model_cls = locate(model_config._target_, "model._target_")
    directed = getattr(model_cls, "reads_graph_direction", True)
    if _same_weights(then.adjacency, now.adjacency, directed):
        return
    both = then.adjacency is not None and now.adjacency is not None
    if both and list(now.point_ids) != list(then.point_ids):
        return  # the graph of other points: check_points refuses the points themselves
    trained_on, keep = _trained_graph(then)
    given = "none (data.source.graph=null: the model would build its own)"
    if now.adjacency is not None:
        given = f"the graph of data.source.graph={now.graph} ({len(now.adjacency)} points)"
    if both and _same_weights(np.asarray(then.adjacency).T, now.adjacency, True):
        given += (
            f", the trained graph transposed (each edge reversed), which {model_cls.__name__} "
            "reads along the edges' direction"
        )
    raise UserError(
        f"{trained.path} was trained {trained_on}, and these data give {given}: its weights "
        f"were learnt over the one, and would be scored over the other. Evaluate it with "
        f"{keep} (leave out the override that changes it), or train a model for this graph."
    )


def _trained_graph(spec: DataSpec) -> tuple[str, str]:
    """A checkpoint's graph in words (after "trained"), and the setting that gives it."""
    if spec.adjacency is None:
        return "without a given graph (the model built its own)", "data.source.graph=null"
    size = len(spec.adjacency)
    if spec.graph is None:  # a checkpoint from before the description named the file
        return f"on a given graph of {size} points", "the data.source.graph of its config.yaml"
    keep = f"data.source.graph={spec.graph}"
    return f"on the graph of {keep} ({size} points)", keep


def _same_weights(then: Any, now: Any, directed: bool) -> bool:
    """Whether two graphs' ``(N, N)`` weights (nested lists; None: no graph) are one to a
    model that reads the edges' direction (``directed``), or makes a graph undirected and
    drops its self-loops (STGCN: a graph and its transpose are one)."""
    if then is None or now is None:
        return then is None and now is None
    return np.array_equal(*(_as_read(w, directed) for w in (then, now)))


def _as_read(weights: Any, directed: bool) -> np.ndarray:
    """``(N, N)`` weights as a model reads them: as given where ``directed``, else
    ``max(w_ij, w_ji)`` without the diagonal (:func:`cloudlstm.nn.graph.given_laplacian`)."""
    matrix = np.asarray(weights, dtype=np.float64)
    if directed or matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        return matrix
    undirected = np.maximum(matrix, matrix.T)
    np.fill_diagonal(undirected, 0.0)
    return undirected


def check_points(model: Any, datamodule: Any, trained: TrainedCheckpoint) -> None:
    """Refuse other points than the training ones for a model tied to them (grid models,
    MLP, LSTM: ``model.fixed_points`` says why); point models take any points.

    Checkpoints written before they stored their points are checked by size alone (the
    model's sizes against the data's, :func:`cloudlstm.models.build.build_model`).

    Raises:
        UserError: the checkpoint holds another model than ``model`` (whose points would be
            the wrong question), or the data's points (ids or coordinates) are not the
            training points.
    """
    check_same_model(type(model).__name__, trained)
    reason, spec = getattr(model, "fixed_points", None), trained.spec
    if reason is None or spec is None:
        return
    stream = datamodule.stream
    coords = np.asarray(stream.coords, dtype=np.float64)
    trained_coords = np.asarray(spec.coords, dtype=np.float64)
    same = list(stream.point_ids) == spec.point_ids and coords.shape == trained_coords.shape
    if not (same and np.allclose(coords, trained_coords)):
        raise UserError(
            f"{trained.path} ({spec.model}) can only be evaluated on its "
            f"{len(spec.point_ids)} training points, and the data has other points "
            f"({stream.num_points}): {reason}. Drop the data.* overrides that change the "
            "points, or evaluate a point model (CloudLSTM, ...)."
        )


def check_same_model(built: str, trained: TrainedCheckpoint) -> None:
    """Refuse a checkpoint of another model class than ``built``, the one the run's config
    builds (a config.yaml or checkpoint copied from another run).

    Raises:
        UserError: the checkpoint names another model class.
    """
    stored = None if trained.spec is None else trained.spec.model
    if stored is not None and stored != built:
        raise UserError(
            f"{trained.path} holds a {stored} model, but the run's config builds a {built}. "
            f"Give a checkpoint of this run, or {trained.its_run()}."
        )


def check_same_outputs(settings: Mapping[str, Any], trained: TrainedCheckpoint) -> None:
    """Refuse settings that would give the trained weights' outputs another meaning: other
    quantile levels (the head's columns are the levels it was trained for) or another anchor
    (whether the model's output is added to the last input). ``settings``: ``quantiles`` and
    ``anchor`` as given (``cfg.module``, checked here before the module validates them, so
    that levels a point-forecast run cannot have are refused for that alone), or as a
    module holds them. Settings absent from either side, and checkpoints without them
    stored, pass.

    Raises:
        UserError: ``module.quantiles`` or ``module.anchor`` differs from the checkpoint's.
    """
    stored = trained.contents.get("hyper_parameters") or {}
    now = {"quantiles": setting_levels(settings.get("quantiles")), "anchor": settings.get("anchor")}
    then = {"quantiles": setting_levels(stored.get("quantiles")), "anchor": stored.get("anchor")}
    for key in [k for k in now if k in stored and k in settings and now[k] != then[k]]:
        raise UserError(
            f"{trained.path} was trained with module.{key}={_as_override(then[key])}; its "
            f"weights do not forecast for module.{key}={_as_override(now[key])}. Drop that "
            "override, or train a run with it."
        )


def module_outputs(module: L.LightningModule) -> dict[str, Any]:
    """The settings :func:`check_same_outputs` compares, as a built module holds them."""
    return {"quantiles": module.quantile_levels, "anchor": module.hparams.get("anchor")}


def setting_levels(value: Any) -> Any:
    """Quantile levels as an ascending tuple (``()`` for none); a value that is not a list
    of numbers as given, for the message (the module refuses it by itself)."""
    items = [] if value is None else value
    if isinstance(items, str) or not isinstance(items, Sequence):
        return value
    if not all(isinstance(t, int | float) and not isinstance(t, bool) for t in items):
        return tuple(items)
    return tuple(sorted(float(t) for t in items))


def _as_override(value: Any) -> str:
    """A setting as the command line writes it: ``[0.1,0.5,0.9]``, ``null``, ``last``."""
    if isinstance(value, tuple):
        return "[" + ",".join(str(v) for v in value) + "]" if value else "null"
    return "null" if value is None else str(value)


def load_weights(
    module: L.LightningModule, trained: TrainedCheckpoint, model_overrides: Sequence[str] = ()
) -> None:
    """Load the checkpoint's weights (and what ``on_load_checkpoint`` restores) into ``module``.

    Args:
        model_overrides: the command's overrides of ``model.*`` keys (``eval.py
            model.hidden_channels=8``), named as the cause where the weights do not fit.

    Raises:
        UserError: the checkpoint holds another model, or weights of other shapes.
    """
    built = type(module.model).__name__
    path, checkpoint = trained.path, trained.contents
    check_same_model(built, trained)
    check_same_outputs(module_outputs(module), trained)
    differences = weight_differences(module, checkpoint["state_dict"])
    if differences and model_overrides:
        them = "it" if len(model_overrides) == 1 else "them"
        raise UserError(
            f"{path} does not fit the model these settings build ({differences}): "
            f"{', '.join(model_overrides)} {'reshapes' if them == 'it' else 'reshape'} the "
            f"model, and a trained model keeps the sizes it was trained with. Drop {them}, "
            f"or train a run with {them}."
        )
    if differences:
        raise UserError(
            f"{path} does not fit the run's {built} model ({differences}). Give a checkpoint "
            f"of this run, or {trained.its_run()}."
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
