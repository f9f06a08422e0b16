"""Times, CSV dialects and file formats as users' files have them.

Day-first dates, Unix times and dates written as digits are read with
``data.source.time_format`` / ``time_unit`` (numbers without a unit are refused, never read
as nanoseconds); semicolon- and tab-separated files, with decimal commas, read like comma
files. Each reading is compared with the same data written the ordinary way.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import one_line, run_python

from cloudlstm.data.pipeline import forecast_input
from cloudlstm.data.pipeline.datamodule import PointCloudDataModule
from cloudlstm.data.pipeline.forecast_input import build_input
from cloudlstm.data.sources.long_format import LongFormatSource
from cloudlstm.data.sources.tables import (
    check_columns,
    csv_dialect,
    line_numbers,
    pivot_long,
    read_table,
)
from cloudlstm.data.sources.times import check_time_reading, parse_times
from cloudlstm.data.sources.wide_table import WideTableSource, read_positions
from cloudlstm.data.spec import DataSpec
from cloudlstm.errors import UserError

T, N = 40, 3
STAMPS = pd.date_range("2024-01-01", periods=T, freq="h")
UNIX = (STAMPS - pd.Timestamp("1970-01-01")) // pd.Timedelta("1s")


def table() -> pd.DataFrame:
    """Rows ``timestamp, id, x, y, v`` of N points over T hourly steps (ISO dates)."""
    rng = np.random.default_rng(0)
    rows = [
        [STAMPS[t], f"p{p}", 0.5 + p, 1.25 * p, rng.normal(10, 3)]
        for t in range(T)
        for p in range(N)
    ]
    return pd.DataFrame(rows, columns=["timestamp", "id", "x", "y", "v"])


def stream_of(path: Path, **kwargs):
    return LongFormatSource(path, **kwargs).load()


def assert_same_stream(a, b) -> None:
    np.testing.assert_array_equal(a.timestamps, b.timestamps)
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.coords, b.coords)
    assert a.point_ids == b.point_ids


@pytest.fixture
def reference(tmp_path):
    path = tmp_path / "iso.csv"
    table().to_csv(path, index=False)
    return stream_of(path)


# ---------------------------------------------------------------------- times
def test_day_first_dates_name_the_row_and_the_format_that_reads_them(tmp_path, reference):
    """From 12 January: the first row reads month first, and 13/01 (row 24 * N) cannot."""
    shift = pd.Timedelta("11D")
    df = table().assign(timestamp=lambda d: (d["timestamp"] + shift).dt.strftime("%d/%m/%Y %H:%M"))
    df.to_csv(path := tmp_path / "day_first.csv", index=False)
    with pytest.raises(UserError) as err:
        stream_of(path)
    assert str(err.value) == (
        f"Cannot parse the timestamps in column 'timestamp' of file {path}: line {24 * N + 2}, "
        "'13/01/2024 00:00', does not match the format '%m/%d/%Y %H:%M' of the first row "
        "('12/01/2024 00:00'). If the dates are day first, give "
        "data.source.time_format='%d/%m/%Y %H:%M'."
    )
    stream = stream_of(path, time_format="%d/%m/%Y %H:%M")
    np.testing.assert_array_equal(stream.timestamps, reference.timestamps + shift.to_timedelta64())
    np.testing.assert_array_equal(stream.values, reference.values)


def test_dates_read_month_first_by_guess_are_said(caplog):
    """No row tells 1 February from 2 January: the reading pandas guesses is said."""
    dates = pd.Series(["01/01/2024 00:00", "02/01/2024 00:00"])
    with caplog.at_level("WARNING", logger="cloudlstm.data.sources.times"):
        read = parse_times(dates, "col")
    np.testing.assert_array_equal(read, pd.to_datetime(["2024-01-01", "2024-02-01"]).to_numpy())
    (record,) = caplog.records
    assert record.getMessage() == (
        "col: read month first ('%m/%d/%Y %H:%M': '02/01/2024 00:00' is 2024-02-01 00:00); "
        "if the dates are day first, give data.source.time_format='%d/%m/%Y %H:%M'."
    )
    caplog.clear()
    with caplog.at_level("WARNING", logger="cloudlstm.data.sources.times"):
        read = parse_times(dates, "col", time_format="%d/%m/%Y %H:%M")
        parse_times(pd.Series(["13/01/2024 00:00"]), "col")  # the first row says day first
        parse_times(pd.Series(["01/13/2024 00:00"]), "col")  # ... or month first
    np.testing.assert_array_equal(read, pd.to_datetime(["2024-01-01", "2024-01-02"]).to_numpy())
    assert not caplog.records


@pytest.mark.parametrize(
    ("values", "kwargs", "message"),
    [
        (
            ["2024-01-01 00:00", "2024-01-01 00:00:30"],
            {},
            r"data row 1, '2024-01-01 00:00:30', "
            r"does not match the format '%Y-%m-%d %H:%M' of the first row .* one format",
        ),
        (
            ["2024-01-01", "garbage"],
            {},
            r"data row 1, 'garbage', is not a date/time \(the first "
            r"row: '2024-01-01'\); correct or remove that row\.$",
        ),
        (
            ["2024-01-01 00:00"],
            {"time_format": "%Y"},
            r"data row 0, '2024-01-01 00:00', does "
            r"not match data\.source\.time_format='%Y': correct the format",
        ),
        (
            ["2024-01-01 00:00"],
            {"time_unit": "s"},
            r"data row 0 holds '2024-01-01 00:00', not "
            r"a number of s since 1970-01-01",
        ),
        ([1e30], {"time_unit": "s"}, r"beyond the dates pandas holds"),
    ],
    ids=["mixed-formats", "not-a-date", "wrong-format", "text-with-unit", "beyond-2262"],
)
def test_unreadable_times_name_row_value_and_setting(values, kwargs, message):
    with pytest.raises(UserError, match=message):
        parse_times(pd.Series(values), "col", **kwargs)


def test_numbers_are_refused_without_a_unit_and_read_with_one(tmp_path, reference):
    """pandas would read 1704067200 as nanoseconds: hourly data in seconds would become a
    stream of 3.6-microsecond steps in 1970."""
    df = table().assign(timestamp=np.repeat(UNIX, N))
    df.to_csv(path := tmp_path / "unix.csv", index=False)
    with pytest.raises(
        UserError,
        match=r"holds numbers \(e\.g\. 1704067200\), not dates: say "
        r"what they count with data\.source\.time_unit=s",
    ):
        stream_of(path)
    assert_same_stream(stream_of(path, time_unit="s"), reference)
    df.assign(timestamp=df["timestamp"] * 1000).to_csv(path, index=False)
    assert_same_stream(stream_of(path, time_unit="ms"), reference)


def test_unix_times_in_the_wrong_unit_are_refused_not_wrapped_to_other_dates(tmp_path):
    """pandas 3 reads milliseconds taken for seconds (the year 55969) in microseconds without
    a word; cast to nanoseconds they wrapped around to dates in 2190-2202, and a run trained."""
    df = table().assign(timestamp=np.repeat(UNIX * 1000, N))
    df.to_csv(path := tmp_path / "unix_ms.csv", index=False)
    with pytest.raises(UserError) as err:
        stream_of(path, time_unit="s")
    assert str(err.value) == (
        f"column 'timestamp' of file {path}: line 2 holds {UNIX[0] * 1000}, and as many s "
        "since 1970-01-01 are beyond the dates pandas holds (1677-2262): are the numbers "
        "counted in s (time_unit=s)? Counted in ms they run from 2024-01-01 00:00 to "
        "2024-01-02 15:00: give time_unit=ms if so."
    )


@pytest.mark.parametrize("typo", ["3024-01-01 02:00:00", "1024-01-01 02:00:00"])
def test_a_date_beyond_2262_is_named_by_its_row(tmp_path, typo):
    """It was read, then wrapped around: the grid check named another row and a grid from
    1854."""
    df = table().assign(timestamp=lambda d: d["timestamp"].dt.strftime("%Y-%m-%d %H:%M:%S"))
    df.loc[12, "timestamp"] = typo
    df.to_csv(path := tmp_path / "typo.csv", index=False)
    with pytest.raises(UserError) as err:
        stream_of(path)
    assert str(err.value) == (
        f"column 'timestamp' of file {path}: line 14, {typo!r}, is beyond the dates "
        "pandas holds (1677-2262): correct or remove that row."
    )


def test_a_forecast_history_dated_beyond_2262_is_refused():
    history = table()[lambda d: d["id"].isin(["p0", "p1"])].reset_index(drop=True)
    history.loc[3, "timestamp"] = pd.Timestamp("3024-01-01").as_unit("us")
    with pytest.raises(UserError, match=r"data row 3, '3024-01-01 00:00:00', is beyond"):
        build_input(history, spec())
    unix = history.assign(timestamp=np.repeat(UNIX * 1000, 2))
    with pytest.raises(UserError, match=r"are the numbers counted in s .* give time_unit=ms"):
        build_input(unix, spec(time_unit="s"))


def test_dates_written_as_digits_read_with_their_format(tmp_path, reference):
    df = table().assign(timestamp=np.repeat(STAMPS.strftime("%Y%m%d%H").astype(int), N))
    df.to_csv(path := tmp_path / "digits.csv", index=False)
    with pytest.raises(UserError, match="holds numbers .*time_format='%Y%m%d'"):
        stream_of(path)
    assert_same_stream(stream_of(path, time_format="%Y%m%d%H"), reference)


@pytest.mark.parametrize(
    ("fmt", "unit", "message"),
    [
        (None, "h", r"time_unit='h': give what .* one of \['s', 'ms', 'us', 'ns'\]"),
        ("dd/mm/yyyy", None, r"time_format='dd/mm/yyyy' has no strftime code"),
        ("%Y", "s", r"holds dates \(time_format\) or numbers \(time_unit\)"),
    ],
)
def test_time_settings_are_checked_when_the_source_is_made(fmt, unit, message):
    with pytest.raises(UserError, match=message):
        check_time_reading(fmt, unit)
    with pytest.raises(UserError, match=message):
        LongFormatSource("any.csv", time_format=fmt, time_unit=unit)


def test_the_time_settings_key_the_cache_and_leave_old_keys_alone(tmp_path):
    plain = LongFormatSource(tmp_path / "a.csv")
    assert "time_unit" not in plain.config() and "time_format" not in plain.config()
    assert LongFormatSource(tmp_path / "a.csv", time_unit="s").config()["time_unit"] == "s"


def test_a_wide_table_reads_its_time_column_in_unix_time(tmp_path):
    wide = table().pivot(index="timestamp", columns="id", values="v")
    positions = table().drop_duplicates("id")[["id", "x", "y"]]
    positions.to_csv(tmp_path / "pos.csv", index=False)
    wide.rename_axis("time").reset_index().to_csv(tmp_path / "dated.csv", index=False)
    wide.set_axis(UNIX, axis=0).rename_axis("time").reset_index().to_csv(
        tmp_path / "unix.csv", index=False
    )
    dated = WideTableSource(tmp_path / "dated.csv", tmp_path / "pos.csv").load()
    with pytest.raises(UserError, match="holds numbers"):
        WideTableSource(tmp_path / "unix.csv", tmp_path / "pos.csv").load()
    unix = WideTableSource(tmp_path / "unix.csv", tmp_path / "pos.csv", time_unit="s").load()
    assert_same_stream(unix, dated)
    wide.to_csv(tmp_path / "untimed.csv", index=False)
    untimed = WideTableSource(
        tmp_path / "untimed.csv", tmp_path / "pos.csv", start="2024-01-01", step="1h", time_unit="s"
    )
    with pytest.raises(UserError, match=r"time_unit='s', but .* has no time column to read"):
        untimed.load()


# ---------------------------------------------------------------------- forecasting
def spec(**time_reading) -> DataSpec:
    """Two points ``p0``, ``p1`` of one channel ``v``, hourly, 4 input steps."""
    sized = DataSpec.sized(num_points=2, num_channels=1, input_steps=4, output_steps=1,
                           steps_per_day=24)  # fmt: skip
    return replace(
        sized, channel_names=["v"], value_channels=["v"], point_ids=["p0", "p1"], **time_reading
    )


def test_a_forecast_reads_its_history_as_the_training_file_was_read(tmp_path):
    source = LongFormatSource(tmp_path / "unix.csv", time_unit="s")
    table().assign(timestamp=np.repeat(UNIX, N)).to_csv(source.path, index=False)
    dm = PointCloudDataModule(source, input_steps=4, output_steps=1, batch_size=4)
    dm.setup()
    assert DataSpec.from_datamodule(dm).time_unit == "s"

    dated = table()[lambda d: d["id"].isin(["p0", "p1"])]
    unix = dated.assign(timestamp=np.repeat(UNIX, 2))
    expected = build_input(dated, spec())
    window = build_input(unix, spec(time_unit="s"))
    np.testing.assert_array_equal(window.x, expected.x)
    assert window.last_time == expected.last_time == np.datetime64(STAMPS[-1])
    with pytest.raises(UserError, match=r"holds numbers .*not dates: say what they count with "
                       r"reading=TimeReading\(time_unit='s'\)"):  # fmt: skip
        build_input(unix, spec())


def test_times_already_datetimes_are_read_as_such_in_a_run_of_unix_times():
    """A run trained on Unix times reads a history whose times are datetimes (a DataFrame's,
    or the stream Forecaster.update keeps and forecast() reads) as they are: they were
    read as nanoseconds counted in seconds, and refused as beyond 2262."""
    dated = table()[lambda d: d["id"].isin(["p0", "p1"])]
    window = build_input(dated, spec(time_unit="s"))
    np.testing.assert_array_equal(window.x, build_input(dated, spec()).x)
    assert window.last_time == np.datetime64(STAMPS[-1])
    zoned = dated.assign(timestamp=dated["timestamp"].dt.tz_localize("UTC"))
    assert build_input(zoned, spec(time_unit="s")).last_time == np.datetime64(STAMPS[-1])


def test_a_history_makes_each_distinct_point_id_text_once(monkeypatch):
    """Once per row, a week of METR-LA's 207 sensors (400,000 rows) spent seconds of every
    forecast on it; the ids read as before: 7.0 is 7, 007 stays 007."""
    calls = []
    real = forecast_input.id_text
    monkeypatch.setattr(forecast_input, "id_text", lambda value: calls.append(value) or real(value))
    history = table()[lambda d: d["id"].isin(["p0", "p1"])].reset_index(drop=True)
    history["id"] = history["id"].map({"p0": 7.0, "p1": "007"}).astype(object)
    parsed = forecast_input.parse_history(history, spec(), "the history")
    assert parsed["id"].tolist() == ["7", "007"] * T
    assert len(calls) == 2


def test_a_history_in_other_units_is_warned_of(caplog):
    """Readings 1000 times the training's (Beijing's CO in the files' µg/m³ for a run
    trained on mg/m³) lie too near one another to be absurd: they were forecast from in
    silence."""
    reference = {
        "max_abs_z": 1e4,
        "channels": {"v": {"median": 10.0, "spread": 3.0, "range": None}},
    }
    # the table's positions, as training would store them: not another warning's subject
    info = replace(spec(), value_reference=reference, coords=[[0.5, 0.0], [1.5, 1.25]])
    history = table()[lambda d: d["id"].isin(["p0", "p1"])].reset_index(drop=True)
    with caplog.at_level("WARNING", logger="cloudlstm.data.pipeline.forecast_input"):
        build_input(history, info)
        assert not caplog.records  # the training's units
        last = history["timestamp"] == STAMPS[-1]
        build_input(history.assign(v=history["v"].where(~last, history["v"] * 1000)), info)
    (line,) = [r.getMessage() for r in caplog.records]
    assert re.match(
        rf"the history: its 'v' readings at {STAMPS[-1]} are typically [\d,]+ times the training "
        r"data's \(.*; 1 of the 4 steps read so\): are they in other units\?",
        line,
    )


def test_old_descriptions_read_without_time_settings():
    state = spec().to_dict()
    del state["time_format"], state["time_unit"]
    assert DataSpec.from_dict(state).time_unit is None


# ---------------------------------------------------------------------- CSV dialects
@pytest.mark.parametrize(
    ("name", "sep", "decimal"),
    [("semi.csv", ";", "."), ("semi_comma.csv.gz", ";", ","), ("tab.tsv", "\t", ",")],
)
def test_semicolon_and_tab_files_read_like_comma_files(tmp_path, reference, name, sep, decimal):
    table().to_csv(path := tmp_path / name, index=False, sep=sep, decimal=decimal)
    expected = {"sep": sep, **({"decimal": ","} if decimal == "," else {})}
    assert csv_dialect(path) == expected
    assert_same_stream(stream_of(path), reference)


def thousands(rows: int) -> list[str]:
    """Counts 800-3000 as a spreadsheet writes them with thousands separators: ``2,585``
    beside ``988``."""
    return [f"{v:,}" for v in np.random.default_rng(3).integers(800, 3000, rows)]


def wide_counts(tmp_path: Path, sep: str) -> Path:
    """A wide table of :func:`thousands`, with its positions file ``pos.csv``."""
    wide = table().pivot(index="timestamp", columns="id", values="v")
    wide = wide.apply(lambda column: thousands(len(column)))
    table().drop_duplicates("id")[["id", "x", "y"]].to_csv(tmp_path / "pos.csv", index=False)
    wide.rename_axis("time").reset_index().to_csv(path := tmp_path / "counts.csv", sep=sep,
                                                   index=False)  # fmt: skip
    return path


@pytest.mark.parametrize(("sep", "name"), [("\t", "tabs"), (";", "semicolons")])
def test_thousands_separators_are_refused_not_read_as_decimal_commas(tmp_path, sep, name):
    """2,585 was read as 2.585 beside 988: values 1000 times off, with an INFO line alone."""
    path = wide_counts(tmp_path, sep)
    cell = next(c for c in pd.read_csv(path, sep=sep).iloc[:, 1:].to_numpy().ravel() if "," in c)
    with pytest.raises(UserError) as err:
        WideTableSource(path, tmp_path / "pos.csv").load()
    assert str(err.value) == (
        f"The wide table {path} (columns separated by {name}) writes numbers such as "
        f"{cell!r}, which read as {cell.replace(',', '')} with a thousands separator or as "
        f"{cell.replace(',', '.')} with a decimal comma, and no cell of its first rows tells "
        f"which: write the numbers without thousands separators ({cell.replace(',', '')}), or "
        f"their decimals with a point ({cell.replace(',', '.')})."
    )


def test_thousands_separators_are_refused_in_points_and_positions_files(tmp_path):
    counts = table().assign(v=lambda d: thousands(len(d)))
    counts.to_csv(path := tmp_path / "counts.csv", sep="\t", index=False)
    with pytest.raises(UserError, match=r"^The long-format file .* writes numbers such as '\d,"):
        stream_of(path)
    positions = pd.DataFrame({"id": ["p0", "p1"], "x": ["34,154", "1,250"], "y": [1, 2]})
    positions.to_csv(path := tmp_path / "pos.csv", sep=";", index=False)
    with pytest.raises(UserError, match=r"^The positions file .* such as '34,154', which read "
                       r"as 34154 with a thousands separator or as 34\.154"):  # fmt: skip
        read_positions(path)


def test_decimal_commas_that_cannot_be_thousands_separators_read_once_said(tmp_path, caplog):
    """A comma after a leading 0, or before other than 3 digits, is a decimal comma; the
    INFO line saying so was written twice for a wide table (its header is read apart)."""
    wide = pd.DataFrame({"time": STAMPS[:3], "p0": ["1,250", "0,125", "988"],
                         "p1": ["12,5", "3,14159", "1234,567"]})  # fmt: skip
    wide.to_csv(path := tmp_path / "dec.csv", sep="\t", index=False)
    pd.DataFrame({"id": ["p0", "p1"], "x": [0, 1], "y": [1, 0]}).to_csv(
        tmp_path / "pos.csv", index=False
    )
    with caplog.at_level("INFO", logger="cloudlstm.data.sources.tables"):
        stream = WideTableSource(path, tmp_path / "pos.csv").load()
    np.testing.assert_allclose(
        stream.values[..., 0], [[1.25, 12.5], [0.125, 3.14159], [988, 1234.567]], rtol=1e-6
    )
    said = [r.getMessage() for r in caplog.records if "columns separated by" in r.getMessage()]
    assert said == [f"{path}: columns separated by '\\t', decimal commas."]


def test_a_positions_file_with_decimal_commas_reads_its_coordinates(tmp_path):
    positions = table().drop_duplicates("id")[["id", "x", "y"]]
    positions.to_csv(path := tmp_path / "pos.csv", index=False, sep=";", decimal=",")
    ids, coords = read_positions(path)
    assert ids == ["p0", "p1", "p2"]
    np.testing.assert_array_equal(coords, positions[["x", "y"]].to_numpy())


def test_a_comma_file_is_read_as_pandas_reads_it(tmp_path):
    """A comma in the header decides, whatever the cells hold ('a;b' text, '1,5' quoted)."""
    pd.DataFrame({"id": ["a;b"], "note": ["1,5"], "v": [1.0]}).to_csv(
        path := tmp_path / "comma.csv", index=False
    )
    assert csv_dialect(path) == {}
    assert csv_dialect(tmp_path / "absent.csv") == {}


@pytest.mark.parametrize(
    ("between", "sep", "lines"),
    [
        ('"  "', ",", [2, 3, 4]),  # a row: its one field quoted blanks
        ('""', ",", [2, 3, 4]),  # a row: its one field empty
        ("\f", ",", [2, 3, 4]),  # a row: a form feed is no blank to pandas
        ("\t", "\t", [2, 3, 4]),  # a row: a tab that separates two empty fields
        (" \t ", ";", [2, 4]),  # skipped: spaces and tabs alone
        ("   ", ",", [2, 4]),
    ],
    ids=["quoted-blanks", "quoted-empty", "form-feed", "tab-separated", "blanks", "spaces"],
)
def test_each_row_pandas_reads_is_named_by_its_line(tmp_path, between, sep, lines):
    """A line between two rows is named as a row where pandas reads one, and counted but
    skipped where pandas skips it: a quoted blank field and a form feed were taken for
    blanks alone, and the rows after them named by the line after their own."""
    path = tmp_path / "rows.csv"
    path.write_text(f"a{sep}b\n1{sep}2\n{between}\nx{sep}3\n")
    assert len(pd.read_csv(path, sep=sep)) == len(lines)
    assert line_numbers(path, list(range(len(lines))), sep=sep) == lines


def test_train_py_says_the_unit_in_one_line(tmp_path):
    table().assign(timestamp=np.repeat(UNIX, N)).to_csv(path := tmp_path / "unix.csv", index=False)
    proc = run_python(
        "train.py",
        "data=points",
        f"data.source.path={path}",
        f"hydra.run.dir={tmp_path / 'run'}",
        "logger=none",
        "debug=fdr",
    )
    assert one_line(proc) == (
        f"column 'timestamp' of file {path} holds numbers (e.g. 1704067200), not dates: say "
        "what they count with data.source.time_unit=s (seconds since 1970-01-01 UTC; or ms, "
        "us, ns), or, for dates written as digits (20240131), give their format: "
        "data.source.time_format='%Y%m%d'."
    )


def test_a_written_index_is_no_channel(tmp_path, reference, caplog):
    """``DataFrame.to_csv`` writes the row numbers as an unnamed first column by default:
    it was forecast and scored as a channel ``Unnamed: 0``."""
    table().to_csv(path := tmp_path / "indexed.csv")
    with caplog.at_level("INFO", logger="cloudlstm.data.sources.tables"):
        assert_same_stream(stream_of(path), reference)
    assert stream_of(path).channel_names == ["v"]
    assert "skipping column(s) without a name ['Unnamed: 0']" in caplog.text


# ---------------------------------------------------------------------- file formats
@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "data.xlsx",
            b"PK\x03\x04",
            r"^The long-format file .*data\.xlsx is an Excel workbook, "
            r"which is not read: save it as CSV \(\.csv, \.csv\.gz, \.\.\.\), Parquet",
        ),
        ("data.json", b"[]", r"is a JSON file, which is not read"),
        (
            "data.csv",
            "timestamp,id\n2024-01-01,caf\u00e9\n".encode("latin-1"),
            r"as CSV: it is not UTF-8 text \(a byte 0xe9\)\. Save it as UTF-8",
        ),
        (  # as PowerShell and "Unicode text" in spreadsheets write it: not a file cut short
            "data.csv",
            "timestamp,id\n2024-01-01,a\n".encode("utf-16"),
            r"as CSV: it is not UTF-8 text \(a byte 0xff\)\. Save it as UTF-8",
        ),
        ("data.parquet", b"PAR1 no parquet", r"^Cannot read the long-format file .* as Parquet: "),
    ],
    ids=["excel", "json", "latin-1", "utf-16", "broken-parquet"],
)
def test_a_file_that_is_no_readable_table_is_one_line(tmp_path, name, content, message):
    (path := tmp_path / name).write_bytes(content)
    with pytest.raises(UserError, match=message):
        stream_of(path)


def test_a_zip_of_several_files_is_one_line(tmp_path):
    with zipfile.ZipFile(path := tmp_path / "data.csv.zip", "w") as archive:
        archive.writestr("a.csv", "timestamp,id,x,y,v\n")
        archive.writestr("b.csv", "timestamp,id,x,y,v\n")
    with pytest.raises(UserError, match=r"as CSV: Multiple files found in ZIP file"):
        stream_of(path)


# ---------------------------------------------------------------------- point ids
def test_point_ids_are_kept_as_the_file_writes_them(tmp_path):
    """A number rewrote ids such as 007 (read as 7, the forecasts then named point 7);
    ids written as their numbers print keep the numeric order they always had."""
    padded = table().assign(id=table()["id"].map({"p0": "007", "p1": "010", "p2": "100"}))
    padded.to_csv(path := tmp_path / "padded.csv", index=False)
    assert stream_of(path).point_ids == ["007", "010", "100"]
    numbers = table().assign(id=table()["id"].map({"p0": "2", "p1": "10", "p2": "1"}))
    numbers.to_csv(path := tmp_path / "numbers.csv", index=False)
    assert stream_of(path).point_ids == ["1", "2", "10"]  # not "1", "10", "2"
    padded.to_parquet(path := tmp_path / "padded.parquet")
    assert stream_of(path).point_ids == ["007", "010", "100"]


def test_a_table_written_with_its_times_as_index_reads_them(tmp_path, reference):
    """``df.set_index("timestamp").to_parquet(...)`` (or ``.to_hdf``) keeps the times in
    the index, which the long-format source never looked at: "lacks column(s)
    ['timestamp'] ... Did you mean: 'timestamp' -> 'temp'?"."""
    indexed = table().assign(timestamp=pd.to_datetime(table()["timestamp"]))
    indexed = indexed.set_index("timestamp")
    indexed.to_parquet(tmp_path / "indexed.parquet")
    indexed.to_hdf(tmp_path / "indexed.h5", key="readings")
    for name in ("indexed.parquet", "indexed.h5"):
        assert_same_stream(stream_of(tmp_path / name), reference)


