"""CloudLSTM, CloudGRU and CloudRNN cells: the paper's Eq. (3) with DConv in place of
convolution.

All tensors are point clouds ``(B, N, U, H+L)`` (see :mod:`cloudlstm.nn.dconv`). The
hidden state carries values *and* coordinates per channel, so the neighbour sets of the
hidden channels are recomputed at every step from the state's own coordinates.

Gates use the simplified DConv (no sigmoid on coordinates) because sigmoid is applied to
the whole gate; candidate states use the full DConv, sigmoid on coordinates, then tanh.
Because a DConv sums over input channels, each with its own neighbours, the paper's
``W_s * S_t + W_h * H_{t-1}`` is exactly one DConv over the channel concatenation
``[S_t; H_{t-1}]``: one gather and one matmul for all gates. The concatenation is given to
the DConv as its two parts, and on CPU it is never built (the gather reads both).

Neighbour sets are per channel, so those of ``[S_t; H_{t-1}]`` are those of ``S_t`` next
to those of ``H_{t-1}``. A cloud is often searched where it was already searched: the
input ``S_t`` of layer l is layer l-1's new hidden state, which is also layer l-1's state
at step t+1; the GRU's two DConvs both see ``S_t``. So every cell takes the neighbours of
its input and of its hidden state when the caller has them (:class:`CloudSeq2Seq
<cloudlstm.models.CloudSeq2Seq>` searches each cloud once) and searches only what it is
not given; the result is the same, index for index.
"""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.nn import lstm_triton
from cloudlstm.nn.dconv import DConv, channel_neighbours
from cloudlstm.nn.kernels import lstm_pointwise, use_kernels
from cloudlstm.nn.knn_checks import check_k_option

State = tuple[torch.Tensor, ...]


def search(cloud: torch.Tensor, k: int, value_features: int = 1) -> torch.Tensor:
    """:func:`~cloudlstm.nn.dconv.channel_neighbours` in a narrow integer type:
    ``(B, N, U, K)`` int16 for N <= 32,768 points, else int32.

    Callers keep these between the forward and the backward (as checkpoint inputs, see
    :class:`~cloudlstm.models.CloudSeq2Seq`), where int16 takes a quarter of knn's int64;
    every gather reads them as they are. knn's memory order, ``(B, U, N, K)`` contiguous,
    is kept (the gathers read them in that order).
    """
    dtype = torch.int16 if cloud.shape[1] <= 2**15 else torch.int32
    return channel_neighbours(cloud, k, value_features, dtype)


class CloudCell(nn.Module):
    """Common constructor arguments and state initialisation of the three cells."""

    num_gates: int = 1
    num_states: int = 1

    def __init__(
        self,
        input_channels: int,
        hidden_channels: int,
        k: int,
        value_features: int = 1,
        coord_features: int = 2,
        coordinates: str | None = "absolute",
    ) -> None:
        super().__init__()
        self.input_channels = input_channels
        self.hidden_channels = hidden_channels
        self.k = check_k_option(k)
        self.value_features = value_features
        self.coord_features = coord_features
        self.coordinates = coordinates  # every DConv's (see DConv)

    def _dconv(self, out_gates: int, coord_activation: bool) -> DConv:
        return DConv(
            self.input_channels + self.hidden_channels,
            out_gates * self.hidden_channels,
            self.k,
            self.value_features,
            self.coord_features,
            coord_activation=coord_activation,
            coordinates=self.coordinates,
        )

    def _candidate(self, z: torch.Tensor) -> torch.Tensor:
        """tanh of a full DConv output whose coordinates have not had their sigmoid yet."""
        h = self.value_features
        return torch.tanh(torch.cat([z[..., :h], torch.sigmoid(z[..., h:])], dim=-1))

    def initial_state(self, coords: torch.Tensor) -> State:
        """Zero values, every hidden channel placed at the input points' coordinates.

        coords ``(B, N, L)`` -> tuple of ``(B, N, U_h, H+L)``. Zero coordinates would put
        every point at the origin: the first neighbour search would see only ties and
        the model would no longer be permutation-equivariant. Memory states (LSTM ``C``)
        start at zero.
        """
        b, n, _ = coords.shape
        values = coords.new_zeros(b, n, self.hidden_channels, self.value_features)
        placed = coords[:, :, None, :].expand(b, n, self.hidden_channels, -1)
        hidden = torch.cat([values, placed], dim=-1)
        return (hidden,) + tuple(torch.zeros_like(hidden) for _ in range(self.num_states - 1))

    def _neighbours(
        self, *parts: tuple[torch.Tensor, torch.Tensor | None]
    ) -> tuple[torch.Tensor, ...] | None:
        """Neighbours of each ``(cloud, its neighbours or None)`` part of a channel
        concatenation, for a DConv: None if none is given (the DConv then searches every
        part), else the given ones next to searches of the others."""
        if all(given is None for _, given in parts):
            return None
        return tuple(
            given if given is not None else search(cloud, self.k, self.value_features)
            for cloud, given in parts
        )


