"""The one LightningModule every forecaster trains and is evaluated with."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

import lightning as L
import numpy as np
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch import nn
from torch.nn.utils import get_total_norm
from torch.optim.lr_scheduler import ReduceLROnPlateau

from cloudlstm.data.spec import SPEC_KEY, DataSpec, stored_spec
from cloudlstm.engine.declared_metrics import declared, monitor_mode
from cloudlstm.engine.distributed import gather_on_rank_zero
from cloudlstm.engine.metrics import (
    ForecastMetrics,
    quantile_forecast_metrics,
    ssim_blind_channels,
)
from cloudlstm.engine.quantile_levels import check_calibration, check_quantiles
from cloudlstm.engine.quantile_metrics import QUANTILE_DECLARED
from cloudlstm.engine.quantile_module import QuantileForecasting
from cloudlstm.engine.quantiles import pinball_loss
from cloudlstm.engine.results import results_scalars
from cloudlstm.engine.resumed_settings import (
    apply_configured,
    configured_patience,
    configured_settings,
    note_configured_lr,
    stop_if_stopped_early,
)
from cloudlstm.engine.saved_predictions import tested_data
from cloudlstm.engine.scheduled_sampling import (
    check_scheduled_sampling,
    draw_teacher,
    truth_probability,
)
from cloudlstm.errors import UserError, replacing
from cloudlstm.models.base import silence_output_head
from cloudlstm.models.teacher import Teacher, taught
from cloudlstm.nn.knn_finite import NonFiniteCoordinatesError

log = logging.getLogger(__name__)

LOSSES = ("mse", "mae")
LOSS_WEIGHTS = ("equal", "real_units")
ANCHORS = ("none", "last")
# how a divergence message ends: its run directory holds the checkpoints before the
# divergence, if any, which the same command would resume and other settings may not
STOPPED = (
    "The run stopped without writing metrics. Train again with other settings in a new run "
    "directory, or with resume=never in this one (the same command would resume its last "
    "checkpoint before the divergence, and other settings are refused there)."
)
# module.diverge_factor: a validation MAE more than this many times that of forecasting the
# training mean stops the run (TrainingDivergedError)
DEFAULT_DIVERGE_FACTOR = 10.0
# the reference forecasts measured at a fit's first validation (ForecastModule.reference_mae)
REFERENCES = ("mean", "persistence")
# persistence's validation MAE, logged beside val/mae (in metrics.json's "val")
PERSISTENCE_KEY = "val/persistence_mae"
# the checkpoint's record of the last validation before it: its val/ metrics
VALIDATION_KEY = "last_validation"


def masked_loss(
    pred: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor,
    kind: str = "mse",
    channel_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean squared (``mse``) or absolute (``mae``) error over observed entries only
    (filled gaps are not trained on), each channel's error times ``channel_weights (C,)``."""
    mask = mask.bool()
    # where on the difference, not a product with the mask: a NaN or inf in an unobserved
    # entry must reach neither the loss nor (through the square's backward) the gradient
    diff = torch.where(mask, pred - target, torch.zeros_like(pred))
    error = diff.square() if kind == "mse" else diff.abs()
    if channel_weights is not None:
        error = error * channel_weights.to(error)
    return error.sum() / mask.sum().clamp_min(1).to(pred.dtype)


def real_unit_weights(std: np.ndarray, kind: str) -> torch.Tensor:
    """Channel weights ``(C,)`` that make a loss on normalised values proportional to the
    same loss in real units: the error of channel c is std_c times its normalised error,
    so the weight is std_c (mae) or std_c^2 (mse), divided by the mean weight."""
    power = 2 if kind == "mse" else 1
    weights = torch.as_tensor(np.asarray(std, dtype=np.float64).reshape(-1)) ** power
    return (weights / weights.mean()).float()


def make_optimizer(
    factory: Callable[..., torch.optim.Optimizer], params: Iterable[torch.nn.Parameter]
) -> torch.optim.Optimizer:
    """``factory(params=params)``: the configured optimizer (``optimizer``, a partial).

    Raises:
        UserError: one of its values is invalid (torch's "Invalid learning rate: -1").
    """
    inner = getattr(factory, "func", factory)
    name = getattr(inner, "__name__", inner)
    try:
        optimizer = factory(params=params)
    except ValueError as err:  # torch's "Invalid learning rate: -1", "Invalid beta ..."
        if not str(err).startswith("Invalid"):
            raise
        raise UserError(
            f"optimizer ({name}): {err}. Set a valid value of "
            "that optimizer.* key (optimizer.lr > 0, weight_decay >= 0, betas in [0, 1))."
        ) from None
    # torch takes a rate of 0, with which training runs its whole budget and learns nothing
    if any(group.get("lr") == 0 for group in optimizer.param_groups):
        raise UserError(
            f"optimizer ({name}): optimizer.lr=0 would never change the weights: give a "
            "rate > 0, e.g. optimizer.lr=0.001."
        )
    return optimizer