def test_a_forecast_history_keeps_its_ids_as_written(tmp_path):
    """predict.py read 007 as 7 (no such training point), and a DataFrame's whole-number
    float ids as '7.0'."""
    from cloudlstm.cli.predict import read_history

    padded = replace(spec(), point_ids=["007", "010"])
    dated = table()[lambda d: d["id"].isin(["p0", "p1"])]
    named = dated.assign(id=dated["id"].map({"p0": "007", "p1": "010"}))
    named.to_csv(path := tmp_path / "history.csv", index=False)
    window = build_input(read_history(path), padded)
    np.testing.assert_array_equal(window.x, build_input(dated, spec()).x)
    assert list(window.point_ids) == ["007", "010"]
    floats = dated.assign(id=dated["id"].map({"p0": 7.0, "p1": 10.0}))
    assert list(build_input(floats, replace(spec(), point_ids=["7", "10"])).point_ids) == [
        "7", "10",
    ]  # fmt: skip


def test_a_forecast_history_written_with_its_times_as_index_reads_them(tmp_path):
    """``history.set_index("timestamp").to_parquet(...)``: training read such a file, and
    predict.py refused it as lacking the column 'timestamp'. A wide history's index of
    times stays its index, which the wide reading takes its times from."""
    from cloudlstm.cli.predict import read_history

    dated = table()[lambda d: d["id"].isin(["p0", "p1"])]
    expected = build_input(dated, spec()).x
    # a DataFrame given to Forecaster.forecast, as a file that predict.py reads
    np.testing.assert_array_equal(build_input(dated.set_index("timestamp"), spec()).x, expected)
    dated.set_index("timestamp").to_parquet(path := tmp_path / "indexed.parquet")
    np.testing.assert_array_equal(build_input(read_history(path), spec()).x, expected)
    dated.set_index(["timestamp", "id"]).to_hdf(path := tmp_path / "indexed.h5", key="h")
    np.testing.assert_array_equal(build_input(read_history(path), spec()).x, expected)
    wide = dated.pivot(index="timestamp", columns="id", values="v").rename_axis("when")
    wide.to_parquet(path := tmp_path / "wide.parquet")
    assert read_history(path).index.name == "when"


