"""Lightning's checkpoint I/O with a SHA-256 beside every checkpoint it writes.

Every checkpoint a Trainer saves goes through its ``CheckpointIO`` plugin, whoever asks
for it: the ModelCheckpoint callbacks (best, ``last.ckpt``), Lightning's SLURM handler
(``hpc_ckpt_<n>.ckpt``), ``trainer.save_checkpoint``. So the checksum is written here once,
for all of them. The plugin is set for every Trainer in ``conf/trainer/default.yaml``
(``plugins:``, instantiated by Hydra with the Trainer); a config that sets
``trainer.plugins`` must keep it in its list.

A save that finds no room (a full disk, a quota, ``ulimit -f``) leaves the file saved before
and its checksum as they were, and stops with one line naming the file (an
:class:`~cloudlstm.errors.OutOfSpaceError`).

Lightning's own loads (``ckpt_path=`` of fit and test) verify through :meth:`load_checkpoint`;
``resume=``, ``eval.py``, ``predict.py`` and :class:`cloudlstm.Forecaster` through
:func:`cloudlstm.rundir.checkpoints.check_checkpoint`.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from cloudlstm.errors import out_of_space
from cloudlstm.rundir.checkpoints import (
    checksum_path,
    read_checksum_file,
    verify_checksum,
    write_checksum,
)


class ChecksummedCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` that writes ``<file>.checksum`` after each checkpoint, checks it
    before loading one, and removes it with its checkpoint. Local files only; a remote path
    (``s3://...``) is saved and loaded as by ``TorchCheckpointIO``."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        """Save atomically, then the checksum. A local file is written in a folder beside
        ``path`` (:data:`STAGING`) and renamed over it, never through ``$TMPDIR`` as
        Lightning's transaction does: from another file system, its final move is a copy,
        and a copy cut short by a full disk left part of a checkpoint at ``path``, in place
        of the one saved before.

        Raises:
            OutOfSpaceError: no room for the file (a full disk, a quota, ``ulimit -f``); the
                file saved before at ``path``, if any, is left as it was, with its checksum.
            UserError: the ``.checksum`` to replace is no file that can be read
                (:func:`_old_checksum`); nothing is written.
        """
        local = _local(path)
        if local is None or storage_options is not None:
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        sidecar = checksum_path(local)
        old_checksum = _old_checksum(sidecar)
        # the old checksum goes first: a job killed between the file's rename and the new
        # checksum's leaves a checkpoint without a checksum (loaded unverified), never one
        # with a stale checksum that would refuse a good file
        sidecar.unlink(missing_ok=True)
        # serialised in memory first, as Lightning does: torch's writer, failing on a file,
        # raises a RuntimeError of its own in place of the OSError that says why
        data = io.BytesIO()
        torch.save(checkpoint, data)
        try:
            _write_and_rename(data.getbuffer(), local)
        except OSError as err:
            # the write failed before the rename: the old file is there, as it was
            if old_checksum is not None:
                _restore(sidecar, old_checksum)
            full = out_of_space(err, local, _THEN)
            if full is None:
                raise
            raise full from err
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


_THEN = (
    "The checkpoints saved before are intact: make room (or raise the limit), then run the "
    "same command again; training resumes from its last checkpoint."
)


# The folder, beside a checkpoint, where it is written before its rename. A name without
# digits or "ckpt": Lightning takes the number of the SLURM checkpoint to resume from the
# digits of every name in the run's folder that holds "hpc_ckpt_", and one left by a job
# killed mid-save must not count.
STAGING = ".saving"


def _write_and_rename(data: memoryview, path: Path) -> None:
    """Write ``data`` to ``path`` through a file of the same name in :data:`STAGING` beside
    it, renamed over ``path``: ``path`` is the old file or the new one, never a part."""
    staged = path.parent / STAGING / path.name
    try:
        staged.parent.mkdir(parents=True, exist_ok=True)
        staged.write_bytes(data)
        os.replace(staged, path)
    finally:
        staged.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # another save's file in it, or already gone
            staged.parent.rmdir()


def _old_checksum(sidecar: Path) -> bytes | None:
    """The ``.checksum`` a save replaces, kept to put back should the save fail; None
    where there is none.

    Raises:
        UserError: something is at ``sidecar`` that cannot be read as one (a folder, no
            permission, a link to nothing), as a load of the checkpoint says
            (:func:`~cloudlstm.rundir.checkpoints.read_checksum_file`): it was an
            IsADirectoryError or PermissionError traceback in the middle of training.
    """
    return read_checksum_file(
        sidecar,
        lambda problem: (
            f"Cannot replace {sidecar}, the SHA-256 of checkpoint {sidecar.with_suffix('')} "
            f"({problem}), so the checkpoint cannot be saved with its checksum. Make it a "
            "readable file, or delete it, then run the same command again."
        ),
    )


def _restore(sidecar: Path, text: bytes) -> None:
    """Put a checksum back, atomically; where even that finds no room, the checkpoint
    stays without one (loaded unverified), never with a part of one."""
    tmp = sidecar.with_name(sidecar.name + ".tmp")
    try:
        tmp.write_bytes(text)
        os.replace(tmp, sidecar)
    except OSError:
        tmp.unlink(missing_ok=True)


def _local(path: Any) -> Path | None:
    """``path`` as a local Path, or None for a URL (``s3://``, ``gs://``)."""
    text = str(path)
    return None if "://" in text else Path(text)
