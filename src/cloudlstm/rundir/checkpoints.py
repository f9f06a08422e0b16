"""Checkpoints, checked and read, for everything that uses a trained run.

``eval.py``, ``predict.py``, :class:`cloudlstm.Forecaster` and training's ``resume=`` all
load a run's checkpoint here (:mod:`cloudlstm.rundir.layout` finds it), so a missing or
truncated checkpoint, a checkpoint whose bytes changed since it was written, or a file that is not a
Lightning checkpoint is one clear :class:`~cloudlstm.errors.UserError` wherever it happens.

Checksums: every checkpoint a Trainer writes gets its SHA-256 in ``<file>.checksum`` beside
it (:mod:`cloudlstm.rundir.checkpoint_io` writes it), in ``sha256sum`` format, so
``sha256sum -c last.ckpt.checksum`` checks it by hand too. Not ``.sha256``: Lightning reads
the number of ``hpc_ckpt_<n>.ckpt`` from every file name that contains ``hpc_ckpt_`` by
dropping all but its digits, and ``hpc_ckpt_1.ckpt.sha256`` would read as checkpoint 1256.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from cloudlstm.errors import UserError

log = logging.getLogger(__name__)

CHECKSUM_SUFFIX = ".checksum"
# files whose checksum matched, by (path, size, mtime): a file checked by resume= and
# loaded again by Lightning right after is read and hashed once
_verified: set[tuple[str, int, int]] = set()
# what a message about a damaged checkpoint ends with (what to do instead): a text, or a
# function that makes it once the checkpoint is found damaged (looking at the other
# checkpoints of the run costs their hashing, which a sound checkpoint never needs)
Remedy = str | Callable[[], str] | None


def remedy_text(remedy: Remedy) -> str | None:
    """``remedy``'s text (None stays None)."""
    return remedy() if callable(remedy) else remedy


def checksum_path(path: str | Path) -> Path:
    """Where the SHA-256 of checkpoint ``path`` is kept: ``<path>.checksum``."""
    path = Path(path)
    return path.with_name(path.name + CHECKSUM_SUFFIX)


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, as hex."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def kept_sha256(path: Path) -> str:
    """The SHA-256 of checkpoint ``path``: the one written beside it where there is one
    (as it was verified, or will be, before the file is loaded), else its bytes'.

    Raises:
        UserError: its ``.checksum`` is there but cannot be read (:func:`_written_sha256`).
    """
    written = _written_sha256(checksum_path(path))
    return file_sha256(path) if written is None else written


def _written_sha256(sidecar: Path) -> str | None:
    """The SHA-256 that a ``.checksum`` file holds (``sha256sum`` format: first field);
    None where there is no such file.

    Raises:
        UserError: something is at ``sidecar`` but cannot be read as one
            (:func:`read_checksum_file`): the checkpoint cannot be verified, and loading it
            unverified would hide that.
    """
    text = read_checksum_file(
        sidecar,
        lambda problem: (
            f"Cannot read {sidecar}, the SHA-256 of checkpoint {sidecar.with_suffix('')} "
            f"({problem}), so the checkpoint cannot be verified. Make it a readable file, or "
            "delete it to load the checkpoint unverified."
        ),
    )
    return None if text is None else (text.split() or [b""])[0].decode("ascii", "replace")


def read_checksum_file(sidecar: Path, unreadable: Callable[[str], str]) -> bytes | None:
    """The bytes of the ``.checksum`` file ``sidecar``; None where there is none (a
    checkpoint written before checksums, or, since, deleted).

    Raises:
        UserError: something is at ``sidecar`` but cannot be read as one (no permission, a
            folder, a link to nothing), in the line ``unreadable`` makes of what is wrong.
    """
    try:
        if sidecar.is_file() or not (sidecar.exists() or sidecar.is_symlink()):
            return sidecar.read_bytes()
        problem = "it is a folder" if sidecar.is_dir() else "it is not a file"
    except FileNotFoundError:
        return None
    except OSError as err:  # no permission, an I/O error
        problem = err.strerror or str(err)
    raise UserError(unreadable(problem))


