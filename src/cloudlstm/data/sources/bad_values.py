"""Channel cells of a long-format table that cannot be read as numbers.

Empty cells (text of blanks alone too) and pandas' missing-value markers (``NA``, ``NULL``,
``n/a``, ``nan``, ...: :data:`NA_TEXTS`, blanks around them aside) are gaps, filled later like
missing rows, however the table came: pandas' CSV reader makes the markers empty, and the
same text in a Parquet or HDF5 file's text column or a DataFrame given to the forecaster
(``forecast()``, ``update()``) is read alike here. Anything else that is not a finite
number, such as text (``"12 ug/m3"``, ``"error"``) or an infinity (``inf``, or a value beyond
float32), is a *bad value*: by default an error naming its row (as the user finds it: a
file's line or time, a table's index label, :func:`index_row_names`) and column
(``bad_values="error"``), or, with ``bad_values="warn"``, a warning that counts them and names
the first few, after which they count as missing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from pandas._libs.parsers import STR_NA_VALUES
from pandas.api.types import infer_dtype

from cloudlstm.errors import UserError

__all__ = [
    "BAD_VALUE_MODES",
    "NA_TEXTS",
    "RowNames",
    "channel_values",
    "check_mode",
    "common_unit",
    "filled_text",
    "flags",
    "holds_no_reading",
    "index_row_names",
    "mostly_numeric",
    "numbers_among_text",
    "refuse_flag_points",
    "refuse_unreal",
    "row_names_through",
    "row_word",
    "written_cells",
]

log = logging.getLogger(__name__)

BAD_VALUE_MODES = ("error", "warn")
# the texts pandas' CSV reader takes for a missing value: "NA", "n/a", "null", "NaN", ...
NA_TEXTS = frozenset(STR_NA_VALUES)
SHOWN = 5  # bad cells named in a message
# the names of a table's rows at some positions (sorted), as messages give them
RowNames = Callable[[list[int]], Sequence[str]]


def check_mode(bad_values: str) -> str:
    """``bad_values`` if it is a known mode, else a UserError listing them."""
    if bad_values not in BAD_VALUE_MODES:
        raise UserError(f"bad_values={bad_values!r}: use one of {list(BAD_VALUE_MODES)}.")
    return bad_values


def mostly_numeric(series: pd.Series) -> bool:
    """A numeric column, or a text column whose non-empty cells are mostly numbers: a channel
    with a few bad cells rather than a label column such as a station name. A column of
    True/False (:func:`flags`) is none, though pandas counts it as numbers."""
    if flags(series):
        return False
    if pd.api.types.is_numeric_dtype(series):
        return True
    filled = series[written_cells(series)]
    return len(filled) > 0 and pd.to_numeric(filled, errors="coerce").notna().mean() > 0.5


def filled_text(series: pd.Series) -> pd.Series:
    """The cells of the column that hold something (:func:`written_cells`: not empty, blanks,
    nor a missing-value text such as ``n/a``), as text: those a check of how a text
    column writes its numbers reads, a Parquet file's ``n/a`` left out as a CSV file's is."""
    return series[written_cells(series)].astype(str)


def holds_no_reading(series: pd.Series) -> bool:
    """Whether every cell of the column is empty: NaN or None, text of blanks alone, or a
    missing-value text (:data:`NA_TEXTS`), as :func:`channel_values` reads each cell; a
    column of ``n/a`` is as empty as one of NaN."""
    return not written_cells(series).any()


def flags(series: pd.Series) -> bool:
    """Whether the column holds True/False alone (``bool``, or ``object`` where some cells
    are empty): a label such as "holiday" or "sensor_ok", which a user forecasts only by
    naming it."""
    if pd.api.types.is_bool_dtype(series):
        return True
    if pd.api.types.is_numeric_dtype(series):
        return False
    filled = series.dropna()
    # stops at the first cell that is no bool: a column of text labels costs one cell
    return len(filled) > 0 and all(isinstance(cell, bool | np.bool_) for cell in filled)


def refuse_flag_points(
    frame: pd.DataFrame, columns: Sequence[str], channel: str, what: str
) -> None:
    """Refuse the point columns ``columns`` of a wide table ``frame`` that hold True/False
    alone (:func:`flags`): its cells are readings of its one ``channel``, which True/False
    are not, though pandas reads them as 1/0 (a sensor's status column joined by mistake).
    A long-format table's True/False column is read as 0/1 only where the user names it as
    a channel or covariate (docs/data.md); a wide table names none, so none is taken so.

    Raises:
        UserError: naming the columns and the fix.
    """
    flagged = [str(c) for c in columns if flags(frame[c])]
    if not flagged:
        return
    more = f" ... ({len(flagged)} in all)" if len(flagged) > SHOWN else ""
    raise UserError(
        f"{what}: point column(s) {', '.join(flagged[:SHOWN])}{more} hold True/False, not "
        f"readings of {channel!r}: write each point's readings as numbers (0 and 1 where "
        "they are yes/no), or leave those columns out."
    )


# pandas' kinds of a column of objects (infer_dtype) whose cells may be complex numbers,
# or True/False among others; every other kind holds neither, or True/False alone (flags)
_MIXED_KINDS = frozenset({"mixed", "mixed-integer", "complex"})
# the types of a cell of complex numbers, or of True/False, as pandas and numpy make them
_COMPLEX_TYPES = frozenset({complex, np.complex64, np.complex128, np.clongdouble})
_BOOL_TYPES = frozenset({bool, np.bool_})


def refuse_unreal(
    series: pd.Series, col: str, what: str, name: Callable[[int], str] | None = None
) -> None:
    """Refuse a reading, coordinate or point column that holds complex numbers (a complex
    column of a DataFrame or an HDF5 file, an FFT's output say), whose imaginary parts
    pandas would drop with a mere warning, or True/False among numbers (``[1.5, True,
    2.0]`` in a column of objects) or text (``[1.5, True, "abc"]``: the line names a text
    cell too), which pandas reads as 1 and 0. A column of True/False
    alone is :func:`flags`', which each caller refuses or reads as 0/1 by its rule.
    ``name(row)`` names a row by its position (None: ``data row`` and the position).

    Raises:
        UserError: naming the column, a cell and its row, and the fix.
    """
    complex_cells, bool_cells = _odd_cells(series)
    if not complex_cells.any() and not bool_cells.any():
        return
    named = name or (lambda r: f"data row {r}")
    if complex_cells.any():
        imaginary = complex_cells & series.map(_imaginary).to_numpy(dtype=bool)
        row = int(np.flatnonzero(imaginary if imaginary.any() else complex_cells)[0])
        raise UserError(
            f"{what}: column {col!r} holds complex numbers (e.g. {_plain(series.iloc[row])!r} "
            f"at {named(row)}), whose imaginary parts would be lost: give real numbers (the "
            "real part or the magnitude, whichever the column means)."
        )
    others = written_cells(series) & ~bool_cells
    if not others.any():
        return  # True/False alone: flags
    rows = np.flatnonzero(bool_cells)
    among, text = _beside_true_false(series, others, named)
    raise UserError(
        f"{what}: column {col!r} holds True/False among {among} (e.g. "
        f"{_plain(series.iloc[int(rows[0])])!r} at {named(int(rows[0]))}; {len(rows)} such "
        f"cell(s)), which would read as 1 and 0{text}: write every cell as a number, or leave "
        "it empty where there is no reading."
    )


def _beside_true_false(
    series: pd.Series, others: np.ndarray, named: Callable[[int], str]
) -> tuple[str, str]:
    """What the column's other filled cells ``others`` are, as :func:`refuse_unreal` says
    it (``numbers``, ``text`` or ``numbers and text``; text that reads as a number, "1.5",
    is a number), and the part of its line that names a text cell (empty where none is):
    a column of True/False among words is no column of numbers with a few flags."""
    numbers = pd.to_numeric(series[others], errors="coerce").notna().to_numpy()
    if numbers.all():
        return "numbers", ""
    row = int(np.flatnonzero(others)[np.flatnonzero(~numbers)[0]])
    text = f", and text that is no number (e.g. {_plain(series.iloc[row])!r} at {named(row)})"
    return ("numbers and text" if numbers.any() else "text"), text


def _odd_cells(series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``(R,)`` twice: which cells are complex numbers, and which True/False, in a column
    that may hold them among others (:data:`_MIXED_KINDS`); all False in any other."""
    none = np.zeros(len(series), dtype=bool)
    if pd.api.types.is_complex_dtype(series):
        return ~none, none
    if series.dtype != object or infer_dtype(series, skipna=True) not in _MIXED_KINDS:
        return none, none  # at C speed: a column of numbers or text costs no cell-by-cell look
    cells = series.to_numpy()
    kinds = set(map(type, cells))  # the types at C speed: numbers beside text hold neither
    if not kinds & (_COMPLEX_TYPES | _BOOL_TYPES):
        return none, none
    complex_cells = np.fromiter((type(c) in _COMPLEX_TYPES for c in cells), bool, len(cells))
    bool_cells = np.fromiter((type(c) in _BOOL_TYPES for c in cells), bool, len(cells))
    return complex_cells, bool_cells


def _imaginary(cell: Any) -> bool:
    """Whether a cell is a complex number with an imaginary part (NaN's is none)."""
    return isinstance(cell, complex | np.complexfloating) and bool(cell.imag)


# a number and the unit after it in the same cell: "10.5 ppb", "-3e2 km/h", "12%", "4 °C";
# a unit begins with a letter or a sign of one, so that a time ("10:00") is none
_NUMBER_AND_UNIT = r"^\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*((?:[^\W\d_]|[%°‰]).*?)\s*$"
# the share of a column's filled cells that must carry the same unit for it to be one
_UNIT_SHARE = 0.9


def common_unit(series: pd.Series) -> str | None:
    """The unit that (nearly) every filled cell of a text column writes after its number
    (``"10.5 ppb"``: ``"ppb"``), or None: a channel with its unit in each cell, where a
    label column (a station's address, ``"12 Main St"``) has no one text after its numbers.
    Missing-value texts (``n/a``) are no cells of it, as they are none of a CSV file's."""
    filled = filled_text(series)
    units = filled.str.extract(_NUMBER_AND_UNIT, expand=False).dropna()
    if not len(units):
        return None
    counts = units.value_counts()
    return str(counts.index[0]) if counts.iloc[0] >= _UNIT_SHARE * len(filled) else None


# a number whose digits are grouped by thousands: "17,675", "1'234'567.5"; a space groups too
# in some locales, but is left out: "12 345" is as likely a street number and a postcode
_THOUSANDS = r"^\s*[-+]?\d{1,3}(?:[,'\u00a0\u202f]\d{3})+(?:\.\d+)?\s*$"
# the share of a text column's filled cells that, read as numbers, make it a channel
_NUMBERS_SHARE = 0.25


def numbers_among_text(series: pd.Series) -> tuple[float, str | None, str] | None:
    """A text column (not :func:`mostly_numeric`) whose filled cells are numbers in at least
    :data:`_NUMBERS_SHARE` of them, once numbers written with thousands separators count:
    a channel written so (``"17,675"``) or with text for missing readings (``"--"``), not a
    label. Returns the share of numbers, a cell with thousands separators (None: none) and
    a text cell; None for a label column. Empty cells and missing-value texts (``n/a``)
    count for neither, however the table came (:func:`filled_text`)."""
    filled = filled_text(series)
    if not len(filled):
        return None
    plain = pd.to_numeric(filled, errors="coerce").notna()
    grouped = filled.str.match(_THOUSANDS) & ~plain
    numbers = plain | grouped
    if numbers.mean() < _NUMBERS_SHARE:
        return None
    text = filled[~numbers]
    return (
        float(numbers.mean()),
        str(filled[grouped].iloc[0]) if grouped.any() else None,
        str(text.iloc[0]) if len(text) else "",
    )


def row_word(index: pd.Index) -> str:
    """How messages name a row of a user's table with ``index``: ``data row`` and its
    number from 0 where the index numbers the rows so (a table read from a file, or built
    with the default index), else ``row with index`` and its label, which ``.loc`` finds
    (a slice of a larger table keeps that table's labels, not its own positions)."""
    return "data row" if index.equals(pd.RangeIndex(len(index))) else "row with index"


def index_row_names(index: pd.Index) -> RowNames:
    """How messages name the rows of a user's table with ``index`` by their positions: by
    :func:`row_word` and their index labels (``data row 19``, ``row with index 5019``)."""
    word = row_word(index)
    return lambda positions: [f"{word} {_plain(index[r])}" for r in positions]


def row_names_through(names: RowNames, origin: np.ndarray) -> RowNames:
    """How messages name the rows of a table made from another, whose row ``r`` comes from
    that table's row ``origin[r]`` (a position; ``origin (R,)``), as ``names`` names those:
    a part of it, or its cells melted into rows. Each row of the other table is asked for
    once, in order (a file's lines are read for them)."""

    def named(positions: list[int]) -> list[str]:
        wanted = [int(origin[r]) for r in positions]
        distinct = sorted(set(wanted))
        called = dict(zip(distinct, names(distinct), strict=True))
        return [called[r] for r in wanted]

    return named


def channel_values(
    df: pd.DataFrame,
    cols: Sequence[str],
    what: str,
    bad_values: str = "error",
    row_names: RowNames | None = None,
    option: str = "data.source.bad_values",
) -> np.ndarray:
    """The channel columns ``cols`` of ``df`` as ``(R, C)`` float32, NaN where empty.

    ``option``: the one that sets ``bad_values``, as the refusal names it (``bad_values``
    for the Python API).

    ``row_names``: how the messages name the rows of ``df`` at some positions (sorted),
    asked for only those shown: as the user finds them, in a file (its time, or line
    number: :func:`~cloudlstm.data.sources.tables.file_row_names`) or a table of which
    ``df`` may be a part (:func:`index_row_names`); by default ``data row`` and the
    position.

    Raises:
        UserError: ``bad_values="error"`` and some cells are bad (see the module docstring);
            the message counts them and names the first few ``(row, column, cell)``. Or,
            whatever ``bad_values``, a column of complex numbers or of True/False among
            numbers (:func:`refuse_unreal`): no cell of it is a reading to count as missing.
    """
    values = np.empty((len(df), len(cols)), dtype=np.float32)

    def names(positions: list[int]) -> list[str]:
        if row_names is not None:
            return list(row_names(positions))
        return [f"data row {r}" for r in positions]

    def name(r: int) -> str:
        return names([r])[0]

    # by position, named once sorted: index labels may not sort (text beside numbers)
    shown: list[tuple[int, str, Any]] = []
    count = 0
    for j, col in enumerate(cols):  # column by column: large files stay affordable
        series = df[col]
        refuse_unreal(series, str(col), what, name)
        parsed = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        with np.errstate(over="ignore"):  # a finite float64 beyond float32 becomes inf
            column = parsed.astype(np.float32)
        _refuse_below_float32(parsed, str(col), what, name)
        bad = np.isinf(column) | (np.isnan(parsed) & written_cells(series))
        bad_rows = np.flatnonzero(bad)
        count += len(bad_rows)
        shown += [(int(r), str(col), _plain(series.iloc[r])) for r in bad_rows[:SHOWN]]
        column[bad_rows] = np.nan
        values[:, j] = column
    if count:
        first = sorted(shown)[:SHOWN]
        positions = sorted({r for r, _, _ in first})  # each row named once: lines are read
        called = dict(zip(positions, names(positions), strict=True))
        named = [(called[r], col, cell) for r, col, cell in first]
        _report(count, named, what, check_mode(bad_values), option)
    return values


# the smallest normal float32: a reading below it (but 0) is lost when read as float32
_FLOAT32_TINY = float(np.finfo(np.float32).tiny)


def _refuse_below_float32(
    parsed: np.ndarray, col: str, what: str, name: Callable[[int], str]
) -> None:
    """Refuse a column with readings too small for float32 (``2e-199``): read, they become
    0, and the channel was then said not to vary, the data blamed for the reading.

    Raises:
        UserError: naming the column, a cell, and the fix (a larger unit).
    """
    with np.errstate(invalid="ignore"):
        lost = (parsed != 0) & (np.abs(parsed) < _FLOAT32_TINY)
    if lost.any():
        row = int(np.flatnonzero(lost)[0])
        raise UserError(
            f"{what}: column {col!r} holds values too small to keep (e.g. {parsed[row]:g} at "
            f"{name(row)}; {int(lost.sum())} in all): below "
            f"{_FLOAT32_TINY:.3g}, which float32 keeps, they would read as 0. Give "
            "the channel in a smaller unit, so that its numbers are larger."
        )


def written_cells(series: pd.Series) -> np.ndarray:
    """``(R,)`` whether each cell holds something: not NaN or None, not text of blanks
    alone (``""`` in a DataFrame built from records, ``" "`` in a CSV), which is as empty
    as an empty cell, and not one of pandas' missing-value texts (:data:`NA_TEXTS`, blanks
    around it aside), which a CSV file's reader makes empty: ``n/a`` in a DataFrame or a
    Parquet file is as missing as in a CSV file."""
    present = series.notna().to_numpy().copy()
    if not pd.api.types.is_numeric_dtype(series):  # object or pandas' str dtype
        empty = series.map(lambda cell: isinstance(cell, str) and _empty_text(cell))
        present &= ~empty.to_numpy(dtype=bool)
    return present


def _empty_text(cell: str) -> bool:
    """Whether a text cell says no reading: blanks alone, or a missing-value text."""
    text = cell.strip()
    return not text or text in NA_TEXTS


def _report(
    count: int, shown: list[tuple[str, str, Any]], what: str, mode: str, option: str
) -> None:
    """Warn of or refuse ``count`` bad cells, naming ``shown``: ``(row as named, column,
    cell)``, and ``option`` as the one that lets them in."""
    cells = "; ".join(f"{row}, column {col!r}: {cell!r}" for row, col, cell in shown)
    more = f" (first {len(shown)})" if count > len(shown) else ""
    found = f"{what}: {count} channel value(s) are not finite numbers{more}: {cells}."
    if mode == "warn":
        log.warning("%s They count as missing (bad_values=warn).", found)
        return
    fix = f"{option}=warn"
    if option == "data.source.bad_values":  # a source's option, named as a function takes it too
        fix = "bad_values=warn (data.source.bad_values=warn)"
    raise UserError(
        f"{found} Leave missing readings empty (or NA) and remove units or text from the cells, "
        f"or set {fix} to treat them as missing."
    )


def _plain(cell: Any) -> Any:
    """A numpy scalar as a Python one, so messages show ``inf`` and not ``np.float64(inf)``."""
    return cell.item() if isinstance(cell, np.generic) else cell
