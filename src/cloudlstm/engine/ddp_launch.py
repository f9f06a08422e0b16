"""What a DDP run leaves in process 0, taken back once its job ends: the launch's
environment variables, the process group and the share of the cores given to torch.

With ``strategy=ddp`` on one node (``trainer=ddp_cpu``), Lightning's process 0 sets
``MASTER_ADDR``, ``MASTER_PORT``, ``NODE_RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` in its own
environment to start the other processes; its teardown removes ``WORLD_SIZE`` alone (in
every process, one that torchrun gave it too), and the process group stays until the
interpreter ends. The next job of the same Python (a notebook or a script calling
``train`` and ``evaluate`` in turn) was then taken for a process that an outside launcher
started: a DDP training started no processes (``LOCAL_RANK`` set) and waited for peers
that never came, and an evaluation on one device kept DDP
(:func:`cloudlstm.cli.process_group.launched_processes`) and broadcast to the process 1
that had ended. Variables that the process had before the job (a launcher's: torchrun,
SLURM, Lightning's for process 1) are kept, or put back; the group goes where this process
started the others.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist

from cloudlstm.errors import process_lost

__all__ = ["LAUNCH_VARIABLES", "ddp_launch_undone"]

# what a DDP launch sets in a process's environment: Lightning's, and torchrun's rank
LAUNCH_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE", "RANK")


@contextmanager
def ddp_launch_undone() -> Iterator[None]:
    """Within the block, a job's Trainer may fit and test; after it, failed too, the
    variables of :data:`LAUNCH_VARIABLES` are as they were before it, and where this process
    started the others (Lightning's process 0 on one node), their process group is gone.

    A group that an outside launcher's processes share (torchrun, SLURM) stays, as in
    Lightning: the next job of a sweep in those processes goes on in it."""
    before = {name: os.environ.get(name) for name in LAUNCH_VARIABLES}
    omp_threads, threads = os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()
    try:
        yield
    except RuntimeError as err:
        # worded here, while the group still says which process this is of how many
        lost = process_lost(err)
        if lost is None:
            raise
        raise lost from None
    finally:
        # Lightning's launch sets LOCAL_RANK in the process that starts the others alone
        started_others = before["LOCAL_RANK"] is None and "LOCAL_RANK" in os.environ
        if started_others and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        if omp_threads is None and "OMP_NUM_THREADS" in os.environ:
            # Lightning's DDP set it, and torch's threads, to a share of the cores: the next
            # job of this Python, in one process, would run on that share
            del os.environ["OMP_NUM_THREADS"]
            torch.set_num_threads(threads)
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
