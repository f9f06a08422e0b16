"""Every model's output head: zeroed, the model outputs exactly zeros, and still learns.

``module.anchor=last`` forecasts ``x[:, -1:] + model(x, coords)`` after
:func:`~cloudlstm.models.base.silence_output_head`, so an anchored untrained model is
persistence, exactly, only if a silent head makes the model's output exactly zero. Every
``conf/model/*.yaml`` is checked, so a new model config is covered without editing this file.

Models whose forecast is absolute by construction are not anchorable and name no head:
persistence, seasonal naive, and CloudLSTM with ``residual`` (each step is added to the
previous one, starting from the last observed frame, so a silent head gives persistence,
not zeros; anchoring it would add the last frame twice).

Every model config is also built from data with covariates and time features: it forecasts
the targets from them, or refuses such data in one line.
"""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT, compose_train
from omegaconf import DictConfig

from cloudlstm.data.spec import DataSpec
from cloudlstm.errors import UserError
from cloudlstm.models import CloudSeq2Seq
from cloudlstm.models.base import ForecastModel, silence_output_head
from cloudlstm.models.build import build_model

MODELS = sorted(p.stem for p in (ROOT / "conf" / "model").glob("*.yaml"))
# Data dimensions (B, M, N, C, J, L): N = 12 points fill a 4x3 grid for the grid models.
B, M, N, C, J, L = 2, 4, 12, 2, 3, 2
# Widths and depths shrunk where a model's config has the key: seconds for all models.
TINY_MODEL = {
    "hidden_channels": 4,
    "hidden_size": 8,
    "num_layers": 2,
    "k": 3,
    "embed_dim": 4,
    "node_dim": 4,
}


# a day of M steps, so that seasonal naive, built for a window of M, finds a whole season
SPEC = DataSpec.sized(N, C, M, J, coord_features=L, steps_per_day=M)


def tiny_model_config(tmp_path, name: str) -> DictConfig:
    """``model=name`` composed with conf/train.yaml, widths shrunk to :data:`TINY_MODEL`
    (the sizes come from :data:`SPEC`)."""
    cfg = compose_train(tmp_path, [f"model={name}"])
    for key, value in TINY_MODEL.items():
        if key in cfg.model:
            cfg.model[key] = value
    return cfg.model


def random_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x (B, M, N, C)``, shared ``coords (B, N, L)`` in [0, 1], target ``(B, J, N, C)``."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, M, N, C, generator=gen)
    coords = torch.rand(N, L, generator=gen).expand(B, N, L).contiguous()
    return x, coords, torch.randn(B, J, N, C, generator=gen)


@pytest.mark.parametrize("name", MODELS)
def test_a_silent_head_makes_the_forecast_zero_and_still_learns(tmp_path, name: str) -> None:
    """Anchorable models: non-zero output before, exactly zero after silencing, and one
    Adam step on an MSE target moves the output off zero through the head's weights (not
    just its biases). Others: no head."""
    torch.manual_seed(0)
    model: ForecastModel = build_model(tiny_model_config(tmp_path, name), SPEC)
    if not model.anchorable:
        assert model.output_head() == []
        return
    head = model.output_head()
    assert head and all(any(True for _ in layer.parameters()) for layer in head), name
    x, coords, target = random_batch()
    assert model(x, coords).abs().sum() > 0, "the model outputs zeros before silencing"

    silence_output_head(model)
    out = model(x, coords)
    assert torch.equal(out, torch.zeros_like(out)), f"{name}: a silent head gives non-zeros"

    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    torch.nn.functional.mse_loss(out, target).backward()
    weights = [p for layer in head for p in layer.parameters() if p.dim() > 1]
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in weights), (
        f"{name}: the silent head's weights get no gradient"
    )
    opt.step()
    assert model(x, coords).abs().sum() > 0, f"{name}: the head did not learn"


def test_residual_cloudlstm_is_anchored_by_construction() -> None:
    """With ``residual`` a zeroed head forecasts the last observed frame at every step:
    persistence already, so ``module.anchor=last`` leaves the model as it is."""
    torch.manual_seed(0)
    model = CloudSeq2Seq(num_channels=C, output_steps=J, k=3, hidden_channels=4, residual=True)
    assert not model.anchorable and model.output_head() == []
    with torch.no_grad():
        for param in model.head.parameters():
            param.zero_()
    x, coords, _ = random_batch()
    assert torch.equal(model(x, coords), x[:, -1:].expand(B, J, N, C))


# Two measured covariates and the time of day (sin, cos): C_in = C + 2 + 2, F = 2. A day of
# M steps, so that seasonal naive finds a whole season in the window.
COV, F = 2, 2
COVARIATE_SPEC = DataSpec.sized(
    N, C, M, J, coord_features=L, steps_per_day=M, covariates=COV, time_features=["hour"]
)


def covariate_failure(tmp_path, name: str) -> str | None:
    """Why ``model=name`` fails on data with covariates, or None: built from
    :data:`COVARIATE_SPEC`, it forecasts ``(B, J, N, C)`` finite values from ``x (B, M, N,
    C_in)`` and ``future (B, J, N, F)``, or refuses the data with a one-line
    :class:`UserError`."""
    torch.manual_seed(0)
    try:
        model: ForecastModel = build_model(tiny_model_config(tmp_path, name), COVARIATE_SPEC)
    except UserError as err:
        return None if "\n" not in str(err) else f"refuses in several lines: {err}"
    except Exception as err:  # listed with the others' failures, not raised
        return f"build: {type(err).__name__}: {err}"
    x, coords, _ = random_batch()
    cov = torch.randn(B, M, N, COV + F, generator=torch.Generator().manual_seed(1))
    future = torch.randn(B, J, N, F, generator=torch.Generator().manual_seed(2))
    try:
        with torch.no_grad():
            out = model(torch.cat([x, cov], dim=-1), coords, future)
    except Exception as err:  # every model's failure is listed, not only the first
        return f"{type(err).__name__}: {err}"
    if out.shape != (B, J, N, C) or not out.isfinite().all():
        return f"forecast {tuple(out.shape)} (finite: {bool(out.isfinite().all())})"
    return None


def test_every_model_takes_covariates_or_refuses_them_in_one_line(tmp_path) -> None:
    """Every model config, built from data with covariates and time features, forecasts
    the C target channels from the C_in input channels and the future time features, or
    refuses such data with one line; the message lists every model that does neither."""
    failures = {name: covariate_failure(tmp_path, name) for name in MODELS}
    failed = {name: why for name, why in failures.items() if why is not None}
    assert not failed, "models failing with covariates:\n" + "\n".join(
        f"  {name}: {why}" for name, why in failed.items()
    )
