"""Tests of the Telecom Italia source: daily files in the original format (tab-separated, no
header, a row per square, 10-minute interval and country code, empty fields for no
activity), summed by hand; the grid's centroids; the errors."""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import (
    ROOT,
    build_datamodule,
    cache_of_version,
    compose_train,
    one_line,
    rebuilding_fails,
    run_python,
)

from cloudlstm.data.sources import telecom_italia
from cloudlstm.data.sources.telecom_italia import CHANNELS, TelecomItaliaSource, grid_centroids
from cloudlstm.errors import MissingFileError, UserError

MILAN = ROOT.parent / "shared" / "data" / "milan_telecom"
needs_milan = pytest.mark.skipif(
    not MILAN.is_dir(), reason=f"the Milan Telecom Italia copy is not at {MILAN}"
)
SQUARES = [1, 2, 10]
COUNTRIES = [0, 39, 44]
# The file of a (local) day starts at 23:00 UTC the day before: Milan is UTC+1 in November.
DAYS = {
    "2013-11-01": pd.Timestamp("2013-10-31 23:00"),
    "2013-11-02": pd.Timestamp("2013-11-01 23:00"),
}
EPOCH = pd.Timestamp("1970-01-01")
# Hand-written rows of square 2 in the hour 2013-11-01 05:00 UTC (the generic ones left out):
# SMS in 1 + 2.5 + empty = 3.5; Internet 1.5 + 2.25 + empty = 3.75; calls in 0.25 once.
HAND_HOUR = pd.Timestamp("2013-11-01 05:00")
HAND = [
    (HAND_HOUR, 39, ["1", "", "", "", "1.5"]),
    (HAND_HOUR + pd.Timedelta("10min"), 44, ["2.5", "", "0.25", "", "2.25"]),
    (HAND_HOUR + pd.Timedelta("50min"), 0, ["", "", "", "", ""]),
]
OUTAGE = pd.Timestamp("2013-11-02 10:20")  # no row of any square in this interval


