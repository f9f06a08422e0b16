"""``trainer.devices`` and ``trainer.num_nodes`` read as Lightning reads them, without torch:
how many devices the first names, or that it takes every device of the machine that runs
it, which only that machine can count; how many nodes the second.

``trainer.accelerator=auto`` is read as Lightning picks it (:func:`auto_accelerator`: a TPU
first, then a GPU, else the CPU). One reading for the Trainer's own machine
(:func:`cloudlstm.assembly.compile.run_device`, which counts the GPUs there, and so for
``eval.py``'s test in one process), for ``compare``, which reads the configs of runs that
ran elsewhere (:mod:`cloudlstm.compare.runs`), and for what ``hydra/launcher=slurm`` asks
SLURM for (:func:`slurm_gpus_per_node`, the ``${gpus_per_node:...}`` of its config).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from cloudlstm.errors import UserError

# The values Lightning takes for every device there is: its default, and -1 (every GPU)
EVERY_DEVICE_TEXT = ("auto", "-1")
# What trainer.devices may be, for the lines that refuse another value
DEVICES_WANTED = "a number >= 1, -1 or auto (all there are), or a list of device indices"
NOT_DEVICES = "no number of devices, nor a list of device indices"
# What trainer.num_nodes may be: Lightning takes an int of 1 or more, and no text
NODES_WANTED = "a whole number of nodes >= 1"


def auto_accelerator() -> str:
    """What Lightning's ``trainer.accelerator=auto`` runs on here: ``tpu``, ``mps``, ``cuda``
    or ``cpu``, the first its accelerators find available in its own order (an XLA device,
    then Apple's GPU, then CUDA), so that every reading of ``auto`` here (the CPU's
    device checks, the devices a run counts, whether it trains in host memory) is the
    Trainer's choice. Lightning is imported here alone: compare reads configs without it."""
    from lightning.fabric.accelerators import CUDAAccelerator, MPSAccelerator, XLAAccelerator

    for accelerator in (XLAAccelerator, MPSAccelerator, CUDAAccelerator):
        if accelerator.is_available():
            return accelerator.name()
    return "cpu"


def named_devices(devices: Any) -> int | None:
    """How many devices Lightning's ``trainer.devices`` names: a number that many (``2``,
    ``"2"``), device indices as many as they list (``[0, 1]``, ``"0,1"``; ``"0,"``: one), None
    for every device of the machine (``auto``, -1, ``"-1"``).

    Raises:
        ValueError: a value Lightning refuses or that names no device, saying what is wrong
            (a clause: ``no device to run on``): 0, ``"0"``, an empty list; a negative
            number but -1; text that is no number nor indices; an index below 0 or listed
            twice; a bool, a float or another type.
    """
    if isinstance(devices, str):
        return _named_by_text(devices.strip())
    if isinstance(devices, bool) or not isinstance(devices, int | Sequence):
        raise ValueError(NOT_DEVICES)
    if isinstance(devices, int):
        return _named_by_number(devices)
    return _indices(list(devices))


def user_devices(devices: Any) -> int | None:
    """:func:`named_devices` of a job's own ``trainer.devices``.

    Raises:
        UserError: one line naming the value, what is wrong and what to give.
    """
    try:
        return named_devices(devices)
    except ValueError as err:
        raise UserError(
            f"trainer.devices={devices}: {err}: give {DEVICES_WANTED}, e.g. trainer.devices=1."
        ) from None


def user_cpu_devices(devices: Any, accelerator: str) -> int:
    """:func:`user_devices` of a Trainer that runs on the CPU (``accelerator``: how its
    ``trainer.accelerator`` came to mean the CPU, for the line), where Lightning takes a
    number of processes alone: ``auto`` is one; device indices (``[0]``, ``"0,"``) and -1
    (every GPU) it refuses in a TypeError of Hydra's many lines ("should be an int > 0").

    Raises:
        UserError: one line naming the value, that the Trainer runs on the CPU and the fix.
    """
    count = user_devices(devices)
    if str(devices).strip() == "auto":
        return 1
    if count is None or _indices_named(devices):
        named = "every GPU" if count is None else "device indices"
        raise UserError(
            f"trainer.devices={devices}: {named}, which Lightning takes on GPUs alone, but "
            f"the Trainer runs on the CPU ({accelerator}): give a number of CPU processes, "
            "e.g. trainer.devices=1."
        )
    return count


