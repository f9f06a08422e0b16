"""The comparison table, the parameter-count table and the space check."""

from __future__ import annotations

import json

import pytest

from cloudlstm.cli import space_check
from cloudlstm.cli.compare import find_runs, main, to_markdown
from cloudlstm.cli.models_table import count_parameters, model_names


def _fake_run(path, model, data, mae, params=10):
    path.mkdir(parents=True)
    overall = {
        m: {"mean": mae * f, "std": 0.1}
        for m, f in zip(("mae", "rmse", "psnr", "ssim"), (1, 2, 3, 0.01), strict=True)
    }
    (path / "metrics.json").write_text(
        json.dumps(
            {
                "run": {"model": model, "data": data, "tags": [model, data, "k=3"]},
                "num_params": params,
                "epochs": 2,
                "train_time_s": 12.3,
                "test": {"overall": overall},
            }
        )
    )


def test_compare_sorts_by_data_then_mae(tmp_path, capsys):
    _fake_run(tmp_path / "a", "lstm", "synthetic", 3.0)
    _fake_run(tmp_path / "b", "cloudlstm", "synthetic", 2.0, params=1234567)
    _fake_run(tmp_path / "c", "mlp", "beijing", 9.0)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "metrics.json").write_text(json.dumps({"run": {}}))  # no test: skipped
    rows = find_runs([tmp_path])
    assert [(r["data"], r["model"]) for r in rows] == [
        ("beijing", "mlp k=3"),
        ("synthetic", "cloudlstm k=3"),
        ("synthetic", "lstm k=3"),
    ]
    table = to_markdown(rows)
    assert "| cloudlstm k=3 | synthetic | 1,234,567 | 2 | 12 | 2 ± 0.1 | 4 ± 0.1 |" in table
    assert main([str(tmp_path), "--format", "csv"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("model,data,params,epochs,train_s,mae_mean,mae_std")
    assert out[1].startswith("mlp k=3,beijing,10,2,12.3,9.0,0.1")


def test_compare_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        find_runs([tmp_path / "missing"])
    assert main([str(tmp_path)]) == 1


def test_parameter_counts_follow_the_configs():
    names = model_names()
    assert {"cloudlstm", "mlp", "cnn", "stgcn", "pointlstm", "persistence"} <= set(names)
    assert count_parameters("persistence") == 0
    # MLP: 5 hidden layers of 500 on the flattened 12 x 274 x 6 window, all outputs at once.
    d = 12 * 274 * 6
    expected = (d * 500 + 500) + 4 * (500 * 500 + 500) + (500 * d + d)
    assert count_parameters("mlp") == expected
    assert count_parameters("mlp", num_points=10) < expected


def test_space_check_prints_test_mse_and_ratio_to_the_per_point_lstm(capsys):
    space_check.main(["--seeds", "0", "--epochs", "1", "--models", "lstm_k6"])
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines()[2:]]
    # lstm_k1 is always trained first: it is the reference of the ratio
    assert [r[1].strip() for r in rows] == ["lstm_k1", "lstm_k6"]
    base, other = (float(r[2]) for r in rows)
    assert float(rows[0][3]) == 1.0
    assert float(rows[1][3]) == pytest.approx(other / base, abs=2e-3)
    assert 0 < base < 1  # one epoch already beats the training-mean forecast
