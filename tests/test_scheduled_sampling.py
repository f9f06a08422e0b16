"""Scheduled sampling (``module.scheduled_sampling``): the decay against hand computation,
the draws, and every model that reads its own forecasts reading the truth exactly where
it is told to, in its own layout of the points (reordered, gridded, one sequence per
point); models that forecast all steps at once are refused in one line.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from conftest import TINY, run_python
from test_anchor_heads import MODELS, SPEC, J, N, random_batch, tiny_model_config

from cloudlstm.engine.module import ForecastModule
from cloudlstm.engine.scheduled_sampling import (
    check_scheduled_sampling,
    draw_teacher,
    truth_probability,
)
from cloudlstm.errors import UserError
from cloudlstm.models.base import ForecastModel
from cloudlstm.models.build import build_model
from cloudlstm.models.teacher import Teacher, taught


def test_the_decay_is_dcrnns_inverse_sigmoid():
    assert truth_probability(0, 10) == pytest.approx(10 / 11)
    assert truth_probability(100, 10) == pytest.approx(10 / (10 + math.e**10))
    # one half where exp(s / tau) = tau
    assert truth_probability(round(2000 * math.log(2000)), 2000) == pytest.approx(0.5, abs=1e-4)
    assert truth_probability(10**9, 1) == 0.0  # exp would overflow
    values = [truth_probability(s, 50) for s in range(0, 2000, 50)]
    assert values == sorted(values, reverse=True)


@pytest.mark.parametrize("value", [0, -3, 1.5, True, "10"])
def test_a_decay_that_is_not_a_number_of_steps_is_refused(tmp_path, value):
    lstm = _built(tmp_path, "lstm")
    with pytest.raises(UserError, match=r"module.scheduled_sampling=.*whole number >= 1"):
        check_scheduled_sampling(value, lstm)


def test_draws_are_one_per_step_for_the_whole_batch_and_skip_unobserved_targets():
    y = torch.randn(4, 6, 5, 2)
    observed = torch.rand(4, 6, 5, 2) > 0.3
    torch.manual_seed(1)
    teacher = draw_teacher(y, observed, 0.5)
    torch.manual_seed(1)
    steps = torch.rand(6) < 0.5
    assert torch.equal(teacher.use, observed & steps[None, :, None, None])
    assert torch.equal(teacher.values, y)
    assert draw_teacher(y, observed, 1.0).use.equal(observed)
    assert not draw_teacher(y, observed, 0.0).use.any()


def test_anchored_the_truth_is_given_in_the_models_output_space():
    """With module.anchor=last the module adds the last frame to the model's output: the
    decoder's own values are the targets less it."""
    y, last = torch.randn(2, 3, 4, 1), torch.randn(2, 4, 1)
    teacher = draw_teacher(y, torch.ones_like(y, dtype=torch.bool), 1.0, anchor=last)
    assert torch.allclose(teacher.values + last[:, None], y, atol=1e-6)


# the model configs whose decoder reads its own forecasts
DECODER_CONFIGS = {
    *("attention_cloudlstm", "attention_cloudlstm_k3", "cloudgru", "cloudgru_k3"),
    *("cloudlstm", "cloudlstm_k3", "cloudlstm_k6", "cloudlstm_mae", "cloudlstm_residual"),
    *("cloudrnn", "convlstm", "dcrnn", "knn_lstm", "knn_lstm_k3", "lstm", "pointlstm"),
    "predrnnpp",
}
# one of each decoder's structure; "cloudlstm z-order": points reordered while it runs
DECODERS = [
    *("attention_cloudlstm", "cloudgru", "cloudlstm", "cloudlstm z-order"),
    *("cloudlstm_residual", "cloudrnn", "convlstm", "dcrnn", "knn_lstm", "lstm"),
    *("pointlstm", "predrnnpp"),
]


def _built(tmp_path, name: str) -> ForecastModel:
    config = tiny_model_config(tmp_path, name.split()[0])
    if name.endswith("z-order"):
        config.spatial_order = True
    torch.manual_seed(0)
    return build_model(config, SPEC).eval()