def test_ids_written_as_pandas_missing_markers_are_kept(tmp_path):
    """Stations coded NA, null or None read as missing ids: training refused their rows as
    without an id, a positions file as empty, and predict.py's history made the point
    NaN. An empty id stays missing, and other columns still read NA as missing."""
    from cloudlstm.cli.predict import read_history

    coded = table().assign(id=table()["id"].map({"p0": "NA", "p1": "null", "p2": "None"}))
    coded = coded.astype({"v": object})
    coded.loc[0, "v"] = "NA"  # point NA's first reading
    coded.to_csv(path := tmp_path / "coded.csv", index=False)
    stream = stream_of(path)
    assert stream.point_ids == ["NA", "None", "null"]
    assert not stream.mask[0, 0, 0] and stream.mask[1:, 0, 0].all()
    assert sorted(read_history(path)["id"].unique()) == ["NA", "None", "null"]
    coded.drop_duplicates("id")[["id", "x", "y"]].to_csv(pos := tmp_path / "pos.csv", index=False)
    assert read_positions(pos)[0] == ["NA", "null", "None"]
    wide = pd.DataFrame(
        {"time": STAMPS, **{i: np.arange(T) + k for k, i in enumerate(["NA", "null", "None"])}}
    )
    wide.to_csv(wide_path := tmp_path / "wide.csv", index=False)
    assert WideTableSource(wide_path, pos).load().point_ids == ["NA", "null", "None"]
    coded.loc[4, "id"] = ""
    coded.to_csv(path, index=False)
    with pytest.raises(UserError, match=r"^file .*coded\.csv: column 'id' is empty at line 6\.$"):
        stream_of(path)


