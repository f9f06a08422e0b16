"""What an evaluation reads, against what its run trained on: the same file, and a test
part the run did not see.

``eval.py`` rebuilds a run's data from its ``config.yaml``, so the data are the run's only
as long as its settings still name them. Both checks compare the run's data summary
(``data_summary.json``, written at training) with the evaluation's
(:func:`~cloudlstm.data.pipeline.summary.summary`):

* :func:`check_same_file`: a relative ``data.source.path`` names another file from another
  folder; without a ``data.source`` override the evaluation must read the run's own.
* :func:`own_file_not_found`: where that path names no file from here, the run's own file
  is the fix to name.
* :func:`check_same_units`: a channel in other units than the run's (a ``data.source``
  setting such as ``co_units``, another file) is read in units the model and its scaler
  did not learn. :func:`check_units_and_graph_settings` refuses the settings that say so
  from the configs alone, before the data are read, and those of another graph too.
* :func:`warn_other_inputs`: a model fed more or fewer input steps than it trained on is
  measured in another setting than its run's.
* :func:`warn_test_seen`: a test part that overlaps what the run trained on, moved by
  ``data.*`` overrides or by a file cut short since, flatters the model.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig

from cloudlstm.data.sources.beijing import BEIJING_NAME
from cloudlstm.data.stream import UNITS_KEY
from cloudlstm.errors import UserError
from cloudlstm.models.build import reads_given_graph

__all__ = [
    "check_same_file",
    "check_same_units",
    "check_units_and_graph_settings",
    "own_file_not_found",
    "points_within",
    "warn_other_inputs",
    "warn_test_seen",
]

log = logging.getLogger(__name__)

# What tells that an evaluation reads the stream its run trained on (another stream, e.g.
# more points of a synthetic network, may lay its parts over the same steps) ...
SAME_STREAM = ("name", "total_steps", "num_points", "channel_names")
# ... or its network over other times (a file cut short or grown since, under another name)
SAME_NETWORK = ("points_digest", "channel_names")
# ... or some of its points (``data.num_points``, ``data.source.stations``), over its steps
SAME_STEPS = ("name", "total_steps", "channel_names")


def check_same_file(
    trained: dict[str, Any] | None, summary: dict[str, Any], overrides: Sequence[str]
) -> None:
    """Refuse an evaluation that reads another file than its run trained on although no
    override chose one: the run's ``data.source.path`` is relative, and read from another
    folder. ``trained``: the run's data summary (None: unknown); ``summary``: the
    evaluation's; ``overrides``: the command's.

    Raises:
        UserError: naming both files, the setting, and the ways on.
    """
    then = _source(trained)
    now = _source(summary)
    if then is None or now is None or then == now or not os.path.isabs(then):
        return
    if any(_chooses_data(o) for o in overrides):
        return
    raise UserError(
        f"The run trained on {then}, and its data.source settings read {now} from this folder "
        f"({os.getcwd()}; a relative path, or a link that moved). Evaluate from the folder it "
        "was trained in, or name the "
        f"file: data.source.path={then} (its own), or data.source.path={now} to test on "
        "that one."
    )


def own_file_not_found(
    trained: dict[str, Any] | None, source: Any, overrides: Sequence[str]
) -> UserError | None:
    """The error to raise where the file a run's relative ``data.source.path`` names from
    this folder is not there, and no override chose the data: the run's own file (its data
    summary's absolute source), still there, is the fix to name, as :func:`check_same_file`
    names it where this folder holds another file of that name. None where that is not so
    (the data's own not-found error then says what to do). ``source``: the evaluation's
    ``data.source`` node.
    """
    then = _source(trained)
    path = source.get("path") if isinstance(source, DictConfig) else None
    if then is None or not os.path.isabs(then) or not os.path.exists(then):
        return None
    if not isinstance(path, str) or os.path.isabs(path) or source.get("root") is not None:
        return None
    if any(_chooses_data(o) for o in overrides):
        return None
    return UserError(
        f"The run trained on {then}, and its data.source.path={path} names "
        f"{os.path.abspath(path)} from this folder ({os.getcwd()}), where there is no such "
        "file. Evaluate from the folder it was trained in, or name the file: "
        f"data.source.path={then} (its own)."
    )


def check_same_units(
    trained: dict[str, Any] | None, summary: dict[str, Any], overrides: Sequence[str], run: Any
) -> None:
    """Refuse an evaluation whose data give a channel in other units than the run trained
    on (``eval.py data.source.co_units=ug/m3`` on a Beijing run of mg/m³, or a file or
    source that gives them so): the training scaler and the weights would read every value
    in the wrong units (CO 1000 times too large), and the scores would be of that
    misreading. The units are those the data sources record in the stream's metadata
    (:data:`~cloudlstm.data.stream.UNITS_KEY`), which the data summaries carry.
    ``trained``: the run's data summary (None: unknown); ``summary``: the evaluation's;
    ``overrides``: the command's; ``run``: the run directory, for the message.

    Raises:
        UserError: naming the channel, both units and the way on.
    """
    # a run trained before sources recorded units, or a source that knows none, has none:
    # nothing to compare
    _compare_units(_units(trained), _units(summary), overrides, run)


def _compare_units(
    then: dict[str, str], now: dict[str, str], overrides: Sequence[str], run: Any
) -> None:
    """Refuse a channel that the run's ``{channel: unit}`` (``then``) and the evaluation's
    (``now``) give in other units; a channel whose unit either side does not know passes.

    Raises:
        UserError: naming the channel, both units and the way on.
    """
    for channel, unit in then.items():
        if now.get(channel, unit) == unit:
            continue
        changed = [o for o in overrides if "units" in o.split("=", 1)[0]]
        way = f"leave out {', '.join(changed)}" if changed else f"give {channel} in {unit}"
        raise UserError(
            f"{run} was trained on {channel} in {unit}, and these data give it in "
            f"{now[channel]}: the model and its training scaler would read every value in "
            f"the wrong units. Evaluate it on data in {unit} ({way}), or train a model for "
            "these units."
        )


def check_units_and_graph_settings(
    trained: DictConfig, cfg: DictConfig, overrides: Sequence[str], run: Any
) -> None:
    """Refuse, before the data are read (Beijing's take minutes on a fresh cache), an
    evaluation whose config sets other units or another graph than the run's config
    (``trained``, its ``config.yaml`` in today's form): a ``data.source`` key of units
    (``co_units``) of another value, a channel of ``data.source.units`` that both name in
    other units, or, for a model that reads a given graph, a ``data.source.graph`` given
    where the run gave none, or none where it gave one. ``cfg``: the evaluation's config;
    ``overrides``: the command's; ``run``: the run directory, for the message.

    Two graph files may hold one graph (a path relative to the data's folder and its
    absolute one), and units or graph change by other routes too (another file or
    source): :func:`check_same_units` and
    :func:`~cloudlstm.assembly.checkpoint_fit.check_same_graph` compare the data once read.

    Raises:
        UserError: naming the setting, both values and the way on.
    """
    then, now = _source_node(trained), _source_node(cfg)
    _refuse_other_units(then, now, run)
    # a channel's unit that one side does not name is unknown there, as in the data check
    units_then, units_now = then.get("units"), now.get("units")
    if isinstance(units_then, DictConfig) and isinstance(units_now, DictConfig):
        _compare_units(dict(units_then), dict(units_now), overrides, run)
    graph_then, graph_now = then.get("graph"), now.get("graph")
    if (graph_then is None) != (graph_now is None) and reads_given_graph(trained.model):
        _refuse_other_graph(graph_then, graph_now, run)


def _refuse_other_units(then: DictConfig, now: DictConfig, run: Any) -> None:
    """Refuse a key of one unit in ``data.source`` (``co_units``) that both the run's node
    (``then``) and the evaluation's (``now``) hold, of other values."""
    for key in [k for k in then if str(k).endswith("units") and k in now]:
        one_unit = [isinstance(v, str) for v in (then[key], now[key])]
        if not all(one_unit) or then[key] == now[key]:
            continue  # data.source.units, a mapping of channels (or null): _compare_units
        raise UserError(
            f"{run} was trained with data.source.{key}={then[key]}, and this evaluation "
            f"gives data.source.{key}={now[key]}: the model and its training scaler would "
            f"read every value in the wrong units. Evaluate it with data.source.{key}="
            f"{then[key]} (leave out the override that changes it), or train a model for "
            "these units."
        )


def _refuse_other_graph(graph_then: Any, graph_now: Any, run: Any) -> None:
    """Refuse an evaluation's ``data.source.graph`` (``graph_now``) where the run's
    (``graph_then``) is null and it is not, or the other way round."""
    trained_on = "without a given graph (data.source.graph=null: the model built its own)"
    given = "none (data.source.graph=null: the model would build its own)"
    if graph_then is not None:
        trained_on = f"on the graph of data.source.graph={graph_then}"
    else:
        given = f"the graph of data.source.graph={graph_now}"
    raise UserError(
        f"{run} was trained {trained_on}, and this evaluation gives {given}: its weights were "
        f"learnt over the one, and would be scored over the other. Evaluate it with "
        f"data.source.graph={'null' if graph_then is None else graph_then} (leave out the "
        "override that changes it), or train a model for this graph."
    )


def _source_node(cfg: DictConfig) -> DictConfig:
    """``cfg``'s ``data.source`` node; an empty one where it has none (an older form)."""
    source = (cfg.get("data") or {}).get("source")
    return source if isinstance(source, DictConfig) else DictConfig({})


def _units(summary: dict[str, Any] | None) -> dict[str, str]:
    """``{channel: unit}`` a data summary's stream recorded (empty: none recorded)."""
    metadata = (summary or {}).get("source_metadata") or {}
    units = metadata.get(UNITS_KEY)
    if isinstance(units, dict):
        return units
    # a Beijing run trained before the units were recorded wrote CO's alone (co_units),
    # and one trained before co_units existed read the files' µg/m³ (keep_old_co_units)
    if (summary or {}).get("name") == BEIJING_NAME:
        return {"CO": metadata.get("co_units", "ug/m3")}
    return {}


def _source(summary: dict[str, Any] | None) -> str | None:
    """The file or folder a data summary's stream was read from (None: synthetic, older)."""
    source = ((summary or {}).get("source_metadata") or {}).get("source")
    return source if isinstance(source, str) else None


def _chooses_data(override: str) -> bool:
    """Whether a command-line override chooses the data itself (``data=``, ``experiment=``,
    ``data.source.*``), rather than how the run's data are split or served."""
    key = override.lstrip("+~").split("=", 1)[0]
    return key in ("data", "experiment") or key.startswith("data.source")


def warn_other_inputs(trained: dict[str, Any] | None, summary: dict[str, Any]) -> bool:
    """Warn where an evaluation feeds the model another number of input steps than it was
    trained on (``eval.py data.input_steps=6`` on a run of 4): a recurrent model takes any,
    and its scores are of that setting, not the run's. Returns whether it warned."""
    then = (trained or {}).get("input_steps")
    now = summary.get("input_steps")
    if then is None or now is None or then == now:
        return False
    log.warning(
        "This evaluation feeds the model %d input steps, and it was trained on %d: its scores "
        "measure the model with inputs it did not learn from, not the run's setting. Leave "
        "out data.input_steps to test the run as it was trained.",
        now,
        then,
    )
    return True


def warn_test_seen(
    trained: dict[str, Any] | None, summary: dict[str, Any], within_training_points: bool = False
) -> bool:
    """Warn where an evaluation's test part overlaps the steps its run trained on or chose
    its checkpoint on (``data.test_fraction``, ``data.split_times`` moved in ``eval.py``, or
    the file cut short since): its scores flatter the model. Not refused: a fit to the
    training period is a fair thing to measure, said as such. ``trained``: the run's data
    summary (None: unknown, nothing to compare); ``summary``: the evaluation's;
    ``within_training_points``: every point evaluated is one the run trained on
    (:func:`points_within`), where a subset of them is evaluated. Returns whether it warned.
    """
    if not trained:
        return False
    if all(trained.get(k) == summary.get(k) for k in SAME_STREAM):
        return _steps_seen(trained, summary)
    if "points_digest" in trained and all(trained[k] == summary.get(k) for k in SAME_NETWORK):
        return _times_seen(trained, summary)
    if within_training_points and trained.get("channel_names") == summary.get("channel_names"):
        if all(trained.get(k) == summary.get(k) for k in SAME_STEPS):
            return _steps_seen(trained, summary)
        return _times_seen(trained, summary)
    return False


def points_within(points: Sequence[Any], trained_points: Sequence[Any] | None) -> bool:
    """Whether every one of ``points`` (the evaluation's ids) is one of ``trained_points``
    (the checkpoint's; None: unknown). Ids are compared as text: a checkpoint stores them
    so, a stream may hold numbers."""
    if trained_points is None:
        return False
    return {str(p) for p in points} <= {str(p) for p in trained_points}


def _steps_seen(trained: dict[str, Any], summary: dict[str, Any]) -> bool:
    """:func:`warn_test_seen` on the same stream, by its steps."""
    try:
        seen = (trained["bounds"]["train"][0], trained["bounds"]["val"][1])
        test = summary["bounds"]["test"]
    except (KeyError, IndexError, TypeError):  # a summary of another form: no parts to compare
        return False
    if not (test[0] < seen[1] and seen[0] < test[1]):
        return False
    log.warning(
        "The test part of this evaluation, steps %d-%d, overlaps steps %d-%d, which the run "
        "trained on and chose its checkpoint on: its scores flatter the model. For a test on "
        "unseen steps, leave out the data.* overrides that move the split.",
        test[0],
        test[1] - 1,
        seen[0],
        seen[1] - 1,
    )
    return True


def _times_seen(trained: dict[str, Any], summary: dict[str, Any]) -> bool:
    """:func:`warn_test_seen` on the network's data over other times, by their times (ISO
    8601 strings, which compare as the times do)."""
    times = trained.get("times") or {}
    try:
        seen = (times["train"][0], (times.get("val") or times["train"])[1])
        test = summary["times"]["test"]
    except (KeyError, IndexError, TypeError):  # no times, or an empty part: nothing to compare
        return False
    if not (test[0] <= seen[1] and seen[0] <= test[1]):
        return False
    log.warning(
        "The test part of this evaluation, %s to %s, overlaps %s to %s, which the run trained "
        "on and chose its checkpoint on (the data now hold %d steps, %d at training): its "
        "scores flatter the model. For a test on unseen times, test on data after %s.",
        *test,
        *seen,
        summary.get("total_steps"),
        trained.get("total_steps"),
        seen[1],
    )
    return True
