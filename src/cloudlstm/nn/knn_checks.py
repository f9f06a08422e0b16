"""What K a neighbour search takes: a whole number from 1 to the N points of the cloud.

:func:`check_k_option` checks ``model.k`` (and X-Conv's ``model.dilation``) as a model or
layer is built, before any tensor is sized by it; :func:`check_k` checks K against the N of
coordinates ``(..., N, L)`` as they are searched (:func:`cloudlstm.nn.knn.knn`). Both raise
:class:`NeighbourCountError`, a user's error.
"""

from __future__ import annotations

import numbers
from typing import Any

from cloudlstm.errors import UserError


class NeighbourCountError(UserError):
    """K is not a number of neighbours, or larger than the number of points in the cloud.

    A user's error wherever it is raised: no model of this package shrinks a cloud, so K
    exceeds N only through ``model.k`` and the points of the data (or of a forecast's
    history), and it is reported as one line. Still a ``ValueError``.
    """


def check_k_option(k: Any, dilation: Any = 1) -> int:
    """``k`` as a model or layer is built with it: refuse what no cloud can have.

    Every constructor that takes ``k`` (the CloudLSTM family, CloudCNN, the kNN models,
    PointCNN, PointLSTM, and their DConv / X-Conv layers) checks it here, before a tensor is
    sized by it, so ``model.k=0`` or ``-1`` is one line naming the option rather than a
    division by zero or a negative dimension. ``dilation`` (X-Conv's) likewise. Whether K
    fits the data's points is checked once their number is known
    (:func:`cloudlstm.models.build.build_model`, then :func:`check_k` per cloud).

    Raises:
        NeighbourCountError: ``k`` or ``dilation`` is not a whole number >= 1.
    """
    if not _is_count(k):
        raise NeighbourCountError(
            f"model.k={k!r} is not a number of neighbours: set it to a whole number from 1 "
            "(each point alone) to the number of points (the paper's CloudLSTM uses model.k=9)."
        )
    if not _is_count(dilation):
        raise NeighbourCountError(
            f"model.dilation={dilation!r} is not a dilation: set it to a whole number >= 1 "
            "(1: the K nearest points), with model.k * model.dilation at most the number of "
            "points."
        )
    return int(k)


def _is_count(value: Any) -> bool:
    """A whole number >= 1 (not a bool)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1


def check_k(k: int, num_points: int) -> None:
    """Raise a clear error when K neighbours cannot be found among ``num_points`` points."""
    check_k_option(k)
    if k > num_points:
        raise NeighbourCountError(
            f"K={k} nearest neighbours requested but the point cloud has only "
            f"{num_points} points. Set model.k <= {num_points} (e.g. model.k={num_points})."
        )