# ---------------------------------------------------------------------- clock changes
def test_times_with_utc_offsets_that_change_are_read_as_utc(tmp_path):
    """Local times written with their offset (+01:00, then +02:00 after the clocks go
    forward on 31 March) were pandas' 'Mixed timezones detected' traceback."""
    utc = pd.date_range("2024-03-30 12:00", periods=T, freq="h")
    table().assign(timestamp=np.repeat(utc, N)).to_csv(plain := tmp_path / "utc.csv", index=False)
    local = [t.isoformat() for t in utc.tz_localize("UTC").tz_convert("Europe/Rome")]
    assert {t[-6:] for t in local} == {"+01:00", "+02:00"}
    table().assign(timestamp=np.repeat(local, N)).to_csv(path := tmp_path / "rome.csv", index=False)
    assert_same_stream(stream_of(path), stream_of(plain))


def test_the_hour_repeated_when_the_clocks_go_back_is_named():
    clock = pd.date_range("2024-10-27 00:00", periods=T, freq="h", tz="Europe/Rome")
    rows = table().assign(timestamp=np.repeat(clock.strftime("%Y-%m-%d %H:%M"), N))
    with pytest.raises(UserError, match=(
        r"time 2024-10-27 02:00:00 and id='p0'.*drop the duplicates\); if the file writes the "
        r"local clock times of a zone such as Europe/Berlin, that is the hour which repeats when "
        r"its clocks go back: write the times in UTC or with their offset "
        r"\(2024-10-27T02:00:00\+01:00 the second time\), which are read as UTC\.$"
    )):  # fmt: skip
        pivot_long(rows.assign(timestamp=pd.to_datetime(rows["timestamp"])), "timestamp", "id",
                   "1h", "error", "file local.csv", clock=True)  # fmt: skip
    one_extra = pd.concat([table(), table().iloc[[4]]], ignore_index=True)
    with pytest.raises(UserError, match=r"drop the duplicates\)\.$"):  # no clock hint
        pivot_long(one_extra, "timestamp", "id", "1h", "error", "file local.csv", clock=True)
    # every point written twice at an hour no zone's clocks repeat: no clock hint either
    twice = table().assign(
        timestamp=lambda d: d["timestamp"].where(d["timestamp"] != STAMPS[5], STAMPS[4])
    )
    with pytest.raises(UserError, match=r"drop the duplicates\)\.$"):
        pivot_long(twice, "timestamp", "id", "1h", "error", "file twice.csv", clock=True)