def generic(square: int, start: pd.Timestamp, country: int, channel: int) -> str:
    """A field of the generic rows: a number, or empty (no activity) for one in five."""
    minutes = int((start - EPOCH) / pd.Timedelta("1min"))
    if (square + minutes // 10 + country + channel) % 5 == 0:
        return ""
    return f"{(square * 7 + minutes % 97 + country * 3 + channel) / 16:g}"


def write_files(folder: Path, gz: bool = False) -> dict:
    """Two daily files and the grid; returns the hourly sums per (hour, square, channel),
    added up here row by row from the fields written."""
    folder.mkdir(exist_ok=True)
    sums: dict = defaultdict(float)
    for day, first in DAYS.items():
        lines = []
        for k in range(144):
            start = first + k * pd.Timedelta("10min")
            if start == OUTAGE:
                continue
            for square in SQUARES:
                if square == 10 and k % 7 == 3:  # a quiet square: no row at all, no activity
                    continue
                if square == 2 and start.floor("1h") == HAND_HOUR:
                    continue
                for country in COUNTRIES[: 1 + (square + k) % 3]:
                    fields = [generic(square, start, country, c) for c in range(5)]
                    lines.append((square, start, country, fields))
        if day == "2013-11-01":
            lines += [(2, t, c, f) for t, c, f in HAND]
        text = []
        for square, start, country, fields in lines:
            ms = int((start - EPOCH) / pd.Timedelta("1ms"))
            text.append("\t".join([str(square), str(ms), str(country), *fields]))
            for c, field in enumerate(fields):
                sums[(start.floor("1h"), square, CHANNELS[c])] += float(field) if field else 0.0
        name = f"sms-call-internet-mi-{day}.txt"
        body = "\n".join(text) + "\n"
        if gz:
            with gzip.open(folder / f"{name}.gz", "wt") as f:
                f.write(body)
        else:
            (folder / name).write_text(body)
    write_grid(folder / "milano-grid.geojson.gz")
    return sums


def cell(square: int) -> tuple[float, float]:
    """Square ``s``'s centre: 235 m-ish cells in rows of 100, as the Milano grid's."""
    return 9.0 + 0.003 * ((square - 1) % 100) + 0.0015, 45.35 + 0.002 * (
        (square - 1) // 100
    ) + 0.001


def write_grid(path: Path, squares=(1, 2, 3, 10, 101), ids=None) -> None:
    """The grid of ``squares``, their cellIds written as ``ids`` (by default the numbers)."""
    features = []
    for s, written in zip(squares, ids or squares, strict=True):
        x, y = cell(s)
        ring = [[x - 0.0015, y + 0.001], [x + 0.0015, y + 0.001], [x + 0.0015, y - 0.001]]
        ring += [[x - 0.0015, y - 0.001], [x - 0.0015, y + 0.001]]
        geometry = {"type": "Polygon", "coordinates": [ring]}
        features.append(
            {"geometry": geometry, "type": "Feature", "properties": {"cellId": written}}
        )
    with gzip.open(path, "wt") as f:
        json.dump({"type": "FeatureCollection", "features": features}, f)


@pytest.fixture
def milan(tmp_path) -> tuple[Path, dict]:
    folder = tmp_path / "telecom"
    return folder, write_files(folder)


def test_hourly_sums_over_country_codes(milan, tmp_path):
    folder, sums = milan
    stream = TelecomItaliaSource(folder, cache_dir=tmp_path / "cache").load()
    assert stream.channel_names == list(CHANNELS) and stream.point_ids == ["1", "2", "10"]
    assert stream.values.shape == (48, 3, 5)
    assert stream.timestamps[0] == np.datetime64("2013-10-31T23:00")  # UTC
    assert stream.metadata["step_minutes"] == 60.0 and stream.metadata["incomplete_steps"] == 1
    hours = pd.DatetimeIndex(stream.timestamps)
    for (hour, square, channel), total in sums.items():
        if hour == OUTAGE.floor("1h"):
            continue
        got = stream.values[hours.get_loc(hour), SQUARES.index(square), CHANNELS.index(channel)]
        assert got == pytest.approx(total, rel=1e-6), (hour, square, channel)
    hand = hours.get_loc(HAND_HOUR)
    np.testing.assert_allclose(stream.values[hand, 1], [3.5, 0.0, 0.25, 0.0, 3.75])
    assert stream.mask[hand].all()
    # the hour with a 10-minute outage is missing everywhere (filled, mask False)
    assert {tuple(i) for i in np.argwhere(~stream.mask.all(axis=(1, 2)))} == {
        (hours.get_loc(OUTAGE.floor("1h")),)
    }
    np.testing.assert_allclose(stream.coords, [cell(1), cell(2), cell(10)])
    with rebuilding_fails(TelecomItaliaSource, "generate"):
        again = TelecomItaliaSource(folder, cache_dir=tmp_path / "cache")
        again.load()
    assert again.last_load_from_cache


def test_channels_squares_steps_and_days_are_chosen(tmp_path):
    folder = tmp_path / "gz"
    sums = write_files(folder, gz=True)
    half = TelecomItaliaSource(
        folder, channels=["internet", "sms_in"], squares=[10, 2], step="30min"
    ).load()
    assert half.channel_names == ["internet", "sms_in"] and half.point_ids == ["2", "10"]
    assert half.values.shape == (96, 2, 2) and half.metadata["step_minutes"] == 30.0
    first, second = half.values[0::2], half.values[1::2]
    hourly = TelecomItaliaSource(folder, channels=["internet", "sms_in"], squares=[2, 10]).load()
    both = (half.mask[0::2] & half.mask[1::2]).all(axis=(1, 2))
    np.testing.assert_allclose((first + second)[both], hourly.values[both], rtol=1e-5)
    one_day = TelecomItaliaSource(folder, channels=["call_out"], last_day="2013-11-01").load()
    assert one_day.values.shape == (24, 3, 1)
    assert one_day.values[5, 0, 0] == pytest.approx(
        sums[(pd.Timestamp("2013-11-01 04:00"), 1, "call_out")]
    )


@needs_milan
def test_grid_centroids_match_the_published_ones():
    centroids = grid_centroids(MILAN / "milano-grid.geojson.gz")
    assert len(centroids) == 10_000
    published = pd.read_csv(MILAN / "cell_centroids.csv")
    ours = np.array([centroids[str(c)] for c in published["cellId"]])
    np.testing.assert_allclose(ours, published[["lon", "lat"]].to_numpy(), atol=1e-9)


def test_bad_options_and_files(milan, tmp_path):
    folder, _ = milan
    with pytest.raises(UserError, match=r"channels=\['sms'\]: give one or more of"):
        TelecomItaliaSource(folder, channels=["sms"])
    with pytest.raises(UserError, match=r"step='15min'.*multiple of 10 minutes"):
        TelecomItaliaSource(folder, step="15min")
    with pytest.raises(UserError, match=r"square\(s\) \[7\] have no row"):
        TelecomItaliaSource(folder, squares=[1, 7]).load()
    with pytest.raises(MissingFileError, match=r"No Telecom Italia files .*dataverse"):
        TelecomItaliaSource(tmp_path / "empty").load()
    with pytest.raises(MissingFileError, match=r"from 2014-01-01 to the last"):
        TelecomItaliaSource(folder, first_day="2014-01-01").load()
    write_grid(folder / "small.geojson.gz", squares=(1, 2))
    with pytest.raises(UserError, match=r"square\(s\) \['10'\] .* no cell in the grid"):
        TelecomItaliaSource(folder, grid=folder / "small.geojson.gz").load()
    with pytest.raises(MissingFileError, match=r"No grid file .*data\.source\.grid="):
        TelecomItaliaSource(folder, grid=folder / "none.geojson").load()


@pytest.mark.parametrize(
    ("written", "shown"),
    [("c2", '"c2"'), (None, "null"), ("2.0", '"2.0"'), (2.5, "2.5"), (True, "true")],
)
def test_a_grid_cell_id_that_is_no_whole_number_is_one_line(milan, written, shown):
    """It was a traceback of int(), or 2.5 was read as square 2."""
    folder, _ = milan
    grid = folder / "odd.geojson.gz"
    write_grid(grid, squares=(1, 2, 10), ids=[1, written, 10])
    with pytest.raises(UserError) as err:
        TelecomItaliaSource(folder, grid=grid).load()
    assert str(err.value) == (
        f'{grid}: feature 1 has the cellId {shown}, not a whole number (101 or "101"); the '
        "Milano grid's cells are numbered 1-10000."
    )


def test_grid_cell_ids_written_as_text_or_whole_floats_are_read(milan):
    folder, _ = milan
    write_grid(grid := folder / "text.geojson.gz", squares=(1, 2, 10), ids=["1", 2.0, " 10"])
    assert TelecomItaliaSource(folder, grid=grid).load().point_ids == ["1", "2", "10"]
    write_grid(grid := folder / "twice.geojson.gz", squares=(1, 2, 10), ids=[1, 2, "2"])
    with pytest.raises(UserError, match=r"feature 2 has the cellId 2 of an earlier feature"):
        TelecomItaliaSource(folder, grid=grid).load()


@pytest.mark.parametrize(
    ("squares", "message"),
    [
        (
            [101.7, 102, 103],
            "data.source.squares=[101.7, 102, 103]: 101.7 is not a square id; give whole "
            "numbers (1-10000).",
        ),
        (
            ["c1"],
            "data.source.squares=['c1']: 'c1' is not a square id; give whole numbers (1-10000).",
        ),
        ([1, 2, 2, 10, 1], "data.source.squares names 1, 2 twice: name each once."),
        (
            [5, 0],
            "data.source.squares=[5, 0]: 0 is not a square id; give whole numbers (1-10000).",
        ),
        ([-3], "data.source.squares=[-3]: -3 is not a square id; give whole numbers (1-10000)."),
    ],
)
def test_squares_are_whole_numbers_each_named_once(milan, squares, message):
    """101.7 was read as 101 and a repeated square dropped, without a word; 0 and -3 were
    looked for in the files, which number their cells from 1."""
    folder, _ = milan
    with pytest.raises(UserError) as err:
        TelecomItaliaSource(folder, squares=squares)
    assert str(err.value) == message
    assert TelecomItaliaSource(folder, squares=[10, 2.0, "1"]).squares == [1, 2, 10]


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("1\t1383260400000\t39\t0.5\t0.5", r"has 5 tab-separated field\(s\) per row, not 8"),
        (
            "1\t1383260400000\t39\t0.5\tlots\t\t\t1",
            r"1 channel value\(s\) are not finite numbers: line 2, column 'sms_out': 'lots'\. A",
        ),
        ("1\t1383260412345\t39\t0.5\t\t\t\t1", r"1383260412345 at line 2 is not on the 10"),
        (
            "1.5\t1383260400000\t39\t0.5\t\t\t\t1",
            r"the square id at line 2 is 1\.5, not a whole number \(1 such field\(s\)\)\. Each "
            r"row starts with the square id and the interval start in ms since 1970",
        ),
        (
            "1\tmonday\t39\t0.5\t\t\t\t1",
            r"the interval start at line 2 is 'monday', not a whole number .*\. Each row starts",
        ),
    ],
)
def test_malformed_files_are_named(tmp_path, line, words):
    folder = tmp_path / "bad"
    folder.mkdir()
    # named by the file's line, the blank first one counted, as an editor counts it
    (folder / "sms-call-internet-mi-2013-11-01.txt").write_text("\n" + line + "\n")
    write_grid(folder / "milano-grid.geojson.gz")
    with pytest.raises(UserError, match=words):
        TelecomItaliaSource(folder).load()


