"""Experiment loggers of ``conf/logger/``: Lightning's, with what they print made right."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger


class WandbLogger(LightningWandbLogger):
    """Lightning's W&B logger, without the ``anonymous`` argument it always hands to
    ``wandb.init``: recent W&B versions warn on every run that the setting has no
    effect, even when it is None."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self._wandb_init.get("anonymous") is None:  # never asked for: not sent at all
            self._wandb_init.pop("anonymous", None)
