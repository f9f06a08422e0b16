"""Values on the command line as Hydra's override grammar reads them.

Unquoted, the grammar takes letters, digits, ``/``, ``.``, ``-`` and spaces, but not ``ü``,
``(`` or ``,``: ``run=/data/dü`` is a parse error, ``"run='/data/dü'"`` the folder. The
programs print commands a user copies, and read folders from ``run=``, with these.
"""

from __future__ import annotations

import re
import shlex

from hydra.core.override_parser.overrides_parser import OverridesParser


def hydra_quoted(text: str) -> str:
    """``text`` as one quoted value of the override grammar, every character kept: a quote
    is escaped, and so are the backslashes before a quote or at the end (the grammar keeps
    any other backslash as it is)."""
    kept = re.sub(r"(\\+)(?='|$)", lambda run: run.group(1) * 2, text)
    return "'" + kept.replace("'", "\\'") + "'"


def _reads_as(override: str) -> object:
    """What the grammar reads as ``override``'s value; raises where it reads nothing."""
    return OverridesParser.create().parse_override(override).value()


def as_override(key: str, text: str) -> str:
    """``key=text``, quoted for the grammar where it would not read ``text`` back as is."""
    plain = f"{key}={text}"
    try:
        if _reads_as(plain) == text:
            return plain
    except Exception:  # the grammar's errors share no base class
        pass
    return f"{key}={hydra_quoted(text)}"


def shell_override(key: str, text: str) -> str:
    """``key=text`` to paste into a POSIX shell: quoted for the grammar, then for the shell,
    in double quotes where nothing inside them is special (``"run='/data/dü'"``)."""
    return shell_word(as_override(key, text))


def shell_word(text: str) -> str:
    """``text`` as one word to paste into a POSIX shell: as it is where nothing in it is
    special, else in double quotes where nothing inside them is special
    (``"run='/data/dü'"``), else in single quotes. A leading ``~`` (Hydra's deletion)
    stays bare before a name without ``/``, as the shell keeps it but for a user's name."""
    bare = text.removeprefix("~") if "/" not in text else text
    if shlex.quote(bare) == bare:
        return text
    if re.search(r'["$`\\!]', text):
        return shlex.quote(text)
    return f'"{text}"'


def override_text(arg: str) -> str:
    """The string a ``key=value`` argument gives: its value as the grammar reads it
    (``run='my run'``, ``run=my\\ run``), or, where the grammar reads no string
    (``run=/data/dü``, ``run=2024``), the text after ``=`` as given: one argument of the
    shell all the same."""
    text = arg.split("=", 1)[1]
    try:
        value = _reads_as(arg)
    except Exception:  # the grammar's errors share no base class
        return text
    return value if isinstance(value, str) else text
