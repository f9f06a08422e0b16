"""Points held out of training: the protocol that measures forecasts at sites a model never
trained on (``data.holdout_points``, ``data.holdout_seed``, ``data.holdout_history``).

The held-out points stay in the cloud, at their positions, in every split, so that every
window has the same N points and a model sized for the cloud keeps its size. What is taken
from them is their readings (:meth:`HoldOut.hidden`):

* training and validation windows: every measured channel of a held-out point (targets and
  covariates alike) reads 0, the normalised mean, with its masks False, in the input and the
  target; no loss, no validation metric and no statistic (scaler, absurd-value check) ever
  reads them, so their values cannot reach the weights;
* test windows: the targets are scored, as the ``held_out`` point group beside the
  ``trained`` one; the inputs hold the held-out points' own readings
  (``holdout_history=true``) or, like during training, none (``holdout_history=false``: the
  forecast comes from the other points alone, as in kriging).

Which points: a list of point ids, a count (a whole number >= 1) or a fraction in (0, 1)
of the cloud, drawn with :func:`numpy.random.default_rng` of ``holdout_seed``
(:meth:`HoldOut.mask`); the same data and settings always draw the same points.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cloudlstm.data.pipeline.options import check_switch
from cloudlstm.errors import UserError

__all__ = ["DROPPED_WHY", "HELD_OUT", "TRAINED", "HoldOut", "check_holdout", "held_out_groups"]

log = logging.getLogger(__name__)

# what eval.py's held_out scores are of held-out points with nothing of their own to score
_ONLY_READ_SCORED = (
    "its held_out scores cover only what the held-out points read (null where they read nothing)."
)
_FILLED_SCORED = (
    "its held_out scores count the values filled in where the held-out points read nothing "
    "as if they were read (data.score_filled=true)."
)

HELD_OUT = "held_out"  # the point group of the held-out points
# ... and of the points trained on; not "training", which a torch ModuleDict of the groups'
# metrics cannot hold (an nn.Module attribute)
TRAINED = "trained"
SHOWN = 6  # ids named in a message
# The stream's metadata keys of the points its loading dropped
# (:data:`cloudlstm.data.cache.DROPPED_POINTS`) -> why, and the way out of naming one
DROPPED_WHY = {
    "dropped_points_without_position": (
        "having no position",
        "it has no place in the cloud; name points with positions, or give theirs in the file",
    ),
    "dropped_points": (
        "having no reading at all",
        "there is nothing to score there; name points with readings, or give these readings "
        "in the file",
    ),
}
# steps of a (T, N, C) mask read at once: a memory-mapped stream is not read whole
_CHUNK_STEPS = 256


@dataclass(frozen=True)
class HoldOut:
    """Which points are held out of training, and what the test inputs hold of them.

    Attributes:
        points: ``data.holdout_points`` as given: a fraction in (0, 1), a count >= 1, or a
            tuple of point ids (as text).
        seed: ``data.holdout_seed``, the seed of a drawn fraction or count.
        history: ``data.holdout_history``: test inputs hold the held-out points' readings.
    """

    points: float | int | tuple[str, ...]
    seed: int
    history: bool

    def mask(
        self,
        point_ids: Sequence[Any],
        what: str = "the data",
        dropped: Mapping[str, Sequence[str]] | None = None,
    ) -> np.ndarray:
        """``(N,)`` bool: the held-out points among ``point_ids`` (the stream's, in order);
        ``dropped``: the ids of the points the loading dropped, by the stream's metadata key
        that lists them (:data:`DROPPED_WHY`), named as such where the list names one.

        Raises:
            UserError: a named id is not a point of the data (or one it dropped), or the
                selection leaves no point to train on.
        """
        ids = [str(p) for p in point_ids]
        n = len(ids)
        if isinstance(self.points, tuple):
            chosen = _named(self.points, ids, what, dropped)
        else:
            chosen = _drawn(self.points, self.seed, n, what)
        if len(chosen) >= n:
            raise UserError(
                f"data.holdout_points={_text(self.points)} holds out all {n} points of {what}: "
                "no point is left to train on; hold out fewer."
            )
        mask = np.zeros(n, dtype=bool)
        mask[chosen] = True
        return mask

    def check_scored(
        self,
        held_out: np.ndarray,
        observed: np.ndarray,
        test: tuple[int, int],
        point_ids: Sequence[Any],
        what: str = "the data",
        trained: bool = False,
        score_filled: bool = False,
    ) -> None:
        """Refuse a selection that leaves the ``held_out`` group nothing of its own to score:
        a held-out point without a reading of a forecast channel at any step (its readings
        are covariates only), or held-out points none of which reads one in the ``test``
        steps (where there are any: ``data.test_fraction=0`` tests nothing). Their scores
        would be empty (null), or with ``data.score_filled=true`` those of values filled in
        from other points; a point only silent in the test part, among others that read
        there, is named by the datamodule's warning of unread points.

        With ``trained`` (the data serve a trained run's evaluation), the same is a warning
        and the run is evaluated: its held-out points are its own, which no other draw or
        name can replace, and a run trained before such a selection was refused could not
        be evaluated at all; its held_out scores leave those points out (null where none is
        left), as its training's did, or with ``score_filled`` (``data.score_filled=true``)
        count their filled values as if read: the warning says which.

        Args:
            held_out: ``(N,)`` bool, :meth:`mask`.
            observed: ``(T, N, C)`` bool, True where a forecast channel was observed (the
                stream's mask without its covariates); a memory map is read by chunks.
            test: the test part's steps ``[first, end)``.
            score_filled: ``data.score_filled``: filled values are scored as if read.

        Raises:
            UserError: naming the points and the way out (not with ``trained``).
        """
        unscored = self._unscored(held_out, observed, test, point_ids, what, score_filled)
        if unscored is None:
            return
        reason, way_out = unscored
        if not trained:
            raise UserError(f"{reason}; {way_out}")
        log.warning(
            "%s; the evaluated run held these out in training, so it is evaluated all the same: %s",
            reason,
            _FILLED_SCORED if score_filled else _ONLY_READ_SCORED,
        )

    def _unscored(
        self,
        held_out: np.ndarray,
        observed: np.ndarray,
        test: tuple[int, int],
        point_ids: Sequence[Any],
        what: str,
        score_filled: bool,
    ) -> tuple[str, str] | None:
        """``(why the held-out group has nothing of its own to score, the way out)`` of
        :meth:`check_scored`, or None where it has something."""
        index = np.flatnonzero(held_out)
        ever, in_test = np.zeros(len(index), bool), np.zeros(len(index), bool)
        for t in range(0, observed.shape[0], _CHUNK_STEPS):  # (chunk, N, C) at a time
            read = observed[t : t + _CHUNK_STEPS][:, index].any(axis=2)  # (chunk, H)
            ever |= read.any(axis=0)
            lo, hi = max(test[0] - t, 0), max(test[1] - t, 0)
            in_test |= read[lo:hi].any(axis=0)
        ids = [str(point_ids[i]) for i in index]
        fix = (
            "name points with readings of the forecast channels"
            if isinstance(self.points, tuple)
            else "draw others (another data.holdout_seed)"
        )
        if not ever.all():
            silent = [p for p, r in zip(ids, ever, strict=True) if not r]
            one = len(silent) == 1
            return (
                f"data.holdout_points={_text(self.points)} holds out {_listed(silent)}, "
                f"{'a point that reads' if one else 'points that read'} no forecast channel "
                f"at any step of {what} (covariates only): nothing to score",
                f"{fix}, or leave {'it' if one else 'them'} out of the data.",
            )
        # no test part (data.test_fraction=0): nothing is tested, so nothing comes out empty
        if len(index) and test[1] > test[0] and not in_test.any():
            return (
                f"data.holdout_points={_text(self.points)} holds out {_listed(ids)}, none of "
                f"which reads a forecast channel in the test part of {what} (steps "
                f"[{test[0]}, {test[1]})): the held-out scores would be "
                f"{'of filled values alone' if score_filled else 'empty'}",
                f"{fix}.",
            )
        return None

    def hidden(self, split: str, held_out: np.ndarray) -> tuple[np.ndarray | None, ...]:
        """``(inputs, targets)``: the ``(N,)`` points whose readings a ``split`` window
        hides from its input and from its target (None: none)."""
        if split != "test":
            return held_out, held_out
        return (None if self.history else held_out), None


def check_holdout(points: Any, seed: Any, history: Any) -> HoldOut | None:
    """The datamodule's held-out options, checked before any data is read; None when
    ``points`` is None (no point held out).

    Raises:
        UserError: ``points`` is neither a fraction in (0, 1), a count >= 1 nor a list of
            distinct ids; ``seed`` is no whole number >= 0; ``history`` no boolean, or
            false where no point is held out (it would change nothing: an evaluation
            "without the held-out points' readings" that is the ordinary one).
    """
    check_switch("holdout_history", history)  # also without held-out points: a typo is no choice
    if points is None:
        if history is False:
            raise UserError(
                "data.holdout_history=false hides the held-out points' readings at test, and "
                "no point is held out (data.holdout_points is null): hold points out, e.g. "
                "data.holdout_points=3, or leave data.holdout_history out."
            )
        return None
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UserError(
            f"data.holdout_seed={seed!r}: use a whole number >= 0 (the draw of the held-out "
            "points; by default the run's seed)."
        )
    return HoldOut(_checked_points(points), seed, history)


def _checked_points(points: Any) -> float | int | tuple[str, ...]:
    """``data.holdout_points`` as a fraction, a count or a tuple of ids."""
    usage = (
        "use a fraction in (0, 1) (drawn with data.holdout_seed), a number of points >= 1, "
        "a list of point ids, e.g. [Dongsi,Tiantan], or null"
    )
    if isinstance(points, bool):
        raise UserError(f"data.holdout_points={points!r}: {usage}.")
    if isinstance(points, float) and points >= 1 and points.is_integer():
        # 3.0 reads as a count; a fraction of 1 or more would hold out every point
        raise UserError(
            f"data.holdout_points={points} is no fraction in (0, 1): a fraction of 1 or more "
            f"would hold out every point; for a number of points write it whole, "
            f"data.holdout_points={int(points)}."
        )
    if isinstance(points, int | float):
        if (isinstance(points, int) and points < 1) or (
            isinstance(points, float) and not 0 < points < 1
        ):
            raise UserError(f"data.holdout_points={points}: {usage}.")
        return points
    if isinstance(points, str) or not isinstance(points, Iterable):
        raise UserError(f"data.holdout_points={points!r}: {usage}.")
    ids = tuple(str(p) for p in points)
    if not ids:
        raise UserError(f"data.holdout_points=[] holds out no point: {usage}.")
    twice = sorted({p for p in ids if ids.count(p) > 1})
    if twice:
        raise UserError(f"data.holdout_points names {', '.join(twice)} twice: name each once.")
    return ids


def _named(
    named: tuple[str, ...],
    ids: list[str],
    what: str,
    dropped: Mapping[str, Sequence[str]] | None = None,
) -> np.ndarray:
    """The indices of the ``named`` ids among ``ids`` (those in ``dropped``: refused as
    dropped by the loading, which the file holds, not as unknown)."""
    index = {p: i for i, p in enumerate(ids)}
    for key, gone_ids in (dropped or {}).items():
        if gone := [p for p in named if p not in index and p in {str(d) for d in gone_ids}]:
            why, fix = DROPPED_WHY[key]
            raise UserError(
                f"data.holdout_points names {_listed(gone)}, point(s) of {what} that the "
                f"loading dropped for {why} (as its warning said): {fix}."
            )
    unknown = [p for p in named if p not in index]
    if unknown:
        raise UserError(
            f"data.holdout_points names {_listed(unknown)}, not points of {what}, whose "
            f"{len(ids)} points are {_listed(ids)}: name points of the data."
        )
    return np.array(sorted(index[p] for p in named), dtype=np.int64)


def _drawn(points: float | int, seed: int, n: int, what: str) -> np.ndarray:
    """``points`` (a count, or a fraction of ``n`` rounded half up, at least 1) drawn from
    ``n`` points with their own generator, sorted."""
    count = points if isinstance(points, int) else max(1, math.floor(points * n + 0.5))
    if count >= n:
        raise UserError(
            f"data.holdout_points={points} holds out {count} of the {n} points of {what}: "
            "no point is left to train on; hold out fewer."
        )
    return np.sort(np.random.default_rng(seed).choice(n, count, replace=False))


def held_out_groups(held_out: np.ndarray) -> dict[str, np.ndarray]:
    """The two point groups scored apart at test time: ``trained`` and ``held_out``."""
    return {TRAINED: ~held_out, HELD_OUT: held_out.copy()}


def _listed(ids: Sequence[str]) -> str:
    more = f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else ""
    return ", ".join(ids[:SHOWN]) + more


def _text(points: float | int | tuple[str, ...]) -> str:
    return f"[{','.join(points)}]" if isinstance(points, tuple) else str(points)
