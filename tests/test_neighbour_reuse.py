"""Each cloud is searched for neighbours once: forecasts and gradients are bit-identical to
the computation before (every DConv searching its own input), with fewer searches.

``old_forward`` below is a copy of CloudSeq2Seq.forward and of the cells' and the
attention's forwards as they were before the neighbours were passed around: every DConv
call but the embedding's searches the neighbours of its whole input itself.
"""

from __future__ import annotations

import pytest
import torch

import cloudlstm.nn.cells as cells
import cloudlstm.nn.dconv as dconv
from cloudlstm.models import CloudSeq2Seq
from cloudlstm.models.base import values_to_cloud
from cloudlstm.nn import CELLS, CloudGRUCell, CloudLSTMCell, CloudRNNCell, shared_neighbours
from cloudlstm.nn.cells import search
from cloudlstm.nn.kernels import lstm_pointwise

B, M, J, N, C, U, LAYERS, K = 2, 4, 5, 20, 3, 6, 2, 4


def old_cell(cell, x, state):
    """The cells' forward before: one DConv search per call, over [x; hidden]."""
    if isinstance(cell, CloudLSTMCell):
        hidden, memory = state
        z = cell.gates(torch.cat([x, hidden], dim=2))
        if cells.use_kernels(z):
            hidden, memory = lstm_pointwise(z, memory, cell.value_features)
            return hidden, (hidden, memory)
        i, f, o, g = z.chunk(4, dim=2)
        memory = torch.sigmoid(f) * memory + torch.sigmoid(i) * cell._candidate(g)
        hidden = torch.sigmoid(o) * torch.tanh(memory)
        return hidden, (hidden, memory)
    if isinstance(cell, CloudGRUCell):
        (hidden,) = state
        update, reset = torch.sigmoid(cell.gates(torch.cat([x, hidden], dim=2))).chunk(2, dim=2)
        candidate = cell._candidate(cell.candidate(torch.cat([x, reset * hidden], dim=2)))
        hidden = (1 - update) * hidden + update * candidate
        return hidden, (hidden,)
    assert isinstance(cell, CloudRNNCell)
    hidden = cell._candidate(cell.transition(torch.cat([x, state[0]], dim=2)))
    return hidden, (hidden,)


def old_attention(attention, decoder_state, encoder_states, keys):
    query = attention.decoder_proj(decoder_state)[:, None]
    scores = (torch.tanh(keys + query) * attention.score).sum(dim=(-1, -2)).mean(dim=-1)
    weights = torch.softmax(scores, dim=1)
    return torch.einsum("bm,bmnuf->bnuf", weights, encoder_states)