@pytest.mark.parametrize("name", MODELS)
def test_the_models_that_read_their_own_forecasts_say_so(tmp_path, name):
    assert _built(tmp_path, name).reads_own_forecasts == (name in DECODER_CONFIGS)


def _forecast(model: ForecastModel, x, coords, teacher: Teacher | None = None) -> torch.Tensor:
    with torch.no_grad(), taught(model, teacher):
        return model(x, coords)


@pytest.mark.parametrize("name", DECODERS)
def test_a_decoder_reads_the_truth_where_it_is_used_and_its_forecast_elsewhere(tmp_path, name):
    """Fed its own forecasts as the truth, a decoder forecasts what it does untaught; a
    wrong value where it is not used (one point of one step) changes nothing, and the
    model's layout of the points (Z-order, grid cells, one sequence per point) puts each
    value at its point."""
    model = _built(tmp_path, name)
    x, coords, _ = random_batch()
    plain = _forecast(model, x, coords)
    use = torch.ones_like(plain, dtype=torch.bool)
    use[:, 0, N // 3] = False
    values = plain.clone()
    values[:, 0, N // 3] = 100.0
    assert torch.allclose(_forecast(model, x, coords, Teacher(values, use)), plain, atol=1e-6)
    nothing = Teacher(torch.full_like(plain, 100.0), torch.zeros_like(use))
    assert torch.equal(_forecast(model, x, coords, nothing), plain)


@pytest.mark.parametrize("name", DECODERS)
def test_step_j_reads_the_truth_of_step_j_minus_1_alone(tmp_path, name):
    """The truth of step j moves the forecasts of the steps after it, never of step j or
    before; the last step's truth is never read. At the point changed, step j + 1 moves."""
    model = _built(tmp_path, name)
    x, coords, truth = random_batch()
    use = torch.ones_like(truth, dtype=torch.bool)
    taught_once = _forecast(model, x, coords, Teacher(truth, use))
    assert not torch.allclose(taught_once[:, 1:], _forecast(model, x, coords)[:, 1:])
    for j in range(J):
        changed = truth.clone()
        changed[:, j, N // 2] += 5.0
        out = _forecast(model, x, coords, Teacher(changed, use))
        assert torch.equal(out[:, : j + 1], taught_once[:, : j + 1]), j
        if j + 1 < J:
            assert not torch.allclose(out[:, j + 1, N // 2], taught_once[:, j + 1, N // 2]), j


@pytest.mark.parametrize("name", sorted(set(MODELS) - DECODER_CONFIGS))
def test_a_model_that_forecasts_all_steps_at_once_is_refused(tmp_path, name):
    model = _built(tmp_path, name)
    with pytest.raises(UserError, match=rf"{type(model).__name__} forecasts its steps without"):
        ForecastModule(model, optimizer=None, scheduled_sampling=100)


# TINY's data and budget, without its CloudLSTM widths
TINY_DATA = [a for a in TINY if not a.startswith("model.")]


def test_a_run_logs_the_decay_and_a_direct_model_is_refused_from_the_command_line(tmp_path):
    run_dir = tmp_path / "run"
    trained = run_python(
        "train.py",
        *TINY_DATA,
        "model=lstm",
        "module.scheduled_sampling=2",
        "logger=csv",
        "trainer.log_every_n_steps=1",
        f"hydra.run.dir={run_dir}",
        f"paths.data_dir={tmp_path / 'data'}",
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    (path,) = run_dir.glob("csv/*/metrics.csv")
    logged = pd.read_csv(path).dropna(subset=["train/truth_probability"])
    for step, probability in zip(logged["step"], logged["train/truth_probability"], strict=True):
        assert probability == pytest.approx(truth_probability(int(step), 2))
    assert len(logged) == 6  # 2 epochs of 3 batches

    refused = run_python(
        "train.py",
        *TINY_DATA,
        "model=stid",
        "module.scheduled_sampling=2",
        f"hydra.run.dir={tmp_path / 'stid'}",
        f"paths.data_dir={tmp_path / 'data'}",
    )
    assert refused.returncode != 0
    lines = [line for line in refused.stderr.splitlines() if "scheduled_sampling" in line]
    assert len(lines) == 1 and "STID forecasts its steps without" in lines[0]
    assert "Traceback" not in refused.stderr
