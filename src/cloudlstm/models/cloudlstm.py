"""Seq2seq CloudLSTM / CloudGRU / CloudRNN with optional attention (paper Fig. 2, right)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from cloudlstm.models.base import (
    Channels,
    ForecastModel,
    check_output_steps,
    check_sizes,
    values_to_cloud,
)
from cloudlstm.models.teacher import Teacher, read_back
from cloudlstm.nn import CELLS, CloudAttention, DConv, check_k, shared_neighbours
from cloudlstm.nn.cells import search
from cloudlstm.nn.dconv import check_coordinates_option, weight_matrices
from cloudlstm.nn.knn_checks import check_k_option
from cloudlstm.nn.knn_finite import deferred_finite_check
from cloudlstm.nn.ordering import morton_order


class CloudSeq2Seq(ForecastModel):
    """CloudCNN embedding -> stacked Cloud{LSTM,GRU,RNN} encoder -> decoder -> CloudCNN head.

    * The input layer is a DConv (the paper's CloudCNN "embedding") from the C measured
      channels (1 value + L coordinates each) to ``hidden_channels``.
    * Encoder and decoder are separate stacks of ``num_layers`` cells; decoder layer l
      starts from encoder layer l's final state.
    * Decoding is autoregressive for J steps (J may exceed M): the decoder input at step
      i is the embedding of its own forecast for step i-1, starting from the last
      observed frame. Training with ``module.scheduled_sampling`` it reads the true
      value at the steps drawn (:mod:`cloudlstm.models.teacher`); by default it never
      does, so training and inference decode alike.
    * With ``attention``, the top decoder state is concatenated with its context over
      the top encoder states before the output DConv.
    * Output: the value features of the output DConv. Points are fixed here, so the
      predicted coordinates are dropped, as in the paper's experiments.

    Every cloud is searched for neighbours once, where it is made, and its neighbours go
    to every DConv that reads it: a hidden state feeds the layer above at the same step
    and its own layer at the next (and the attention and the head, at the top); the
    initial states sit at the points, like the embedding's input, so they take that
    search. Forecasts are the same as with a search per DConv call, bit for bit.

    ``checkpointing`` (activation checkpointing, only while grad is enabled): every cell
    step, the embedding, the attention and the head run under
    :func:`torch.utils.checkpoint.checkpoint`, so the backward recomputes their gathered
    ``(B*N, U*K*F)`` neighbourhood matrices and gates instead of keeping one set per call
    (``T * layers`` of them). What stays: each step's inputs and states and the
    neighbour indices (searched outside the checkpoints, so not searched again; int16 up
    to 32,768 points). Same loss and gradients, bit for bit; the backward costs about one
    more forward.

    ``spatial_order`` (default false): the points are put in Z-order of their positions
    while the model runs and the forecast is returned in the caller's order, so that the
    neighbourhood gathers read nearby memory (:mod:`cloudlstm.nn.ordering`). The model
    computes the same function either way, except that an exact distance tie between two
    neighbours is broken by the index in the sorted order, and rounding differs in the last
    bits, enough to give training another trajectory. Off by default: it pays only at
    thousands of points (1.04x per step at N = 5,000 and 13,000).

    Options beyond the paper (off by default; docs/design.md, "CloudLSTM options", has the
    reasons and the ablation):

    * ``neighbours="static"``: every DConv takes its neighbours from the points' positions
      (one search per sample) instead of searching each hidden cloud in its own learned
      coordinates. The paper's rule (``"dynamic"``) chooses neighbours by coordinates that
      get no gradient through the choice and collapse at initialisation.
    * ``residual``: the head forecasts the change from the previous frame, so an untrained
      model starts at persistence, the floor on real data at short horizons.
    * ``forget_bias``: added to the LSTM forget gates' bias at initialisation (1 is the
      usual choice for LSTMs: memory is kept until the gate learns to drop it).
    * ``coordinates="relative"``: every DConv weights its neighbours' coordinates minus
      those of the point convolved instead of the absolute ones of the paper's Eq. (2)
      (:class:`~cloudlstm.nn.DConv`), so translating the points changes no forecast
      (but the GRU's, whose gates scale the hidden coordinates); docs/cloudlstm.md
      measures what it does to the slow start.

    Covariates (``input_channels``, ``future_channels``): the embedding reads all C_in
    channels of each frame; each decoder step reads the frame before it, its forecast
    targets with the measured covariates held at their last values and its time features
    (:meth:`~cloudlstm.models.base.Channels.next_frame`).

    Input ``x (B, M, N, C_in)``, ``coords (B, N, L)`` in [0, 1] (and ``future (B, J, N,
    F)`` with time features) -> ``(B, J, N, C_out)``.
    """

    searches_neighbours = True
    reads_own_forecasts = True

    NEIGHBOURS = ("dynamic", "static")

    def __init__(
        self,
        num_channels: int,
        output_steps: int,
        k: int = 9,
        cell: str = "lstm",
        hidden_channels: int = 36,
        num_layers: int = 2,
        attention: bool = False,
        coord_features: int = 2,
        checkpointing: bool = False,
        spatial_order: bool = False,
        neighbours: str = "dynamic",
        residual: bool = False,
        forget_bias: float = 0.0,
        coordinates: str | None = None,
        input_channels: int | None = None,
        future_channels: int = 0,
    ) -> None:
        super().__init__()
        if cell not in CELLS:
            raise ValueError(f"model.cell={cell!r} is not one of {sorted(CELLS)}.")
        if neighbours not in self.NEIGHBOURS:
            raise ValueError(
                f"model.neighbours={neighbours!r} is not one of {list(self.NEIGHBOURS)}."
            )
        if forget_bias and cell != "lstm":
            raise ValueError(
                f"model.forget_bias={forget_bias} needs model.cell=lstm (the {cell} cell "
                "has no forget gate); leave it at 0."
            )
        check_coordinates_option(coordinates)
        check_sizes(num_layers=num_layers, hidden_channels=hidden_channels)
        check_output_steps(output_steps)
        self.output_steps = output_steps
        self.channels = Channels.of(num_channels, input_channels, future_channels)
        self.k = check_k_option(k)
        self.checkpointing = checkpointing
        self.spatial_order = spatial_order
        self.neighbours = neighbours
        self.residual = residual
        cell_cls = CELLS[cell]
        common = dict(k=k, value_features=1, coord_features=coord_features, coordinates=coordinates)
        self.embed = DConv(self.channels.inp, hidden_channels, **common)
        self.encoder = nn.ModuleList(
            cell_cls(hidden_channels, hidden_channels, **common) for _ in range(num_layers)
        )
        self.decoder = nn.ModuleList(
            cell_cls(hidden_channels, hidden_channels, **common) for _ in range(num_layers)
        )
        self.attention = CloudAttention(hidden_channels, **common) if attention else None
        head_in = hidden_channels * (2 if attention else 1)
        self.head = DConv(head_in, num_channels, **common)
        if forget_bias:
            with torch.no_grad():
                for lstm in (*self.encoder, *self.decoder):
                    # gates are (i, f, o, g) blocks of hidden_channels output channels
                    lstm.gates.bias.view(4, hidden_channels, -1)[1] += forget_bias

    @property
    def anchorable(self) -> bool:  # type: ignore[override]
        """False with ``residual``: each step is then added to the previous one, starting
        from the last observed frame, so the forecast is anchored by construction and
        ``module.anchor=last`` would add that frame twice."""
        return not self.residual

    def output_head(self) -> list[nn.Module]:
        """``[self.head]``, the DConv whose value features are each decoded step; ``[]``
        with ``residual``.

        A zero head gives zero value features whatever its input, so every step is zero
        (the decoder then embeds its own zero forecast, which changes its states but not
        the head's output). With ``residual`` a zero head forecasts the last observed frame
        at every step: no layer makes that model output zeros (it is not
        :attr:`anchorable`).
        """
        return [] if self.residual else [self.head]

    def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, under activation checkpointing when it is on and grad enabled."""
        if self.checkpointing and torch.is_grad_enabled():
            return checkpoint(fn, *args, use_reentrant=False)
        return fn(*args)

    def _embed_frames(
        self, x: torch.Tensor, coords: torch.Tensor, neighbours: torch.Tensor
    ) -> torch.Tensor:
        """All M input frames in one batched DConv call: ``(B, M, N, U, F)``."""
        b, m = x.shape[:2]
        frames = self.embed(
            values_to_cloud(x, coords).flatten(0, 1), neighbours.repeat_interleave(m, dim=0)
        )
        return frames.view(b, m, *frames.shape[1:])

    def _embed(self, last: torch.Tensor, coords: torch.Tensor, neighbours: torch.Tensor):
        return self.embed(values_to_cloud(last, coords), neighbours)

    def _head(
        self,
        top: torch.Tensor,
        neighbours: torch.Tensor,
        context: torch.Tensor | None = None,
        context_neighbours: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``(B, N, C)`` forecast values from the top decoder state (and the context, as the
        second part of the head's input: see :meth:`DConv.forward
        <cloudlstm.nn.dconv.DConv.forward>`)."""
        if context is None:
            return self.head(top, neighbours)[..., 0]
        return self.head((top, context), (neighbours, context_neighbours))[..., 0]

    def _project_encoder(
        self, encoder_states: torch.Tensor, *neighbours: torch.Tensor
    ) -> torch.Tensor:
        """The attention's keys from the M top encoder states and their neighbours."""
        # (B, M, N, U, K), stacked in knn's memory order (see nn.dconv.join_neighbours)
        stacked = torch.stack([nb.transpose(1, 2) for nb in neighbours], dim=1)
        return self.attention.project_encoder(encoder_states, stacked.transpose(2, 3))

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check_input(x, coords, future)
        check_k(self.k, x.shape[2])
        if torch.compiler.is_compiling():  # one graph: no deferral (see knn's operators)
            return self._forward(x, coords, future)
        # NaN coordinates (a diverged model) are refused once per forward on the GPU, not
        # with a host synchronisation in each of its dozens of searches; each DConv's
        # weight is laid out once for its calls at every time step
        with deferred_finite_check(), weight_matrices():
            return self._forward(x, coords, future)

    def _forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None
    ) -> torch.Tensor:
        if not self.spatial_order:
            return self._forecast(x, coords, future, self.teacher)
        # Points in Z-order of their positions while the model runs, given back in the
        # caller's order: the gathers read nearby rows (nn/ordering.py).
        order = morton_order(coords)  # (B, N)

        def ordered(values: torch.Tensor) -> torch.Tensor:  # (B, T, N, C), points on dim 2
            return values.gather(2, order[:, None, :, None].expand_as(values))

        x = ordered(x)
        if future is not None:
            future = ordered(future)
        coords = coords.gather(1, order[..., None].expand_as(coords))
        teacher = None if self.teacher is None else self.teacher.mapped(ordered)
        out = self._forecast(x, coords, future, teacher)
        back = order.argsort(dim=1)[:, None, :, None].expand_as(out)
        return out.gather(2, back)

    def _neighbour_rule(self, at_points: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        """How a cloud the model made ``(B', N, U, F)`` gets its neighbours ``(B', N, U, K)``:
        searched in its own coordinates (dynamic), or those of the points (static).

        ``at_points`` ``(B, N, 1, K)``: the points' own neighbours; B' is B or a multiple
        of it (the M embedded frames of each sample, sample-major).
        """
        if self.neighbours == "dynamic":
            return lambda cloud: search(cloud, self.k)

        def static(cloud: torch.Tensor) -> torch.Tensor:
            repeats = cloud.shape[0] // at_points.shape[0]
            points = at_points if repeats == 1 else at_points.repeat_interleave(repeats, dim=0)
            return points.expand(-1, -1, cloud.shape[2], -1)

        return static

    def _forecast(
        self,
        x: torch.Tensor,
        coords: torch.Tensor,
        future: torch.Tensor | None,
        teacher: Teacher | None,
    ) -> torch.Tensor:
        """:meth:`forward` on points in the order given, ``teacher`` in that order too."""
        b, m, n, c = x.shape
        run, k = self._run, self.k
        # Everything at the points (the C input channels of every frame, the initial
        # hidden channels) shares one search per sample, for all M + J frames.
        at_points = shared_neighbours(coords, k, 1).to(torch.int32)  # (B, N, 1, K)
        embed_neighbours = at_points.expand(-1, -1, c, -1)
        frames = run(self._embed_frames, x, coords, embed_neighbours)
        find = self._neighbour_rule(at_points)
        frame_neighbours = find(frames.flatten(0, 1)).unflatten(0, (b, m))

        states = [cell.initial_state(coords) for cell in self.encoder]
        hidden_neighbours = [
            at_points.expand(-1, -1, cell.hidden_channels, -1) for cell in self.encoder
        ]
        top_states, top_neighbours = [], []
        for t in range(m):
            inp, inp_neighbours = frames[:, t], frame_neighbours[:, t]
            for layer, cell in enumerate(self.encoder):
                inp, states[layer] = run(
                    cell, inp, states[layer], inp_neighbours, hidden_neighbours[layer]
                )
                inp_neighbours = hidden_neighbours[layer] = find(inp)
            top_states.append(inp)
            if self.attention is not None:
                top_neighbours.append(inp_neighbours)

        if self.attention is not None:
            encoder_states = torch.stack(top_states, dim=1)
            keys = run(self._project_encoder, encoder_states, *top_neighbours)

        # each decoder step reads the frame before it: the last observed one, then its own
        # forecast with the covariates held and the step's time features
        frame, last = x[:, -1], x[:, -1, :, : self.channels.out]
        outputs = []
        for j in range(self.output_steps):
            if j > 0:  # the frame of step j - 1, forecast
                step_future = None if future is None else future[:, j - 1]
                frame = self.channels.next_frame(last, x[:, -1], step_future)
            inp = run(self._embed, frame, coords, embed_neighbours)
            inp_neighbours = find(inp)
            for layer, cell in enumerate(self.decoder):
                inp, states[layer] = run(
                    cell, inp, states[layer], inp_neighbours, hidden_neighbours[layer]
                )
                inp_neighbours = hidden_neighbours[layer] = find(inp)
            if self.attention is None:
                step = run(self._head, inp, inp_neighbours)
            else:
                context, _ = run(self.attention, inp, encoder_states, keys, inp_neighbours)
                step = run(self._head, inp, inp_neighbours, context, find(context))
            last = last + step if self.residual else step
            outputs.append(last)
            last = read_back(teacher, last, j)  # what step j + 1 reads, and adds to
        return torch.stack(outputs, dim=1)
