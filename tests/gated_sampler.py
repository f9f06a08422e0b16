"""A sampler that holds its search as it asks trial 1, until the test lets it go: the gap
between two trials of a search, when no job of it holds a run directory
(test_optuna_search.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import optuna


class GatedSampler(optuna.samplers.TPESampler):
    """TPE that, asked trial 1, writes ``<gate>/asking`` and waits (at most 300 s) for
    ``<gate>/go``."""

    def __init__(self, gate: str, seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(seed=seed, **kwargs)
        self.gate = Path(gate)

    def before_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if trial.number == 1:
            (self.gate / "asking").touch()
            deadline = time.monotonic() + 300
            while not (self.gate / "go").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        super().before_trial(study, trial)
