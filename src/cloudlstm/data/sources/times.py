"""A table's time column -> ``datetime64[ns]``, as the user's files write their times.

Dates as text are read in the format pandas infers from the first row, or in the
``time_format`` the user gives (strftime codes, ``"%d/%m/%Y %H:%M"``); where pandas reads
``01/02/2024`` month first and no row shows otherwise, a warning says so. Numbers are counts
since 1970-01-01 UTC (Unix time) in the ``time_unit`` the user gives; without one they are
refused, because pandas would read them as nanoseconds and an hourly file in seconds would
become a stream of 3.6-microsecond steps in 1970. Every failure is one line naming the row,
the value and the setting that reads it.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timezone, tzinfo
from typing import Any

import numpy as np
import pandas as pd
from pandas.tseries.api import guess_datetime_format

from cloudlstm.data.sources.bad_values import RowNames
from cloudlstm.errors import UserError

__all__ = [
    "API_OPTIONS",
    "SOURCE_OPTIONS",
    "TIMES_ZONED_KEY",
    "TIME_UNITS",
    "check_time_reading",
    "counting_unit",
    "parse_times",
    "time_zone",
]

# A stream's metadata key: whether its file wrote the times with a zone or UTC offset
# (read as UTC), or as clock times without one; absent where unknown.
TIMES_ZONED_KEY = "times_zoned"

log = logging.getLogger(__name__)

TIME_UNITS = ("s", "ms", "us", "ns")
# Where a data source's time settings live, named in the messages' fixes.
SOURCE_OPTIONS = "data.source."
# ... and a forecast's in Python: ``reading=TimeReading(time_format=...)``.
API_OPTIONS = "reading=TimeReading("
ISO_EXAMPLE = "'2014-05-01 13:00:00'"


def check_time_reading(
    time_format: str | None, time_unit: str | None, prefix: str = SOURCE_OPTIONS
) -> tuple[str | None, str | None]:
    """``(time_format, time_unit)`` checked: at most one of them, a format with a ``%``
    code, a unit of :data:`TIME_UNITS`; a :class:`UserError` naming the setting (after
    ``prefix``: ``data.source.``, ``TimeReading.``) otherwise."""
    if time_unit is not None and str(time_unit) not in TIME_UNITS:
        raise UserError(
            f"{prefix}time_unit={time_unit!r}: give what the time column's numbers count, "
            f"one of {list(TIME_UNITS)} since 1970-01-01 UTC (s: Unix time in seconds)."
        )
    if time_format is not None and "%" not in str(time_format):
        raise UserError(
            f"{prefix}time_format={time_format!r} has no strftime code: write it as "
            "'%d/%m/%Y %H:%M' (which reads '31/12/2024 23:00')."
        )
    if time_format is not None and time_unit is not None:
        raise UserError(
            f"{prefix}time_format={time_format!r} and time_unit={time_unit!r}: a time "
            "column holds dates (time_format) or numbers (time_unit); give the one it holds."
        )
    return (
        None if time_format is None else str(time_format),
        None if time_unit is None else str(time_unit),
    )


def parse_times(
    column: pd.Series,
    what: str,
    time_format: str | None = None,
    time_unit: str | None = None,
    options: str | None = SOURCE_OPTIONS,
    row_names: RowNames | None = None,
) -> np.ndarray:
    """Parse a column of times into ``(R,)`` ``datetime64[ns]`` (timezones -> naive UTC).

    Args:
        column: the R times: text, datetimes, or numbers when ``time_unit`` is given.
        what: the column and file, for messages ("column 'time' of file data.csv").
        time_format: the strftime format of text dates (and of dates written as digits,
            ``"%Y%m%d"``); None: inferred from the first row.
        time_unit: the column holds numbers counted in this unit since 1970-01-01 UTC; a
            column of datetimes (a DataFrame's, the stream ``Forecaster.update`` keeps) is
            read as it is.
        options: where ``time_format`` and ``time_unit`` are set, named in the fixes
            (:data:`SOURCE_OPTIONS`, :data:`API_OPTIONS`); None where the user sets neither
            (a file of a fixed format).
        row_names: how the messages name rows, by their positions in ``column``, as the
            user finds them (a file's lines: :func:`~cloudlstm.data.sources.tables.
            file_row_names`); None: ``data row`` and the position, from 0.

    Raises:
        UserError: a value that cannot be read (its row, the value and the setting that
            would read it), numbers without a unit, or an empty time.
    """
    name = _row_name(row_names)
    if (unit := counting_unit(column, time_unit)) is not None:
        parsed = _counted(column, what, unit, name)
    else:
        if time_format is None and _numbers(column):
            raise UserError(_numbers_given(column, what, options))
        parsed = _dated(column, what, time_format, options, name)
    if parsed.isna().any():
        row = int(np.flatnonzero(parsed.isna().to_numpy())[0])
        raise UserError(
            f"{what} has {int(parsed.isna().sum())} empty timestamp(s) (first at {name(row)}); "
            "every row needs a time."
        )
    if getattr(parsed.dt, "tz", None) is not None:
        parsed = parsed.dt.tz_convert("UTC").dt.tz_localize(None)
    return _nanoseconds(parsed, column, what, name)


def counting_unit(column: pd.Series, time_unit: str | None) -> str | None:
    """The unit :func:`parse_times` reads the numbers of ``column`` in, counted since
    1970-01-01 UTC: ``time_unit``; None where it reads dates: text, or datetimes (which
    hold no count: as numbers they are nanoseconds, and are read as they are)."""
    return None if pd.api.types.is_datetime64_any_dtype(column) else time_unit


def _row_name(row_names: RowNames | None) -> Callable[[int], str]:
    """The name of one row by its position, as ``row_names`` gives it (None: ``data row``
    and the position)."""
    if row_names is None:
        return lambda row: f"data row {row}"
    return lambda row: row_names([row])[0]


def _nanoseconds(
    parsed: pd.Series, column: pd.Series, what: str, name: Callable[[int], str]
) -> np.ndarray:
    """``parsed`` as ``datetime64[ns]``: pandas 3 reads a date beyond the nanoseconds'
    1677-2262 (a typo: 3024) in microseconds, and a plain cast would wrap it around to
    another date in silence.

    Raises:
        UserError: names the first row beyond, as ``column`` writes it.
    """
    beyond = np.flatnonzero(((parsed < pd.Timestamp.min) | (parsed > pd.Timestamp.max)).to_numpy())
    if len(beyond):
        row = int(beyond[0])
        others = f" ({len(beyond)} such rows)" if len(beyond) > 1 else ""
        raise UserError(
            f"{what}: {name(row)}, {str(column.iloc[row])!r}, is beyond the dates pandas "
            f"holds (1677-2262){others}: correct or remove that row."
        )
    return parsed.dt.as_unit("ns").to_numpy()  # as_unit raises where the check missed one


def _setting(options: str, key: str, value: str) -> str:
    """A time setting as the user writes it where ``options`` says: on the command line
    (``data.source.time_unit=s``, ``data.source.time_format='%d/%m/%Y'``) or as Python's
    :data:`API_OPTIONS` (``reading=TimeReading(time_unit='s')``)."""
    if options.endswith("("):
        return f"{options}{key}={value!r})"
    return f"{options}{key}={value if key == 'time_unit' else repr(value)}"


def _numbers(column: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)


def _numbers_given(column: pd.Series, what: str, options: str | None) -> str:
    example = _first_value(column)
    found = f"{what} holds numbers (e.g. {example!r}), not dates"
    if options is None:
        return f"{found}: write the times as dates such as {ISO_EXAMPLE}."
    return (
        f"{found}: say what they count with {_setting(options, 'time_unit', 's')} (seconds "
        f"since 1970-01-01 UTC; or ms, us, ns), or, for dates written as digits (20240131), "
        f"give their format: {_setting(options, 'time_format', '%Y%m%d')}."
    )


def _counted(column: pd.Series, what: str, unit: str, name: Callable[[int], str]) -> pd.Series:
    """Numbers of ``unit`` since 1970-01-01 UTC as datetimes."""
    numbers = pd.to_numeric(column, errors="coerce")
    bad = np.flatnonzero(((numbers.isna() & column.notna()) | np.isinf(numbers)).to_numpy())
    if len(bad):
        raise UserError(
            f"{what}: {name(int(bad[0]))} holds {column.iloc[bad[0]]!r}, not a number of "
            f"{unit} since 1970-01-01 (time_unit={unit})."
        )
    beyond = np.flatnonzero(_beyond(numbers, unit))
    if len(beyond):
        row = int(beyond[0])
        raise UserError(
            f"{what}: {name(row)} holds {_item(numbers.iloc[row])!r}, and as many {unit} "
            f"since 1970-01-01 are beyond the dates pandas holds (1677-2262): are the numbers "
            f"counted in {unit} (time_unit={unit})?{_finer_unit(numbers, unit)}"
        )
    return pd.to_datetime(numbers, unit=unit)


# nanoseconds in one of TIME_UNITS
_NANOSECONDS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}


def _beyond(numbers: pd.Series, unit: str) -> np.ndarray:
    """Which ``numbers`` of ``unit`` since 1970 lie beyond the nanoseconds' 1677-2262: pandas
    3 reads them in microseconds, and as nanoseconds they would wrap around to other dates."""
    ns = numbers.to_numpy(dtype=float, na_value=np.nan) * _NANOSECONDS[unit]
    with np.errstate(invalid="ignore", over="ignore"):
        return (ns < pd.Timestamp.min.value) | (ns > pd.Timestamp.max.value)


def _finer_unit(numbers: pd.Series, unit: str) -> str:
    """The first unit finer than ``unit`` that dates every number, with the dates it gives
    (milliseconds read as seconds); "" where none does."""
    for finer in TIME_UNITS[TIME_UNITS.index(unit) + 1 :]:
        if not _beyond(numbers, finer).any():
            dates = pd.to_datetime(numbers, unit=finer)
            return (
                f" Counted in {finer} they run from {dates.min():%Y-%m-%d %H:%M} to "
                f"{dates.max():%Y-%m-%d %H:%M}: give time_unit={finer} if so."
            )
    return ""


def _dated(
    column: pd.Series,
    what: str,
    time_format: str | None,
    options: str | None,
    name: Callable[[int], str],
) -> pd.Series:
    """Text or datetime values read in ``time_format`` (None: inferred from the first)."""
    if time_format is not None and _numbers(column):
        column = _digits(column)
    try:
        with _quiet_guess():
            parsed = pd.to_datetime(column, format=time_format, utc=True)
    except (ValueError, TypeError, OverflowError):
        raise UserError(
            f"Cannot parse the timestamps in {what}: "
            + _why_not(column, time_format, options, name)
        ) from None
    if time_format is None and options is not None:
        _say_a_guessed_month_first(column, parsed, what, options)
    return parsed


def _say_a_guessed_month_first(
    column: pd.Series, parsed: pd.Series, what: str, options: str
) -> None:
    """Warn where pandas read ``01/02/2024`` month first and no row shows it is not day
    first (a day above 12 in the first place would have)."""
    used = _guessed_format(column)
    if used is None or not used.startswith("%m"):
        return
    day_first = _day_first(used)
    other = pd.to_datetime(column, format=day_first, errors="coerce", utc=True)
    if (other.isna() & column.notna()).any():
        return  # some row reads month first only
    differ = np.flatnonzero((other != parsed).to_numpy())
    if not len(differ):
        return  # every date reads the same both ways (day = month)
    row = int(differ[0])
    log.warning(
        "%s: read month first (%r: %r is %s); if the dates are day first, give %s.",
        what,
        used,
        column.iloc[row],
        parsed.iloc[row].strftime("%Y-%m-%d %H:%M"),
        _setting(options, "time_format", day_first),
    )


def _day_first(month_first: str) -> str:
    """``"%m/%d/%Y %H:%M"`` -> ``"%d/%m/%Y %H:%M"``."""
    return "%d" + month_first[2] + "%m" + month_first[5:]


def _digits(column: pd.Series) -> pd.Series:
    """Dates written as whole numbers (20240131, read as int or, with gaps, as float) as text."""
    return column.map(lambda v: v if pd.isna(v) else str(int(v)))


def _why_not(
    column: pd.Series, time_format: str | None, options: str | None, name: Callable[[int], str]
) -> str:
    """The first row that does not match the format (``time_format``, else the one pandas
    infers from the first row), and the setting that would read it."""
    first = _first_value(column)
    used = time_format or _guessed_format(column)
    if used is None:
        return _unreadable(column, options, name)
    strict = pd.to_datetime(column, format=used, errors="coerce", utc=True)
    rows = np.flatnonzero((strict.isna() & column.notna()).to_numpy())
    if not len(rows):
        return _unreadable(column, options, name)
    value = column.iloc[rows[0]]
    at = f"{name(int(rows[0]))}, {value!r},"
    if _no_date(value):
        return f"{at} is not a date/time (the first row: {first!r}); correct or remove that row."
    if time_format is not None:
        return (
            f"{at} does not match {_setting(options or '', 'time_format', time_format)}: correct "
            "the format (strftime codes: '%d/%m/%Y %H:%M' reads '31/12/2024 23:00') or that row."
        )
    found = f"{at} does not match the format {used!r} of the first row ({first!r})."
    if options is None:
        return f"{found} Write every row in one format (ISO 8601, e.g. {ISO_EXAMPLE})."
    if used.startswith("%m"):
        return (
            f"{found} If the dates are day first, give "
            f"{_setting(options, 'time_format', _day_first(used))}."
        )
    return (
        f"{found} Write every row in one format (ISO 8601, e.g. {ISO_EXAMPLE}), or give the "
        f"format: {_setting(options, 'time_format', '%d/%m/%Y %H:%M')} (strftime codes)."
    )


def _unreadable(column: pd.Series, options: str | None, name: Callable[[int], str]) -> str:
    """A value that is no date in any format (named by its row, ``name``), or the
    column's formats mixed."""
    loose = pd.to_datetime(column, errors="coerce", format="mixed", utc=True)
    bad = np.flatnonzero((loose.isna() & column.notna()).to_numpy())
    fix = f"Use ISO 8601 values such as {ISO_EXAMPLE} in every row"
    if options is not None:
        fix += f", or give their format: {_setting(options, 'time_format', '%d/%m/%Y %H:%M')}"
    if len(bad):
        row = int(bad[0])
        return f"{name(row)}, {column.iloc[row]!r}, is not a date/time. {fix}."
    return f"the rows mix formats (the first: {_first_value(column)!r}). {fix}."


def _no_date(value: Any) -> bool:
    """Whether ``value`` reads as a date in no format at all."""
    with _quiet_guess():
        return pd.isna(
            pd.to_datetime(pd.Series([value]), errors="coerce", format="mixed", utc=True)[0]
        )


def _guessed_format(column: pd.Series) -> str | None:
    """The format pandas infers from the column's first value (None: not text, or none)."""
    first = _first_value(column)
    if not isinstance(first, str):
        return None
    with _quiet_guess():
        return guess_datetime_format(first)


@contextmanager
def _quiet_guess() -> Iterator[None]:
    """pandas warns where the first value shows day first ('13/01/2024'), which it then
    reads right; the messages here say what was read where it matters."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Parsing dates in .* when dayfirst", UserWarning)
        yield


def _first_value(column: pd.Series) -> Any:
    filled = column.dropna()
    return _item(filled.iloc[0] if len(filled) else None)


def _item(value: Any) -> Any:
    """A NumPy scalar as the Python number it holds (shown as the file writes it)."""
    return value.item() if isinstance(value, np.generic) else value


def time_zone(column: pd.Series, time_format: str | None, time_unit: str | None) -> tzinfo | None:
    """The time zone the times of ``column`` are written in, which the forecast's times are
    given in: the column's own, or that of text with a UTC offset (``+01:00``); UTC where
    the rows mix offsets (the clocks changed) or mix them with times without one; None for
    times without a zone and for numbers (counted in UTC: the forecast's times are too).
    """
    if isinstance(column.dtype, pd.DatetimeTZDtype):
        return column.dt.tz
    if time_unit is not None or pd.api.types.is_datetime64_dtype(column):
        return None
    values = pd.Series(column.dropna().unique())
    if not len(values) or pd.api.types.is_numeric_dtype(values):
        return None
    with warnings.catch_warnings():  # pandas' word on mixed offsets: UTC below
        warnings.simplefilter("ignore")
        try:
            parsed = pd.to_datetime(values, format=time_format)
        except (ValueError, TypeError, OverflowError):
            return timezone.utc
    if isinstance(parsed.dtype, pd.DatetimeTZDtype):
        return parsed.dt.tz
    return None if pd.api.types.is_datetime64_dtype(parsed) else timezone.utc
