"""A resumed run goes on with the data it trained on, or says what changed.

The same command with the same run directory resumes a run; the config check
(:mod:`cloudlstm.rundir.config_changes`) refuses changed settings, but the data the
settings name can change under them: a CSV file edited or grown by new rows (which also
moves fractional split boundaries). The datamodule then fits its scaler on the new
training part, and the run would go on, and be tested, on other data than it began with.
So the description of the data the checkpoint was trained on (its
:class:`~cloudlstm.data.spec.DataSpec`) is compared with the data's now: channels, points,
their coordinates, the sampling step and the training part's scaler. A difference stops
the run in one line; ``allow_changes=[data...]`` (a data setting changed on purpose) and
checkpoints written before they stored the description are not checked, unless the
allowed setting is one that serves the same data otherwise (``data.batch_size``,
``data.stride``, ``data.holdout_history``), which lets no other data through.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cloudlstm.data.spec import DataSpec, stored_spec
from cloudlstm.errors import UserError

__all__ = ["check_resume_data"]

# Data settings that change how the same data are served (the batches, the windows' stride,
# the test-time held-out mode), never the description compared here: allowing one of them
# to change lets no other data through.
_SERVING_KEYS = frozenset({"batch_size", "stride", "holdout_history"})

# Relative tolerance on the scaler's statistics: the same values fitted again on another
# machine may differ in their last bits; a changed reading moves them far more.
_RTOL = 1e-6


def check_resume_data(
    spec: DataSpec, checkpoint: dict[str, Any], path: Path, allowed: Sequence[str] = ()
) -> None:
    """Refuse to resume from ``checkpoint`` (read from ``path``) on data other than its own.

    Args:
        spec: the description of the data now.
        checkpoint: the checkpoint's contents.
        allowed: the run's ``allow_changes``: one under ``data``, but for those that serve
            the same data otherwise, lets any data through.

    Raises:
        UserError: naming the first difference, and the ways on.
    """
    if any(_changes_data(str(key)) for key in allowed):
        return
    state = stored_spec(checkpoint)
    if state is None:
        return
    difference = data_difference(DataSpec.from_dict(state), spec)
    if difference:
        raise UserError(
            f"{path} was trained on other data than the run reads now: {difference}. Restore "
            "the data the run trained on to resume it, or train on these afresh: resume=never "
            "(better in a new run directory)."
        )


def _changes_data(key: str) -> bool:
    """Whether allowing ``key`` to change allows the data to (``data``, ``data.source``)."""
    parts = key.split(".")
    return parts[0] == "data" and (len(parts) == 1 or parts[1] not in _SERVING_KEYS)


def data_difference(then: DataSpec, now: DataSpec) -> str:
    """The first difference between the data of two descriptions, in words; "" if none."""
    if then.scaled_channels != now.scaled_channels:
        return f"its channels were {_listed(then)}, they are {_listed(now)}"
    if then.point_ids != now.point_ids:
        return _points_differ(then.point_ids, now.point_ids)
    if then.step_minutes != now.step_minutes:
        return f"its step was {then.step_minutes} min, it is {now.step_minutes} min"
    if not np.allclose(then.coords, now.coords, rtol=_RTOL, atol=0.0):
        moved = np.flatnonzero(~np.isclose(then.coords, now.coords, rtol=_RTOL).all(axis=1))
        return f"point {then.point_ids[moved[0]]!r} (and {len(moved) - 1} more) moved"
    return _scaler_difference(then, now)


def _scaler_difference(then: DataSpec, now: DataSpec) -> str:
    """The first channel whose training-part mean or spread changed, in words."""
    names = now.scaled_channels
    old, new = then.scaler, now.scaler
    for stat in ("mean", "std"):
        a, b = np.asarray(old[stat], dtype=float), np.asarray(new[stat], dtype=float)
        changed = np.flatnonzero(~np.isclose(a, b, rtol=_RTOL, atol=0.0))
        if len(changed):
            c = int(changed[0])
            return (
                f"the training part's {names[c]!r} has mean {new['mean'][c]:.6g} and standard "
                f"deviation {new['std'][c]:.6g}, against {old['mean'][c]:.6g} and "
                f"{old['std'][c]:.6g} when it trained (a data file changed, or rows were added)"
            )
    return ""


def _points_differ(then: list[str], now: list[str]) -> str:
    gone = [p for p in then if p not in set(now)]
    new = [p for p in now if p not in set(then)]
    if not gone and not new:
        return "its points are the same, in another order"
    parts = [f"{len(x)} {word} ({', '.join(x[:3])}{' ...' if len(x) > 3 else ''})"
             for x, word in ((new, "new"), (gone, "gone")) if x]  # fmt: skip
    return f"its points differ: {'; '.join(parts)}"


def _listed(spec: DataSpec) -> str:
    return "[" + ", ".join(spec.scaled_channels) + "]"
