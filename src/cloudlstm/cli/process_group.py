"""A training started as one of several processes by an outside launcher (``torchrun``,
``srun``, or by hand on each node): they must share one run directory.

Every process composes its own config, and the default run directory is named by the
time of day to the microsecond (``hydra.run.dir``): each process would make a directory of
its own. Rank 0 writes the checkpoints into its own, the other processes look for the
checkpoint to resume in theirs and find none, so a resumed job would start some processes
afresh and others from the checkpoint. Lightning's own launch (``trainer=ddp_cpu`` on one
node) passes the directory on to the processes it starts; an outside launcher cannot, so
the command must name it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from cloudlstm.assembly.devices import user_nodes
from cloudlstm.cli.invoked import multirun_flagged, this_program
from cloudlstm.errors import UserError

__all__ = ["check_shared_run_dir", "launched_processes"]


def launched_processes(environ: Mapping[str, str], argv: Sequence[str]) -> str | None:
    """How an outside launcher started this process among others, in a few words, or None
    where it did not: ``torchrun`` (``WORLD_SIZE``), SLURM tasks as Lightning takes them
    (``SLURM_NTASKS`` outside an interactive shell), a node of a multi-node run started by
    hand (``NODE_RANK``, or ``trainer.num_nodes`` above 1)."""
    world = _int(environ.get("WORLD_SIZE"))
    if world > 1:
        return f"one of {world} processes (WORLD_SIZE={world}: torchrun)"
    tasks = _int(environ.get("SLURM_NTASKS"))
    # Lightning's SLURMEnvironment.detect(): an interactive allocation runs one process
    if tasks > 1 and environ.get("SLURM_JOB_NAME") not in ("bash", "interactive"):
        return f"one of {tasks} SLURM tasks (SLURM_NTASKS={tasks})"
    if "NODE_RANK" in environ:
        return f"node {environ['NODE_RANK']} of a multi-node run (NODE_RANK)"
    nodes = _nodes_given(argv)
    if nodes > 1:
        return f"one of the nodes of trainer.num_nodes={nodes}"
    return None


def check_shared_run_dir(argv: Sequence[str], environ: Mapping[str, str]) -> None:
    """Refuse a training started among several processes by an outside launcher whose
    command does not name the run directory (see the module).

    Raises:
        UserError: one line naming how the process was started and the override to add.
    """
    if multirun_flagged(argv):
        return  # a sweep's launcher composes each job's directory once, for all its tasks
    how = launched_processes(environ, argv)
    if how is None or "hydra.run.dir" in {_key(a) for a in argv[1:]}:
        return
    program = this_program(argv)
    raise UserError(
        f"{program} runs here as {how}, and each process would make a run directory of its "
        "own (named by the time it started): give them one, hydra.run.dir=<dir>, the same "
        "for every process."
    )


def _nodes_given(argv: Sequence[str]) -> int:
    """``trainer.num_nodes`` as the command's last override of it sets it, read as the
    Trainer's is (:func:`~cloudlstm.assembly.devices.user_nodes`): its text as Hydra reads
    it (``01`` and ``'2'`` are text, which Lightning refuses), an interpolation resolved
    where it needs nothing of the config (``${oc.env:NODES}``). 1 where no override sets
    it, or where Hydra will refuse the override or its interpolation reads the config,
    which is not composed yet: the composed config's value is read as the Trainer starts.

    Raises:
        UserError: the value is no whole number of nodes >= 1, in one line.
    """
    overrides = [a for a in argv[1:] if _key(a) == "trainer.num_nodes"]
    if not overrides:
        return 1
    try:
        override = OverridesParser.create().parse_override(overrides[-1])
        if override.is_delete():
            return 1
        value = OmegaConf.create({"nodes": override.value()}).nodes
    except (HydraException, OmegaConfBaseException):
        return 1
    return user_nodes(value)


def _key(arg: str) -> str:
    return arg.lstrip("+~").partition("=")[0]


def _int(value: str | None) -> int:
    try:
        return int(value) if value is not None else 1
    except ValueError:
        return 1
