"""A resumed run goes on with the data it trained on: a data file edited or grown since its
checkpoint stops the resume in one line naming what changed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import TINY, compose_train

from cloudlstm.assembly.resume_data import check_resume_data, data_difference
from cloudlstm.cli.train import train
from cloudlstm.data.spec import SPEC_KEY, DataSpec
from cloudlstm.errors import UserError

SPEC = replace(
    DataSpec.sized(num_points=3, num_channels=2, input_steps=4, output_steps=2, steps_per_day=24),
    scaler={"mean": [1.0, 2.0], "std": [0.5, 4.0]},
)


@pytest.mark.parametrize(
    ("now", "said"),
    [
        (SPEC, ""),
        (replace(SPEC, channel_names=["ch0", "no2"]), "its channels were [ch0, ch1], they are"),
        (
            replace(SPEC, point_ids=["0", "1", "7"]),
            "its points differ: 1 new (7); 1 gone (2)",
        ),
        (replace(SPEC, point_ids=["2", "1", "0"]), "its points are the same, in another order"),
        (replace(SPEC, step_minutes=30.0), "its step was 60.0 min, it is 30.0 min"),
        (
            replace(SPEC, coords=[[0.0, 0.0], [0.5, 0.9], [1.0, 1.0]]),
            "point '1' (and 0 more) moved",
        ),
        (
            replace(SPEC, scaler={"mean": [1.0, 2.5], "std": [0.5, 4.0]}),
            "the training part's 'ch1' has mean 2.5 and standard deviation 4, against 2 and 4",
        ),
        (replace(SPEC, scaler={"mean": [1.0 + 1e-9, 2.0], "std": [0.5, 4.0]}), ""),
    ],
    ids=["same", "channels", "points", "order", "step", "moved", "scaler", "last-bits"],
)
def test_the_first_difference_of_the_data_is_said(now, said):
    found = data_difference(SPEC, now)
    assert found.startswith(said) if said else found == ""


def test_a_checkpoint_without_a_description_or_a_data_change_allowed_is_not_checked():
    moved = replace(SPEC, step_minutes=30.0)
    check_resume_data(moved, {}, Path("old.ckpt"))
    check_resume_data(moved, {SPEC_KEY: SPEC.to_dict()}, Path("a.ckpt"), ["data.source.path"])
    check_resume_data(moved, {SPEC_KEY: SPEC.to_dict()}, Path("a.ckpt"), ["data"])
    for allowed in (["optimizer.lr"], ["data.batch_size"], ["data.stride", "data.holdout_history"]):
        # a setting that serves the same data otherwise lets no other data through
        with pytest.raises(UserError, match=r"^a\.ckpt was trained on other data than the run"):
            check_resume_data(moved, {SPEC_KEY: SPEC.to_dict()}, Path("a.ckpt"), allowed)


def csv_job(tmp_path: Path, path: Path, *extra: str):
    keep = [o for o in TINY if not o.startswith("data.source.")]
    return compose_train(tmp_path, [*keep, "data=points", f"data.source.path={path}", *extra])


def test_resuming_on_an_edited_file_is_refused(tmp_path):
    """The datamodule fitted its scaler on the edited file and the run went on, and was
    tested, on other data than it began with."""
    rng = np.random.default_rng(0)
    stamps = pd.date_range("2024-01-01", periods=160, freq="h")
    rows = [[t, f"p{p}", p, p * p % 5, rng.normal(10, 2)] for t in stamps for p in range(6)]
    table = pd.DataFrame(rows, columns=["timestamp", "id", "x", "y", "v"])
    table.to_csv(path := tmp_path / "stream.csv", index=False)
    train(csv_job(tmp_path / "first", path, "logger=none"))
    last = tmp_path / "first" / "run" / "checkpoints" / "last.ckpt"

    table.assign(v=table["v"] * 1.2).to_csv(path, index=False)
    with pytest.raises(UserError) as refused:
        train(csv_job(tmp_path / "again", path, "logger=none", f"resume={last}"))
    assert str(refused.value).startswith(
        f"{last} was trained on other data than the run reads now: the training part's 'v' has "
        "mean "
    )
    assert str(refused.value).endswith("or train on these afresh: resume=never (better in a new "
                                       "run directory).")  # fmt: skip