def test_a_file_cut_short_is_one_line_and_a_days_gz_is_read_before_its_txt(tmp_path):
    folder = tmp_path / "gz"
    write_files(folder, gz=True)
    whole = TelecomItaliaSource(folder).load()
    day = folder / "sms-call-internet-mi-2013-11-02.txt.gz"
    text = gzip.decompress(day.read_bytes()).decode()
    # a gunzip stopped half-way: the .txt beside the .gz ends at a line's end
    (folder / day.stem).write_text(text[: text.rindex("\n", 0, len(text) // 2) + 1])
    again = TelecomItaliaSource(folder).load()
    np.testing.assert_array_equal(again.values, whole.values)
    data = day.read_bytes()
    day.write_bytes(data[: len(data) // 2])  # a download cut short
    with pytest.raises(UserError) as err:
        TelecomItaliaSource(folder).load()
    assert str(err.value).startswith(f"Cannot read the Telecom Italia file {day}: Compressed ")
    grid = folder / "milano-grid.geojson.gz"
    grid.write_bytes(grid.read_bytes()[:40])
    with pytest.raises(UserError, match=rf"^Cannot read the grid {re.escape(str(grid))}: .*cut "):
        grid_centroids(grid)


def test_a_gzipped_day_file_named_txt_is_read_and_named_by_its_lines(milan):
    """A browser saves a day's .txt.gz as .txt: it was refused as tab-separated values of
    one field. Its rows are read, and a message names its lines as the text's."""
    folder, _ = milan
    whole = TelecomItaliaSource(folder).load()
    day = folder / "sms-call-internet-mi-2013-11-02.txt"
    lines = day.read_text().splitlines(keepends=True)
    day.write_bytes(gzip.compress(day.read_bytes()))
    np.testing.assert_array_equal(TelecomItaliaSource(folder).load().values, whole.values)
    day.write_bytes(gzip.compress("".join([*lines[:3], lines[1]]).encode()))
    with pytest.raises(UserError, match=rf"^Telecom Italia file {re.escape(str(day))}: line 4 "):
        TelecomItaliaSource(folder).load()
    data = gzip.compress("".join(lines).encode())
    day.write_bytes(data[: len(data) // 2])  # a download cut short: the codec says so
    with pytest.raises(UserError) as err:
        TelecomItaliaSource(folder).load()
    assert str(err.value).startswith(f"Cannot read the Telecom Italia file {day}: Compressed ")
    assert str(err.value).endswith(
        "(e.g. a download that stopped): fetch it again, or name it by its format."
    )


def docs_command(folder: Path, cache: Path) -> list[str]:
    """The overrides of docs/data.md's command for these files, on the squares written here,
    with windows that fit their two days."""
    text = (ROOT / "docs" / "data.md").read_text()
    command = text[text.index("python train.py data=milan '~data.source'") :]
    command = command[: command.index("```")].replace("\\\n", " ")
    overrides = [word.strip("'") for word in command.split()[2:]]
    return [
        o.replace("root:/data/milano", f"root:{folder}")
        .replace("squares:[4259,4456,5060]", "squares:[1,2,10]")
        .replace("cache_dir:data/telecom", f"cache_dir:{cache}")
        for o in overrides
    ] + ["data.input_steps=3", "data.output_steps=2"]


def test_the_docs_command_over_data_milan_reads_the_files(milan, tmp_path):
    """data=milan's range of its `traffic` channel stopped the command of docs/data.md."""
    folder, _ = milan
    overrides = docs_command(folder, tmp_path / "cache")
    assert "data.valid_ranges=null" in overrides
    datamodule, _ = build_datamodule(compose_train(tmp_path, overrides), tmp_path)
    assert datamodule.stream.channel_names == ["internet"]
    assert datamodule.stream.point_ids == ["1", "2", "10"]


def test_ranges_of_other_channels_are_one_line_whose_fixes_work(milan, tmp_path):
    """The line named the channels without a fix; a mapping given alone is merged into
    data=milan's, so the fix named sets null first."""
    folder, _ = milan
    overrides = [o for o in docs_command(folder, tmp_path / "cache") if "valid_ranges" not in o]
    proc = run_python(
        "train.py", *overrides, f"hydra.run.dir={tmp_path / 'run'}", "logger=none", "debug=fdr"
    )
    assert one_line(proc) == (
        "data.valid_ranges names ['traffic'], not channels of the data; its channels are "
        "['internet']. Set data.valid_ranges=null to check only the ranges the source "
        "declares, or replace the config's with data.valid_ranges=null "
        "'data.valid_ranges={internet:[lo,hi]}' (null for an open end)."
    )
    replaced = ["data.valid_ranges=null", "data.valid_ranges={internet:[0,50000]}"]
    cfg = compose_train(tmp_path / "replaced", [*overrides, *replaced])
    datamodule, _ = build_datamodule(cfg, tmp_path / "replaced")
    assert datamodule.valid_ranges == {"internet": (0.0, 50000.0)}


def test_the_units_option_reaches_the_data_summary(milan, tmp_path):
    """The files do not say their units: data.source.units records them in
    data_summary.json, as Beijing's are, so that eval.py can compare them."""
    folder, _ = milan
    overrides = docs_command(folder, tmp_path / "cache")
    units = ["+data.source.units={internet: activity}"]
    build_datamodule(compose_train(tmp_path, [*overrides, *units]), tmp_path)
    written = json.loads((tmp_path / "data_summary.json").read_text())
    assert written["source_metadata"]["units"] == {"internet": "activity"}
    _, summary = build_datamodule(compose_train(tmp_path, overrides), tmp_path)
    assert "units" not in summary["source_metadata"]  # the default: none recorded


def test_units_of_a_channel_not_chosen_are_refused_before_the_files_are_read(tmp_path):
    with pytest.raises(UserError) as err:
        TelecomItaliaSource(tmp_path, channels=["internet"], units={"sms_in": "count"})
    assert str(err.value) == (
        "data.source.units names 'sms_in', no channel of the data; its channels are "
        "['internet']: give the unit of each by its channel's name."
    )
    with pytest.raises(UserError, match=r"^data.source.units gives internet the unit null,"):
        TelecomItaliaSource(tmp_path, channels=["internet"], units={"internet": None})


def test_a_first_day_after_the_last_is_refused_as_such(milan):
    """It was read as no files in those days, and the line said to download them."""
    folder, _ = milan
    with pytest.raises(UserError) as err:
        TelecomItaliaSource(folder, first_day="2013-11-02", last_day="2013-11-01")
    assert str(err.value) == (
        "data.source.first_day=2013-11-02 is after data.source.last_day=2013-11-01: swap "
        "them (first_day=2013-11-01, last_day=2013-11-02)."
    )
    one_day = TelecomItaliaSource(folder, first_day="2013-11-02", last_day="2013-11-02")
    assert len(one_day.day_files()) == 1


@pytest.mark.parametrize("fields", [7, 4])
def test_a_row_with_fields_left_out_is_refused_by_line(milan, fields):
    """Its fields left out were read as empty ones, no activity; empty fields stay read."""
    folder, _ = milan
    day = folder / "sms-call-internet-mi-2013-11-02.txt"
    lines = day.read_text().splitlines(keepends=True)
    lines[4] = "\t".join(lines[4].rstrip("\n").split("\t")[:fields]) + "\n"
    day.write_text("".join(lines))
    with pytest.raises(UserError) as err:
        TelecomItaliaSource(folder).load()
    assert str(err.value) == (
        f"Telecom Italia file {day}: line 5 has {fields} tab-separated field(s), not 8 (square "
        "id, interval start, country code, sms in, sms out, call in, call out, internet); a "
        "row leaves a field of no activity empty, not out. Correct or remove the line, or get "
        "the file again."
    )
    lines[4] = "\t".join(lines[4].rstrip("\n").split("\t")[:3] + [""] * 5) + "\n"
    day.write_text("".join(lines))
    assert TelecomItaliaSource(folder).load().mask.any()


def test_a_square_without_rows_is_named_with_the_files_squares(milan, tmp_path):
    """The line said the files' squares were 1-10000, whatever the files held."""
    folder, _ = milan
    with pytest.raises(UserError) as err:
        TelecomItaliaSource(folder, squares=[2, 3, 7]).load()
    assert str(err.value) == (
        "data.source.squares: the square(s) [3, 7] have no row in the 2 file(s) read, whose "
        "squares are 1, 2, 10: choose among those, or set data.source.squares=null for all "
        "of them."
    )
    many = tmp_path / "many"
    many.mkdir()
    rows = [f"{s}\t1383260400000\t39\t1\t\t\t\t1\n" for s in [*range(1, 13), 20]]
    (many / "sms-call-internet-mi-2013-11-01.txt").write_text("".join(rows))
    with pytest.raises(
        UserError, match=r"whose squares are 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, \.\.\. "
    ):
        TelecomItaliaSource(many, squares=[13], grid=folder / "milano-grid.geojson.gz").load()
    (many / "sms-call-internet-mi-2013-11-01.txt").write_text("".join(rows[:12]))
    with pytest.raises(UserError, match=r"whose squares are 1-12: choose"):
        TelecomItaliaSource(many, squares=[13], grid=folder / "milano-grid.geojson.gz").load()


def test_rows_repeating_a_square_interval_and_country_code_are_refused(milan):
    """A day file concatenated with itself was read with every value of that day doubled;
    rows of one square and interval with different country codes are still summed."""
    folder, _ = milan
    day = folder / "sms-call-internet-mi-2013-11-02.txt"
    lines = day.read_text().splitlines(keepends=True)
    day.write_text("".join(lines + lines))  # cat day day
    with pytest.raises(UserError) as err:
        TelecomItaliaSource(folder).load()
    square, ms, country = lines[0].split("\t")[:3]
    assert str(err.value) == (
        f"Telecom Italia file {day}: line {len(lines) + 1} repeats line 1: square {square}, "
        f"interval start {ms} (2013-11-01 23:00 UTC), country code {country} "
        f"({len(lines)} repeated row(s) in all); a day file has one row per square, "
        "interval and country code, and a repeated one would count its activity again. "
        "Remove the repeated rows, or get the file again."
    )
    # a blank line is skipped by the reader: the lines are still counted as in the file
    day.write_text("".join([lines[0], "\n", *lines[:2]]))
    with pytest.raises(UserError, match=r": line 3 repeats line 1: square "):
        TelecomItaliaSource(folder).load()
    # an empty country code repeated is one too
    empty = "\t".join([square, ms, "", "1", "", "", "", "1"]) + "\n"
    day.write_text("".join([*lines[:2], empty, empty]))
    with pytest.raises(UserError, match=r": line 4 repeats line 3: .* country code empty \("):
        TelecomItaliaSource(folder).load()
    # the hand-written rows: one square and hour, three country codes, summed
    day.write_text("".join(lines))
    stream = TelecomItaliaSource(folder).load()
    hand = pd.DatetimeIndex(stream.timestamps).get_loc(HAND_HOUR)
    np.testing.assert_allclose(stream.values[hand, 1], [3.5, 0.0, 0.25, 0.0, 3.75])


def test_a_days_file_copied_under_another_days_name_is_refused(milan):
    """The first day's file copied over the second's: its rows were summed twice, every
    value of that day doubled without a word (and the second day missing)."""
    folder, _ = milan
    first, second = (folder / f"sms-call-internet-mi-{day}.txt" for day in DAYS)
    lines, own = (day.read_text().splitlines(keepends=True) for day in (first, second))
    second.write_text("".join(lines[5:]))  # a copy, its first rows lost
    with pytest.raises(UserError) as err:
        TelecomItaliaSource(folder).load()
    square, ms, country = lines[5].split("\t")[:3]
    start = pd.Timestamp(int(ms), unit="ms").strftime("%Y-%m-%d %H:%M")
    assert str(err.value) == (
        f"Telecom Italia file {second} repeats rows of {first}: line 1 repeats line 6 (square "
        f"{square}, interval start {ms}, {start} UTC, country code {country}; "
        f"{len(lines) - 5} repeated row(s) in all). Each row belongs in one day's file, and a "
        "repeated one would count its activity again: is one file a copy of another day's? "
        "Get the day's own file again, or remove the copy."
    )
    # a row of an interval that another file holds too, but of another country code: summed
    second.unlink()
    chosen = {"channels": ["internet"], "squares": [int(square)]}
    alone = TelecomItaliaSource(folder, **chosen).load()
    second.write_text("".join(own) + "\t".join([square, ms, "7", "", "", "", "", "2.5"]) + "\n")
    both = TelecomItaliaSource(folder, **chosen).load()
    hour = pd.DatetimeIndex(both.timestamps).get_loc(pd.Timestamp(start).floor("1h"))
    assert both.values[hour, 0, 0] == pytest.approx(alone.values[hour, 0, 0] + 2.5)


def test_a_days_file_renamed_to_another_day_is_refused_naming_both_days(milan, tmp_path):
    """A day's file renamed to another day was read as it was: that day missing, and
    ``first_day``/``last_day`` choosing it by the day of its name. Its days are Milan's
    (UTC+1 in November): the file of 2013-11-02 holds 2013-11-01 23:00 to 2013-11-02 22:50
    UTC, which is its own day, not two; a cache that the reading of before left (cache
    version 6) must not stand in for the refusal."""
    folder, _ = milan
    stream = TelecomItaliaSource(folder, cache_dir=tmp_path / "first").load()
    second = folder / "sms-call-internet-mi-2013-11-02.txt"
    renamed = second.rename(folder / "sms-call-internet-mi-2013-11-05.txt")
    said = (
        f"Telecom Italia file {renamed} is named for 2013-11-05, but its rows are of "
        "2013-11-02 (interval starts 2013-11-01 23:00 to 2013-11-02 22:50 UTC; a file's day "
        "is Milan's): is it another day's file renamed? Get the file of 2013-11-05 again, or "
        "give this one its own day's name."
    )
    source = TelecomItaliaSource(folder, cache_dir=tmp_path / "cache")
    cache_of_version(source, telecom_italia, 6, stream)
    with pytest.raises(UserError, match=f"^{re.escape(said)}$"):
        source.load()
    renamed.rename(second)
    assert TelecomItaliaSource(folder, first_day="2013-11-02").load().timestamps[0] == (
        np.datetime64("2013-11-01T23:00")
    )


@pytest.mark.parametrize(
    ("written", "shown"), [("inf", "inf"), ("-inf", "-inf"), ("1e39", "1e+39"), ("-1e39", "-1e+39")]
)
def test_a_cell_not_finite_or_beyond_float32_is_refused_by_line_and_column(milan, written, shown):
    """``inf`` and ``1e39`` were summed into an overflow to inf, read as a missing step with
    no more than numpy's RuntimeWarning; empty cells stay no activity."""
    folder, _ = milan
    day = folder / "sms-call-internet-mi-2013-11-01.txt"
    lines = day.read_text().splitlines(keepends=True)
    fields = lines[76].rstrip("\n").split("\t")
    fields[7] = written
    lines[76] = "\t".join(fields) + "\n"
    day.write_text("".join(lines))
    with pytest.raises(UserError) as err:
        TelecomItaliaSource(folder).load()
    assert str(err.value) == (
        f"Telecom Italia file {day}: 1 channel value(s) are not finite numbers: line 77, "
        f"column 'internet': {shown}. A field holds the activity as a number within float32's "
        f"range (at most {np.finfo(np.float32).max:.4g}), or is empty for no activity: "
        "correct the cell, or get the file again."
    )
    # the channel not read is not refused; an empty field is read as no activity
    assert TelecomItaliaSource(folder, channels=["sms_in"]).load().mask[:10].all()
    fields[7] = ""
    lines[76] = "\t".join(fields) + "\n"
    day.write_text("".join(lines))
    assert TelecomItaliaSource(folder).load().mask[:10].all()


def test_a_sum_beyond_float32_is_refused_by_step_square_and_channel(milan):
    """Fields within float32 whose sum is not were cast to an inf, read as a missing step."""
    folder, _ = milan
    day = folder / "sms-call-internet-mi-2013-11-01.txt"
    ms = int((HAND_HOUR - EPOCH) / pd.Timedelta("1ms"))
    rows = [f"2\t{ms}\t{country}\t\t\t\t\t3e38\n" for country in (7, 86)]
    day.write_text(day.read_text() + "".join(rows))
    with pytest.raises(UserError) as err:
        TelecomItaliaSource(folder).load()
    assert str(err.value) == (
        f"In the Telecom Italia files in {folder}, the internet of square 2 sums to 6e+38 in "
        "the step of 2013-11-01 05:00:00 UTC (1 such sum(s)), beyond float32's 3.403e+38: "
        "its fields are absurd; correct them, or get the files again."
    )


def rewrite_geometries(path: Path, geometry) -> None:
    """The grid ``path`` with each feature's geometry replaced by ``geometry(polygon)``."""
    with gzip.open(path, "rt") as f:
        grid = json.load(f)
    for feature in grid["features"]:
        feature["geometry"] = geometry(feature["geometry"])
    with gzip.open(path, "wt") as f:
        json.dump(grid, f)


def test_a_grid_of_multipolygons_gives_the_polygons_centroids(milan):
    """A grid saved again by a GIS writes each cell as a MultiPolygon of one part: its
    rings were read as one polygon of two vertices, every square at about (27.2, 27.2)."""
    folder, _ = milan
    grid = folder / "milano-grid.geojson.gz"
    polygons = grid_centroids(grid)
    rewrite_geometries(grid, lambda g: {"type": "MultiPolygon", "coordinates": [g["coordinates"]]})
    assert grid_centroids(grid) == polygons
    stream = TelecomItaliaSource(folder, channels=["internet"]).load()
    np.testing.assert_allclose(stream.coords, [cell(s) for s in SQUARES], atol=1e-9)
    # a cell of two parts: the centroid of both, each weighted by its area
    rewrite_geometries(grid, lambda g: {**g, "coordinates": [*g["coordinates"], _shifted(g)]})
    assert grid_centroids(grid)["2"] == pytest.approx((cell(2)[0] + 0.0015, cell(2)[1]))


def _shifted(multipolygon: dict) -> list:
    """The first part of ``multipolygon`` moved east by its width (0.003 degrees)."""
    ring = multipolygon["coordinates"][0][0]
    return [[[x + 0.003, y] for x, y in ring]]


@pytest.mark.parametrize(
    "geometry", [None, {"type": "Point", "coordinates": [9.0, 45.4]}], ids=["null", "point"]
)
def test_a_grid_feature_of_no_polygon_is_one_line(milan, geometry):
    folder, _ = milan
    grid = folder / "milano-grid.geojson.gz"
    rewrite_geometries(grid, lambda g: geometry)
    with pytest.raises(UserError) as err:
        TelecomItaliaSource(folder).load()
    assert str(err.value) == (
        f"{grid}: feature 0 has no properties.cellId and Polygon (or MultiPolygon) "
        "coordinates, as the Milano grid's features have."
    )


def test_a_gzipped_grid_named_without_gz_is_read(milan):
    """A browser saves the gzipped grid as milano-grid.geojson: the line refusing it held
    the reader's error with the bytes it had read, a megabyte of them."""
    folder, _ = milan
    gzipped = folder / "milano-grid.geojson.gz"
    expected = grid_centroids(gzipped)
    gzipped.rename(folder / "milano-grid.geojson")
    assert grid_centroids(folder / "milano-grid.geojson") == expected
    assert TelecomItaliaSource(folder).load().point_ids == ["1", "2", "10"]
    latin = folder / "latin.geojson"
    latin.write_bytes('{"features": [], "name": "Milano, città"}'.encode("latin-1"))
    with pytest.raises(UserError) as err:
        grid_centroids(latin)
    assert str(err.value) == (
        f"Cannot read the grid {latin} as GeoJSON: it is not UTF-8 text (byte b'\\xe0' at "
        "position 38); give the Milano grid's GeoJSON, as published or gzipped."
    )
