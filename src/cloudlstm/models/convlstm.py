"""Seq2seq ConvLSTM baseline (Shi et al., 2015) on the Hungarian grid, and the seq2seq
frame it shares with PredRNN++."""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.models.base import Channels
from cloudlstm.models.grid_base import GridForecaster
from cloudlstm.models.teacher import Teacher, read_back
from cloudlstm.nn.conv_rnn import ConvLSTMCell, LSTMState, same_conv


class RecurrentGridSeq2Seq(GridForecaster):
    """Conv embedding -> encoder stack -> decoder stack -> 1x1 conv head, on grids.

    The structure of :class:`~cloudlstm.models.CloudSeq2Seq` with convolution in place of
    DConv, so that only the core operator differs between the two:

    * a ``kernel_size`` convolution embeds each frame's C_in channels into
      ``hidden_channels``;
    * the encoder runs over the M embedded frames; the decoder, a second stack with its
      own weights, starts from the encoder's final state;
    * decoding is autoregressive for J steps (J may exceed M): the decoder's input at
      step j is the embedding of its own forecast for step j-1, starting from the last
      observed frame; training with ``module.scheduled_sampling``, the true value at the
      steps drawn (:mod:`cloudlstm.models.teacher`). With covariates that frame is the forecast
      targets, the measured covariates held at their last observed values and the time
      features of step j-1 (``future``, gridded;
      :meth:`~cloudlstm.models.base.Channels.next_frame`);
    * a 1x1 convolution maps the top decoder output to the C_out target channels.

    Subclasses provide :meth:`make_stack`: a module with ``initial_state(frame)`` and
    ``forward(frame, state) -> (top output, state)``, frames ``(B, hidden, H, W)``.
    ``forward_grid``: ``(B, M, C_in, H, W)`` (and ``future (B, J, F, H, W)`` with time
    features) ``-> (B, J, C_out, H, W)``.
    """

    reads_future = True
    reads_own_forecasts = True

    def __init__(
        self,
        num_channels: int,
        output_steps: int,
        hidden_channels: int = 36,
        num_layers: int = 2,
        kernel_size: int = 3,
        grid_cache_dir: str | None = None,
        input_channels: int | None = None,
        future_channels: int = 0,
    ) -> None:
        super().__init__(output_steps, grid_cache_dir)
        if min(num_channels, output_steps, hidden_channels, num_layers) < 1:
            raise ValueError(
                "num_channels, output_steps, model.hidden_channels and model.num_layers must "
                f"be >= 1, got {num_channels}, {output_steps}, {hidden_channels}, {num_layers}."
            )
        self.channels = Channels.of(num_channels, input_channels, future_channels)
        self.num_channels = num_channels
        self.embed = same_conv(self.channels.inp, hidden_channels, kernel_size)
        self.encoder = self.make_stack(hidden_channels, num_layers, kernel_size)
        self.decoder = self.make_stack(hidden_channels, num_layers, kernel_size)
        self.head = nn.Conv2d(hidden_channels, num_channels, 1)

    def make_stack(self, hidden_channels: int, num_layers: int, kernel_size: int) -> nn.Module:
        raise NotImplementedError

    def output_head(self) -> list[nn.Module]:
        """``[self.head]``, the 1x1 convolution giving each decoded step: with it zero every
        step is zero (the decoder then embeds its own zero forecast, which changes its
        states but not the head's output)."""
        return [self.head]

    def forward_grid(
        self,
        x: torch.Tensor,
        future: torch.Tensor | None = None,
        teacher: Teacher | None = None,
    ) -> torch.Tensor:
        if x.dim() != 5 or x.shape[2] != self.channels.inp:
            raise ValueError(
                f"expected a grid sequence (B, M, C={self.channels.inp}, H, W), got "
                f"{tuple(x.shape)}: the model's num_channels must match the data's channels."
            )
        if (future is None) != (self.channels.future == 0):
            raise ValueError(
                f"this model reads F={self.channels.future} time features of the forecast "
                "steps: give `future` (B, J, F, H, W) exactly when F > 0."
            )
        b, m = x.shape[:2]
        # Embed all M input frames in one batched convolution.
        frames = self.embed(x.flatten(0, 1)).unflatten(0, (b, m))
        state = self.encoder.initial_state(frames[:, 0])
        for t in range(m):
            _, state = self.encoder(frames[:, t], state)
        frame = x[:, -1]  # (B, C_in, H, W): the frame before the first forecast step
        outputs = []
        for j in range(self.output_steps):
            top, state = self.decoder(self.embed(frame), state)
            step = self.head(top)  # (B, C_out, H, W)
            outputs.append(step)
            step_future = None if future is None else future[:, j]
            step = read_back(teacher, step, j)
            frame = self.channels.next_frame(step, x[:, -1], step_future, dim=1)
        return torch.stack(outputs, dim=1)


class ConvLSTMStack(nn.Module):
    """``num_layers`` stacked :class:`ConvLSTMCell`; each layer's hidden feeds the next.

    State: one ``(H, C)`` pair per layer. ``x (B, hidden, H, W)`` -> top hidden, same shape.
    """

    def __init__(self, hidden_channels: int, num_layers: int, kernel_size: int) -> None:
        super().__init__()
        self.cells = nn.ModuleList(
            ConvLSTMCell(hidden_channels, hidden_channels, kernel_size) for _ in range(num_layers)
        )

    def initial_state(self, x: torch.Tensor) -> list[LSTMState]:
        return [cell.initial_state(x) for cell in self.cells]

    def forward(
        self, x: torch.Tensor, state: list[LSTMState]
    ) -> tuple[torch.Tensor, list[LSTMState]]:
        new_state = []
        for cell, layer_state in zip(self.cells, state, strict=True):
            x, layer_state = cell(x, layer_state)
            new_state.append(layer_state)
        return x, new_state


class ConvLSTM(RecurrentGridSeq2Seq):
    """Seq2seq ConvLSTM (paper appendix: 2 stacks, 36 channels, 3x3 filters).

    See :class:`RecurrentGridSeq2Seq` for the seq2seq frame and :class:`ConvLSTMCell`
    for the cell (and covariates). ``x (B, M, N, C_in)``, ``coords (B, N, 2)`` (``future
    (B, J, N, F)`` with time features) -> ``(B, J, N, C_out)``.
    """

    def make_stack(self, hidden_channels: int, num_layers: int, kernel_size: int) -> nn.Module:
        return ConvLSTMStack(hidden_channels, num_layers, kernel_size)
