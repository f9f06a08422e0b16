"""A text table cut short inside a row is refused, not read.

A download or a copy that stopped leaves a plain-text file whose last line ends in the
middle of a row, without the newline that ends the others. pandas reads it without an
error: the row's missing fields become missing readings and its last number, cut, a
reading (``94.5`` read as ``9``). A compressed file's codec finds such a cut itself
(:func:`cloudlstm.data.sources.tables.damaged_file`); a plain one is looked at here: its
end, which is all a cut changes.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from cloudlstm.errors import UserError

# the end of the file read first; more is read (doubling, up to MAX_TAIL_BYTES) until it
# holds the last two lines
TAIL_BYTES = 1 << 16
MAX_TAIL_BYTES = 1 << 26
TEXT_SUFFIXES = (".csv", ".tsv", ".txt", ".dat")


def refuse_cut_short(path: Path, what: str, sep: str = ",") -> None:
    """Refuse ``path`` (``what`` it holds) when it ends inside a row: its last line has no
    newline and fewer ``sep``-separated fields than the line before it.

    A last line without a newline but with every field is read (files written by hand
    often end so); a file of other suffixes (compressed, Parquet, HDF5), a gzipped one
    whatever its name (its codec finds a cut), or one of NUL bytes
    (UTF-16 text, which the CSV reader refuses as not UTF-8), is not looked at.

    Raises:
        UserError: the file ends inside a row.
    """
    if Path(path).suffix.lower() not in TEXT_SUFFIXES or gzipped(Path(path)):
        return
    try:
        start, tail = _last_lines(Path(path))
    except OSError:  # the reader that follows names the problem
        return
    if not tail or tail.endswith(b"\n"):
        return
    if b"\x00" in tail:  # UTF-16 or -32 text, whose lines end in "\n\x00": the reader says
        return
    lines = tail.decode("utf-8", errors="replace").split("\n")
    whole = lines[-2:] if start == 0 else lines[1:][-2:]  # the first may start mid-line
    if len(whole) < 2:
        return
    previous = _fields(whole[0], sep)
    if previous is None:  # a quoted field goes on over the line: nothing to compare with
        return
    last = _fields(whole[1], sep)
    if last is not None and len(last) >= len(previous):
        return
    shown = whole[1] if len(whole[1]) <= 60 else f"...{whole[1][-57:]}"
    why = (
        "ends inside a quoted field"
        if last is None
        else f"has {len(last)} of the {len(previous)} fields of the line before"
    )
    raise UserError(
        f"Cannot read {what} {path}: it ends inside a row, its last line {shown!r} (no "
        f"newline) {why}, as a download or copy that stopped leaves a file. Get the file "
        "again whole."
    )


def gzipped(path: Path) -> bool:
    """Whether ``path`` starts with gzip's magic bytes, whatever its name says (a browser
    may save a ``.txt.gz`` download as ``.txt``); False where it cannot be read (the reader
    that follows names the problem)."""
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"\x1f\x8b"
    except OSError:
        return False


def _fields(line: str, sep: str) -> list[str] | None:
    """The ``sep``-separated fields of ``line``; None where a quoted field does not end."""
    try:
        return next(csv.reader([line.rstrip("\r")], delimiter=sep, strict=True))
    except csv.Error:
        return None


def _last_lines(path: Path) -> tuple[int, bytes]:
    """The end of ``path`` that holds its last two lines whole (or the whole file, or its
    last :data:`MAX_TAIL_BYTES`), and the offset it starts at."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        length = TAIL_BYTES
        while True:
            start = max(0, size - length)
            f.seek(start)
            tail = f.read()
            if start == 0 or tail.count(b"\n") >= 3 or length >= MAX_TAIL_BYTES:
                return start, tail
            length *= 2
