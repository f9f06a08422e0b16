"""A plain-text data file cut short inside a row (a download or copy that stopped) is one
line naming it, in every reader of text tables: the wide table, the long format, the
positions file and the Telecom Italia day files. pandas read such a file without a word,
a cut number as a reading (``94.5`` as ``9``). A last row with every field and no newline is
read as before."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_data_long_format import long_table
from test_data_telecom_italia import write_files, write_grid
from test_data_wide_table import IDS, source, speeds, write_locations

from cloudlstm.data.sources.cut_short import TAIL_BYTES, refuse_cut_short
from cloudlstm.data.sources.long_format import LongFormatSource
from cloudlstm.data.sources.telecom_italia import TelecomItaliaSource
from cloudlstm.errors import UserError


def cut_in_last_row(text: str, keep: int) -> str:
    """``text`` without its final newline, its last row cut after ``keep`` characters."""
    body = text.rstrip("\n")
    last_start = body.rindex("\n") + 1
    return body[: last_start + keep]


def test_a_wide_table_cut_in_its_last_row_is_refused_not_read_as_a_reading(tmp_path):
    text = speeds().to_csv(index=False)  # last row 74.5,84.5,94.5,104.5
    (tmp_path / "los_speed.csv").write_text(cut_in_last_row(text, keep=11))
    write_locations(tmp_path)
    with pytest.raises(UserError) as err:
        source(tmp_path, path="los_speed.csv").load()
    assert str(err.value) == (
        f"Cannot read the wide table {tmp_path / 'los_speed.csv'}: it ends inside a row, its "
        "last line '74.5,84.5,9' (no newline) has 3 of the 4 fields of the line before, as a "
        "download or copy that stopped leaves a file. Get the file again whole."
    )


def test_a_last_row_whole_but_without_its_newline_is_read(tmp_path):
    text = speeds().to_csv(index=False)
    (tmp_path / "los_speed.csv").write_text(text.rstrip("\n"))
    write_locations(tmp_path)
    stream = source(tmp_path, path="los_speed.csv", missing_value=None).load()
    np.testing.assert_allclose(stream.values[-1, :, 0], [74.5, 84.5, 94.5, 104.5])


def test_a_long_format_file_cut_short_is_refused(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text(cut_in_last_row(long_table().to_csv(index=False), keep=25))
    with pytest.raises(
        UserError, match=r"ends inside a row, its last line '.*' \(no newline\) has 3 of the 7"
    ):
        LongFormatSource(path).load()


def test_a_positions_file_cut_short_is_refused(tmp_path):
    speeds().to_csv(tmp_path / "los_speed.csv", index=False)
    locations = write_locations(tmp_path)
    locations.write_text(cut_in_last_row(locations.read_text(), keep=8))
    with pytest.raises(UserError, match=r"^Cannot read the positions file .*: it ends inside"):
        source(tmp_path, path="los_speed.csv").load()


def test_a_graph_file_cut_short_is_refused(tmp_path):
    speeds().to_csv(tmp_path / "los_speed.csv", index=False)
    write_locations(tmp_path)
    graph = tmp_path / "los_adj.csv"
    graph.write_text("0,1,0.5,0\n1,0,0.2,0\n0.5,0.2,0,1\n0,0,1")  # the last row cut
    with pytest.raises(UserError, match=r"^Cannot read the graph .*: it ends inside a row"):
        source(tmp_path, path="los_speed.csv", graph="los_adj.csv").adjacency(IDS)


def test_a_telecom_italia_day_file_cut_short_is_refused(tmp_path):
    folder = tmp_path / "telecom"
    write_files(folder)
    day = sorted(folder.glob("*.txt"))[-1]
    day.write_text(cut_in_last_row(day.read_text(), keep=20))
    write_grid(folder / "milano-grid.geojson.gz")
    with pytest.raises(UserError) as err:
        TelecomItaliaSource(folder).load()
    assert re.match(
        rf"Cannot read the Telecom Italia file {re.escape(str(day))}: it ends inside a row, "
        r".* of the 8 fields",
        str(err.value),
    )


def test_the_end_is_found_past_the_bytes_looked_at_and_in_short_files(tmp_path):
    long_row = ",".join(["1.25"] * 40_000)  # rows longer than the end read first
    assert len(long_row) > TAIL_BYTES
    path = tmp_path / "wide.csv"
    path.write_text(f"{long_row}\n{long_row}\n{long_row[:-9]}")
    with pytest.raises(UserError, match=r"has 39999 of the 40000 fields"):
        refuse_cut_short(path, "the table")
    one_line = tmp_path / "one.csv"
    one_line.write_text("a,b,c")  # a header alone, no newline: nothing to compare
    refuse_cut_short(one_line, "the table")
    # a whole last row whose quoted field spans two lines is no cut
    (tmp_path / "two_lines.csv").write_text('id,name,v\n1,a,3\n2,"two\nlines",4')
    refuse_cut_short(tmp_path / "two_lines.csv", "the table")
    (tmp_path / "quoted.csv").write_text('id,name\n1,"Milan, Italy"\n2,"Rome')
    with pytest.raises(UserError, match=r"\'2,\"Rome\' \(no newline\) ends inside a quoted field"):
        refuse_cut_short(tmp_path / "quoted.csv", "the table")