class TrainingDivergedError(UserError):
    """The training loss or the weights became NaN or inf, or the validation MAE left every
    sensible bound: the settings need fixing."""


def check_diverge_factor(value: Any) -> float | None:
    """``module.diverge_factor`` as a float (None: no check).

    Raises:
        UserError: not a finite number > 0.
    """
    if value is None:
        return None
    try:
        factor = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        factor = math.nan
    if not 0 < factor < math.inf:
        raise UserError(
            f"module.diverge_factor={value!r}: use a number > 0 (a validation MAE more than "
            "this many times that of forecasting the training mean stops the run; default "
            f"{DEFAULT_DIVERGE_FACTOR:g}) or null for no check."
        )
    return factor


class ForecastModule(QuantileForecasting, L.LightningModule):
    """MSE (or MAE) on normalised values, Adam, metrics on de-normalised values.

    Args:
        model: any :class:`cloudlstm.models.ForecastModel`.
        optimizer: partial optimizer factory (Hydra ``_partial_: true``), called with the
            model parameters.
        scheduler: optional partial LR-scheduler factory; a plateau one
            (``ReduceLROnPlateau``) follows ``monitor``, in the direction declared with it.
        save_predictions: write test predictions and targets (de-normalised) to
            ``predictions.npz`` in ``output_dir``.
        output_dir: where test predictions go (the run directory).
        loss: ``mse`` (the paper's training loss) or ``mae`` (the reported metric's).
        loss_weights: ``equal`` (every channel alike in normalised units) or
            ``real_units`` (channels weighted so that the loss is proportional to the same
            error in real units, as the reported MAE / RMSE over all channels are).
        anchor: ``none`` (the model's output is the forecast, as in the paper) or ``last``
            (the forecast is the last observed frame plus the model's output, whose head
            starts at zero: an untrained model forecasts persistence). Models whose
            forecast is absolute by construction (``anchorable = False``) are not anchored.
        monitor: the validation metric a plateau scheduler follows (the checkpoint and
            early-stopping callbacks follow the same top-level ``monitor`` setting).
        diverge_factor: a validation MAE (real units) more than this many times the MAE
            of forecasting the training mean everywhere (the scaler's mean, measured on the
            validation part at the first validation of a fit) stops training with a
            :class:`TrainingDivergedError`; None: no check. The forecast of an untrained
            model is about that good, one that learns better: only a diverged run is
            10 times worse.
        quantiles: levels in (0, 1) (``[0.1, 0.5, 0.9]``) of quantile forecasts beside the
            point forecast, which is level 0.5 (required); trained with the pinball loss
            (:mod:`cloudlstm.engine.quantiles`). None: point forecasts only.
        calibrate: ``none`` or ``conformal`` (split-conformal offsets per step, channel and
            level, measured on the validation split and stored in every checkpoint).
        scheduled_sampling: the decay's steps ``tau`` of DCRNN's scheduled sampling, for
            models that read their own forecasts: a training step ``s`` feeds their
            decoder the truth with probability ``tau / (tau + exp(s / tau))``
            (:mod:`cloudlstm.engine.scheduled_sampling`). None: never.

    The scaler, channel names, input offsets and point groups come from ``spec`` (the
    data's :class:`~cloudlstm.data.spec.DataSpec`; without one, the datamodule's at
    ``setup``). Every checkpoint stores that description (scaler, points, coordinate range,
    input offsets, sampling step), and loading one into a module without a description
    restores it, so :meth:`predict_step` works on a module restored from a checkpoint alone.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer] | None,
        spec: DataSpec | None = None,
        scheduler: Callable[..., Any] | None = None,
        save_predictions: bool = False,
        output_dir: str | None = None,
        loss: str = "mse",
        loss_weights: str = "equal",
        anchor: str = "none",
        monitor: str = "val/loss",
        diverge_factor: float | None = DEFAULT_DIVERGE_FACTOR,
        quantiles: Any = None,
        calibrate: str = "none",
        scheduled_sampling: int | None = None,
    ) -> None:
        super().__init__()
        self.diverge_factor = check_diverge_factor(diverge_factor)
        self.scheduled_sampling = check_scheduled_sampling(scheduled_sampling, model)
        self.quantile_levels = check_quantiles(quantiles)
        self.calibration = check_calibration(calibrate, self.quantile_levels)
        if anchor not in ANCHORS:
            raise UserError(f"module.anchor={anchor!r} is not one of {list(ANCHORS)}.")
        if loss not in LOSSES:
            raise UserError(f"module.loss={loss!r} is not one of {list(LOSSES)}.")
        if loss_weights not in LOSS_WEIGHTS:
            raise UserError(
                f"module.loss_weights={loss_weights!r} is not one of {list(LOSS_WEIGHTS)}."
            )
        self.save_hyperparameters(ignore=["model", "spec"], logger=False)
        self.model = model
        self.anchored = anchor == "last" and getattr(model, "anchorable", True)
        if self.anchored:
            silence_output_head(model)
        # position in the input window of the last observed step (offset -1), set from the
        # data's input offsets: with data.seasonal=true it need not be the window's last
        self.anchor_index = -1
        self.spec: DataSpec | None = None
        self.test_metrics: ForecastMetrics | None = None
        self.val_metrics: ForecastMetrics | None = None
        self.group_points: dict[str, torch.Tensor] = {}
        # best (lowest) validation MAE in real units so far; the sweepers' objective
        self.val_mae_best = math.inf
        self._validated_at: int | None = None  # the global step of the last validation
        # the val/ metrics of the last validation before the checkpoint this module was
        # restored from ({}: none ran); None where none was, or it predates that record
        self.restored_validation: dict[str, float] | None = None
        # the validation MAE of the reference forecasts (REFERENCES), measured on the same
        # windows as val/mae at the first validation of each fit (_unmeasured_references):
        # the training mean's, the divergence check's bound, and persistence's, the floor
        # a trained model has to beat
        self.reference_mae: dict[str, float] = {}
        self.reference_metrics = nn.ModuleDict()
        # position in the input window of the targets' last observed frame; None where the
        # input has none (no offset -1): no persistence reference
        self.persistence_index: int | None = None
        self.group_metrics = nn.ModuleDict()
        # (C,) with loss_weights=real_units, made at setup; a buffer, so that Lightning moves
        # it to the device with the module (not persistent: derived from the scaler)
        self.register_buffer("loss_channel_weights", None, persistent=False)
        # each test batch's window starts t0, forecast, target, mask (and quantiles), when
        # saving predictions
        self._predictions: list[dict[str, np.ndarray]] = []
        self._ssim_warned = False  # the SSIM constants' warning is given once
        self._init_quantiles()
        if spec is not None:
            self.use_spec(spec)

    def use_spec(self, spec: DataSpec) -> None:
        """Take the data's description: the scaler, the loss weights, the anchor's input
        step and the metrics (point groups are scored separately as well)."""
        self.spec = spec.for_model(self.model)
        self.scaler = spec.value_scaler()
        if self.hparams.loss_weights == "real_units":  # the pinball loss is an L1 one
            kind = "mae" if self.quantile_levels else self.hparams.loss
            self.loss_channel_weights = real_unit_weights(self.scaler.std, kind)
        if self.anchored:
            self.anchor_index = anchor_index(spec.input_offsets)
        self.persistence_index = last_frame_index(spec.input_offsets)
        if self.spec.input_channels < self.spec.num_channels:  # targets not all read
            self.persistence_index = None
        self.test_metrics = self._metrics()
        self.val_metrics = self._metrics()
        self.reference_metrics = nn.ModuleDict(
            {name: self._metrics(quantiles=False) for name in REFERENCES}
        )
        self.group_points = {
            name: torch.as_tensor(points, dtype=torch.long)
            for name, points in spec.point_groups.items()
        }
        self.group_metrics = nn.ModuleDict({name: self._metrics() for name in self.group_points})
        self._use_spec_for_quantiles(spec)

    def setup(self, stage: str) -> None:
        if self.spec is None:  # a module made without one: the datamodule's
            self.use_spec(self.trainer.datamodule.spec)
        # before a resume restores the callbacks' states, their settings with them
        self._configured_patience = configured_patience(self.trainer)

    def _metrics(self, quantiles: bool = True) -> ForecastMetrics:
        """Metrics of the forecast channels, the scale-free MAE against the training std;
        those of its quantiles too (``module.quantiles``), unless ``quantiles`` is False."""
        return quantile_forecast_metrics(
            self.model.output_steps,
            self.spec.num_channels,
            list(self.spec.channel_names),
            channel_std=self.scaler.std,
            levels=self.quantile_levels if quantiles else (),
            channel_mean=self.scaler.mean,
        )

    def forward(
        self, x: torch.Tensor, coords: torch.Tensor, future: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Normalised forecast ``(B, J, N, C_out)`` of ``x (B, M, N, C_in)`` at ``coords
        (B, N, L)``, with the known-future channels ``future (B, J, N, F)`` when the data
        has time features; anchored: plus the last observed frame of the C_out target
        channels (the first C_out of the input's)."""
        out = self.model(x, coords) if future is None else self.model(x, coords, future)
        if self.anchored:
            last = x[:, self.anchor_index, :, : out.shape[-1]]
            out = out + last.unsqueeze(1)
        return out

    def _step(
        self, batch: dict[str, torch.Tensor], stage: str, teacher: Teacher | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Forecast, masked loss (``module.loss``, default MSE; with quantiles the
        pinball loss) on normalised values, logged as ``<stage>/loss``.

        Returns the loss, the normalised forecast ``(B, J, N, C)`` and its uncalibrated
        quantiles ``(B, J, N, C, Q)`` (None without ``module.quantiles``).
        """
        with taught(self.model, teacher):
            pred = self(batch["x"], batch["coords"], batch.get("future"))
        quantiles = self.quantile_forecast(pred, batch)
        if quantiles is None:
            loss = masked_loss(
                pred, batch["y"], batch["y_mask"], self.hparams.loss, self.loss_channel_weights
            )
        else:
            loss = pinball_loss(
                quantiles,
                batch["y"],
                batch["y_mask"],
                self.quantile_levels,
                self.loss_channel_weights,
            )
        self.log(
            f"{stage}/loss",
            loss,
            prog_bar=True,
            on_step=False,
            on_epoch=True,
            # a float: Lightning sums the sizes in an integer tensor, which its DDP mean
            # truncates (11 windows in 2 processes counted as 5)
            batch_size=float(batch["x"].shape[0]),
            # under DDP each process scores its own share of the windows (each once): the
            # mean over all of them is a one-process run's (every process has a batch)
            sync_dist=stage != "train",
        )
        return loss, pred, quantiles

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        try:
            loss = self._step(batch, "train", self._teacher(batch))[0]
        except NonFiniteCoordinatesError:  # CloudLSTM-family features: NaN before the loss
            self._diverged("the model's point coordinates became NaN or inf", batch_idx)
        self._stop_if_not_finite(loss, batch_idx)
        # per-step curve beside the epoch mean (`train/loss`) for long epochs
        self.log("train/loss_step", loss, on_step=True, on_epoch=False)
        return loss

    def _teacher(self, batch: dict[str, torch.Tensor]) -> Teacher | None:
        """The truth this training step's decoder reads, at the steps drawn for it
        (``module.scheduled_sampling``; logged as ``train/truth_probability``); None when
        off."""
        if self.scheduled_sampling is None:
            return None
        probability = truth_probability(self.global_step, self.scheduled_sampling)
        self.log("train/truth_probability", probability, on_step=True, on_epoch=False)
        y = batch["y"]
        anchor = None
        if self.anchored:
            anchor = batch["x"][:, self.anchor_index, :, : y.shape[-1]]
        return draw_teacher(y, batch["y_mask"], probability, anchor)

    def _stop_if_not_finite(self, loss: torch.Tensor, batch_idx: int) -> None:
        """Stop at the first NaN / inf training loss, before its backward pass.

        Checked in the module rather than in a callback so that every run has it (also
        ``callbacks=none``); it costs one host sync per step. All DDP ranks decide together:
        a rank stopping alone would leave the others waiting in the gradient all-reduce.
        """
        bad = not bool(torch.isfinite(loss))
        if self.trainer.strategy.reduce_boolean_decision(bad, all=False):
            value = loss.item() if bad else "not finite on another DDP rank"
            self._diverged(f"the training loss is {value}", batch_idx)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Stop when an update made a weight NaN / inf (identical on every DDP rank): the next
        forward pass would fail obscurely, e.g. neighbours searched among NaN coordinates."""
        # an empty one has no inf norm to take
        params = [p for p in self.parameters() if p.requires_grad and p.numel()]
        if params and not torch.isfinite(get_total_norm(params, norm_type=math.inf)):
            name = next(n for n, p in self.named_parameters() if not torch.isfinite(p).all())
            self._diverged(f"its update made the weights non-finite (first: {name})", batch_idx)

    def _diverged(self, what: str, batch_idx: int) -> NoReturn:
        raise TrainingDivergedError(
            f"Training diverged at epoch {self.current_epoch}, batch {batch_idx} (global step "
            f"{self.global_step}): {what}. Usual causes: a learning rate too high "
            "(optimizer.lr), unnormalised or non-finite inputs, or exploding gradients (clip "
            f"them: trainer.gradient_clip_val=1.0). {STOPPED}"
        )

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        try:
            _, pred, quantiles = self._step(batch, "val")
        except NonFiniteCoordinatesError:  # finite weights so large that the features overflow
            self._diverged(
                "the model's point coordinates became NaN or inf in validation", batch_idx
            )
        if self._collects_calibration():
            self.residual_bank.update(quantiles, batch["y"], batch["y_mask"])
        quantiles = self._real_quantiles(quantiles)
        pred, target = self._real_units(pred, batch)
        self.val_metrics.update(pred, target, batch["y_mask"], quantiles=quantiles)
        for name, metrics in self._unmeasured_references().items():
            forecast = self._reference_forecast(name, batch["x"], pred)
            metrics.update(self.scaler.inverse_transform(forecast), target, batch["y_mask"])

    @property
    def mean_forecast_mae(self) -> float | None:
        """The validation MAE of forecasting the training mean (the divergence check's
        reference); None before it is measured."""
        return self.reference_mae.get("mean")

    @property
    def persistence_mae(self) -> float | None:
        """The validation MAE of persistence (each target's last observed input frame);
        None before it is measured, or where the input has no such frame."""
        return self.reference_mae.get("persistence")

    def _unmeasured_references(self) -> dict[str, ForecastMetrics]:
        """The reference forecasts this validation measures, by name: each not measured yet,
        at the first validation of a fit (not the sanity check) or of the validation of a
        resumed finished training (``cli/train.py``): the training mean's where the
        divergence check is on, persistence's where the input holds the last frame."""
        trainer = self.trainer
        if trainer.sanity_checking or trainer.state.fn not in (
            TrainerFn.FITTING,
            TrainerFn.VALIDATING,
        ):
            return {}
        wanted = {
            "mean": self.diverge_factor is not None,
            "persistence": self.persistence_index is not None,
        }
        return {
            name: self.reference_metrics[name]
            for name in REFERENCES
            if wanted[name] and name not in self.reference_mae
        }

    def _reference_forecast(self, name: str, x: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
        """Reference forecast ``name`` (normalised, shaped as ``pred``): the training mean
        (zeros) or persistence, the last observed frame of the targets (what
        ``model=persistence`` forecasts, value for value)."""
        if name == "mean":
            return torch.zeros_like(pred)
        last = x[:, self.persistence_index, :, : pred.shape[-1]]
        return last.unsqueeze(1).expand_as(pred)

    def on_validation_epoch_start(self) -> None:
        self.val_metrics.reset()
        if self.residual_bank is not None:
            self.residual_bank.reset()

    def on_validation_epoch_end(self) -> None:
        """``val/<metric>`` in real units (as at test) for every metric declared
        ``at_validation``, and ``val/mae_best``."""
        if self.trainer.sanity_checking:  # two batches only: not a validation result
            return
        self._validated_at = self.global_step
        if self._collects_calibration():
            self._calibrated(self.residual_bank.offsets(self.quantile_levels, self.centre))
        overall = self.val_metrics.compute()["overall"]
        mae = overall["mae"]["mean"]
        for name, metrics in self._unmeasured_references().items():
            self.reference_mae[name] = metrics.compute()["overall"]["mae"]["mean"]
        if self.diverge_factor is not None and self.trainer.state.fn == TrainerFn.FITTING:
            self._stop_if_val_diverged(mae)
        if math.isfinite(mae):
            self.val_mae_best = min(self.val_mae_best, mae)
        # compute() already reduced the sums over DDP ranks: every rank logs the same value
        for info in self.val_metrics.metric_infos:
            if info.at_validation:
                self.log(f"val/{info.name}", overall[info.name]["mean"])
        self.log("val/mae_best", self.val_mae_best)
        if self.persistence_mae is not None:  # at every validation: its curve's flat line
            self.log(PERSISTENCE_KEY, self.persistence_mae)

    def _stop_if_val_diverged(self, mae: float) -> None:
        """Stop when the validation MAE exceeds ``diverge_factor`` times that of forecasting
        the training mean (every DDP rank has the same, reduced, values: all stop)."""
        reference = self.mean_forecast_mae
        if reference is None or not 0 < reference < math.inf:  # nothing to compare with
            return
        bound = self.diverge_factor * reference
        if mae > bound:  # an inf MAE too; a NaN one (nothing observed) is not compared
            raise TrainingDivergedError(
                f"Training diverged at the validation of global step {self.global_step} (epoch "
                f"{self.current_epoch}): val/mae is {mae:.4g}, above the bound {bound:.4g} "
                f"(module.diverge_factor={self.diverge_factor:g} times {reference:.4g}, the "
                "validation MAE of forecasting the training mean). Usual causes: a learning "
                "rate too high (optimizer.lr) or exploding gradients (clip them: "
                "trainer.gradient_clip_val=1.0); module.diverge_factor=null turns this check "
                f"off. {STOPPED}"
            )

    def _real_units(
        self, pred: torch.Tensor, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """De-normalised forecast and target, ``(B, J, N, C)`` each."""
        return self.scaler.inverse_transform(pred), self.scaler.inverse_transform(batch["y"])

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        _, pred, raw = self._step(batch, "test")
        quantiles = self._real_quantiles(self.calibrated(raw))
        pred, target = self._real_units(pred, batch)
        self.test_metrics.update(pred, target, batch["y_mask"], quantiles=quantiles)
        self._update_groups(self.group_metrics, pred, target, batch["y_mask"], quantiles)
        if self.uncalibrated_metrics is not None:  # module.calibrate: the raw quantiles too
            raw = self._real_quantiles(raw)
            self.uncalibrated_metrics.update(pred, target, batch["y_mask"], quantiles=raw)
            self._update_groups(self.uncalibrated_group_metrics, pred, target, batch["y_mask"], raw)
        if self.hparams.save_predictions:
            saved = {"t0": batch["t0"], "prediction": pred, "target": target}
            saved["scored"] = batch["y_mask"]  # the readings, or every value (score_filled)
            if quantiles is not None:
                saved["quantiles"] = quantiles
            self._predictions.append({k: v.cpu().numpy() for k, v in saved.items()})

    def _update_groups(
        self,
        metrics: nn.ModuleDict,
        pred: torch.Tensor,
        target: torch.Tensor,
        mask: torch.Tensor,
        quantiles: torch.Tensor | None,
    ) -> None:
        """Score each point group's part of a test batch (``(B, J, N, C)``; ``quantiles``
        ``(B, J, N, C, Q)`` or None) with its metric of ``metrics``."""
        for name, metric in metrics.items():
            points = self.group_points[name].to(pred.device)
            part = None if quantiles is None else quantiles[:, :, points]
            metric.update(pred[:, :, points], target[:, :, points], mask[:, :, points], part)

    def on_fit_start(self) -> None:
        # before a resume's restore, which brings back the checkpoint's settings too
        self._configured = configured_settings(self.trainer, self._configured_patience)
        self._warn_ssim_blind()

    def _warn_ssim_blind(self) -> None:
        """Once, before the first scores: the channels whose SSIM says nothing
        (:func:`~cloudlstm.engine.metrics.ssim_blind_channels`)."""
        if self._ssim_warned or not self.trainer.is_global_zero:
            return
        self._ssim_warned = True
        blind = ssim_blind_channels(self.scaler.std, self.spec.channel_names)
        if blind:
            log.warning(
                "SSIM takes the paper's constants in the data's units (L = 2, c2 = 0.36): "
                "channel(s) %s spread less than 0.6 over the training part (their std), "
                "which c2 outweighs, so their SSIM is near 1 whatever the forecast; rank on "
                "MAE, RMSE or smae.",
                ", ".join(map(repr, blind)),
            )

    def on_train_start(self) -> None:
        self._loaded_step = None  # training moves on from a resumed checkpoint's weights
        if self.trainer.ckpt_path is not None:
            apply_configured(self.trainer, self._configured)
            stop_if_stopped_early(self.trainer)  # after a raised patience is put back

    def on_test_start(self) -> None:
        self.prepare_quantiles()
        self._warn_ssim_blind()

    def on_test_epoch_start(self) -> None:
        self.test_metrics.reset()
        if self.uncalibrated_metrics is not None:
            self.uncalibrated_metrics.reset()
        for metric in [*self.group_metrics.values(), *self.uncalibrated_group_metrics.values()]:
            metric.reset()
        self._predictions = []

    def on_test_epoch_end(self) -> None:
        """Log the test metrics: their overall and per-horizon scalars for the loggers, and
        the whole results (:func:`~cloudlstm.engine.results.results_from` rebuilds them from
        ``trainer.test()``'s return value)."""
        test_results = self.test_metrics.compute()
        groups = {name: metric.compute() for name, metric in self.group_metrics.items()}
        if groups:
            test_results["groups"] = groups
        extra = self._uncalibrated_results()  # {"uncalibrated": ...} with module.calibrate
        test_results.update(extra)
        for prefix, results in [("test", test_results)] + [
            (f"test_{name}", res) for name, res in {**groups, **extra}.items()
        ]:
            for name, stats in results["overall"].items():
                self.log(f"{prefix}/{name}", stats["mean"])
                self.log(f"{prefix}/{name}_std", stats["std"])
        for name, value in horizon_scalars(test_results, "test").items():
            self.log(name, value)
        # a batch size of 1: Lightning's mean over "batches" is then the value, bit for bit
        for name, value in results_scalars(test_results).items():
            self.log(name, value, batch_size=1)
        if self.hparams.save_predictions and self.hparams.output_dir:
            self._save_predictions(Path(self.hparams.output_dir) / "predictions.npz")

    def _save_predictions(self, path: Path) -> None:
        """Write every rank's test forecasts to ``path`` from rank 0, in window order (under
        DDP each rank tested every world_size-th window): ``prediction``, ``target`` (NaN
        where the metrics scored nothing), ``scored`` (the cells the metrics counted) and
        ``observed`` (the cells that were readings, filled gaps not), ``(W, J, N, C)``;
        ``point_ids`` ``(N,)`` and ``forecast_time`` ``(W, J)``
        (:func:`~cloudlstm.engine.saved_predictions.tested_data`); with quantile forecasts,
        ``quantiles`` ``(W, J, N, C, Q)`` (calibrated as tested) at ``levels`` ``(Q,)``."""
        ranks = gather_on_rank_zero(self._predictions)
        if ranks is None:
            return
        batches = [batch for rank in ranks for batch in rank]
        saved = {key: np.concatenate([b[key] for b in batches]) for key in batches[0]}
        order = np.argsort(saved["t0"], kind="stable")
        saved = {key: values[order] for key, values in saved.items()}
        datamodule = getattr(self.trainer, "datamodule", None)
        saved.update(tested_data(datamodule, saved.pop("t0"), saved["scored"]))
        saved["target"] = np.where(saved["scored"], saved["target"], np.nan)
        if "quantiles" in saved:
            saved["levels"] = np.asarray(self.quantile_levels, dtype=np.float64)
        with replacing(path) as part:
            np.savez_compressed(part, **saved)

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        """De-normalised forecast ``(B, J, N, C_out)`` of ``batch["x"]`` (normalised, ``(B,
        M, N, C_in)``) at ``batch["coords"]`` (normalised, ``(B, N, L)``), with
        ``batch["future"]`` ``(B, J, N, F)`` when the model was trained with time features."""
        pred = self(batch["x"], batch["coords"], batch.get("future"))
        return self.scaler.inverse_transform(pred)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["val_mae_best"] = self.val_mae_best
        # a resumed fit with no validation left to run reports these (cli/train.py)
        checkpoint[VALIDATION_KEY] = self._last_validation()
        self._save_quantile_offsets(checkpoint)
        if self.spec is not None:
            checkpoint[SPEC_KEY] = self.spec.to_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restore the best validation MAE, and the data's description where this module
        has none (a module rebuilt for forecasting; one built for data keeps that data's)."""
        self.val_mae_best = checkpoint.get("val_mae_best", math.inf)
        self.restored_validation = checkpoint.get(VALIDATION_KEY)
        self._load_quantile_offsets(checkpoint)
        if self.spec is not None:
            return
        state = stored_spec(checkpoint)
        if state is not None:  # none in checkpoints written before it was stored
            self.use_spec(DataSpec.from_dict(state))

    def _last_validation(self) -> dict[str, float]:
        """The ``val/`` metrics of the last validation: this process's, else those of the
        checkpoint it resumed from (a process killed after it resumed, before it validated,
        keeps them), else none."""
        return validation_metrics(self.trainer) or self.restored_validation or {}

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = make_optimizer(self.hparams.optimizer, self.parameters())
        note_configured_lr(optimizer)
        if self.hparams.scheduler is None:
            return {"optimizer": optimizer}
        scheduler = self.hparams.scheduler(optimizer=optimizer, **self._plateau_mode())
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            config = {"monitor": self.hparams.monitor, **self._plateau_cadence()}
        else:  # a schedule over optimiser steps (the recipe's warm-up + cosine)
            config = {"interval": "step"}
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, **config}}

    def _plateau_cadence(self) -> dict[str, Any]:
        """When a plateau scheduler steps: after each validation, whose metric it reads, so
        that its patience counts validations, as early stopping's does. At the end of every
        k-th epoch where validations are there alone (``check_val_every_n_epoch=k``,
        ``val_check_interval=1.0``). Where they come every N steps or several times an
        epoch (``experiment=compare`` under ``recipe=paper``), at epochs' ends the metric
        would be missing, or the last one again, and the patience would count epochs; and
        Lightning counts a frequency in the epoch's batches, not in steps. So it is offered
        the metric at every step (none before the first validation: skipped, ``strict``
        false) and :meth:`lr_scheduler_step` steps it after a validation alone."""
        if self._validates_within_epochs():
            return {"interval": "step", "frequency": 1, "strict": False}
        every = getattr(getattr(self, "_trainer", None), "check_val_every_n_epoch", 1)
        return {"interval": "epoch", "frequency": every or 1}

    def _validates_within_epochs(self) -> bool:
        """Whether validations come other than once, at an epoch's end: every N steps
        (across epochs or within each), at a fraction of an epoch, or every so much time
        (Lightning keeps that interval apart from ``val_check_interval``)."""
        trainer = getattr(self, "_trainer", None)
        every = getattr(trainer, "check_val_every_n_epoch", 1)
        interval = getattr(trainer, "val_check_interval", 1.0)
        if every is None or getattr(trainer, "_val_check_time_interval", None) is not None:
            return True
        return not (isinstance(interval, float) and interval >= 1.0)

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """A plateau scheduler under validations within epochs steps right after one (on
        its metric), never on the metric of an earlier one (:meth:`_plateau_cadence`)."""
        if isinstance(scheduler, ReduceLROnPlateau) and self._validates_within_epochs():
            if self._validated_at == self.global_step:
                scheduler.step(metric)
            return
        super().lr_scheduler_step(scheduler, metric)

    def _plateau_mode(self) -> dict[str, str]:
        """``mode`` for a plateau scheduler: the direction declared with the monitored
        metric (``max`` for ``val/ssim``), where its factory does not name one; torch's
        default, ``min``, would halve the rate while the metric improves.

        Raises:
            UserError: the factory names the other mode.
        """
        factory = self.hparams.scheduler
        target = getattr(factory, "func", factory)
        if not (isinstance(target, type) and issubclass(target, ReduceLROnPlateau)):
            return {}
        monitor = self.hparams.monitor
        declared_mode = monitor_mode(monitor, default=None)
        given = getattr(factory, "keywords", {}).get("mode")
        if declared_mode is None or given == declared_mode:
            return {}
        if given is not None:
            raise UserError(
                f"scheduler.mode={given} contradicts monitor={monitor}, which improves as it "
                f"gets {'higher' if declared_mode == 'max' else 'lower'} (mode {declared_mode}, "
                "declared with the metric): leave scheduler.mode out, it follows the metric."
            )
        return {"mode": declared_mode}


def validation_metrics(trainer: L.Trainer) -> dict[str, float]:
    """The ``val/`` metrics of the trainer's last validation in this process ({}: none)."""
    metrics = trainer.callback_metrics
    return {key: float(value) for key, value in metrics.items() if key.startswith("val/")}


def anchor_index(input_offsets: list[int]) -> int:
    """Index in the input window of its last observed step (offset -1).

    Raises:
        UserError: the input does not reach the step right before the forecast, so there is
            no last frame to anchor on.
    """
    index = last_frame_index(input_offsets)
    if index is None:
        raise UserError(
            f"module.anchor=last needs the step right before the forecast in the input, but "
            f"the input offsets are {list(input_offsets)}; use module.anchor=none."
        )
    return index


def last_frame_index(input_offsets: list[int]) -> int | None:
    """Index in the input window of its last observed step (offset -1; the last such, where
    the offsets repeat it), or None where the input does not reach it."""
    if -1 not in input_offsets:
        return None
    return len(input_offsets) - 1 - list(reversed(input_offsets)).index(-1)


def horizon_metrics() -> tuple[str, ...]:
    """The metrics declared ``per_horizon`` (MAE, RMSE, smae; CRPS, coverage, width)."""
    return tuple(info.name for info in (*declared(), *QUANTILE_DECLARED) if info.per_horizon)


def horizon_scalars(results: dict[str, Any], prefix: str) -> dict[str, float]:
    """Per-horizon values of the :func:`horizon_metrics` as flat scalars:
    ``{"<prefix>/mae_h01": ..., ...}``.

    Horizons are 1-based and zero-padded (at least two digits) so they sort in order.
    """
    per_step = results["per_step"]
    steps = len(per_step["mae"]["mean"])
    width = max(2, len(str(steps)))
    return {
        f"{prefix}/{metric}_h{h + 1:0{width}d}": per_step[metric]["mean"][h]
        for metric in horizon_metrics()
        if metric in per_step
        for h in range(steps)
    }
