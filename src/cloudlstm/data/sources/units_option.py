"""``data.source.units`` of the sources of users' files (a wide table, a long-format file,
the Telecom Italia files): each channel's unit as the user names it.

The files say nothing of their units, so these sources record none unless told. Given, the
units are what the source's :meth:`~cloudlstm.data.cache.CachedSource.units` declares: every
load records them in the stream's metadata (:data:`~cloudlstm.data.stream.UNITS_KEY`), the
data summary keeps them, and ``eval.py`` refuses data given in other units than its run's
(:func:`~cloudlstm.assembly.evaluated_data.check_same_units`), as for Beijing's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cloudlstm.errors import UserError, nearest_name

__all__ = ["UNITS_OPTION", "UnitsGiven", "check_unit_channels", "units_option"]

UNITS_OPTION = "data.source.units"


class UnitsGiven:
    """Mixed into a source (before :class:`~cloudlstm.data.cache.CachedSource`) whose
    channels' units are the ones ``units`` names: its constructor sets ``given_units``
    (:func:`units_option`)."""

    given_units: dict[str, str]

    def units(self) -> dict[str, str]:
        """The channels' units that ``units`` names (:meth:`CachedSource.units`)."""
        return dict(self.given_units)


def units_option(units: Any, channels: Sequence[str] | None = None) -> dict[str, str]:
    """``units`` as given (a mapping channel -> unit, e.g. ``{speed: mph}``; None: no unit
    recorded) as a plain ``{channel: unit}``, its channels checked against ``channels``
    where they are known before the data are read (None: :func:`check_unit_channels` once
    they are).

    Raises:
        UserError: ``units`` is no mapping, a unit is no text (a number, null, empty) or a
            key names none of ``channels``.
    """
    if units is None:
        return {}
    if not isinstance(units, Mapping):
        raise UserError(
            f"{UNITS_OPTION}={units!r} is no mapping of channels to units: give each "
            f"channel's unit, e.g. {UNITS_OPTION}={{speed: mph}}, or null to record none."
        )
    given = {}
    for channel, unit in units.items():
        # a number or a null would be recorded as a unit no evaluation could match in words
        if not isinstance(unit, str) or not unit.strip():
            shown = "null" if unit is None else repr(unit)
            raise UserError(
                f"{UNITS_OPTION} gives {channel} the unit {shown}, which names no unit: write "
                f"each unit as text, e.g. {{{channel}: mph}} (quoted where it reads as a "
                "number: '1'), and leave out a channel whose unit is unknown."
            )
        given[str(channel)] = unit
    if channels is not None:
        check_unit_channels(given, channels)
    return given


def check_unit_channels(units: Mapping[str, str], channels: Sequence[str]) -> None:
    """Refuse a channel of ``units`` (:func:`units_option`'s) that is none of the data's
    ``channels``: its unit would be recorded for nothing, and the channel it was meant for
    left without one.

    Raises:
        UserError: naming the key, the nearest channel and the data's channels.
    """
    unknown = [channel for channel in units if channel not in channels]
    if unknown:
        raise UserError(
            f"{UNITS_OPTION} names {unknown[0]!r}, no channel of the data"
            f"{nearest_name(unknown[0], channels)}; its channels are {list(channels)}: "
            "give the unit of each by its channel's name."
        )
