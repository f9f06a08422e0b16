"""User errors: bad input or settings, reported as one message without a traceback.

:class:`UserError` derives from Hydra's ``CompactHydraException``, so when it escapes a
``@hydra.main`` entry point Hydra prints only its message and exits with status 1. Any
other exception is a bug and keeps its traceback. It is also a ``ValueError``: a bad value
given by the user, which callers that catch ``ValueError`` keep handling.
"""

from __future__ import annotations

from hydra.errors import CompactHydraException


class UserError(CompactHydraException, ValueError):
    """Something the user can fix; the message names the problem and the fix."""


class MissingFileError(UserError, FileNotFoundError):
    """A file or folder the user named does not exist (still a ``FileNotFoundError``)."""


class MissingPackageError(UserError, ImportError):
    """An optional package the requested feature needs is not installed."""


class DownloadError(UserError, RuntimeError):
    """A data set could not be downloaded (address, network or the server)."""