# 2024-10-27 from midnight, as Rome's clocks write it: 02:00 twice (CEST, then CET)
ROME_CLOCK = pd.date_range("2024-10-27 00:00", periods=T, freq="h", tz="Europe/Rome")
CLOCK_HINT = "if the file writes the local clock times of a zone such as Europe/Berlin"


@pytest.mark.parametrize("written", ["clock", "unix"])
def test_the_clock_change_is_named_only_for_times_written_as_clock_times(tmp_path, written):
    """Numbers count seconds since 1970 in UTC, which no clock change repeats: a number
    written twice whose moment is an hour some zone's clocks repeat (02:00 UTC of 27
    October) was said to be that zone's clock time, in a long-format file and a forecast's
    history alike."""
    clock = pd.Series(ROME_CLOCK.strftime("%Y-%m-%d %H:%M"))
    unix = (pd.to_datetime(clock) - pd.Timestamp("1970-01-01")) // pd.Timedelta("1s")
    times, unit = (clock, None) if written == "clock" else (unix, "s")
    rows = table().assign(timestamp=np.repeat(times.to_numpy(), N))
    rows.to_csv(path := tmp_path / "twice.csv", index=False)
    with pytest.raises(UserError) as err:
        stream_of(path, time_unit=unit)
    recent = rows["id"].isin(["p0", "p1"]) & rows["timestamp"].isin(times[:6])  # the 4 read
    history = rows[recent].reset_index(drop=True)
    with pytest.raises(UserError) as refused:
        build_input(history, spec(time_unit=unit))
    for message in (str(err.value), str(refused.value)):
        assert "several rows for the same (time, point), e.g. time 2024-10-27 02:00:00" in message
        assert (CLOCK_HINT in message) == (written == "clock"), message
        assert message.endswith("." if written == "clock" else "drop the duplicates).")


