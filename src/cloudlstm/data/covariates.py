"""Input-only channels: measured covariates and known-future time features.

A model forecasts C_out *target* channels from C_in >= C_out *input* channels, in this
order along the channel axis of a window's ``x``::

    [targets (C_out) | measured covariates (C_cov) | time features (F)]

* **Measured covariates** (e.g. Beijing's temperature, pressure, wind) are channels of the
  stream that are seen in the input window only: they are normalised with the training
  part's scaler like the targets but never forecast or scored. A source marks them by
  listing their names under ``stream.metadata["covariates"]``; they are the stream's last
  channels.
* **Time features** (``data.time_features=[hour,weekday]``) are sin/cos of the time of day,
  the day of the week or of the year, computed from the stream's timestamps. They are
  known for the future as well, so a window also holds them for its J forecast steps
  (``future (J, N, F)``), which sequence-to-sequence decoders read. They follow the clock
  of the times as read (UTC where the file wrote them with an offset or counted them since
  1970), or that of ``data.time_zone`` (``Europe/Rome``), whose hour and day also change
  with its daylight saving.
"""

from __future__ import annotations

import difflib
import zoneinfo
from collections.abc import Sequence

import numpy as np
import pandas as pd

from cloudlstm.errors import UserError

__all__ = [
    "COVARIATES_KEY",
    "TIME_FEATURES",
    "check_time_features",
    "check_time_zone",
    "input_names",
    "stream_covariates",
    "time_feature_names",
    "time_features",
]

# stream.metadata key listing the stream's measured covariates (its last channels)
COVARIATES_KEY = "covariates"
# name -> its period in days: each gives a sin and a cos channel
TIME_FEATURES: dict[str, float] = {"hour": 1.0, "weekday": 7.0, "yearday": 365.2425}
_EPOCH_WEEKDAY = 3  # 1970-01-01 was a Thursday (Monday = 0)


def check_time_features(names: Sequence[str] | None) -> list[str]:
    """``data.time_features`` as a list of known, distinct names.

    Raises:
        UserError: an unknown or repeated name.
    """
    if names is None:
        return []
    if isinstance(names, str):
        names = [names]
    names = [str(n) for n in names]
    unknown = [n for n in names if n not in TIME_FEATURES]
    if unknown or len(set(names)) != len(names):
        raise UserError(
            f"data.time_features={names}: each must be one of {list(TIME_FEATURES)}, "
            "at most once (e.g. data.time_features=[hour,weekday])."
        )
    return names


def check_time_zone(name: str | None) -> str | None:
    """``data.time_zone`` as an IANA zone name the machine knows, or None.

    Raises:
        UserError: a name that is not such a zone (``UTC+1``, ``CET`` spelt wrong, ...).
    """
    if name is None:
        return None
    try:
        zoneinfo.ZoneInfo(str(name))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        near = difflib.get_close_matches(str(name), zoneinfo.available_timezones(), n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise UserError(
            f"data.time_zone={name!r} is not a time zone this machine knows{hint}: give an "
            "IANA name such as data.time_zone=Europe/Rome or America/Los_Angeles, or null "
            "for the times as read."
        ) from None
    return str(name)


def time_feature_names(names: Sequence[str]) -> list[str]:
    """The 2F channel names of the time features ``names``: ``hour_sin, hour_cos, ...``."""
    return [f"{name}_{part}" for name in names for part in ("sin", "cos")]


def input_names(
    targets: Sequence[str], covariates: Sequence[str], time_features: Sequence[str]
) -> list[str]:
    """The C_in channels of a window's ``x``: the targets, the measured covariates, then
    the time features' sin/cos channels."""
    return [*targets, *covariates, *time_feature_names(time_features)]


def time_features(
    timestamps: np.ndarray, names: Sequence[str], zone: str | None = None
) -> np.ndarray:
    """``(T, 2F)`` float32 sin/cos of each time feature at each of the ``(T,)`` timestamps.

    ``hour`` is the time of day (minutes count), ``weekday`` the day of the week with its
    time of day, ``yearday`` the position in a mean Gregorian year; each is an angle of one
    turn per period. ``zone``: the timestamps are UTC and the features follow this zone's
    clock (its offset on each day); None: they follow the timestamps as they are.
    """
    clock = np.asarray(timestamps, dtype="datetime64[ns]")
    if zone is not None:
        local = pd.DatetimeIndex(clock).tz_localize("UTC").tz_convert(zoneinfo.ZoneInfo(zone))
        clock = local.tz_localize(None).to_numpy(dtype="datetime64[ns]")
    days = (clock - np.datetime64(0, "ns")) / (np.timedelta64(1, "D"))
    columns = []
    for name in names:
        period = TIME_FEATURES[name]
        phase = days + _EPOCH_WEEKDAY if name == "weekday" else days
        angle = 2 * np.pi * np.mod(phase, period) / period
        columns += [np.sin(angle), np.cos(angle)]
    if not columns:
        return np.zeros((len(days), 0), dtype=np.float32)
    return np.stack(columns, axis=1).astype(np.float32)


def stream_covariates(channel_names: Sequence[str], metadata: dict) -> list[str]:
    """The measured covariates a stream declares (its last channels).

    Raises:
        ValueError: the declared names are not the stream's last channels (a source bug).
    """
    names = [str(n) for n in metadata.get(COVARIATES_KEY, [])]
    if names and list(channel_names[-len(names) :]) != names:
        raise ValueError(
            f"stream covariates {names} must be its last channels; channels are "
            f"{list(channel_names)}."
        )
    return names