def write_checksum(path: str | Path) -> Path:
    """Write the SHA-256 of checkpoint ``path`` beside it, atomically; returns that file.

    Written to a temporary file then renamed over the old one, so a reader sees the old
    checksum or the new one, never a part. (The temporary name has no digits of its own,
    for Lightning's reading of ``hpc_ckpt_<n>`` numbers.)
    """
    path = Path(path)
    sidecar = checksum_path(path)
    tmp = sidecar.with_name(sidecar.name + ".tmp")
    tmp.write_text(f"{file_sha256(path)}  {path.name}\n")
    os.replace(tmp, sidecar)
    return sidecar


def verify_checksum(path: str | Path, remedy: Remedy = None) -> None:
    """Check checkpoint ``path`` against its ``.checksum``; a file without one passes.

    Checkpoints written before checksums existed (older runs, ``docs/results/``) have none
    and load as before.

    Raises:
        UserError: the file's SHA-256 is not the one written with it, or its ``.checksum``
            cannot be read.
    """
    path = Path(path)
    sidecar = checksum_path(path)
    written = _written_sha256(sidecar)
    if written is None:
        log.debug("%s has no %s: loaded without verifying it.", path, sidecar.name)
        return
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key in _verified:
        return
    if file_sha256(path) != written:
        raise UserError(
            f"Checkpoint {path} does not match its SHA-256 in {sidecar.name}: its bytes "
            "changed after training wrote it (a disk or copy error, or an edit), so its "
            "weights are not the trained ones. "
            + (remedy_text(remedy) or "Use another checkpoint, or start fresh with `resume=never`.")
        )
    _verified.add(key)


# How a file torch.save wrote begins: a zip archive (torch >= 1.6) or a pickle (before)
CHECKPOINT_STARTS = (b"PK\x03\x04", b"\x80")


def check_checkpoint(
    path: Path, remedy: Remedy = None, other_file: str | None = None
) -> dict[str, Any]:
    """Verify a Lightning checkpoint's checksum and load it on CPU, or raise a UserError
    that names the file.

    ``remedy`` ends the message about a damaged checkpoint (what to do instead); by default
    it is about ``resume=``. ``other_file`` ends the one about a file that is no checkpoint
    at all (a ``.checksum``, a ``config.yaml`` given by mistake), which no deleting mends;
    by default ``remedy``. Returns the loaded checkpoint dict.
    """
    verify_checksum(path, remedy)
    with open(path, "rb") as file:
        head = file.read(4)
    if head and not head.startswith(CHECKPOINT_STARTS):  # empty: cut short when saved
        raise UserError(
            f"{path} is not a checkpoint: training writes them as .ckpt files, zip archives, "
            f"and this file begins {head!r}. {_not_one(remedy, other_file)}"
        )
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # truncated zip, bad pickle
        raise UserError(
            f"Cannot read checkpoint {path} ({type(err).__name__}: {_first_line(err)}). "
            "The file is truncated or corrupted, e.g. by a job killed while saving it. "
            + (remedy_text(remedy) or "Delete it, or start fresh with `resume=never`.")
        ) from err
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise UserError(
            f"{path} is not a Lightning checkpoint (no state_dict). {_not_one(remedy, other_file)}"
        )
    return ckpt


def _not_one(remedy: Remedy, other_file: str | None) -> str:
    """The end of the message about a file that is no checkpoint at all."""
    return other_file or remedy_text(remedy) or "Point resume= at a .ckpt written by training."


def sound_checkpoint(path: Path) -> bool:
    """Whether :func:`check_checkpoint` takes checkpoint ``path``: what a message may offer
    as a way on. The hash is the one :func:`verify_checksum` keeps, so a file offered and
    then taken is hashed once."""
    try:
        check_checkpoint(path)
    except (UserError, OSError):  # damaged, or gone or unreadable since it was found
        return False
    return True


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else "no message"
