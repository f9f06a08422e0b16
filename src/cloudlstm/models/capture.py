"""``model.compile=auto`` (the default): a training step replayed from CUDA graphs where it
can be, eager where it cannot.

On one GPU a small cloud's step is launch-bound: a CloudLSTM step at Beijing's size
(12 points) runs about 1,300 kernels, each too short to hide its launch. torch.compile's
``reduce-overhead`` mode records the forward and its backward once as CUDA graphs and then
replays each with one launch. That needs a forward without host synchronisation: every
neighbour search inside it must be the Triton kernel (clouds of up to
``knn_triton.MAX_POINTS`` points in 1-3 dimensions, Triton installed and not switched off),
since the cell list reads its cell counts back to the host.

So ``auto`` means ``reduce-overhead`` on a single CUDA device for a model that trains and
whose forward can be captured, and eager otherwise: on CPU (where compiling does not pay),
on several devices, with ``model.checkpointing`` (its recomputed forward has not been run
under captured graphs here), for models that say why not (:attr:`ForecastModel.capture_refused`)
and for searching models (:attr:`ForecastModel.searches_neighbours`) without the Triton
search. The run's log says which, and why.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from cloudlstm.nn import knn_triton

AUTO = "auto"
CAPTURED = "reduce-overhead"


@dataclass(frozen=True)
class RunDevice:
    """Where a run trains: on CUDA or not, and on how many devices in all."""

    cuda: bool
    devices: int


@dataclass(frozen=True)
class Capture:
    """What ``model.compile=auto`` chose: a torch.compile mode (None: eager), and why."""

    mode: str | None
    why: str


def auto_compile(
    model: nn.Module, num_points: int, coord_features: int, device: RunDevice,
    checkpointing: bool = False, taught: bool = False,
) -> Capture:  # fmt: skip
    """The compile mode of ``model.compile=auto`` for ``model`` on ``device``, with clouds
    of ``num_points`` points of ``coord_features`` coordinates; ``taught``: its training
    forwards read drawn true values (``module.scheduled_sampling``)."""
    name = type(model).__name__
    if not device.cuda:
        return Capture(None, "not on CUDA: compiling does not pay on CPU")
    if device.devices != 1:
        return Capture(None, f"{device.devices} devices: captured steps run on one device only")
    if not any(p.requires_grad for p in model.parameters()):
        return Capture(None, f"{name} has nothing to train")
    refused = getattr(model, "capture_refused", None)
    if refused:
        return Capture(None, f"{name}: {refused}")
    if checkpointing:
        return Capture(None, "model.checkpointing recomputes the forward in the backward")
    if taught:
        return Capture(
            None, "module.scheduled_sampling's training forwards have not run under captured graphs"
        )
    if getattr(model, "searches_neighbours", False):
        dims = max(coord_features, 2)  # a 1-D cloud is searched with a zero second axis
        if not knn_triton.fits(True, num_points, dims):
            return Capture(None, f"{name} searches neighbours, {_why_no_triton(num_points, dims)}")
    return Capture(CAPTURED, f"{name}'s forward and backward replayed as CUDA graphs")


def _why_no_triton(num_points: int, dims: int) -> str:
    """Why the Triton search does not take these clouds (the cell list, which reads back to
    the host, would search them)."""
    if not knn_triton.triton_switch.ENABLED:
        return "and without Triton (not installed, or CLOUDLSTM_TRITON=0) the search syncs the host"
    if num_points > knn_triton.MAX_POINTS:
        return (
            f"and clouds of {num_points} points (over {knn_triton.MAX_POINTS}) are searched "
            "by the cell list, which syncs the host"
        )
    return f"and {dims}-D clouds are searched by the cell list, which syncs the host"