def old_forward(model: CloudSeq2Seq, x: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
    b, m, n, c = x.shape
    neighbours = shared_neighbours(coords, model.k, c)
    frames = model.embed(
        values_to_cloud(x, coords).flatten(0, 1), neighbours.repeat_interleave(m, dim=0)
    )
    frames = frames.view(b, m, *frames.shape[1:])
    states = [cell.initial_state(coords) for cell in model.encoder]
    top_states = []
    for t in range(m):
        inp = frames[:, t]
        for layer, cell in enumerate(model.encoder):
            inp, states[layer] = old_cell(cell, inp, states[layer])
        top_states.append(inp)
    if model.attention is not None:
        encoder_states = torch.stack(top_states, dim=1)
        keys = model.attention.encoder_proj(encoder_states.flatten(0, 1)).view(encoder_states.shape)
    last = x[:, -1]
    outputs = []
    for _ in range(model.output_steps):
        inp = model.embed(values_to_cloud(last, coords), neighbours)
        for layer, cell in enumerate(model.decoder):
            inp, states[layer] = old_cell(cell, inp, states[layer])
        if model.attention is not None:
            context = old_attention(model.attention, inp, encoder_states, keys)
            inp = torch.cat([inp, context], dim=2)
        last = model.head(inp)[..., 0]
        outputs.append(last)
    return torch.stack(outputs, dim=1)


def data(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(B, M, N, C, generator=gen), torch.rand(B, N, 2, generator=gen)


def gradients(model, forecast):
    model.zero_grad()
    forecast.pow(2).mean().backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.fixture
def searched(monkeypatch) -> list[int]:
    """Clouds per kNN call (every search goes through dconv.knn)."""
    calls: list[int] = []
    real = dconv.knn

    def counting(points: torch.Tensor, k: int, **options) -> torch.Tensor:
        calls.append(points.shape[:-2].numel())
        return real(points, k, **options)

    monkeypatch.setattr(dconv, "knn", counting)
    return calls


@pytest.mark.parametrize("cell", sorted(CELLS))
@pytest.mark.parametrize("attention", [False, True], ids=["", "attention"])
@pytest.mark.parametrize("path", ["numba", "torch"])
def test_forecast_and_gradients_bit_identical_with_fewer_searches(
    cell, attention, path, searched, monkeypatch
):
    if path == "torch":  # the gather by index_select and the LSTM update in torch ops
        for module in (cells, dconv):
            monkeypatch.setattr(module, "use_kernels", lambda tensor: False)
    torch.manual_seed(0)
    model = CloudSeq2Seq(
        C, J, k=K, cell=cell, hidden_channels=U, num_layers=LAYERS, attention=attention
    )
    # old_forward runs on the points in the given order; the Z-order (which breaks an
    # exact tie by its own index order) is tested on its own in tests/test_ordering.py
    model.spatial_order = False
    x, coords = data()
    # a tie in the coordinates: equal neighbour sets need the same tie-breaking, too
    coords[:, 7] = coords[:, 3]
    old = old_forward(model, x, coords)
    old_searched = sum(searched)
    old_grads = gradients(model, old)
    searched.clear()
    new = model(x, coords)
    assert torch.equal(new, old)
    new_grads = gradients(model, new)
    assert all(torch.equal(new_grads[name], g) for name, g in old_grads.items())

    # Clouds searched. Before: the embedding's B, then per cell step [x; hidden] (2U
    # channels; the GRU's candidate DConv 2U more), the head's U (2U with attention) per
    # decoder step, and with attention the encoder's M and the decoder's J projections.
    steps = (M + J) * LAYERS
    gru = cell == "gru"
    expected_old = B + B * U * (2 * steps * (2 if gru else 1) + J * (2 if attention else 1))
    if attention:
        expected_old += B * U * (M + J)
    assert old_searched == expected_old
    # Now: B, then each new cloud once: the M + J embedded frames, every new hidden state
    # (the initial ones sit at the points: no search), the GRU's reset-scaled hidden
    # states, and with attention the J contexts.
    expected_new = B + B * U * ((M + J) + steps * (2 if gru else 1) + (J if attention else 0))
    assert sum(searched) == expected_new
    assert expected_new < expected_old


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_cell_with_given_neighbours_is_bit_identical(cell):
    """A cell given the neighbours of x, of the hidden state, of both or of neither gives
    the old cell's output exactly (here from a random state whose channels have moved)."""
    torch.manual_seed(0)
    layer = CELLS[cell](3, 4, k=K)
    x = torch.rand(B, N, 3, 3)
    state = tuple(torch.rand(B, N, 4, 3) for _ in range(layer.num_states))
    expected, expected_state = old_cell(layer, x, state)
    nx, nh = search(x, K), search(state[0], K)
    for given in [(None, None), (nx, None), (None, nh), (nx, nh)]:
        out, new_state = layer(x, state, *given)
        assert torch.equal(out, expected)
        assert all(torch.equal(a, b) for a, b in zip(new_state, expected_state, strict=True))


def test_joined_neighbours_are_those_of_the_concatenation():
    torch.manual_seed(0)
    a, b = torch.rand(B, N, 3, 3), torch.rand(B, N, 2, 3)
    joined = dconv.join_neighbours([search(a, K), search(b, K)])
    expected = dconv.channel_neighbours(torch.cat([a, b], dim=2), K, 1)
    assert torch.equal(joined.long(), expected)
    assert joined.dtype == torch.int16  # as searched: every gather reads it as it is
    assert joined.transpose(1, 2).is_contiguous()  # knn's memory order, for the gather


@pytest.mark.parametrize(
    "n, dtype", [(40, torch.int16), (2**15, torch.int16), (2**15 + 1, torch.int32)]
)
def test_searches_are_kept_narrow(n, dtype):
    """What the model keeps between forward and backward is int16 while every index fits."""
    cloud = torch.rand(1, n, 1, 3)
    found = search(cloud, 3)
    assert found.dtype == dtype
    assert torch.equal(found.long(), dconv.channel_neighbours(cloud, 3, 1))
