"""Linear (LTSF-Linear) and STID: two simple, strong baselines from the forecasting recipes."""

from __future__ import annotations

import pytest
import torch
from conftest import compose_train
from model_checks import check_forecaster, tiny_batch

from cloudlstm.data.spec import DataSpec
from cloudlstm.models.base import silence_output_head
from cloudlstm.models.build import build_model
from cloudlstm.models.linear import TimeLinear
from cloudlstm.models.stid import STID

SIZES = dict(num_channels=2, input_steps=4, output_steps=3)
SMALL_STID = dict(embed_dim=8, node_dim=8, num_layers=2)


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


MAKERS = {
    "linear": lambda: TimeLinear(**SIZES),
    "linear-shared": lambda: TimeLinear(**SIZES, share_channels=True),
    "stid": lambda: STID(num_points=12, **SIZES, **SMALL_STID),
}


@pytest.mark.parametrize("name", MAKERS)
def test_shape_and_learning(name):
    torch.manual_seed(0)
    check_forecaster(MAKERS[name](), m=4, n=12, c=2, j=3)


@pytest.mark.parametrize("name", MAKERS)
def test_a_silent_head_outputs_exactly_zero(name):
    torch.manual_seed(0)
    model = MAKERS[name]()
    silence_output_head(model)
    x, coords, _ = tiny_batch(m=4, n=12, c=2)
    assert torch.equal(model(x, coords), torch.zeros(4, 3, 12, 2))


def test_linear_is_its_map_by_hand():
    torch.manual_seed(0)
    b, m, n, c, j = 2, 4, 3, 2, 5
    model = TimeLinear(num_channels=c, input_steps=m, output_steps=j)
    x = torch.randn(b, m, n, c)
    w, bias = model.map.weight, model.map.bias  # (C, J, M), (C, J)
    assert w.shape == (c, j, m) and bias.shape == (c, j)
    expected = torch.zeros(b, j, n, c)
    for bi, ji, ni, ci in torch.cartesian_prod(*map(torch.arange, (b, j, n, c))).tolist():
        expected[bi, ji, ni, ci] = bias[ci, ji] + sum(
            w[ci, ji, mi] * x[bi, mi, ni, ci] for mi in range(m)
        )
    torch.testing.assert_close(model(x, torch.rand(b, n, 2)), expected)


def test_linear_shared_map_is_the_same_for_every_channel():
    torch.manual_seed(0)
    model = TimeLinear(num_channels=2, input_steps=4, output_steps=3, share_channels=True)
    x = torch.randn(2, 4, 5, 1).expand(2, 4, 5, 3)  # three equal channels (C=3 is allowed)
    out = model(x, torch.rand(2, 5, 2))
    assert out.shape == (2, 3, 5, 3)
    torch.testing.assert_close(out[..., 1:], out[..., :1].expand_as(out[..., 1:]))


def test_linear_takes_any_points_and_stid_learns_each_training_point():
    assert TimeLinear(**SIZES).fixed_points is None
    assert "embedding for each training point" in STID(num_points=12, **SIZES).fixed_points
    torch.manual_seed(0)
    model = TimeLinear(**SIZES)
    x, coords, _ = tiny_batch(m=4, n=12, c=2)
    perm = torch.randperm(12)
    torch.testing.assert_close(model(x[:, :, perm], coords[:, perm]), model(x, coords)[:, :, perm])
    few, few_coords, _ = tiny_batch(m=4, n=5, c=2)
    assert model(few, few_coords).shape == (4, 3, 5, 2)


def test_stid_refuses_another_number_of_points_naming_the_expected_count():
    x, coords, _ = tiny_batch(m=4, n=10, c=2)
    with pytest.raises(ValueError, match=r"trained on 12 points.*got 10.*model\.num_points"):
        STID(num_points=12, **SIZES)(x, coords)


def test_linear_and_stid_refuse_another_window_or_channel_count():
    x, coords, _ = tiny_batch(m=5, n=12, c=2)
    with pytest.raises(ValueError, match=r"model\.input_steps"):
        TimeLinear(**SIZES)(x, coords)
    with pytest.raises(ValueError, match=r"model\.input_steps"):
        STID(num_points=12, **SIZES)(x, coords)
    x, coords, _ = tiny_batch(m=4, n=12, c=3)
    with pytest.raises(ValueError, match=r"model\.share_channels=true"):
        TimeLinear(**SIZES)(x, coords)


def test_stid_points_do_not_mix_but_their_identities_differ():
    torch.manual_seed(0)
    model = STID(num_points=12, **SIZES, **SMALL_STID).eval()
    x, coords, _ = tiny_batch(b=1, m=4, n=12, c=2)
    poked = x.clone()
    poked[:, :, 5] += 1.0  # change point 5's history only
    changed = (model(poked, coords) - model(x, coords)).abs().amax(dim=(0, 1, 3)) > 0
    assert changed.nonzero().flatten().tolist() == [5]
    same = x[:, :, :1].expand_as(x)  # every point with the same history
    out = model(same, coords)
    assert not torch.allclose(out[:, :, 0], out[:, :, 1])  # told apart by the embedding alone


def test_parameter_counts():
    n, c, m, j = 12, 6, 12, 12

    def linear(i: int, o: int) -> int:
        return i * o + o

    width = 32 + 32
    stid = linear(m * c, 32) + n * 32 + 3 * 2 * linear(width, width) + linear(width, j * c)
    assert n_params(TimeLinear(c, m, j)) == c * linear(m, j) == 936
    assert n_params(TimeLinear(c, m, j, share_channels=True)) == linear(m, j) == 156
    assert n_params(STID(n, c, m, j)) == stid == 32_360


@pytest.mark.parametrize("name, cls", [("linear", TimeLinear), ("stid", STID)])
def test_hydra_config_builds_the_model(tmp_path, name, cls):
    cfg = compose_train(tmp_path, [f"model={name}"])
    spec = DataSpec.sized(
        num_channels=2,
        num_points=7,
        input_steps=6,
        output_steps=5,
        coord_features=2,
        steps_per_day=24,
    )
    model = build_model(cfg.model, spec)
    assert isinstance(model, cls) and model.output_steps == 5
    x, coords, _ = tiny_batch(m=6, n=7, c=2, j=5)
    assert model(x, coords).shape == (4, 5, 7, 2)
    if name == "linear":
        assert cfg.model.share_channels is False
    if name == "stid":  # the paper's sizes
        model_cfg = cfg.model
        assert (model_cfg.embed_dim, model_cfg.node_dim, model_cfg.num_layers) == (32, 32, 3)
        assert model_cfg.dropout == 0.15
