"""What every forecaster shares: the interface and the raw-data -> point-cloud step."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from cloudlstm.models.teacher import Teacher


def values_to_cloud(values: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
    """Turn C measured variables into C point-cloud channels sharing the points' coordinates.

    values ``(..., N, C)``, coords ``(B, N, L)`` with ``...`` = ``B`` or ``B, T``
    -> ``(..., N, C, 1+L)``: per channel, one value feature then the L coordinates.
    """
    while coords.dim() < values.dim():
        coords = coords.unsqueeze(1)  # broadcast over time
    placed = coords.unsqueeze(-2).expand(*values.shape, coords.shape[-1])
    return torch.cat([values.unsqueeze(-1), placed], dim=-1)


@dataclass(frozen=True)
class Channels:
    """A model's channel sizes: it reads ``inp`` (C_in) channels and forecasts the first
    ``out`` (C_out) of them; the last ``future`` (F) are time features, known for the
    forecast steps too; those between are measured covariates
    (:mod:`cloudlstm.data.covariates`)."""

    out: int
    inp: int
    future: int = 0

    @classmethod
    def of(
        cls, num_channels: int, input_channels: int | None = None, future_channels: int = 0
    ) -> Channels:
        """The sizes from a model's constructor arguments (``input_channels`` None: the
        targets alone).

        Raises:
            ValueError: sizes that do not fit (fewer inputs than targets and time features).
        """
        inp = num_channels if input_channels is None else int(input_channels)
        future = int(future_channels or 0)
        if num_channels < 1 or future < 0 or inp < num_channels + future:
            raise ValueError(
                f"channels: need num_channels >= 1 and input_channels >= num_channels + "
                f"future_channels; got {num_channels}, {inp}, {future}."
            )
        return cls(int(num_channels), inp, future)

    def next_frame(
        self,
        forecast: torch.Tensor,
        last: torch.Tensor,
        future_step: torch.Tensor | None,
        dim: int = -1,
    ) -> torch.Tensor:
        """The input frame ``(..., C_in)`` of a forecast step, for decoders that read their
        own forecast: the forecast targets ``(..., C_out)``, the measured covariates held
        at their last input values (``last (..., C_in)``; their future is unknown) and the
        step's time features ``future_step (..., F)``. ``dim``: the channel axis of all
        three when it is not the last (1 for grid frames ``(B, C, H, W)``)."""
        if self.inp == self.out:
            return forecast
        held = last.narrow(dim, self.out, self.inp - self.future - self.out)
        parts = [forecast, held] if future_step is None else [forecast, held, future_step]
        return torch.cat(parts, dim=dim)


class ForecastModel(nn.Module):
    """Base class: ``forward(x (B, M, N, C_in), coords (B, N, L)[, future (B, J, N, F)])
    -> (B, J, N, C_out)``.

    Subclasses set ``output_steps`` (J) and may override :meth:`check_input`. A model that
    takes covariates has constructor arguments ``input_channels`` (C_in) and, for time
    features, ``future_channels`` (F), and sets :attr:`channels`; ``forward`` then takes
    ``future`` (the time features of the J forecast steps) when F > 0. A model without
    them reads and forecasts the same channels, and the build refuses data with
    covariates for it (:func:`cloudlstm.models.build.build_model`).
    """

    channels: Channels | None = None

    output_steps: int
    # Why the model can forecast only the points it was trained on, or None when it takes
    # any points (new ones too); forecasting new data refuses other points with this reason.
    fixed_points: str | None = None
    # Why the model learns parameters of each training point, by index (an embedding, a
    # row of an output layer), which a point held out of training would have unfitted
    # (data.holdout_points refuses it); None: every parameter is shared by all points.
    point_parameters: str | None = None
    # Whether a graph given with the data (``adjacency``) is read along its edges'
    # direction (DCRNN's two diffusion walks, Graph WaveNet's forward and backward
    # supports), or made undirected first (STGCN), so that a graph and its transpose are
    # one to the model, and eval.py takes either
    # (:func:`cloudlstm.assembly.checkpoint_fit.check_same_graph`).
    reads_graph_direction: bool = True
    # Why the model forecasts a point from that point's own readings alone, so that a point
    # without readings (data.holdout_history=false) cannot be forecast; None: it reads
    # other points' too (a model reading K neighbours with K = 1 reads only its own).
    own_history_only: str | None = None
    # False for forecasts that are absolute by construction (persistence, seasonal naive):
    # ``module.anchor=last`` adds the last observed frame to every other model's output.
    anchorable: bool = True
    # True for models that search neighbours inside their forward (``cloudlstm.nn.knn``
    # as an operator of the compiled graph): on CUDA such a forward is capturable in CUDA
    # graphs only through the Triton search (:mod:`cloudlstm.models.capture`).
    searches_neighbours: bool = False
    # Why the model's training step is not captured in CUDA graphs on a GPU
    # (``model.compile=auto`` then runs it eagerly), or None where it can be.
    capture_refused: str | None = None
    # True for an autoregressive decoder, which reads each step's forecast as the next
    # step's input: scheduled sampling (``module.scheduled_sampling``) applies to it.
    reads_own_forecasts: bool = False
    # The truth a training forward's decoder reads instead, at the steps drawn for it
    # (:mod:`cloudlstm.models.teacher`); None: its own forecasts, as always at test time.
    teacher: Teacher | None = None

    def output_head(self) -> list[nn.Module]:
        """The layers that produce the forecast: with all their parameters zero the model
        outputs zeros, so an anchored model (``module.anchor=last``) starts as persistence.

        Models with parameters override this; parameter-free ones have no head.
        """
        if any(True for _ in self.parameters()):
            # a model being written: say what to add, not only what is missing
            raise NotImplementedError(
                f"{type(self).__name__} does not name its output head: define "
                "output_head() to return the layers that produce its forecast, which "
                "module.anchor=last zeroes so that the model starts as persistence "
                "(docs/design.md, 'Adding a model')."
            )
        return []

    def check_input(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> None:
        if self.channels is not None:
            check_channels(self.channels, x, future, self.output_steps)
        if x.dim() != 4 or coords.dim() != 3 or x.shape[0] != coords.shape[0]:
            raise ValueError(
                f"expected x (B, M, N, C) and coords (B, N, L), got {tuple(x.shape)} and "
                f"{tuple(coords.shape)}"
            )
        if x.shape[2] != coords.shape[1]:
            raise ValueError(
                f"x has {x.shape[2]} points but coords has {coords.shape[1]}: they must match."
            )


def check_sizes(**sizes: int) -> None:
    """Refuse a size setting below 1, naming the first such ``model.<name>``.

    Raises:
        ValueError: ``model.<name> must be >= 1, got <value>.``
    """
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"model.{name} must be >= 1, got {value}.")


def check_output_steps(output_steps: int, **data_sizes: int) -> None:
    """Refuse sizes of the data below 1 (``output_steps``, and e.g. ``num_channels``): the
    data's own checks come first, so this guards a model built without them.

    Raises:
        ValueError: ``<name> must be >= 1, got <value>.``
    """
    for name, value in {"output_steps": output_steps, **data_sizes}.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}.")


def check_counts(**counts: int) -> None:
    """Refuse a count setting below 0 (where 0 means "none", e.g. no hidden layer), naming
    the first such ``model.<name>``.

    Raises:
        ValueError: ``model.<name> must be >= 0, got <value>.``
    """
    for name, value in counts.items():
        if value < 0:
            raise ValueError(f"model.{name} must be >= 0, got {value}.")


def check_channels(
    channels: Channels, x: torch.Tensor, future: torch.Tensor | None, output_steps: int
) -> None:
    """``x (B, M, N, C_in)`` and ``future (B, J, N, F)`` (given exactly when F > 0) fit
    ``channels``."""
    if x.shape[-1] != channels.inp:
        raise ValueError(
            f"this model reads C_in={channels.inp} channels (targets, covariates, time "
            f"features), got x {tuple(x.shape)}: build it from the data it forecasts."
        )
    if channels.future == 0:
        if future is not None:
            raise ValueError("this model was built without time features, but got `future`.")
        return
    want = (x.shape[0], output_steps, x.shape[2], channels.future)
    if future is None or tuple(future.shape) != want:
        got = None if future is None else tuple(future.shape)
        raise ValueError(f"this model needs future (B, J, N, F) = {want}; got {got}.")


def silence_output_head(model: ForecastModel) -> None:
    """Zero every parameter of ``model.output_head()``: the model then outputs zeros."""
    with torch.no_grad():
        for layer in model.output_head():
            for param in layer.parameters():
                param.zero_()
