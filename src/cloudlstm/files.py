"""Writing a file so that no reader ever sees a part of it.

Every file this package writes for a reader (a forecast, ``metrics.json``, a figure, a
report) is written under its own name in a new hidden folder beside it, then renamed over
it: a write that fails, or a process killed while writing, leaves the earlier file as it
was and no part of a new one. A write that fails for want of room is reported as one line
(:func:`~cloudlstm.errors.out_of_space`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cloudlstm.errors import out_of_space


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Where to write ``path``: a file of the same name (so a format or a compression read
    from its suffix, or a name NumPy would extend, stays that of ``path``) in a new hidden
    folder beside it, renamed over ``path`` when the block ends. ``path``'s folders are
    made first.

    Raises:
        OutOfSpaceError: the write failed for want of room (a full disk, a quota,
            ``ulimit -f``), naming ``path``; ``path`` is as it was.
        OSError: any other failure to write, ``path`` as it was too.
    """
    path = Path(path)
    folder = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent))
        yield folder / path.name
        os.replace(folder / path.name, path)
    except OSError as err:
        full = out_of_space(err, path)
        if full is None:
            raise
        raise full from None
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
