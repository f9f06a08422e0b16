"""What every forecaster shares: the interface and the raw-data -> point-cloud step."""

from __future__ import annotations

import torch
from torch import nn


def values_to_cloud(values: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
    """Turn C measured variables into C point-cloud channels sharing the points' coordinates.

    values ``(..., N, C)``, coords ``(B, N, L)`` with ``...`` = ``B`` or ``B, T``
    -> ``(..., N, C, 1+L)``: per channel, one value feature then the L coordinates.
    """
    while coords.dim() < values.dim():
        coords = coords.unsqueeze(1)  # broadcast over time
    placed = coords.unsqueeze(-2).expand(*values.shape, coords.shape[-1])
    return torch.cat([values.unsqueeze(-1), placed], dim=-1)


class ForecastModel(nn.Module):
    """Base class: ``forward(x (B, M, N, C), coords (B, N, L)) -> (B, J, N, C)``.

    Subclasses set ``output_steps`` (J) and may override :meth:`check_input`.
    """

    output_steps: int
    # Why the model can forecast only the points it was trained on, or None when it takes
    # any points (new ones too); forecasting new data refuses other points with this reason.
    fixed_points: str | None = None
    # False for forecasts that are absolute by construction (persistence, seasonal naive):
    # ``module.anchor=last`` adds the last observed frame to every other model's output.
    anchorable: bool = True

    def output_head(self) -> list[nn.Module]:
        """The layers that produce the forecast: with all their parameters zero the model
        outputs zeros, so an anchored model (``module.anchor=last``) starts as persistence.

        Models with parameters override this; parameter-free ones have no head.
        """
        if any(True for _ in self.parameters()):
            raise NotImplementedError(f"{type(self).__name__} does not name its output head")
        return []

    def check_input(self, x: torch.Tensor, coords: torch.Tensor) -> None:
        if x.dim() != 4 or coords.dim() != 3 or x.shape[0] != coords.shape[0]:
            raise ValueError(
                f"expected x (B, M, N, C) and coords (B, N, L), got {tuple(x.shape)} and "
                f"{tuple(coords.shape)}"
            )
        if x.shape[2] != coords.shape[1]:
            raise ValueError(
                f"x has {x.shape[2]} points but coords has {coords.shape[1]}: they must match."
            )


def silence_output_head(model: ForecastModel) -> None:
    """Zero every parameter of ``model.output_head()``: the model then outputs zeros."""
    with torch.no_grad():
        for layer in model.output_head():
            for param in layer.parameters():
                param.zero_()