# ---------------------------------------------------------------------- the grid's period
def test_jittered_timestamps_are_refused_with_the_points_period(tmp_path, reference):
    """Hourly readings a few seconds off the hour were read as a 1 s stream, 99.97 % filled."""
    jitter = pd.to_timedelta(np.random.default_rng(1).integers(-3, 4, T * N), "s")
    table().assign(timestamp=lambda d: d["timestamp"] + jitter).to_csv(
        path := tmp_path / "jittered.csv", index=False
    )
    with pytest.raises(UserError, match=(
        r"jittered.csv: only 0\.\d+% of the [\d,]+ steps of the 1s grid \(inferred from the most "
        r"common gap between timestamps\) have any row; each point's readings are about 1h "
        r"apart \(the median gap\)\. If the timestamps are jittered"
    )):  # fmt: skip
        stream_of(path)
    rounded = table().assign(timestamp=lambda d: (d["timestamp"] + jitter).dt.round("h"))
    rounded.to_csv(fixed := tmp_path / "rounded.csv", index=False)
    assert_same_stream(stream_of(fixed), reference)


@pytest.mark.parametrize("freq, share", [("30min", 50), ("20min", 67)])
def test_a_step_finer_than_the_datas_period_is_refused(tmp_path, freq, share):
    """data.source.freq=30min on hourly data filled every other step in silence."""
    table().to_csv(path := tmp_path / "hourly.csv", index=False)
    with pytest.raises(UserError, match=(
        rf"every timestamp lies on a 1h grid, so data.source.freq={freq} leaves {share}% of the "
        r"steps without any row, to be filled in\. Set data.source.freq=1h, the data's period\.$"
    )):  # fmt: skip
        stream_of(path, freq=freq)
    assert stream_of(path, freq="1h").values.shape[0] == T