def named_nodes(nodes: Any) -> int:
    """How many nodes Lightning's ``trainer.num_nodes`` names: a whole number of 1 or more.

    Raises:
        ValueError: a value Lightning refuses, saying what is wrong (a clause): 0, a
            negative number, text (``"2"`` too: Lightning takes no text here), null, a
            float; and a bool, which it would take for a number.
    """
    if isinstance(nodes, bool) or not isinstance(nodes, int):
        raise ValueError("no whole number of nodes")
    if nodes == 0:
        raise ValueError("no node to run on")
    if nodes < 0:
        raise ValueError("a negative number of nodes")
    return nodes


def user_nodes(nodes: Any) -> int:
    """:func:`named_nodes` of a job's own ``trainer.num_nodes``.

    Raises:
        UserError: one line naming the value, what is wrong and what to give.
    """
    try:
        return named_nodes(nodes)
    except ValueError as err:
        raise UserError(
            f"trainer.num_nodes={nodes}: {err}: give {NODES_WANTED}, e.g. trainer.num_nodes=1."
        ) from None


def _named_by_text(text: str) -> int | None:
    """A number (``"2"``), device indices (``"0,1"``) or every device (``"auto"``, ``"-1"``)."""
    if text in EVERY_DEVICE_TEXT:
        return None
    if "," in text:  # Lightning leaves out the empty parts: "0," is device 0
        parts = [part.strip() for part in text.split(",") if part.strip()]
        if not all(_whole(part) for part in parts):
            raise ValueError(NOT_DEVICES)
        return _indices([int(part) for part in parts])
    if not _whole(text):
        raise ValueError(NOT_DEVICES)
    return _named_by_number(int(text))


def _whole(text: str) -> bool:
    """Whether ``text`` is a whole number in ASCII digits (``int`` takes others too)."""
    return re.fullmatch(r"-?[0-9]+", text) is not None


def _named_by_number(count: int) -> int | None:
    if count == -1:
        return None
    if count == 0:
        raise ValueError("no device to run on")
    if count < 0:
        raise ValueError("a negative number, of which Lightning takes only -1 (every device)")
    return count


def _indices(indices: list[Any]) -> int:
    """How many devices a list of indices names, each a whole number >= 0 listed once."""
    if not indices:
        raise ValueError("no device to run on")
    for index in indices:
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"{index!r} is no device index (a whole number >= 0)")
    twice = sorted({index for index in indices if indices.count(index) > 1})
    if twice:
        raise ValueError(f"device {twice[0]} is listed twice")
    return len(indices)


def slurm_gpus_per_node(accelerator: str, devices: Any) -> int | None:
    """``--gpus-per-node`` that ``hydra/launcher=slurm`` asks for a trainer's ``accelerator``
    and ``devices``: None (no GPU) for a CPU trainer, else the count ``devices`` names
    (``"0,1"``: 2), which SLURM takes where Lightning's device indices it does not.

    Raises:
        UserError: ``devices`` takes every GPU of the node (``auto``, -1), a number only the
            node knows and SLURM must be given before the job starts; or it names no device.
    """
    if str(accelerator) == "cpu":
        return None
    count = user_devices(devices)
    if count is None:
        raise UserError(
            f"trainer.devices={devices} takes every GPU of the node it runs on, but "
            "hydra/launcher=slurm must ask SLURM for a number of GPUs (and tasks) per node "
            "before the job starts: give it, e.g. trainer.devices=4 (or trainer=cpu for "
            "CPU tasks)."
        )
    beyond = [index for index in _indices_named(devices) if index >= count]
    if beyond:  # SLURM numbers a job's GPUs from 0: [1] of one GPU names none of them
        raise UserError(
            f"trainer.devices={devices} names GPU {beyond[0]}, but a SLURM job sees only the "
            f"{count} GPU(s) it is given, numbered from 0: give the number, "
            f"trainer.devices={count}."
        )
    return count


def slurm_tasks_per_node(accelerator: str, devices: Any) -> int:
    """``--ntasks-per-node`` that ``hydra/launcher=slurm`` asks: one task per device, the
    layout Lightning's SLURM environment expects; ``auto`` on the CPU is one device, as
    Lightning counts it.

    Raises:
        UserError: as :func:`slurm_gpus_per_node`; on the CPU, as :func:`user_cpu_devices`.
    """
    if str(accelerator) != "cpu":
        return int(slurm_gpus_per_node(accelerator, devices) or 0)
    return user_cpu_devices(devices, "trainer.accelerator=cpu")


def _indices_named(devices: Any) -> list[int]:
    """The device indices a valid ``trainer.devices`` lists (``"0,2"``, ``[0, 2]``), or none
    for a number."""
    if isinstance(devices, str):
        text = devices.strip()
        return [int(part) for part in text.split(",") if part.strip()] if "," in text else []
    return [] if isinstance(devices, int) else [int(index) for index in devices]
