"""Lightning's checkpoint I/O with a SHA-256 beside every checkpoint it writes.

Every checkpoint a Trainer saves goes through its ``CheckpointIO`` plugin, whoever asks
for it: the ModelCheckpoint callbacks (best, ``last.ckpt``), Lightning's SLURM handler
(``hpc_ckpt_<n>.ckpt``), ``trainer.save_checkpoint``. So the checksum is written here once,
for all of them. The plugin is set for every Trainer in ``conf/trainer/default.yaml``
(``plugins:``, instantiated by Hydra with the Trainer); a config that sets
``trainer.plugins`` must keep it in its list.

Lightning's own loads (``ckpt_path=`` of fit and test) verify through :meth:`load_checkpoint`;
``resume=``, ``eval.py``, ``predict.py`` and :class:`cloudlstm.Forecaster` through
:func:`cloudlstm.rundir.checkpoints.check_checkpoint`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.plugins.io import TorchCheckpointIO

from cloudlstm.rundir.checkpoints import checksum_path, verify_checksum, write_checksum


class ChecksummedCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` that writes ``<file>.checksum`` after each checkpoint, checks it
    before loading one, and removes it with its checkpoint. Local files only; a remote path
    (``s3://...``) is saved and loaded as by ``TorchCheckpointIO``."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        local = _local(path)
        if local is not None:
            # the old checksum goes first: a job killed while the new file is written leaves
            # a checkpoint without a checksum (loaded unverified), never one with a stale
            # checksum that would refuse a good file
            checksum_path(local).unlink(missing_ok=True)
        super().save_checkpoint(checkpoint, path, storage_options)
        if local is not None:
            write_checksum(local)

    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        local = _local(path)
        if local is not None:
            verify_checksum(local)
        return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)

    def remove_checkpoint(self, path: Any) -> None:
        super().remove_checkpoint(path)
        local = _local(path)
        if local is not None:
            checksum_path(local).unlink(missing_ok=True)


def _local(path: Any) -> Path | None:
    """``path`` as a local Path, or None for a URL (``s3://``, ``gs://``)."""
    text = str(path)
    return None if "://" in text else Path(text)