class CloudLSTMCell(CloudCell):
    """``(B, N, U_in, F)`` input and ``(H, C)`` state -> new hidden ``(B, N, U_h, F)``."""

    num_states = 2

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gates = self._dconv(4, coord_activation=False)

    def forward(
        self,
        x: torch.Tensor,
        state: State,
        x_neighbours: torch.Tensor | None = None,
        hidden_neighbours: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, State]:
        """Optional neighbours ``(B, N, U, K)`` of ``x`` and of the hidden state, if the
        caller has them; the others are searched here."""
        hidden, memory = state
        neighbours = self._neighbours((x, x_neighbours), (hidden, hidden_neighbours))
        z = self.gates((x, hidden), neighbours)
        if use_kernels(z):  # fused numba op: one pass forward, one backward
            hidden, memory = lstm_pointwise(z, memory, self.value_features)
            return hidden, (hidden, memory)
        if lstm_triton.available(z):  # CUDA: the same, in Triton
            hidden, memory = lstm_triton.lstm_pointwise_triton(z, memory, self.value_features)
            return hidden, (hidden, memory)
        i, f, o, g = z.chunk(4, dim=2)
        memory = torch.sigmoid(f) * memory + torch.sigmoid(i) * self._candidate(g)
        hidden = torch.sigmoid(o) * torch.tanh(memory)
        return hidden, (hidden, memory)


class CloudGRUCell(CloudCell):
    """ConvGRU with DConv: ``z, r = sigma(W * [S; H])``,
    ``H~ = tanh(W_c * [S; r . H])``, ``H' = (1 - z) . H + z . H~``.

    The reset gate scales the hidden coordinates as well, so the candidate's neighbours
    are searched in ``r . H`` - the literal reading of "DConv in place of convolution".
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gates = self._dconv(2, coord_activation=False)
        self.candidate = self._dconv(1, coord_activation=False)

    def forward(
        self,
        x: torch.Tensor,
        state: State,
        x_neighbours: torch.Tensor | None = None,
        hidden_neighbours: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, State]:
        """As :meth:`CloudLSTMCell.forward`; ``x`` is searched at most once for both DConvs."""
        (hidden,) = state
        if x_neighbours is None:
            x_neighbours = search(x, self.k, self.value_features)
        neighbours = self._neighbours((x, x_neighbours), (hidden, hidden_neighbours))
        gates = self.gates((x, hidden), neighbours)
        update, reset = torch.sigmoid(gates).chunk(2, dim=2)
        reset_hidden = reset * hidden  # its coordinates moved: searched anew
        neighbours = self._neighbours((x, x_neighbours), (reset_hidden, None))
        candidate = self._candidate(self.candidate((x, reset_hidden), neighbours))
        hidden = (1 - update) * hidden + update * candidate
        return hidden, (hidden,)


class CloudRNNCell(CloudCell):
    """Vanilla RNN with DConv: ``H' = tanh(W * [S; H])``."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.transition = self._dconv(1, coord_activation=False)

    def forward(
        self,
        x: torch.Tensor,
        state: State,
        x_neighbours: torch.Tensor | None = None,
        hidden_neighbours: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, State]:
        """As :meth:`CloudLSTMCell.forward`."""
        neighbours = self._neighbours((x, x_neighbours), (state[0], hidden_neighbours))
        hidden = self._candidate(self.transition((x, state[0]), neighbours))
        return hidden, (hidden,)


CELLS: dict[str, type[CloudCell]] = {
    "lstm": CloudLSTMCell,
    "gru": CloudGRUCell,
    "rnn": CloudRNNCell,
}
