"""Synthetic stand-in for the Urban Air clusters where the raw files are absent (``scale=cpu``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cloudlstm.data.sources.synthetic import SyntheticAdvectionDiffusion
from cloudlstm.errors import UserError

__all__ = ["SyntheticClusters"]


class SyntheticClusters(SyntheticAdvectionDiffusion):
    """The synthetic generator with one city cluster's settings, taking ``cluster`` as the
    Urban Air source does (``data.source.cluster``).

    The air-quality paper presets sweep ``data.source.cluster=A,B``. Their ``scale=cpu``
    form runs here, where the Urban Air files are not available, so it swaps in the
    synthetic generator and keeps the key: sweeps, run names and ``compare --paper`` still
    tell the clusters apart. The numbers are a smoke check of the pipeline, not a
    reproduction. The stream, and so its cache, is that of the generator with the merged
    arguments.

    Args:
        cluster: which entry of ``clusters`` to generate.
        clusters: per cluster, the generator arguments that replace those given here
            (e.g. ``seed`` and ``num_points``).
        **arguments: :class:`SyntheticAdvectionDiffusion` arguments.
    """

    def __init__(
        self,
        cluster: str = "A",
        clusters: Mapping[str, Mapping[str, Any]] | None = None,
        **arguments: Any,
    ) -> None:
        clusters = clusters or {}
        if cluster not in clusters:
            raise UserError(
                f"SyntheticClusters: unknown cluster {cluster!r}; valid: {sorted(clusters)} "
                "(set data.source.cluster)."
            )
        super().__init__(**{**arguments, **clusters[cluster]})
        self.cluster = cluster
