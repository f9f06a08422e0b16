"""Synthetic stand-in for the Urban Air clusters where the raw files are absent (``scale=cpu``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cloudlstm.data.pipeline.datamodule import PointCloudDataModule
from cloudlstm.errors import UserError

__all__ = ["SyntheticClusters"]


class SyntheticClusters(PointCloudDataModule):
    """A generated stream per city cluster, taking ``data.cluster`` as ``data=airq`` does.

    The air-quality paper presets sweep ``data.cluster=A,B``. Their ``scale=cpu`` form runs
    here, where the Urban Air files are not available, so it swaps in the synthetic
    generator and keeps the key: sweeps, run names and ``compare --paper`` still tell the
    clusters apart. The numbers are a smoke check of the pipeline, not a reproduction.

    Args:
        source: the generator's config (a mapping with ``_target_``, as in
            ``conf/data/synthetic.yaml``).
        cluster: which entry of ``clusters`` to generate.
        clusters: per cluster, the generator arguments that replace those of ``source``
            (e.g. ``seed`` and ``num_points``).
        **kwargs: passed to :class:`PointCloudDataModule`.
    """

    def __init__(
        self,
        source: Mapping[str, Any],
        cluster: str = "A",
        clusters: Mapping[str, Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        clusters = clusters or {}
        if cluster not in clusters:
            raise UserError(
                f"SyntheticClusters: unknown cluster {cluster!r}; valid: {sorted(clusters)} "
                "(set data.cluster)."
            )
        super().__init__({**source, **clusters[cluster]}, **kwargs)
        self.cluster = cluster
