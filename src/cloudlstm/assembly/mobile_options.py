"""Which options of ``data=mobile`` each of its two sources reads: the generator's
(``city`` ... ``seed``) without ``data.source.path``, a file's reading options with one
(:func:`cloudlstm.data.sources.mobile.mobile_traffic`); and the lines that refuse or drop
the others (:mod:`cloudlstm.assembly.source_options`).

Without the data sources (their package imports torch and pandas: seconds), so that a
sweep or an Optuna search checks its command's options as it starts; the options a file
is read with are those that ``conf/data/points.yaml`` declares (``data=mobile`` takes
them from there), each a parameter of
:class:`~cloudlstm.data.sources.long_format.LongFormatSource`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from omegaconf import OmegaConf

from cloudlstm.paths import config_dir

# the source of data=mobile (conf/data/mobile.yaml), named: importing it imports torch
MOBILE_TARGET = "cloudlstm.data.sources.mobile.mobile_traffic"
# The options of data=mobile that one of its two sources alone reads: the generator's, and
# a file's reading options (LongFormatSource's, but path, cache_dir, which both read, and
# units, which mobile_traffic refuses itself without a file, whoever sets them).
GENERATOR_OPTIONS = ("city", "num_antennas", "num_services", "num_days", "seed")


@functools.cache
def reading_options() -> tuple[str, ...]:
    """A file's reading options, as ``conf/data/points.yaml`` declares them (read once)."""
    source = OmegaConf.load(config_dir() / "data" / "points.yaml").source
    return tuple(str(k) for k in source if k not in ("_target_", "path", "cache_dir", "units"))


def unread_by(path: object) -> tuple[str, ...]:
    """The options that data=mobile's source does not read: with a file (``path`` not
    None), the generator's; without one, a file's reading options."""
    return reading_options() if path is None else GENERATOR_OPTIONS


def unread_sweep_note(
    dropped: Mapping[str | None, Sequence[str]], before: int, after: int, everywhere: bool
) -> str:
    """The line of a sweep whose config sweeps options that data=mobile's source does not
    read (``experiment=paper/mobile``'s cities with a file): its jobs that differ only
    there run once, ``before`` jobs -> ``after``.

    Args:
        dropped: ``{data.source.path of the jobs (None: the generator): the options whose
            sweep they drop}``, in order: each file is named, not the last job's alone.
        everywhere: whether every job that the sweep of those options sets dropped it;
            else some (the other source's) read them, and the line says where it does not
            apply.
    """
    files = [str(path) for path in dropped if path is not None]
    alone = everywhere and (not files or None not in dropped)  # one source, every job's
    here = " here" if alone else ""
    kinds = []  # (the options, where data=mobile does not read them)
    if files:
        named = list(dict.fromkeys(o for p, some in dropped.items() if p is not None for o in some))
        plural = "s" if len(files) > 1 else ""
        where = f"reads your file{plural}{here} (data.source.path={', '.join(files)})"
        kinds.append((named, f"{where}, not the generator"))
    if None in dropped:
        where = f"generates its traffic{here} (data.source.path=null) and reads no file"
        kinds.append((list(dropped[None]), where))
    (named, where), *others = kinds
    said = f"{_sweep_names(named)} does not apply{':' if alone else ' where'} data=mobile {where}"
    said += "".join(f", nor that of {_sweep_names(n)} where it {w}" for n, w in others)
    return (
        f"The config's sweep of {said}, so the jobs that differ only there run once "
        f"({before} jobs -> {after})."
    )


def _sweep_names(options: Sequence[str]) -> str:
    """``options`` as their keys: ``data.source.city, data.source.seed``."""
    return ", ".join(f"data.source.{o}" for o in options)


def unread_options(path: object, given: Mapping[str, str]) -> str | None:
    """The refusal of the options ``given`` (``{option: the command's override that sets
    it}``) that the source data=mobile builds does not read: with a file (``path`` not
    None), the generator's options; without one, a file's reading options. None where
    ``given`` holds none of them."""
    ignored = unread_by(path)
    named = [line for option, line in given.items() if option in ignored]
    if not named:
        return None
    them = "it" if len(named) == 1 else "them"
    if path is None:
        return (
            f"{', '.join(named)}: data=mobile generates its traffic here "
            "(data.source.path=null) and reads no file, so nothing would read "
            f"{them}: give your file (data.source.path=/path/to/traffic.csv), or leave "
            f"{them} out."
        )
    return (
        f"{', '.join(named)}: data=mobile reads your file here (data.source.path={path}), "
        f"so the generator that {them} would set does not run: leave {them} out, or "
        "generate the traffic (data.source.path=null)."
    )
