"""``model.coordinates``: DConv weighting its neighbours' coordinates relative to the point
convolved (translation-invariant) instead of the paper's absolute ones, the default."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cloud_reference import dconv_loop
from conftest import TINY, compose_train
from hydra.utils import instantiate

from cloudlstm.errors import UserError, one_line_errors
from cloudlstm.models import CloudCNN, CloudSeq2Seq
from cloudlstm.nn import DConv, channel_neighbours
from tests.test_console import train_py

SHIFT = torch.tensor([0.25, -0.5])  # a translation of every point's two coordinates


def translated(cloud: torch.Tensor, value_features: int = 1) -> torch.Tensor:
    """``cloud (B, N, U, H+2)`` with every coordinate moved by :data:`SHIFT`."""
    moved = cloud.clone()
    moved[..., value_features:] += SHIFT.to(cloud.dtype)
    return moved


def same_weights(layer: DConv, coordinates: str) -> DConv:
    """A DConv of ``layer``'s shape and weights reading coordinates as ``coordinates`` says."""
    twin = DConv(3, 2, k=4, coordinates=coordinates)
    twin.load_state_dict(layer.state_dict())
    return twin


@pytest.mark.parametrize("coord_activation", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_relative_dconv_matches_the_equation_with_centred_coordinates(coord_activation, dtype):
    """On the numba gather (float32, float64): each neighbour's coordinates minus the point's."""
    torch.manual_seed(0)
    layer = DConv(3, 2, k=4, coord_activation=coord_activation, coordinates="relative")
    cloud = torch.rand(2, 7, 3, 3, dtype=dtype)
    expected = dconv_loop(layer, cloud)
    torch.testing.assert_close(layer.to(dtype)(cloud), expected, rtol=1e-5, atol=1e-5)


def test_relative_dconv_is_the_same_on_the_torch_gather():
    """bfloat16 takes torch's index_select gather on CPU, not numba's: the same centring."""
    torch.manual_seed(0)
    layer = DConv(3, 2, k=4, coordinates="relative")
    cloud = torch.rand(2, 7, 3, 3)
    low = layer.to(torch.bfloat16)(cloud.bfloat16()).float()
    torch.testing.assert_close(low, dconv_loop(layer.float(), cloud), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("coord_activation", [True, False])
def test_relative_dconv_ignores_a_translation_and_absolute_does_not(coord_activation):
    torch.manual_seed(1)
    cloud = torch.rand(3, 30, 3, 3)
    relative = DConv(3, 2, k=4, coord_activation=coord_activation, coordinates="relative")
    torch.testing.assert_close(relative(translated(cloud)), relative(cloud), rtol=0, atol=1e-5)
    absolute = same_weights(relative, "absolute")
    absolute.coord_activation = coord_activation
    assert not torch.allclose(absolute(translated(cloud)), absolute(cloud), atol=1e-3)


def test_relative_centres_on_the_point_also_with_given_neighbours_and_parts():
    """A cloud given as parts, with neighbours that are not its own (static neighbours:
    the point itself need not come first), is centred on each point's own coordinates in
    each channel, as its concatenation is."""
    torch.manual_seed(2)
    layer = DConv(3, 2, k=4, coordinates="relative")
    first, second = torch.rand(2, 15, 1, 3), torch.rand(2, 15, 2, 3)
    elsewhere = channel_neighbours(torch.rand(2, 15, 3, 3), 4, 1)  # another cloud's
    whole = torch.cat([first, second], dim=2)
    out = layer(whole, elsewhere)
    parts = layer((first, second), (elsewhere[:, :, :1], elsewhere[:, :, 1:]))
    torch.testing.assert_close(parts, out)
    moved = layer(translated(whole), elsewhere)
    torch.testing.assert_close(moved, out, rtol=0, atol=1e-5)


def test_the_default_is_the_papers_absolute_dconv():
    """No option: the paper's Eq. (2) (tests/test_dconv.py), equal bit for bit to asking
    for absolute coordinates, and not centred."""
    torch.manual_seed(3)
    default = DConv(3, 2, k=4)
    cloud = torch.rand(2, 9, 3, 3)
    assert default.coordinates == "absolute"
    assert torch.equal(default(cloud), same_weights(default, "absolute")(cloud))
    assert not torch.allclose(default(cloud), same_weights(default, "relative")(cloud))


SMALL = dict(k=4, hidden_channels=6, num_layers=2)


def models(coordinates: str) -> dict[str, torch.nn.Module]:
    """The models of the CloudLSTM family whose forecast a translation leaves alone with
    relative coordinates, small, seeded alike. Not the GRU: its gates scale the hidden
    coordinates (``r . H``, ``(1 - z) . H``), which carry the points' at the first step."""
    built, kw = {}, {"coordinates": coordinates}
    for name, make in {
        "lstm+attention": lambda: CloudSeq2Seq(3, 3, attention=True, **SMALL, **kw),
        "rnn": lambda: CloudSeq2Seq(3, 3, cell="rnn", **SMALL, **kw),
        "static": lambda: CloudSeq2Seq(3, 3, neighbours="static", **SMALL, **kw),
        "cloudcnn": lambda: CloudCNN(3, input_steps=5, output_steps=3, k=4, num_layers=2, **kw),
    }.items():
        torch.manual_seed(0)
        built[name] = make()
    return built


def test_relative_models_forecast_the_same_for_translated_points():
    g = torch.Generator().manual_seed(0)
    x, coords = torch.randn(2, 5, 20, 3, generator=g), torch.rand(2, 20, 2, generator=g)
    moved = coords + SHIFT
    for name, model in models("relative").items():
        torch.testing.assert_close(model(x, moved), model(x, coords), msg=name)
    for name, model in models("absolute").items():
        assert not torch.allclose(model(x, moved), model(x, coords), atol=1e-4), name


def dconvs(module: torch.nn.Module) -> list[DConv]:
    return [m for m in module.modules() if isinstance(m, DConv)]


@pytest.mark.parametrize(
    ("preset", "count"),
    # embedding + 2 x 2 cells + 2 attention projections + head; CloudCNN: 8 layers + head
    [("attention_cloudlstm", 8), ("cloudgru", 10), ("cloudrnn", 6), ("cloudcnn", 9)],
)
def test_the_option_reaches_every_dconv_of_a_model_built_from_config(tmp_path, preset, count):
    from cloudlstm.assembly.assemble import assemble

    cfg = compose_train(tmp_path, [*TINY, f"model={preset}", "model.coordinates=relative"])
    (out := Path(cfg.paths.output_dir)).mkdir(parents=True)
    found = dconvs(assemble(cfg, out, with_loggers=False).module.model)
    assert len(found) == count
    assert {layer.coordinates for layer in found} == {"relative"}
    default = compose_train(tmp_path, [*TINY, f"model={preset}"])
    assert default.model.coordinates is None  # null: the paper's absolute ones


def test_a_bad_value_is_one_line_from_train_py(tmp_path):
    code, out, err = train_py(
        tmp_path, *TINY, "logger=none", "print_config=false", "model.coordinates=centred"
    )
    assert code == 1 and "Traceback" not in err
    lines = [line for line in err.splitlines() if "centred" in line and "overrides" not in line]
    assert lines == [
        "CloudSeq2Seq: model.coordinates='centred' is not one of ['absolute', 'relative'] or "
        "null (null or absolute: the paper's DConv; relative: centred on the point convolved)."
    ]


def test_cloudcnn_refuses_a_bad_value_in_one_line():
    bad = {"_target_": "cloudlstm.models.CloudCNN", "num_channels": 2, "coordinates": "origin"}
    message = r"^CloudCNN: model\.coordinates='origin' is not one"
    with pytest.raises(UserError, match=message), one_line_errors():
        instantiate(bad, input_steps=4, output_steps=3)