def test_a_file_mostly_empty_on_its_grid_is_refused_and_a_gap_is_not():
    hours = table()
    gap = hours[(hours["timestamp"] < STAMPS[10]) | (hours["timestamp"] >= STAMPS[20])]
    assert pivot_long(gap, "timestamp", "id").shape == (T, N)  # a quarter missing: filled
    far = gap.assign(timestamp=lambda d: d["timestamp"].where(
        d["timestamp"] < STAMPS[10], d["timestamp"] + pd.Timedelta(days=30)))  # fmt: skip
    with pytest.raises(UserError, match=r"only 3\.9% of the 760 steps .* cut it to the period"):
        pivot_long(far, "timestamp", "id", what="far.csv")


# ---------------------------------------------------------------------- damaged files
CUT_SHORT = "It is cut short or not compressed as its name says (e.g. a download that stopped)"


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz", ".zip"])
def test_a_compressed_file_cut_short_is_one_line(tmp_path, reference, suffix):
    """A download that stopped half-way: each codec's own error, named with the file."""
    table().to_csv(whole := tmp_path / f"whole.csv{suffix}", index=False)
    assert_same_stream(stream_of(whole), reference)
    data = whole.read_bytes()
    (cut := tmp_path / f"cut.csv{suffix}").write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError) as err:
        stream_of(cut)
    message = str(err.value)
    assert message.startswith(f"Cannot read the long-format file {cut}: ")
    assert message.endswith(f"{CUT_SHORT}: fetch it again, or name it by its format.")
    assert "\n" not in message


def test_a_file_not_compressed_as_its_name_says_is_one_line(tmp_path):
    table().to_csv(plain := tmp_path / "plain.csv.gz", compression=None, index=False)
    proc = run_python(
        "train.py", "data=points", f"data.source.path={plain}",
        f"hydra.run.dir={tmp_path / 'run'}", "logger=none", "debug=fdr",
    )  # fmt: skip
    assert one_line(proc) == (
        f"Cannot read the long-format file {plain}: Not a gzipped file (b'ti'). {CUT_SHORT}: "
        "fetch it again, or name it by its format."
    )


def test_an_hdf5_file_cut_short_is_one_line_with_the_librarys_reason(tmp_path):
    pytest.importorskip("tables")
    frame = pd.DataFrame({"a": np.arange(50.0)}, index=STAMPS[:1].repeat(50))
    frame.to_hdf(whole := tmp_path / "whole.h5", key="df")
    data = whole.read_bytes()
    (cut := tmp_path / "cut.h5").write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError) as err:
        read_table(cut, "the wide table")
    assert re.fullmatch(
        rf"Cannot read the wide table {re.escape(str(cut))} as a pandas HDF5 file: truncated "
        r"file: eof = \d+, .*: it is cut short \(e\.g\. a download that stopped\), fetch it "
        r"again\.",
        str(err.value),
    )


