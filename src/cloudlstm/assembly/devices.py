"""``trainer.devices`` and ``trainer.num_nodes`` read as Lightning reads them, without torch:
how many devices the first names, or that it takes every device of the machine that runs
it, which only that machine can count; how many nodes the second.

``trainer.accelerator`` is read as Lightning maps it on the machine that runs the Trainer
(:func:`run_accelerator`): ``auto`` as it picks one (:func:`auto_accelerator`: a TPU first,
then a GPU, else the CPU), ``gpu`` as Apple's GPU where there is one, else CUDA
(:func:`gpu_accelerator`), a name it does not take (``GPU``, ``cude``) refused
(:func:`user_accelerator`). One reading for the Trainer's own machine
(:func:`cloudlstm.assembly.compile.run_device`, which counts the GPUs there, and so for
``eval.py``'s test in one process), for ``compare``, which reads the configs of runs that
ran elsewhere (:mod:`cloudlstm.compare.runs`), and for what ``hydra/launcher=slurm`` asks
SLURM for (:func:`slurm_gpus_per_node`, the ``${gpus_per_node:...}`` of its config). The
machine that submits to SLURM is not the one that runs the job: there ``auto`` is refused
(:func:`slurm_accelerator`), as what it finds is the compute node's to know.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from cloudlstm.errors import UserError

# The values Lightning takes for every device there is: its default, and -1 (every GPU)
EVERY_DEVICE_TEXT = ("auto", "-1")
# What trainer.devices may be, for the lines that refuse another value
DEVICES_WANTED = "a number >= 1, -1 or auto (all there are), or a list of device indices"
NOT_DEVICES = "no number of devices, nor a list of device indices"
# What trainer.num_nodes may be: Lightning takes an int of 1 or more, and no text
NODES_WANTED = "a whole number of nodes >= 1"
# The names Lightning's Trainer takes for trainer.accelerator, as written (it refuses "GPU"):
# its AcceleratorRegistry's, and the two it maps onto one of them where it runs: auto and gpu
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu")
# What hydra/launcher=slurm asks SLURM for, said where it refuses an accelerator
SLURM_ACCELERATORS = (
    "give trainer=gpu (trainer.devices: the GPUs per node) or trainer=cpu (trainer.devices: "
    "the CPU tasks per node)"
)


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


def gpu_accelerator() -> str:
    """What Lightning's ``trainer.accelerator=gpu`` runs on here: ``mps`` where Apple's GPU
    is available, else ``cuda`` (its ``_AcceleratorConnector._choose_gpu_accelerator_backend``
    in this order). Where neither is, the Trainer refuses ``gpu``
    (:func:`~cloudlstm.assembly.build.check_accelerator` says so first): read as ``cuda``,
    what ``gpu`` names on every machine without Apple's GPU."""
    from lightning.fabric.accelerators import MPSAccelerator

    return "mps" if MPSAccelerator.is_available() else "cuda"


def user_accelerator(accelerator: Any) -> str | None:
    """A job's own ``trainer.accelerator`` as Lightning takes it: one of
    :data:`ACCELERATORS`, as written; None for an accelerator the config builds
    (``_target_``), which Lightning takes as it is.

    Raises:
        UserError: one line naming a value Lightning refuses (``GPU``: it reads no capitals;
            ``cude``) and the names it takes.
    """
    if isinstance(accelerator, Mapping):
        return None
    if isinstance(accelerator, str) and accelerator in ACCELERATORS:
        return accelerator
    raise UserError(
        f"trainer.accelerator={accelerator}: no accelerator Lightning takes (it reads the "
        f"names in lower case): give one of {', '.join(ACCELERATORS)}, e.g. trainer=cpu or "
        "trainer=gpu."
    )


