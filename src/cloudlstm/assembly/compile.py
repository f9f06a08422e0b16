"""``model.compile=auto`` in a run: the Trainer's device decides (cloudlstm.models.capture)."""

from __future__ import annotations

import logging
from typing import Any

import torch
from omegaconf import DictConfig
from torch import nn

from cloudlstm.assembly.devices import run_accelerator, user_devices, user_nodes
from cloudlstm.data.spec import DataSpec
from cloudlstm.models.capture import AUTO, RunDevice, auto_compile

log = logging.getLogger(__name__)


def run_device(trainer: DictConfig | dict[str, Any]) -> RunDevice:
    """Where the Trainer of ``trainer`` (the ``trainer`` config) trains: on CUDA where its
    ``accelerator`` is CUDA as Lightning maps it here
    (:func:`~cloudlstm.assembly.devices.run_accelerator`: cuda; gpu but on Apple's GPU; auto
    where Lightning picks CUDA), on ``devices`` x ``num_nodes``
    devices (:func:`~cloudlstm.assembly.devices.named_devices` and
    :func:`~cloudlstm.assembly.devices.named_nodes`; ``auto``: every visible GPU, every
    TPU core of a TPU run, one on the CPU; -1: every visible GPU, and on the CPU, which
    refuses it before a Trainer is built
    (:func:`~cloudlstm.assembly.build.check_trainer_settings`), one).

    Raises:
        UserError: ``accelerator`` is no name Lightning takes, ``devices`` names no device
            or is of no form Lightning takes, or ``num_nodes`` is no whole number >= 1.
    """
    accelerator = run_accelerator(trainer.get("accelerator", "auto"))
    cuda = accelerator == "cuda"
    count = user_devices(trainer.get("devices", "auto"))
    nodes = user_nodes(trainer.get("num_nodes", 1))
    if count is None:  # every device of this machine
        count = max(_every_device(accelerator, cuda), 1)
    return RunDevice(cuda=cuda, devices=count * nodes)


def _every_device(accelerator: str | None, cuda: bool) -> int:
    """How many devices ``auto`` (or -1) takes on ``accelerator`` here, as Lightning counts
    them: every visible GPU, every TPU core; 0 on the CPU and Apple's GPU (one device)."""
    if cuda:
        return torch.cuda.device_count()
    if accelerator == "tpu":
        from lightning.fabric.accelerators import XLAAccelerator

        return XLAAccelerator.auto_device_count()
    return 0


def compile_for_run(
    model: nn.Module,
    model_cfg: DictConfig,
    trainer: DictConfig | None,
    spec: DataSpec,
    taught: bool = False,
) -> nn.Module:
    """``model`` compiled in place as its ``model.compile=auto`` (in ``model_cfg``) decides
    for the device of ``trainer`` (the ``trainer`` config), the decision logged (on CUDA,
    where it is news: on CPU auto is always eager); ``taught``: the run trains with
    ``module.scheduled_sampling``."""
    if model_cfg.get("compile") != AUTO:
        return model
    device = run_device(trainer or {})
    checkpointing = bool(model_cfg.get("checkpointing", False))
    capture = auto_compile(
        model, spec.num_points, spec.coord_features, device, checkpointing, taught
    )
    if capture.mode is not None:
        model.compile(mode=capture.mode)
    say = log.info if device.cuda else log.debug
    say("model.compile=auto: %s (%s)", capture.mode or "eager", capture.why)
    return model
