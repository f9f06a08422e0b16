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

    With the first target step at offset 0, target step t = 1..J takes the latest input
    step whose offset is ``t - 1`` less a whole number of seasons. On a window of M
    consecutive steps that is the last observed season, repeated as often as J needs, so
    the window must hold one season (M >= period). On the paper's seasonal input
    (``data.seasonal=true``: ``input_offsets`` with gaps) each target reads its own phase of
    the day wherever the input holds it, and the model is refused where it does not.

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
        input_offsets: list[int] | None = None,
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
        self.input_offsets = None if input_offsets is None else [int(o) for o in input_offsets]
        # Known when built for data: a window it cannot read is refused before training.
        if self.input_offsets is not None:
            self.sources(self.input_offsets)
        elif input_steps is not None:
            self.sources(contiguous(input_steps))

    def sources(self, offsets: list[int]) -> list[int]:
        """The input index each target step repeats, for inputs at ``offsets`` (relative to
        the first target step).

        Raises:
            ValueError: the input holds no step of some target's phase of the season.
        """
        index = {offset: i for i, offset in enumerate(offsets)}  # later duplicates win
        found = []
        for t in range(self.output_steps):
            back = t - self.period * (t // self.period + 1)  # the latest same-phase offset
            while back >= min(offsets) and back not in index:
                back -= self.period
            if back not in index:
                raise ValueError(self._missing_phase(t + 1, offsets))
            found.append(index[back])
        return found

    def _missing_phase(self, step: int, offsets: list[int]) -> str:
        if offsets == contiguous(len(offsets)):
            return (
                f"seasonal naive needs one whole season in the input window, but "
                f"input_steps M={len(offsets)} < period={self.period} steps. Set "
                f"data.input_steps to at least {self.period} (e.g. "
                f"data.input_steps={self.period}, with data.seasonal=false), or set "
                f"model.period to a season of at most {len(offsets)} steps."
            )
        return (
            f"seasonal naive: the seasonal input (data.seasonal=true) holds no step a whole "
            f"number of seasons (period={self.period} steps) before target step {step}, so it "
            f"has nothing to repeat there. Use data.seasonal=false with data.input_steps of "
            f"at least {self.period}, or data.seasonal_every_minutes of one step."
        )

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check_input(x, coords, future)
        offsets = self.input_offsets or contiguous(x.shape[1])  # built without data: consecutive
        if len(offsets) != x.shape[1]:
            raise ValueError(
                f"seasonal naive was built for inputs of {len(offsets)} steps, got {x.shape[1]}."
            )
        steps = torch.tensor(self.sources(offsets), device=x.device)
        return x[:, steps, :, : _targets(self, x)]


def contiguous(steps: int) -> list[int]:
    """The offsets of ``steps`` consecutive input steps ending right before the target."""
    return list(range(-steps, 0))


def _targets(model: ForecastModel, x: torch.Tensor) -> int:
    """C_out: the model's forecast channels, or every channel of ``x`` when built
    without channel sizes."""
    return x.shape[-1] if model.channels is None else model.channels.out
