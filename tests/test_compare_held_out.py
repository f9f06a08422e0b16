"""compare's rows and labels of held-out runs (``data.holdout_*``) and of eval.py's
re-tests of them: a row says what differs between runs and nothing that does not."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from cloudlstm.cli.compare.command import main as compare_main
from cloudlstm.cli.evaluate import evaluate
from cloudlstm.cli.train import train
from tests.conftest import TINY, compose_train
from tests.test_eval import compose_eval

NEVER_VALIDATES = "trainer.limit_val_batches=0"  # tests last.ckpt, the only weights it keeps


def trained(folder: Path, *overrides: str) -> Path:
    """The run directory of the tiny job with ``overrides``."""
    cfg = compose_train(folder, [*TINY, "logger=none", "seed=0", *overrides])
    train(cfg)
    return Path(cfg.paths.output_dir)


def evaluated(run: Path, name: str, *overrides: str) -> None:
    """``eval.py run=<run> <overrides>``, into ``<run>/eval/<name>``."""
    evaluate(compose_eval(run, run / "eval" / name, *overrides))


@pytest.fixture(scope="module")
def held_out_runs(tmp_path_factory) -> Path:
    """Four runs of seed 0 and their re-tests:

    * ``a_list``: ``[s007,s001]`` held out; ``b_list``: ``[s001,s007]``, the same set,
      with another ``data.holdout_seed``, which a named list does not draw with;
    * ``c_drawn``, ``d_drawn``: 3 points drawn with ``data.holdout_seed`` 5 and 6, trained
      without validation, so that their tested checkpoint is ``last.ckpt``;
    * re-tests of ``a_list`` naming its points, with no point held out, and of
      ``last.ckpt`` by its name; of ``c_drawn`` by default, with ``ckpt=last``, and
      naming the 3 points it drew.
    """
    root = tmp_path_factory.mktemp("held_out_runs")
    a = trained(root / "a_list", "data.holdout_points=[s007,s001]")
    trained(root / "b_list", "data.holdout_points=[s001,s007]", "data.holdout_seed=5")
    c = trained(root / "c_drawn", "data.holdout_points=3", "data.holdout_seed=5", NEVER_VALIDATES)
    trained(root / "d_drawn", "data.holdout_points=3", "data.holdout_seed=6", NEVER_VALIDATES)
    evaluated(a, "named", "data.holdout_points=[s001,s007]")
    evaluated(a, "every", "data.holdout_points=null")
    evaluated(a, "last_by_name", "ckpt=last.ckpt")
    evaluated(c, "1_default")
    evaluated(c, "2_last", "ckpt=last")
    drawn = json.loads((c / "metrics.json").read_text())["data"]["point_groups"]["held_out"]
    evaluated(c, "3_named", f"data.holdout_points=[{','.join(drawn)}]")
    return root


def compared(root: Path, capsys) -> tuple[dict[tuple[str, str], dict], list[str]]:
    """compare's CSV rows of ``root`` with the re-tests, by (held-out points, evaluation;
    "" where no run holds points out, as compare then shows no such column), and its
    warnings on stderr."""
    argv = [str(root), "--include-evals", "--metrics", "mae", "--format", "csv"]
    assert compare_main(argv) == 0
    out, err = capsys.readouterr()
    rows = csv.DictReader(io.StringIO(out))
    warnings = [line for line in err.splitlines() if line.startswith("compare: warning:")]
    return {(r.get("data.holdout_points", ""), r["evaluation"]): r for r in rows}, warnings


def test_rows_and_labels_name_what_differs_and_nothing_else(held_out_runs, capsys):
    """The same set named in two orders was two rows; a list's draw seed made a copy a
    second sample; two draws of 3 points are the samples of one row; a re-test that named
    the run's own points carried them into its label, and those a run drew into a row and
    data set of their own; ``last.ckpt`` named by its file, or tested as the best of a run
    that never validated, was not ``last``."""
    rows, err = compared(held_out_runs, capsys)
    named = "['s001', 's007']"
    assert {key: row["n"] for key, row in rows.items()} == {
        (named, ""): "1",
        (named, "eval best"): "1",
        (named, "eval last"): "1",
        ("", "eval best data.holdout_points=null"): "1",
        ("3", ""): "2",
        ("3", "eval last"): "1",
    }
    assert len(err) == 2
    assert err[0].startswith("compare: warning: b_list/run has the settings and seed (0) of ")
    assert err[1].startswith(
        "compare: warning: c_drawn/run/eval/2_last re-tests the run and seed (0) that "
        "c_drawn/run/eval/1_default re-tested, with the same checkpoint and overrides "
        "(eval last): one sample, so it is left out, not counted as another seed (1 more "
        "such re-test(s) left out)"
    )


def test_a_retest_without_held_out_points_of_a_run_that_held_none_out_is_its_own(tmp_path, capsys):
    """``data.holdout_points=null`` changed nothing in a re-test of a run that held no
    point out: it was labelled as another setting (``eval best data.holdout_points=null``),
    where it is one sample with the run's plain re-test."""
    run = trained(tmp_path / "every_point")
    evaluated(run, "1_default")
    evaluated(run, "2_null", "data.holdout_points=null")
    capsys.readouterr()  # what training and testing printed: no part of compare's table
    rows, err = compared(tmp_path, capsys)
    assert {key: row["n"] for key, row in rows.items()} == {("", ""): "1", ("", "eval best"): "1"}
    assert len(err) == 1
    assert err[0].startswith(
        "compare: warning: every_point/run/eval/2_null re-tests the run and seed (0) that "
        "every_point/run/eval/1_default re-tested, with the same checkpoint and overrides "
        "(eval best)"
    )
