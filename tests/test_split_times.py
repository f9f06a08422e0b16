"""``data.split_times``: the parts begin at given times instead of at fractions of the steps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import TINY, compose_train

from cloudlstm.cli.evaluate import evaluate
from cloudlstm.cli.train import train
from cloudlstm.data import PointCloudDataModule, PointCloudStream
from cloudlstm.errors import UserError
from tests.test_eval import compose_eval

T = 400  # hourly steps from 2021-01-01 00:00: step t is hour t


def stream(timestamps: bool = True) -> PointCloudStream:
    """values[t, n, 0] = t + 1000 n, so a window's values name its steps."""
    values = (np.arange(T)[:, None, None] + 1000.0 * np.arange(4)[None, :, None]).astype(np.float32)
    stamps = np.datetime64("2021-01-01T00:00") + np.arange(T) * np.timedelta64(1, "h")
    coords = np.random.default_rng(0).uniform(0, 10, (4, 2))
    return PointCloudStream.from_values(
        values, coords, timestamps=stamps if timestamps else None, name="toy"
    )


def datamodule(times, source=None) -> PointCloudDataModule:
    dm = PointCloudDataModule(source or stream(), input_steps=4, output_steps=3, split_times=times)
    dm.setup()
    return dm


def test_each_part_begins_at_the_first_step_at_or_after_its_time(caplog):
    with caplog.at_level("WARNING"):
        dm = datamodule({"val": "2021-01-08", "test": "2021-01-10 12:30", "end": "2021-01-15"})
    assert [r.getMessage() for r in caplog.records] == [  # a time between steps is said
        "data.split_times.test=2021-01-10 12:30:00 is no time of the data's steps: that part "
        "begins at the next one, 2021-01-10 13:00:00."
    ]
    assert dm.bounds == {"train": (0, 168), "val": (168, 229), "test": (229, 336)}
    test = dm.datasets["test"]
    first = dm.scaler.inverse_transform(test[0]["y"]).numpy()[:, 0, 0].round()
    last = dm.scaler.inverse_transform(test[len(test) - 1]["y"]).numpy()[:, 0, 0].round()
    np.testing.assert_array_equal(first, [229, 230, 231])
    np.testing.assert_array_equal(last, [333, 334, 335])  # nothing from `end` on
    # the scaler saw the training part alone: steps 0..167, points at +0, 1000, 2000, 3000
    np.testing.assert_allclose(dm.scaler.mean, [167 / 2 + 1500], rtol=1e-6)


def test_training_may_begin_later():
    dm = datamodule({"train": "2021-01-02", "val": "2021-01-08", "test": "2021-01-10"})
    assert dm.bounds == {"train": (24, 168), "val": (168, 216), "test": (216, T)}
    x = dm.scaler.inverse_transform(dm.datasets["train"][0]["x"]).numpy()[:, 0, 0].round()
    np.testing.assert_array_equal(x, [24, 25, 26, 27])


def test_a_time_with_a_utc_offset_is_the_utc_time_it_names():
    """The data's times are UTC where their files gave an offset: 8 January 01:00 at +01:00
    is midnight UTC, step 168; its wall time, 01:00, was step 169."""
    with_offsets = {"val": "2021-01-08T01:00+01:00", "test": "2021-01-10T07:00-05:00"}
    assert (
        datamodule(with_offsets).bounds
        == datamodule({"val": "2021-01-08 00:00", "test": "2021-01-10 12:00"}).bounds
    )
    assert datamodule(with_offsets).bounds["val"][0] == 168


@pytest.mark.parametrize(
    ("times", "message"),
    [
        ({"val": "2021-01-08"}, r"data.split_times needs test: e\.g\."),
        ({"val": "x", "test": "2021-01-10"}, r"data.split_times.val='x' is not a time"),
        # a year unquoted: pandas read it as nanoseconds after 1970
        ({"val": 2021, "test": "2021-01-10"}, r"data.split_times.val=2021 is a number, not a "),
        ({"val": "2021-01-08", "tst": "2021-01-10"}, "data.split_times has no key tst: its keys"),
        (
            {"val": "2021-01-10", "test": "2021-01-08"},
            r"must leave each part at least one step, in the order train < val < test < end, "
            r"within the data's times \(toy: 2021-01-01 00:00:00 to 2021-01-17 15:00:00\)",
        ),
        ({"val": "2021-01-08", "test": "2022-01-01"}, "must leave each part at least one step"),
        ({"val": "2021-01-08", "test": "2021-01-08 01:00"}, r"the val part .* has 1 steps"),
    ],
)
def test_a_bad_time_is_refused_in_one_line(times, message):
    with pytest.raises(UserError, match=message):
        datamodule(times)


def test_a_time_beyond_the_datas_edge_is_refused_not_moved_to_it():
    """An ``end`` after the data's last step ended the test at the data's end in silence:
    a protocol's test weeks, met in name only."""
    span = "toy runs from 2021-01-01 00:00:00 to 2021-01-17 15:00:00"
    with pytest.raises(UserError) as refused:
        datamodule({"val": "2021-01-08", "test": "2021-01-10", "end": "2021-01-18"})
    assert str(refused.value) == (
        f"data.split_times.end=2021-01-18 00:00:00 is after the data's last step ({span}): the "
        "test would end at the data's end. Leave end out to test up to there, or give data "
        "that reach it."
    )
    with pytest.raises(UserError) as refused:
        datamodule({"train": "2020-12-31", "val": "2021-01-08", "test": "2021-01-10"})
    assert str(refused.value).startswith(
        f"data.split_times.train=2020-12-31 00:00:00 is before the data's first step ({span}): "
        "training would begin at the data's start. Leave train out"
    )
    # the step after the last (an end is not part of the test) and the first step are in
    edges = {"train": "2021-01-01", "val": "2021-01-08", "test": "2021-01-10"}
    assert datamodule({**edges, "end": "2021-01-17 16:00"}).bounds["test"] == (216, T)


def test_data_without_times_is_refused():
    with pytest.raises(UserError, match="toy has none: split it with data.val_fraction"):
        datamodule({"val": "2021-01-08", "test": "2021-01-10"}, stream(timestamps=False))


def test_a_fraction_given_beside_split_times_is_refused(tmp_path):
    """data.test_fraction=0.3 with data.split_times was ignored in silence."""
    times = 'data.split_times={val:"2020-01-05",test:"2020-01-06"}'
    cfg = compose_train(tmp_path, [*TINY, "logger=none", times, "data.test_fraction=0.3"])
    with pytest.raises(UserError, match=(
        r"^data.test_fraction has no effect: data.split_times sets where the parts begin\. "
        r"Give the parts' times in data.split_times, or data.split_times=null"
    )):  # fmt: skip
        train(cfg)


def test_a_run_records_its_parts_and_eval_py_keeps_them(tmp_path):
    """Through the config (the synthetic data: hourly from 2020-01-01, 160 steps): the
    parts lie where the times say, in metrics.json, and eval.py rebuilds the same."""
    times = 'data.split_times={val:"2020-01-05",test:"2020-01-06 00:00"}'
    cfg = compose_train(tmp_path / "train", [*TINY, "logger=none", times])
    results = train(cfg)
    expected = {"train": [0, 96], "val": [96, 120], "test": [120, 160]}
    assert results["data"]["bounds"] == expected
    again = evaluate(compose_eval(Path(cfg.paths.output_dir), tmp_path / "eval"))
    assert again["data"]["bounds"] == expected
    assert again["test"]["overall"] == results["test"]["overall"]
