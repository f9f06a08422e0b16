"""Writing a file whole or not at all (cloudlstm.errors.replacing), and the comparison tool's
view of a write in progress."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from cloudlstm.compare import find_runs
from cloudlstm.errors import replacing
from tests.test_compare import write_run


def test_the_file_is_written_under_its_own_name_and_nothing_else_is_left(tmp_path):
    path = tmp_path / "out" / "forecast.csv.gz"  # its folder made; compression by suffix
    with replacing(path) as part:
        assert part.name == path.name and part.parent.parent == path.parent
        pd.DataFrame({"a": [1, 2]}).to_csv(part, index=False)
    assert pd.read_csv(path)["a"].tolist() == [1, 2]  # read back as gzip: the suffix held
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_numpy_keeps_the_name_it_is_given(tmp_path):
    """``np.savez`` adds ``.npz`` to a name without it: the part has the file's own name."""
    path = tmp_path / "grid.npz"
    with replacing(path) as part:
        np.savez(part, cell=np.arange(3))
    with np.load(path) as saved:
        assert saved["cell"].tolist() == [0, 1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["grid.npz"]


def test_a_failed_write_leaves_the_earlier_file_and_no_part(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text('{"old": 1}')
    with pytest.raises(RuntimeError, match="stopped"), replacing(path) as part:
        part.write_text('{"new"')
        raise RuntimeError("stopped half way")
    assert json.loads(path.read_text()) == {"old": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_a_write_that_made_no_file_is_an_error_and_changes_nothing(tmp_path):
    path = tmp_path / "page.html"
    path.write_text("old")
    with pytest.raises(FileNotFoundError), replacing(path):
        pass
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["page.html"]


def test_a_metrics_file_in_a_hidden_folder_is_no_run(tmp_path):
    """A write killed before its rename leaves ``.metrics.json.<random>.part/metrics.json``;
    Hydra's ``.hydra`` is hidden too. Neither is a run of the comparison."""
    write_run(tmp_path / "run", 1.0)
    write_run(tmp_path / "run" / ".metrics.json.x1y2.part", 9.0)
    write_run(tmp_path / "sweep" / ".hydra", 9.0)
    assert [run.path for run in find_runs([tmp_path])] == [tmp_path / "run"]
    # a root given by the user may itself be hidden
    assert len(find_runs([tmp_path / "run" / ".metrics.json.x1y2.part"])) == 1
