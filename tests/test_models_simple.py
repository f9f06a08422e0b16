"""Simple baselines: MLP, seq2seq LSTM, kNN MLP, persistence and seasonal naive."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import compose_train
from model_checks import check_forecaster, tiny_batch

from cloudlstm.data.pipeline.splits import seasonal_offsets
from cloudlstm.data.spec import DataSpec
from cloudlstm.errors import UserError, one_line_errors
from cloudlstm.models.build import build_model
from cloudlstm.models.knn_lstm import neighbour_histories
from cloudlstm.models.knn_mlp import KNNMLP
from cloudlstm.models.lstm import SeqLSTM
from cloudlstm.models.mlp import MLP
from cloudlstm.models.naive import Persistence, SeasonalNaive
from cloudlstm.nn import NeighbourCountError, knn

SMALL = dict(hidden_size=16, num_layers=2)


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    "make",
    [
        lambda: MLP(num_points=12, num_channels=2, input_steps=4, output_steps=3, **SMALL),
        lambda: SeqLSTM(num_points=12, num_channels=2, output_steps=3, **SMALL),
        lambda: KNNMLP(num_channels=2, input_steps=4, output_steps=3, k=1, **SMALL),
        lambda: KNNMLP(num_channels=2, input_steps=4, output_steps=3, k=3, **SMALL),
        lambda: KNNMLP(num_channels=2, input_steps=4, output_steps=3, k=12, **SMALL),
        lambda: Persistence(output_steps=3),
        lambda: SeasonalNaive(output_steps=3, period=2),
    ],
    ids=["mlp", "lstm", "knn_mlp-k1", "knn_mlp-k3", "knn_mlp-kN", "persistence", "seasonal"],
)
def test_shape_and_learning(make):
    torch.manual_seed(0)
    check_forecaster(make(), m=4, n=12, c=2, j=3)


@pytest.mark.parametrize(
    "make",
    [
        lambda: MLP(num_points=12, num_channels=2, input_steps=4, output_steps=72, **SMALL),
        lambda: SeqLSTM(num_points=12, num_channels=2, output_steps=72, **SMALL),
        lambda: KNNMLP(num_channels=2, input_steps=4, output_steps=72, k=3, **SMALL),
    ],
    ids=["mlp", "lstm", "knn_mlp"],
)
def test_long_horizon_beyond_the_input_window(make):
    torch.manual_seed(0)
    check_forecaster(make(), m=4, n=12, c=2, j=72, steps=20)


def test_lstm_decoder_is_autoregressive_so_a_longer_horizon_extends_a_shorter_one():
    torch.manual_seed(0)
    x, coords, _ = tiny_batch(m=4, n=12, c=2)
    model = SeqLSTM(num_points=12, num_channels=2, output_steps=72, **SMALL)
    long = model(x, coords)
    model.output_steps = 5
    torch.testing.assert_close(model(x, coords), long[:, :5])


def test_mlp_and_lstm_refuse_another_number_of_points():
    x, coords, _ = tiny_batch(m=4, n=10, c=2)
    with pytest.raises(ValueError, match=r"model\.num_points"):
        MLP(num_points=12, num_channels=2, input_steps=4, output_steps=3, **SMALL)(x, coords)
    with pytest.raises(ValueError, match=r"model\.num_points"):
        SeqLSTM(num_points=12, num_channels=2, output_steps=3, **SMALL)(x, coords)


def test_knn_mlp_refuses_another_window_length():
    x, coords, _ = tiny_batch(m=5, n=10, c=2)
    with pytest.raises(ValueError, match=r"model\.input_steps"):
        KNNMLP(num_channels=2, input_steps=4, output_steps=3, **SMALL)(x, coords)


def test_knn_mlp_is_permutation_equivariant():
    torch.manual_seed(0)
    x, coords, _ = tiny_batch(m=4, n=12, c=2)
    model = KNNMLP(num_channels=2, input_steps=4, output_steps=3, k=4, **SMALL)
    perm = torch.randperm(12)
    torch.testing.assert_close(model(x[:, :, perm], coords[:, perm]), model(x, coords)[:, :, perm])


@pytest.mark.parametrize("k", [1, 4, 12])
def test_knn_mlp_sees_exactly_its_k_nearest_neighbours(k):
    torch.manual_seed(0)
    x, coords, _ = tiny_batch(b=1, m=4, n=12, c=2)
    model = KNNMLP(num_channels=2, input_steps=4, output_steps=3, k=k, **SMALL)
    poked = x.clone()
    poked[:, :, 5] += 1.0  # change point 5's history only
    changed = (model(poked, coords) - model(x, coords)).abs().amax(dim=(1, 3))[0] > 0
    expected = (knn(coords, k)[0] == 5).any(dim=1)  # points with 5 among their neighbours
    assert torch.equal(changed, expected)
    if k == 1:  # a purely local model
        assert changed.nonzero().flatten().tolist() == [5]
    if k == 12:  # every point sees every other
        assert changed.all()


def test_knn_mlp_k_larger_than_point_count_is_a_clear_error():
    x, coords, _ = tiny_batch(m=4, n=6, c=2)
    with pytest.raises(NeighbourCountError, match=r"only 6 points.*model\.k"):
        KNNMLP(num_channels=2, input_steps=4, output_steps=3, k=7, **SMALL)(x, coords)


def test_neighbour_histories_layout():
    x, coords, _ = tiny_batch(b=2, m=4, n=9, c=3)
    hist = neighbour_histories(x, coords, 3)  # (B, N, M, K, C)
    assert hist.shape == (2, 9, 4, 3, 3)
    index = knn(coords, 3)
    torch.testing.assert_close(hist[..., 0, :], x.permute(0, 2, 1, 3))  # itself first
    torch.testing.assert_close(hist[1, 7, :, 2], x[1, :, index[1, 7, 2]])


def test_persistence_repeats_the_last_step():
    x = torch.arange(2 * 3 * 4 * 2, dtype=torch.float32).view(2, 3, 4, 2)
    out = Persistence(output_steps=5)(x, torch.rand(2, 4, 2))
    assert out.shape == (2, 5, 4, 2)
    for t in range(5):
        assert torch.equal(out[:, t], x[:, -1])
    assert n_params(Persistence(5)) == 0


def test_seasonal_naive_repeats_the_last_season():
    m, period, j = 5, 3, 8
    # value = 10 * (input step index) + point index: the source of every output is readable
    x = (10 * torch.arange(m).view(1, m, 1, 1) + torch.arange(4).view(1, 1, 4, 1)).float()
    out = SeasonalNaive(output_steps=j, period=period)(x, torch.rand(1, 4, 2))
    # last input step is time 0 at index 4; target t takes time t - 3 * ceil(t / 3)
    sources = [2, 3, 4, 2, 3, 4, 2, 3]
    assert torch.equal(out[0, :, :, 0], x[0, sources, :, 0])
    assert n_params(SeasonalNaive(output_steps=j, period=period)) == 0


def test_seasonal_naive_with_period_one_is_persistence():
    x, coords, _ = tiny_batch(m=4, n=5, c=2)
    torch.testing.assert_close(SeasonalNaive(7, period=1)(x, coords), Persistence(7)(x, coords))


def test_seasonal_naive_needs_a_whole_season_of_input():
    x, coords, _ = tiny_batch(m=12, n=5, c=2)
    with pytest.raises(ValueError, match=r"data\.input_steps to at least 24"):
        SeasonalNaive(output_steps=12, period=24)(x, coords)
    with pytest.raises(ValueError, match=r"no known sampling period.*model\.period"):
        SeasonalNaive(output_steps=3, period=None)


def test_seasonal_naive_on_a_seasonal_input_reads_each_targets_phase():
    """The paper's seasonal input (a week sampled every step, then the last 6 steps): each
    target repeats the step a day before it, wherever it lies in the input; indexing the
    input as if its steps were consecutive read steps of other times."""
    offsets = seasonal_offsets(6, steps_per_day=24, days=7, every_minutes=60).tolist()
    x = torch.tensor(offsets, dtype=torch.float32).view(1, -1, 1, 1).repeat(1, 1, 3, 1)
    model = SeasonalNaive(output_steps=8, steps_per_day=24, input_offsets=offsets)
    out = model(x, torch.rand(1, 3, 2))
    assert out[0, :, 0, 0].tolist() == [t - 24 for t in range(8)]  # target t-1 at offset t


def test_seasonal_naive_without_the_targets_phase_in_the_input_is_refused():
    """Sampled every two hours, the week holds no step a day before the odd targets."""
    offsets = seasonal_offsets(6, steps_per_day=24, days=7, every_minutes=120).tolist()
    assert SeasonalNaive(output_steps=1, period=24, input_offsets=offsets).sources(offsets)
    with pytest.raises(ValueError, match=r"no step .* before target step 2\b.*seasonal_every"):
        SeasonalNaive(output_steps=2, period=24, input_offsets=offsets)


def test_seasonal_naive_is_built_with_the_datas_input_offsets(tmp_path):
    """Built for data, it takes the input's offsets, and a seasonal input it cannot read is
    refused before training, as one line."""
    cfg = compose_train(tmp_path, ["model=seasonal_naive"])
    sized = DataSpec.sized(num_channels=2, num_points=7, input_steps=1, output_steps=5)

    def spec(every_minutes: int) -> DataSpec:
        offsets = seasonal_offsets(6, steps_per_day=24, days=2, every_minutes=every_minutes)
        return replace(sized, input_offsets=offsets.tolist(), steps_per_day=24)

    hourly = spec(60)
    assert build_model(cfg.model, hourly).input_offsets == hourly.input_offsets
    refused = pytest.raises(UserError, match=r"^SeasonalNaive: .* before target step 2\b")
    with refused, one_line_errors():
        build_model(cfg.model, spec(120))


def test_seasonal_naive_built_for_a_window_shorter_than_its_season_is_refused(tmp_path):
    """Built for data (the default: a day of 24 steps, M = 12) it is refused before any
    training, as one line; it failed in its first forward, with a traceback."""
    cfg = compose_train(tmp_path, ["model=seasonal_naive"])
    spec = DataSpec.sized(
        num_channels=2, num_points=7, input_steps=12, output_steps=5, steps_per_day=24
    )
    refused = pytest.raises(UserError, match=r"^SeasonalNaive: .* M=12 < period=24 ")
    with refused, one_line_errors():  # one_line_errors: as the entry points build it
        build_model(cfg.model, spec)


def test_paper_size_parameter_counts():
    n, c, m, j = 274, 6, 12, 12

    def linear(i: int, o: int) -> int:
        return i * o + o

    def lstm(i: int, h: int) -> int:  # two stacked layers, two bias vectors each
        return 4 * h * (i + h) + 8 * h + 4 * h * (2 * h) + 8 * h

    mlp_count = linear(m * n * c, 500) + 4 * linear(500, 500) + linear(500, j * n * c)
    counts = {
        "mlp": (MLP(n, c, m, j), mlp_count),
        "lstm": (SeqLSTM(n, c, j), 2 * lstm(n * c, 500) + linear(500, n * c)),
        "knn_mlp (k=1)": (
            KNNMLP(c, m, j, k=1),
            linear(m * c, 500) + 4 * linear(500, 500) + linear(500, j * c),
        ),
        "knn_mlp (k=9)": (
            KNNMLP(c, m, j, k=9),
            linear(m * 9 * c, 500) + 4 * linear(500, 500) + linear(500, j * c),
        ),
    }
    for name, (model, expected) in counts.items():
        print(f"{name}: {n_params(model):,} parameters at N={n}, C={c}, M=J={m}")
        assert n_params(model) == expected


@pytest.mark.parametrize(
    "name, cls",
    [
        ("mlp", MLP),
        ("lstm", SeqLSTM),
        ("knn_mlp", KNNMLP),
        ("persistence", Persistence),
        ("seasonal_naive", SeasonalNaive),
    ],
)
def test_hydra_config_builds_the_model_with_paper_defaults(tmp_path, name, cls):
    cfg = compose_train(tmp_path, [f"model={name}"])
    spec = DataSpec.sized(
        num_channels=2,
        num_points=7,
        input_steps=24,
        output_steps=5,
        coord_features=2,
        steps_per_day=24,
    )
    model = build_model(cfg.model, spec)
    assert isinstance(model, cls) and model.output_steps == 5
    x, coords, _ = tiny_batch(m=24, n=7, c=2, j=5)
    assert model(x, coords).shape == (4, 5, 7, 2)
    paper = {"mlp": (500, 5), "lstm": (500, 2), "knn_mlp": (500, 5)}
    if name in paper:
        assert (cfg.model.hidden_size, cfg.model.num_layers) == paper[name]
    if name == "knn_mlp":
        assert cfg.model.k == 1
    if name == "seasonal_naive":
        assert model.period == 24