def run_accelerator(accelerator: Any) -> str | None:
    """The accelerator a Trainer of ``trainer.accelerator`` runs on here, as Lightning maps
    it: ``auto`` by :func:`auto_accelerator`, ``gpu`` by :func:`gpu_accelerator` (``mps``
    or ``cuda``), another name as it is; None for one the config builds.

    Raises:
        UserError: a value Lightning refuses (:func:`user_accelerator`).
    """
    name = user_accelerator(accelerator)
    if name == "auto":
        return auto_accelerator()
    if name == "gpu":
        return gpu_accelerator()
    return name


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
    if isinstance(nodes, str):  # "2" too: what ${oc.env:...} reads is text
        raise ValueError("text, where Lightning takes a number")
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
        shown = repr(nodes) if isinstance(nodes, str) else nodes  # '2', not 2
        raise UserError(
            f"trainer.num_nodes={shown}: {err}: give {NODES_WANTED}, e.g. trainer.num_nodes=1."
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


def slurm_accelerator(accelerator: Any) -> str:
    """``trainer.accelerator`` as ``hydra/launcher=slurm`` reads it on the machine that
    submits, which is not the one that runs the job: ``cpu`` (tasks without GPUs) or
    ``gpu`` (``gpu`` or ``cuda``: SLURM's GPUs).

    Raises:
        UserError: one line for ``auto``, whose choice is made on the compute node while
            SLURM must be told before the job starts whether it gets GPUs (asked for on a
            CPU-only cluster the job is refused or waits forever; not asked for, a GPU
            cluster trains on the CPU or on GPUs SLURM gave another job); for ``mps`` and
            ``tpu``, which SLURM gives no job; for an accelerator the config builds; and
            for a name Lightning refuses (:func:`user_accelerator`: ``CPU`` would have
            asked for GPUs).
    """
    name = user_accelerator(accelerator)
    if name in ("cpu", "gpu", "cuda"):
        return "gpu" if name == "cuda" else name
    if name == "auto":
        why = "auto, which picks a GPU or the CPU on the node that runs the job"
    elif name is None:
        why = "an accelerator of its own (_target_)"
    else:
        why = f"{name}, which SLURM does not allot"
    raise UserError(
        f"trainer.accelerator={why}, but hydra/launcher=slurm must ask SLURM for GPUs, or "
        f"none, before the job starts: {SLURM_ACCELERATORS}."
    )


def slurm_gpus_per_node(accelerator: Any, devices: Any) -> int | None:
    """``--gpus-per-node`` that ``hydra/launcher=slurm`` asks for a trainer's ``accelerator``
    and ``devices``: None (no GPU) for a CPU trainer, else the count ``devices`` names
    (``"0,1"``: 2), which SLURM takes where Lightning's device indices it does not.

    Raises:
        UserError: ``accelerator`` is not ``cpu``, ``gpu`` or ``cuda``
            (:func:`slurm_accelerator`: ``auto`` among them); ``devices`` takes every GPU of
            the node (``auto``, -1), a number only the node knows and SLURM must be given
            before the job starts; or it names no device.
    """
    if slurm_accelerator(accelerator) == "cpu":
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


def slurm_tasks_per_node(accelerator: Any, devices: Any) -> int:
    """``--ntasks-per-node`` that ``hydra/launcher=slurm`` asks: one task per device, the
    layout Lightning's SLURM environment expects; ``auto`` on the CPU is one device, as
    Lightning counts it.

    Raises:
        UserError: as :func:`slurm_gpus_per_node`; on the CPU, as :func:`user_cpu_devices`.
    """
    if slurm_accelerator(accelerator) != "cpu":
        return int(slurm_gpus_per_node(accelerator, devices) or 0)
    return user_cpu_devices(devices, "trainer.accelerator=cpu")


def _indices_named(devices: Any) -> list[int]:
    """The device indices a valid ``trainer.devices`` lists (``"0,2"``, ``[0, 2]``), or none
    for a number."""
    if isinstance(devices, str):
        text = devices.strip()
        return [int(part) for part in text.split(",") if part.strip()] if "," in text else []
    return [] if isinstance(devices, int) else [int(index) for index in devices]
