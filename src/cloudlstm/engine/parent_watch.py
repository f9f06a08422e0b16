"""A DDP process that Lightning started stops with one line when the process that started
it (process 0) ends before their process group is set up.

With ``trainer.devices=2`` process 0 starts the other processes of its node, each running
the same command, and serves the store that they meet at (``MASTER_PORT``). Killed
(SIGKILL, the out-of-memory killer) while the others still start (import torch, read their
data), it left them waiting to connect to that store for the process group's timeout
(30 minutes), without a word. Once the group is set up, a lost peer fails the next
collective operation, which says so (:func:`cloudlstm.errors.process_lost`); until then a
thread watches this process's parent and, when it has gone, ends the process with that
line.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from cloudlstm.errors import peer_ended_line

__all__ = ["name_the_launching_process", "watch_the_starting_process"]

# the pid of the process that builds a Trainer, for the processes that Lightning starts from
# it (they inherit its environment): read where one of them starts, which may be after that
# process has ended already
STARTED_BY = "CLOUDLSTM_STARTED_BY_PID"


def name_the_launching_process() -> None:
    """Name this process, which builds a Trainer, to the processes that the Trainer may start
    (:data:`STARTED_BY`). Set here, not as the program starts: a joblib sweep's job builds
    its Trainer in a worker process, which starts that job's other processes."""
    if os.environ.get("LOCAL_RANK", "0") == "0":
        os.environ[STARTED_BY] = str(os.getpid())


def watch_the_starting_process() -> None:
    """In a process that Lightning started (``LOCAL_RANK`` above 0, :data:`STARTED_BY` set),
    watch the process that started it until the process group is set up (a daemon
    thread)."""
    if os.environ.get("LOCAL_RANK", "0") == "0":
        return
    parent = os.environ.get(STARTED_BY, "")
    if not parent.isdigit():
        return  # started by another launcher (torchrun, srun): the first process is a peer
    if os.getppid() != int(parent) and _alive(int(parent)):
        # the name leaked from an environment that some other program started this one
        # from (torchrun run from a notebook that trained under DDP): not its starter
        return
    watch = threading.Thread(target=_watch, args=(int(parent),), name="parent-watch", daemon=True)
    watch.start()


def _watch(parent: int, every_s: float = 0.5) -> None:
    """End this process with the line of a lost peer once ``parent`` has ended (this process
    is then no longer its child), unless the process group is set up first."""
    while not _process_group_ready():
        if os.getppid() != parent:
            sys.stderr.write(f"{peer_ended_line()}\n")
            sys.stderr.flush()
            # the main thread may wait in a call that only the group's timeout ends
            os._exit(1)
        time.sleep(every_s)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs: not where it has ended, though its parent has not yet
    reaped it (a zombie, read from Linux's /proc; without /proc it counts as running)."""
    if not Path("/proc/self/stat").is_file():
        return _exists(pid)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


def _exists(pid: int) -> bool:
    """Whether a process ``pid`` exists, a zombie too (another user's too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _process_group_ready() -> bool:
    """Whether this process's process group is set up (read from an imported torch)."""
    dist = sys.modules.get("torch.distributed")
    # the main thread may be importing it: the module is listed before its functions are
    # defined, and an AttributeError would end the watch with a traceback
    available = getattr(dist, "is_available", None)
    initialized = getattr(dist, "is_initialized", None)
    return available is not None and initialized is not None and available() and initialized()
