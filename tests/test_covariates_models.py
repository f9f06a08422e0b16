"""Covariates in the point and graph models: CloudCNN, PointCNN, PointLSTM, kNN-LSTM,
kNN-MLP, MLP and STGCN.

Each reads ``x (B, M, N, C_in)`` (targets, measured covariates, time features) and forecasts
the C_out targets. The seq2seq models (PointLSTM, kNN-LSTM) compose each decoder step's
frame from their forecast, the held covariates and the step's time features; the direct
ones read the input window only. Without covariates every model is built and computes as
before.
"""

from __future__ import annotations

import pytest
import torch

from cloudlstm.data.spec import DataSpec
from cloudlstm.models.base import ForecastModel
from cloudlstm.models.build import build_model
from cloudlstm.nn import knn

B, M, N, C, J, L = 2, 4, 12, 2, 3, 2
COV, F = 2, 2  # two measured covariates; the hour's sin and cos
C_IN = C + COV + F

MODELS = "cloudlstm.models"
CONFIGS = {
    "cloudcnn": {"_target_": f"{MODELS}.CloudCNN", "k": 3, "hidden_channels": 4, "num_layers": 2},
    "pointcnn": {
        "_target_": f"{MODELS}.pointcnn.PointCNN",
        "k": 3,
        "hidden_channels": 4,
        "num_layers": 2,
    },
    "pointlstm": {
        "_target_": f"{MODELS}.pointlstm.PointLSTM",
        "k": 3,
        "hidden_channels": 4,
        "num_layers": 2,
    },
    "knn_lstm": {"_target_": f"{MODELS}.KNNLSTM", "k": 3, "hidden_size": 8, "num_layers": 2},
    "knn_mlp": {"_target_": f"{MODELS}.knn_mlp.KNNMLP", "k": 3, "hidden_size": 8, "num_layers": 2},
    "mlp": {"_target_": f"{MODELS}.mlp.MLP", "hidden_size": 8, "num_layers": 2},
    "stgcn": {"_target_": f"{MODELS}.stgcn.STGCN", "hidden_channels": 4},
}
# Parameters of each model built from PLAIN before it took covariates: the covariate-free
# build must stay the same model.
PLAIN_PARAMETERS = {
    "cloudcnn": 1986,
    "pointcnn": 622,
    "pointlstm": 2909,
    "knn_lstm": 2194,
    "knn_mlp": 326,
    "mlp": 1496,
    "stgcn": 598,
}
AUTOREGRESSIVE = {"pointlstm", "knn_lstm"}
KNN = {"knn_lstm", "knn_mlp"}

PLAIN = DataSpec.sized(N, C, M, J, coord_features=L, steps_per_day=24)
COVARIATES = DataSpec.sized(
    N, C, M, J, coord_features=L, steps_per_day=24, covariates=COV, time_features=["hour"]
)


def build(name: str, spec: DataSpec) -> ForecastModel:
    torch.manual_seed(0)
    model = build_model(CONFIGS[name], spec).eval()
    with torch.no_grad():  # a head of non-zero weights, whatever the model's initialisation
        for layer in model.output_head():
            for param in layer.parameters():
                param.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(3))
    return model


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x (B, M, N, C_in)``, ``coords (B, N, L)``, ``future (B, J, N, F)``."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(B, M, N, C_IN, generator=gen)
    coords = torch.rand(N, L, generator=gen).expand(B, N, L).contiguous()
    return x, coords, torch.randn(B, J, N, F, generator=gen)


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", CONFIGS)
def test_without_covariates_the_model_is_the_one_of_before(name: str) -> None:
    model = build(name, PLAIN)
    assert model.channels is not None and model.channels.inp == model.channels.out == C
    assert n_params(model) == PLAIN_PARAMETERS[name]
    x, coords, _ = batch()
    with torch.no_grad():
        assert model(x[..., :C], coords).shape == (B, J, N, C)
    with pytest.raises(ValueError, match="without time features"):
        model(x[..., :C], coords, torch.zeros(B, J, N, F))


@pytest.mark.parametrize("name", CONFIGS)
def test_with_covariates_the_model_reads_them_and_forecasts_the_targets(name: str) -> None:
    model = build(name, COVARIATES)
    assert (model.channels.out, model.channels.inp, model.channels.future) == (C, C_IN, F)
    assert n_params(model) > PLAIN_PARAMETERS[name]
    x, coords, future = batch()
    with torch.no_grad():
        out = model(x, coords, future)
        assert out.shape == (B, J, N, C) and out.isfinite().all()
        for channel in (C, C_IN - 1):  # a measured covariate, a time feature
            moved = x.clone()
            moved[..., channel] += 1.0
            assert not torch.allclose(model(moved, coords, future), out), channel
    with pytest.raises(ValueError, match="C_in"):
        model(x[..., :C], coords, future)
    with pytest.raises(ValueError, match="future"):
        model(x, coords)


@pytest.mark.parametrize("name", CONFIGS)
def test_the_future_feeds_only_the_decoder_steps_after_it(name: str) -> None:
    """Seq2seq decoders read step j's time features in the frame of step j, the input of
    step j + 1: changing them moves the forecast from step j + 1 on. Direct models read the
    input window's time features and leave ``future`` unread."""
    model = build(name, COVARIATES)
    x, coords, future = batch()
    with torch.no_grad():
        out = model(x, coords, future)
        for step in range(J):
            moved = future.clone()
            moved[:, step] += 1.0
            changed = (model(x, coords, moved) - out).abs().amax(dim=(0, 2, 3)) > 0
            read = name in AUTOREGRESSIVE and step < J - 1
            expected = torch.arange(J) > step if read else torch.zeros(J, dtype=torch.bool)
            assert torch.equal(changed, expected), (step, changed)


@pytest.mark.parametrize("name", sorted(KNN))
def test_knn_models_gather_their_neighbours_covariates(name: str) -> None:
    """A covariate of point 5 moves the forecast of exactly the points that have point 5
    among their k nearest neighbours."""
    model = build(name, COVARIATES)
    x, coords, future = batch()
    poked = x.clone()
    poked[:, :, 5, C] += 1.0
    with torch.no_grad():
        delta = model(poked, coords, future) - model(x, coords, future)
    changed = delta.abs().amax(dim=(1, 3)) > 0  # (B, N)
    expected = (knn(coords, 3) == 5).any(dim=-1)
    assert torch.equal(changed, expected)
