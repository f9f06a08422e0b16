"""User errors: bad input or settings, reported as one message without a traceback.

:class:`UserError` derives from Hydra's ``CompactHydraException``, so when it escapes a
``@hydra.main`` entry point Hydra prints only its message and exits with status 1. Any
other exception is a bug and keeps its traceback. It is also a ``ValueError``: a bad value
given by the user, which callers that catch ``ValueError`` keep handling.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from hydra.errors import CompactHydraException, InstantiationException


class UserError(CompactHydraException, ValueError):
    """Something the user can fix; the message names the problem and the fix."""


class MissingFileError(UserError, FileNotFoundError):
    """A file or folder the user named does not exist (still a ``FileNotFoundError``)."""


class MissingPackageError(UserError, ImportError):
    """An optional package the requested feature needs is not installed."""


class DownloadError(UserError, RuntimeError):
    """A data set could not be downloaded (address, network or the server)."""


@contextmanager
def one_line_errors() -> Iterator[None]:
    """A bad option of one of our own models or data sets reaches the user as one line.

    Our constructors refuse bad options with a ``ValueError`` that names the key
    (``model.cell='lstmm' is not one of [...]``); Hydra wraps it in an
    ``InstantiationException`` whose message is ``Error in call to target ...`` and the
    exception's repr. A ``ValueError`` raised by this package's code in a constructor of a
    ``cloudlstm.*`` target becomes a :class:`UserError` of its message here; one raised
    elsewhere (torch, a library) is left as it is, with its traceback.
    """
    try:
        yield
    except InstantiationException as err:
        user_error = user_error_of(err)
        if user_error is None:
            raise
        raise user_error from None


def user_error_of(err: InstantiationException) -> UserError | None:
    """The one-line error of a failed instantiation, or None where it is not a user's."""
    cause = err.__cause__
    while cause is not None:
        if isinstance(cause, UserError):
            return cause
        if isinstance(cause, ValueError) and _raised_here(cause):
            target = _target_of(err)
            if target is None or not target.startswith(f"{__package__}."):
                return None
            return UserError(f"{target.rsplit('.', 1)[-1]}: {cause}")
        cause = cause.__cause__
    return None


def _raised_here(err: BaseException) -> bool:
    """True if the innermost frame of ``err``'s traceback is in this package."""
    tb = err.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = tb.tb_frame.f_globals.get("__name__", "")
    return module == __package__ or module.startswith(f"{__package__}.")


def _target_of(err: InstantiationException) -> str | None:
    """The ``_target_`` Hydra names in its message (``Error in call to target 'a.B':``)."""
    match = re.search(r"target '([\w.]+)'", str(err))
    return match.group(1) if match else None
