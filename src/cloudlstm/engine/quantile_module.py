"""The training module's quantile forecasts: its head or the naive floors' residual
quantiles, the conformal calibration and what a checkpoint keeps of them.

:class:`QuantileForecasting` is a part of
:class:`~cloudlstm.engine.module.ForecastModule` (a mixin); what it computes and why is in
:mod:`cloudlstm.engine.quantiles`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor

from cloudlstm.data.spec import DataSpec
from cloudlstm.engine.quantile_levels import centre_index
from cloudlstm.engine.quantile_metrics import only_quantile_metrics
from cloudlstm.engine.quantiles import (
    CALIBRATION_KEY,
    QuantileHead,
    ResidualBank,
    apply_offsets,
)
from cloudlstm.errors import UserError

log = logging.getLogger(__name__)

# The naive floors' residual quantiles read at most this many training batches (the first
# of a shuffled loader: a random subset of the windows, plenty for per-step quantiles).
FLOOR_BATCHES = 200


class QuantileForecasting:
    """Quantile forecasts of a ``ForecastModule`` (``module.quantiles``, ``module.calibrate``).

    Attributes:
        quantile_levels: the Q ascending levels (``()``: point forecasts only).
        centre: the index of the level that is the point forecast.
        quantile_head: the learned gaps (:class:`QuantileHead`) of a model with trainable
            parameters, made with the data's sizes; None otherwise.
        floor_offsets: ``(J, C, Q)`` normalised residual quantiles of a model without
            trainable parameters (the naive floors), measured on the training split.
        conformal_offsets: ``(J, C, Q)`` normalised conformal offsets, or None.
        calibrated_at: the global step of the weights the conformal offsets were measured
            for.
    """

    quantile_levels: tuple[float, ...]
    calibration: str

    def _init_quantiles(self) -> None:
        self.centre = centre_index(self.quantile_levels) if self.quantile_levels else 0
        self.learns_quantiles = any(p.requires_grad for p in self.model.parameters())
        self.quantile_head: QuantileHead | None = None
        self.floor_offsets: Tensor | None = None
        self.conformal_offsets: Tensor | None = None
        self.calibrated_at: int | None = None
        self._loaded_step: int | None = None  # the global step of the loaded checkpoint
        # the validation residuals the conformal offsets are measured on
        self.residual_bank = ResidualBank() if self.calibration == "conformal" else None
        self.uncalibrated_metrics = None
        # the same, of each point group (held-out and trained points, inliers, outliers)
        self.uncalibrated_group_metrics = torch.nn.ModuleDict()

    def _use_spec_for_quantiles(self, spec: DataSpec) -> None:
        """The head (sized from the data) and the metrics of the uncalibrated forecast."""
        if not self.quantile_levels:
            return
        if self.calibration == "conformal":
            self.uncalibrated_metrics = self._metrics()
            self.uncalibrated_group_metrics = torch.nn.ModuleDict(
                {name: self._metrics() for name in self.group_points}
            )
        if self.learns_quantiles and self.quantile_head is None:
            self.quantile_head = QuantileHead(
                self.quantile_levels,
                input_steps=len(spec.input_offsets),
                input_channels=len(spec.input_names),
                output_steps=self.model.output_steps,
                channels=spec.num_channels,
                future_channels=len(spec.future_names),
            )

    # ------------------------------------------------------------------ forecasts
    def quantile_forecast(self, pred: Tensor, batch: dict[str, Tensor]) -> Tensor | None:
        """Uncalibrated normalised quantiles ``(B, J, N, C, Q)`` around the normalised point
        forecast ``pred (B, J, N, C)`` of ``batch``; None without ``module.quantiles``.

        Raises:
            UserError: a model without trainable parameters whose residual quantiles were
                never measured (they are, at the start of a test).
        """
        if not self.quantile_levels:
            return None
        if self.quantile_head is not None:
            return self.quantile_head(pred, batch["x"], batch.get("future"))
        if self.floor_offsets is None:
            raise UserError(
                f"{type(self.model).__name__} has no trainable parameters: its quantiles are "
                "its residual quantiles on the training split, measured when it is tested "
                "(python train.py), not yet here."
            )
        stacked = pred.unsqueeze(-1).expand(*pred.shape, len(self.quantile_levels))
        return apply_offsets(stacked, self.floor_offsets, self.centre)

    def calibrated(self, quantiles: Tensor | None) -> Tensor | None:
        """``quantiles`` moved by the conformal offsets, where there are any."""
        if quantiles is None or self.conformal_offsets is None:
            return quantiles
        return apply_offsets(quantiles, self.conformal_offsets, self.centre)

    def _real_quantiles(self, quantiles: Tensor | None) -> Tensor | None:
        """Normalised ``(B, J, N, C, Q)`` quantiles in real units."""
        if quantiles is None:
            return None
        return self.scaler.inverse_transform(quantiles.movedim(-1, 0)).movedim(0, -1)

    @torch.no_grad()
    def predict_quantiles(self, batch: dict[str, Tensor]) -> Tensor:
        """The calibrated quantiles ``(B, J, N, C_out, Q)`` in real units of a batch as
        :meth:`predict_step` takes it; level ``centre`` is its forecast.

        Raises:
            UserError: the module forecasts no quantiles.
        """
        if not self.quantile_levels:
            raise UserError(
                "this model was trained without module.quantiles: it forecasts no quantiles."
            )
        pred = self(batch["x"], batch["coords"], batch.get("future"))
        return self._real_quantiles(self.calibrated(self.quantile_forecast(pred, batch)))

    # ------------------------------------------------------------------ calibration
    def _collects_calibration(self) -> bool:
        """Whether this validation measures conformal offsets: a fit's, not its sanity
        check."""
        trainer = self.trainer
        return (
            self.calibration == "conformal"
            and trainer.state.fn == TrainerFn.FITTING
            and not trainer.sanity_checking
        )

    def _calibrated(self, offsets: Tensor | None) -> None:
        """Take conformal ``offsets`` measured with the weights of this global step."""
        self.conformal_offsets = offsets
        self.calibrated_at = None if offsets is None else int(self.global_step)

    def prepare_quantiles(self) -> None:
        """Before a test: the naive floors' residual quantiles on the training split, and
        conformal offsets on the validation split where the tested weights have none."""
        if not self.quantile_levels:
            return
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is None:  # tested on loaders alone: nothing to measure offsets on
            if self.quantile_head is None and self.floor_offsets is None:
                raise UserError(
                    f"{type(self.model).__name__} with module.quantiles measures its residual "
                    "quantiles on the training split: test it with its datamodule."
                )
            return
        if self.quantile_head is None and self.floor_offsets is None:
            loader = datamodule.train_dataloader()
            self.floor_offsets = self._offsets(loader, FLOOR_BATCHES, of_point=True)
        if self.calibration == "conformal" and not self._calibration_fits():
            log.info("Calibrating the quantiles of the tested weights on the validation split.")
            self._calibrated(self._offsets(datamodule.val_dataloader(), None, of_point=False))
            if self._loaded_step is not None:
                self.calibrated_at = self._loaded_step

    def _calibration_fits(self) -> bool:
        """Whether the conformal offsets are those of the weights tested now."""
        if self.conformal_offsets is None:
            return False
        weights = self._loaded_step if self._loaded_step is not None else self.global_step
        return self.calibrated_at == weights

    @torch.no_grad()
    def _offsets(self, loader: Iterable, max_batches: int | None, of_point: bool) -> Tensor:
        """``(J, C, Q)`` residual quantiles over ``loader``'s batches (at most
        ``max_batches``): of the point forecast (``of_point``) or of each level's."""
        bank = ResidualBank(sync_on_compute=False)  # every rank reads the whole loader
        was_training = self.training
        self.eval()
        try:
            for index, batch in enumerate(loader):
                if max_batches is not None and index >= max_batches:
                    break
                batch = {
                    k: v.to(self.device) if isinstance(v, Tensor) else v for k, v in batch.items()
                }
                pred = self(batch["x"], batch["coords"], batch.get("future"))
                forecast = pred.unsqueeze(-1) if of_point else self.quantile_forecast(pred, batch)
                bank.update(forecast, batch["y"], batch["y_mask"])
        finally:
            self.train(was_training)
        offsets = bank.offsets(self.quantile_levels, self.centre)
        if offsets is None:
            raise UserError(
                "module.quantiles: the split their offsets are measured on has no windows; "
                "give the data more steps or a larger data.val_fraction."
            )
        return offsets

    def _uncalibrated_results(self) -> dict[str, Any]:
        """``{"uncalibrated": results}``: the quantile metrics of the forecast before the
        conformal offsets, with ``module.calibrate=conformal``; else ``{}``."""
        if self.uncalibrated_metrics is None:
            return {}
        results = only_quantile_metrics(self.uncalibrated_metrics.compute())
        groups = {
            name: only_quantile_metrics(metric.compute())
            for name, metric in self.uncalibrated_group_metrics.items()
        }
        return {"uncalibrated": {**results, **({"groups": groups} if groups else {})}}

    # ------------------------------------------------------------------ checkpoints
    def _save_quantile_offsets(self, checkpoint: dict[str, Any]) -> None:
        if not self.quantile_levels:
            return
        checkpoint[CALIBRATION_KEY] = {
            "levels": list(self.quantile_levels),
            "floor": _listed(self.floor_offsets),
            "conformal": _listed(self.conformal_offsets),
            "calibrated_at": self.calibrated_at,
        }

    def _load_quantile_offsets(self, checkpoint: dict[str, Any]) -> None:
        """Restore the offsets; conformal ones only where measured for these weights (a
        ``last.ckpt`` written after the last validation has none) and where this module
        calibrates: an evaluation with ``module.calibrate=none`` tests the forecast as the
        head gives it."""
        self._loaded_step = checkpoint.get("global_step")
        stored = checkpoint.get(CALIBRATION_KEY)
        if not self.quantile_levels or not stored:
            return
        if tuple(stored.get("levels", ())) != self.quantile_levels:
            return
        self.floor_offsets = _tensor(stored.get("floor"))
        at = stored.get("calibrated_at")
        fits = at is not None and at == self._loaded_step and self.calibration == "conformal"
        self.conformal_offsets = _tensor(stored.get("conformal")) if fits else None
        self.calibrated_at = at if fits else None
        if self.calibration == "conformal" and not fits:
            log.info(
                "This checkpoint holds no conformal offsets of its weights: a test measures "
                "them, a forecast's quantiles are uncalibrated."
            )


def _listed(offsets: Tensor | None) -> list | None:
    return None if offsets is None else offsets.tolist()


def _tensor(values: list | None) -> Tensor | None:
    return None if values is None else torch.tensor(values, dtype=torch.float32)