# ---------------------------------------------------------------------- Parquet datasets
def write_dataset(folder: Path, frame: pd.DataFrame, partition: str | None = None) -> None:
    """``frame`` as Spark, Dask and pyarrow write it: part files (in ``<partition>=<value>``
    subfolders when given), a ``_SUCCESS`` marker and hidden checksums beside them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if partition:
        pq.write_to_dataset(pa.Table.from_pandas(frame), folder, partition_cols=[partition])
    else:
        folder.mkdir()
        for i, part in enumerate(np.array_split(np.arange(len(frame)), 3)):
            frame.iloc[part].to_parquet(folder / f"part-{i:05d}.snappy.parquet", index=False)
            (folder / f".part-{i:05d}.snappy.parquet.crc").write_bytes(b"\x00")
    (folder / "_SUCCESS").touch()


@pytest.mark.parametrize("partition", [None, "id"], ids=["parts", "partitioned-by-id"])
def test_a_parquet_dataset_folder_reads_as_its_rows_in_one_file(tmp_path, reference, partition):
    """Point ids in partition folders stay as written: inferred, ``id=007`` read as 7."""
    frame = table().assign(id=table()["id"].map({"p0": "007", "p1": "p1", "p2": "p2"}))
    frame.to_parquet(one_file := tmp_path / "one.parquet", index=False)
    write_dataset(folder := tmp_path / "dataset", frame, partition)
    from_folder = stream_of(folder)
    assert_same_stream(from_folder, stream_of(one_file))
    assert from_folder.point_ids == ["007", "p1", "p2"]
    assert_same_stream(from_folder, replace(reference, point_ids=["007", "p1", "p2"]))


def test_a_parquet_dataset_is_cached_by_its_parts(tmp_path):
    """A part rewritten, or a partition renamed, is another stream: the cache key changes."""
    write_dataset(folder := tmp_path / "dataset", table(), "id")
    key = LongFormatSource(folder).cache_key
    assert LongFormatSource(folder).cache_key == key
    (folder / "id=p2").rename(folder / "id=p9")
    renamed = LongFormatSource(folder).cache_key
    assert renamed != key and stream_of(folder).point_ids == ["p0", "p1", "p9"]
    part = next((folder / "id=p0").iterdir())
    pd.read_parquet(part).head(5).to_parquet(part)
    assert LongFormatSource(folder).cache_key != renamed


def test_a_folder_that_is_no_parquet_dataset_is_one_line(tmp_path):
    """A CSV beside the parts (which rows belong?) or CSV parts alone: one line, the
    folder's files named, and the two ways out."""
    write_dataset(folder := tmp_path / "dataset", table())
    table().to_csv(folder / "positions.csv", index=False)
    with pytest.raises(UserError) as err:
        stream_of(folder)
    assert str(err.value).startswith(
        f"data.source.path={folder.resolve()} is a folder that is no Parquet dataset (it holds "
        "part-00000.snappy.parquet, part-00001.snappy.parquet, part-00002.snappy.parquet and "
        "1 more): name one long-format file, e.g. "
    )
    assert str(err.value).endswith(
        "or write them as one Parquet dataset (a folder of .parquet parts)."
    )


def test_a_forecast_history_may_be_a_parquet_dataset(tmp_path):
    from cloudlstm.cli.predict import read_history

    write_dataset(folder := tmp_path / "recent", table(), "id")
    read = read_history(folder).sort_values(["timestamp", "id"], ignore_index=True)
    pd.testing.assert_frame_equal(
        read[table().columns].astype({"id": object}),
        table().astype({"id": object}),
        check_dtype=False,
    )


def test_a_folder_given_as_a_wide_table_or_its_positions_is_one_line(tmp_path):
    table().drop_duplicates("id")[["id", "x", "y"]].to_csv(tmp_path / "pos.csv", index=False)
    (tmp_path / "speeds").mkdir()
    with pytest.raises(UserError) as err:
        WideTableSource(tmp_path / "speeds", tmp_path / "pos.csv").load()
    assert str(err.value) == (
        f"data.source.path={tmp_path / 'speeds'} is a folder, not a file: name the table "
        "itself (CSV, Parquet or HDF5) in it."
    )
    with pytest.raises(UserError, match=r"data.source.positions=.* is a folder, not a file: name"):
        WideTableSource(tmp_path / "pos.csv", tmp_path / "speeds").load()


def test_a_parquet_dataset_without_pyarrow_is_one_line(tmp_path, monkeypatch):
    import importlib.util

    from cloudlstm.errors import MissingPackageError

    write_dataset(folder := tmp_path / "dataset", table(), "id")
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "pyarrow" else find_spec(name, *a),
    )
    with pytest.raises(
        MissingPackageError, match=r"Parquet dataset .* needs pyarrow: `pip install"
    ):
        stream_of(folder)


@pytest.mark.parametrize("body", [b"", b"\n\n"])
def test_an_empty_file_is_one_line_with_a_fix(tmp_path, body):
    """The line was pandas' "No columns to parse from file", which says nothing to do."""
    (path := tmp_path / "empty.csv").write_bytes(body)
    with pytest.raises(UserError) as err:
        read_table(path, "the long-format file")
    assert str(err.value) == (
        f"The long-format file {path} is empty, without even a header row: write the header "
        "row of its columns and its rows into it, or name the file that holds them."
    )


def test_a_missing_column_is_not_guessed_as_one_another_expected_column_is():
    """A history lacking the covariate ``temp`` was asked "Did you mean: 'temp' ->
    'timestamp'?", its time column; a column no expected one names is still offered."""
    expected = ["timestamp", "id", "x", "y", "temp"]
    history = pd.DataFrame(columns=["timestamp", "id", "x", "y", "a", "b"])
    with pytest.raises(UserError) as err:
        check_columns(history, expected, "The history", "Add it.")
    assert "lacks column(s) ['temp']" in str(err.value) and "Did you mean" not in str(err.value)
    with pytest.raises(UserError, match=r"Did you mean: 'temp' -> 'tmp'\? Add it\.$"):
        check_columns(history.assign(tmp=0.0), expected, "The history", "Add it.")
