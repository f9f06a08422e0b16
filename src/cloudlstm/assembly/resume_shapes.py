"""An allowed change that reshapes a resumed run's weights, refused before anything is written.

``allow_changes=[model.k]`` lets a change of a resumed run's settings through the check of
:mod:`cloudlstm.rundir.config_changes`; but a resumed run goes on with its checkpoint's
weights, and a setting that shapes them (``model.k``, ``model.hidden_channels``, the
data's channels or input steps for some models) cannot change. Found only when Lightning
loads the weights, the run would by then have written the new settings into its
``config.yaml`` (which then no longer builds the model of its checkpoints) and a change it
never made into ``config_changes.yaml``.

So the check comes first, with the config check (``train.py``'s Hydra callback,
:class:`~cloudlstm.assembly.resume_check.CheckResumeBeforeTheRun`, before Hydra writes
``.hydra/``; and ``train``). Which settings shape the weights is not listed by hand, as that
list would age with every model: the training module the new settings build is compared,
weight by weight, with the checkpoint's
(:func:`~cloudlstm.assembly.checkpoint_fit.weight_differences`), and where they differ, each
allowed change is tried alone (the other allowed ones at their old values) to name those
that reshape. Building a model costs a fraction of a second; it is sized from the data
description stored in the checkpoint, or, where an allowed change is one of the data's
(``data.*``), from the new data's, read as the run would read them (through the data cache).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from cloudlstm.assembly.build import build_module, instantiate_datamodule
from cloudlstm.assembly.checkpoint_fit import TrainedCheckpoint, weight_differences
from cloudlstm.data.spec import DataSpec
from cloudlstm.errors import UserError
from cloudlstm.rundir.config_changes import (
    ABSENT,
    Change,
    ChangesRefused,
    check_config_changes,
    reshaping_refusal,
)
from cloudlstm.rundir.layout import resume_candidates
from cloudlstm.rundir.resume import damaged_checkpoint_remedy


def check_resume(cfg: DictConfig, run_dir: Path) -> list[Change]:
    """The checks of a resume's settings: :func:`check_config_changes`, then
    :func:`check_resume_shapes`; returns the changes taken. A refused change that reshapes
    the model is named so, and allow_changes is not offered for it, which would only lead
    to the shapes' refusal.

    Raises:
        UserError: a change refused, or one allowed that reshapes the model.
    """
    try:
        changes = check_config_changes(cfg, run_dir)
    except ChangesRefused as refusal:
        as_allowed = [replace(c, allowed_by="allow_changes") for c in refusal.refused]
        try:
            found = reshaping_changes(cfg, run_dir, as_allowed)
        except UserError:  # the new data or checkpoint cannot be read: the first line
            found = None
        if found is None:
            raise
        reshaping, differences = found
        raise UserError(
            reshaping_refusal(refusal.source, refusal.refused, reshaping, differences)
        ) from None
    check_resume_shapes(cfg, run_dir, changes)
    return changes


def check_resume_shapes(cfg: DictConfig, run_dir: Path, changes: list[Change]) -> None:
    """Refuse allowed changes (``changes`` of :func:`check_config_changes`) under which the
    model no longer takes the weights of the checkpoint the run resumes from.

    Raises:
        UserError: naming the checkpoint, the first weights whose shapes differ and the
            allowed changes that reshape the model.
    """
    allowed = [c for c in changes if c.allowed_by == "allow_changes"]
    found = reshaping_changes(cfg, run_dir, allowed)
    if found is None:
        return
    named, differences = found
    resumed = _resumed(cfg.get("resume", "auto"), Path(run_dir))
    changes_text = "; ".join(str(change) for change in named[:4])
    changes_text += f" and {len(named) - 4} more" if len(named) > 4 else ""
    raise UserError(
        f"{resumed} holds weights that the model built by these settings cannot take "
        f"({differences}): {changes_text} (allowed by allow_changes) "
        f"{'reshapes' if len(named) == 1 else 'reshape'} the model, and a resumed run keeps "
        "its weights. Start fresh with resume=never (better in a new directory), or drop "
        f"{'that change' if len(named) == 1 else 'those changes'}."
    )


def reshaping_changes(
    cfg: DictConfig, run_dir: Path, allowed: list[Change]
) -> tuple[list[Change], str] | None:
    """Of ``allowed`` changes, those under which the model no longer takes the weights of
    the checkpoint the run resumes from, and how the weights differ; None where they all
    fit (or nothing resumes). Where a change alone builds no model (a model swapped key by
    key) every one is named."""
    if not allowed:
        return None
    resumed = _resumed(cfg.get("resume", "auto"), Path(run_dir))
    if resumed is None:
        return None
    trained = TrainedCheckpoint.read(resumed, damaged_checkpoint_remedy(Path(run_dir)))
    state = trained.contents["state_dict"]
    data_changed = any(_in_data(c) for c in allowed) or trained.spec is None
    new_spec = _new_data_spec(cfg) if data_changed else trained.spec
    differences = _differences(cfg, new_spec, state)
    if not differences:
        return None
    verdicts = {
        change.key: _reshapes(
            _with_only(cfg, change, allowed),
            new_spec if _in_data(change) or trained.spec is None else trained.spec,
            state,
        )
        for change in allowed
    }
    reshaping = [change for change in allowed if verdicts[change.key]]
    # a change that builds no model alone (a model swapped key by key) cannot be judged
    named = allowed if None in verdicts.values() or not reshaping else reshaping
    return named, differences


def _differences(cfg: DictConfig, spec: DataSpec, state: dict[str, Any]) -> str:
    """How the weights of the module ``cfg`` builds for ``spec`` differ from ``state`` (""
    where they fit); a size the data refuse (a UserError of the build) differs too."""
    try:
        module = build_module(cfg, spec)
    except UserError as err:
        return str(err).rstrip(".")
    return weight_differences(module, state)


def _reshapes(cfg: DictConfig, spec: DataSpec, state: dict[str, Any]) -> bool | None:
    """Whether the module of ``cfg`` (one allowed change applied) differs from ``state``;
    None where such a mix of old and new settings builds nothing."""
    try:
        return bool(_differences(cfg, spec, state))
    except Exception:  # any constructor's error: this mix is no model
        return None


def _resumed(resume: Any, run_dir: Path) -> Path | None:
    """The checkpoint the run resumes from, as :func:`~cloudlstm.rundir.resume.resume_checkpoint`
    picks it but without its log line (the run may yet be refused): with ``auto`` the newest
    candidate, whose weights' shapes are those of every candidate."""
    if resume in (None, False, "never"):
        return None
    if resume != "auto":
        path = Path(str(resume)).expanduser()
        return path if path.is_file() else None  # resume_checkpoint says so, in its words
    candidates = resume_candidates(run_dir)
    return max(candidates, key=lambda p: p.stat().st_mtime_ns) if candidates else None


def _in_data(change: Change) -> bool:
    return change.key == "data" or change.key.startswith("data.")


def _new_data_spec(cfg: DictConfig) -> DataSpec:
    """The description of the data ``cfg`` names, read as a run reads them (their cache),
    nothing written into the run directory."""
    datamodule = instantiate_datamodule(cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")
    return datamodule.spec


def _with_only(cfg: DictConfig, change: Change, allowed: list[Change]) -> DictConfig:
    """A copy of ``cfg`` in which the allowed changes but ``change`` are undone."""
    undone = copy.deepcopy(cfg)
    with open_dict(undone):
        for other in allowed:
            if other is change:
                continue
            parent, _, leaf = other.key.rpartition(".")
            node = OmegaConf.select(undone, parent) if parent else undone
            if other.old == ABSENT:
                if isinstance(node, DictConfig):
                    node.pop(leaf, None)  # a key the run did not have
            else:
                OmegaConf.update(undone, other.key, other.old, merge=False, force_add=True)
    return undone
