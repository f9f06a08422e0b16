"""Parameter-free reference forecasts: persistence and seasonal naive."""

from __future__ import annotations

import torch

from cloudlstm.models.base import Channels, ForecastModel


class Persistence(ForecastModel):
    """Every future step equals the last observed step.

    ``x (B, M, N, C_in)``, ``coords (B, N, L)`` -> ``(B, J, N, C_out)``; no parameters.
    Covariates are read and ignored: the forecast is the targets' own last values.
    """

    # The forecast is the last frame itself: anchoring it would add that frame twice.
    anchorable = False
    own_history_only = "it repeats each point's own last readings"

    def __init__(
        self,
        output_steps: int,
        num_channels: int | None = None,
        input_channels: int | None = None,
        future_channels: int = 0,
    ) -> None:
        super().__init__()
        if output_steps < 1:
            raise ValueError(f"output_steps must be >= 1, got {output_steps}.")
        self.output_steps = output_steps
        if num_channels is not None:
            self.channels = Channels.of(num_channels, input_channels, future_channels)

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check_input(x, coords, future)
        return x[:, -1:, :, : _targets(self, x)].repeat(1, self.output_steps, 1, 1)


class SeasonalNaive(ForecastModel):
    """Every future step equals the observation one season (``period`` steps) earlier.

    With the last observed step at time 0, target step t = 1..J takes the value at
    ``t - period * ceil(t / period)``, i.e. the last observed season repeated as often
    as J needs. The input window must therefore hold at least one season (M >= period) of
    consecutive steps: it is not meant for ``data.seasonal=true`` inputs.

    ``x (B, M, N, C_in)``, ``coords (B, N, L)`` -> ``(B, J, N, C_out)``; no parameters.
    Covariates are read and ignored.
    """

    # The forecast is observed values themselves: adding the last frame would double them.
    anchorable = False
    own_history_only = "it repeats each point's own readings of one season before"

    def __init__(
        self,
        output_steps: int,
        period: int | None = None,
        steps_per_day: int | None = None,
        input_steps: int | None = None,
        num_channels: int | None = None,
        input_channels: int | None = None,
        future_channels: int = 0,
    ) -> None:
        super().__init__()
        if num_channels is not None:
            self.channels = Channels.of(num_channels, input_channels, future_channels)
        period = steps_per_day if period is None else period  # a day by default
        if period is None:
            raise ValueError(
                "seasonal naive: the data has no known sampling period (no timestamps), so "
                "model.period cannot default to one day; set model.period=<steps per season>."
            )
        if output_steps < 1 or period < 1:
            raise ValueError(
                f"output_steps and model.period must be >= 1, got {output_steps} and {period}."
            )
        self.output_steps = output_steps
        self.period = period
        if input_steps is not None:  # known when built for data: refused before training
            self._check_window(input_steps)

    def _check_window(self, steps: int) -> None:
        if steps < self.period:
            raise ValueError(
                f"seasonal naive needs one whole season in the input window, but "
                f"input_steps M={steps} < period={self.period} steps. Set "
                f"data.input_steps to at least {self.period} (e.g. "
                f"data.input_steps={self.period}, with data.seasonal=false), or set "
                f"model.period to a season of at most {steps} steps."
            )

    def check_input(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> None:
        super().check_input(x, coords, future)
        self._check_window(x.shape[1])

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check_input(x, coords, future)
        m = x.shape[1]
        # Target t (1-based) maps to input index m - period + (t - 1) % period.
        steps = torch.arange(self.output_steps, device=x.device) % self.period
        return x[:, m - self.period + steps, :, : _targets(self, x)]


def _targets(model: ForecastModel, x: torch.Tensor) -> int:
    """C_out: the model's forecast channels, or every channel of ``x`` when built
    without channel sizes."""
    return x.shape[-1] if model.channels is None else model.channels.out
