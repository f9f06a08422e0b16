"""Who holds a run directory: the description a training leaves in its ``run.lock``
(:mod:`cloudlstm.rundir.lock`), read without taking the lock, and whether its process
still lives.

Apart from the lock itself so that the run directory's layout
(:func:`~cloudlstm.rundir.layout.check_run_dir`, which the lock's module imports) can
tell a run that is starting, or has written no checkpoint yet, from a folder that is no
run.

A process is told by its pid and its start (:func:`process_start`): a pid alone is taken
again by another process once its own has ended, and that one (a shell, an editor) would
pass for the training. The flock itself, which the kernel drops with its process, is
not taken to ask: a training starting that moment would be refused. Where the description
cannot be read (garbled: the NUL bytes a crashed node leaves, a file cut short), the
kernel's list of locks (``/proc/locks``) tells, without taking it, whether a process holds
the file: none does, and the lock is stale. That list also tells a run directory copied
while it trained, whose copied description names a live process holding the original.
"""

from __future__ import annotations

import json
import os
import socket
import time
from datetime import datetime
from pathlib import Path
from typing import Any

# a lock from another host whose heartbeat is older than this is stale: its holder stopped
# touching it (killed, or its node died); 15 heartbeats, so a busy file server is no cause
FOREIGN_STALE_S = 15 * 60.0
# the boot's id (Linux): ticks since boot start again at every boot
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
# the locks this host's processes hold (Linux), by file: read, not taken
LOCKS = Path("/proc/locks")
# the key of a description that cannot be read (read_holder): what is wrong with it
DAMAGED = "damaged"
# a holder writes its description within moments of taking the flock: one read as garbled
# is read again this often, this far apart, before it counts as damaged
READS, REREAD_S = 4, 0.05


def process_start(pid: int) -> str | None:
    """When process ``pid`` started, as this host's kernel tells it: ``<boot id>:<clock
    ticks since boot>`` (``/proc/<pid>/stat``, field 22); the same pid taken again by
    another process has another. None without ``/proc`` (not Linux), or no such process."""
    try:
        boot = BOOT_ID.read_text().strip()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    # the name (field 2) is in parentheses and may hold spaces: the fields after its ")"
    # are 3 onwards
    fields = stat.rpartition(")")[2].split()
    return f"{boot}:{fields[19]}" if len(fields) > 19 else None


def this_process() -> dict[str, Any]:
    """The description of this process, as a training writes it into ``run.lock``."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": datetime.now().astimezone().isoformat(timespec="seconds"),
        "process_start": process_start(os.getpid()),
    }


def read_holder(path: Path) -> dict[str, Any]:
    """The description in the lock file ``path``; empty for a free lock (or none). One that
    is no JSON mapping (NUL bytes, a file cut short, other bytes) is read again for a moment,
    as its holder may be writing it; where it stays so, ``{"damaged": <what is wrong>}``
    (:data:`DAMAGED`), which names no process."""
    problem = ""
    for attempt in range(READS):
        if attempt:
            time.sleep(REREAD_S)
        try:
            text = path.read_bytes().decode()
        except OSError:
            return {}
        except UnicodeDecodeError:
            problem = "not text"
            continue
        if not text.strip():
            return {}
        try:
            holder = json.loads(text)
        except json.JSONDecodeError:
            problem = "not JSON" if text.strip("\0") else "NUL bytes"
            continue
        if isinstance(holder, dict):
            return holder
        problem = f"a JSON {type(holder).__name__}, not a description"
    return {DAMAGED: problem}


def locking_pids(path: Path) -> list[int] | None:
    """The processes of this host that hold a lock on the file ``path``, as the kernel lists
    them (:data:`LOCKS`, read without taking the lock; -1 for one it lists without a pid);
    None where the list cannot be read (not Linux). Told by the file's inode number alone:
    a file system may give ``stat`` another device number than the list's (btrfs)."""
    try:
        inode = path.stat().st_ino
        lines = LOCKS.read_text().splitlines()
    except OSError:
        return None
    pids = []
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 2346 fe:00:5653636 0 EOF"; "1: -> FLOCK ..." waits
        fields = line.split()
        if len(fields) >= 6 and fields[1] != "->" and fields[5].endswith(f":{inode}"):
            pids.append(int(fields[4]) if fields[4].lstrip("-").isdigit() else -1)
    return pids


def with_locking_pid(path: Path, holder: dict[str, Any]) -> dict[str, Any]:
    """A damaged description (:func:`read_holder`) with this host and the pid that holds
    the lock file ``path`` (:func:`locking_pids`), where one does; any other as it is."""
    pids = locking_pids(path) if DAMAGED in holder else None
    return {**holder, "host": socket.gethostname(), "pid": pids[0]} if pids else holder


def alive(holder: dict[str, Any]) -> bool:
    """Whether the process a description of this host names still runs: its pid lives and
    started when the description says (:func:`process_start`; a description without it,
    from before it was written, or a host without ``/proc``: the pid alone)."""
    try:
        pid = int(holder.get("pid", -1))
        os.kill(pid, 0)
    except (ValueError, TypeError, ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        pass  # someone else's process: alive, and its start is still readable
    recorded = holder.get("process_start")
    now = process_start(pid) if recorded else None
    return now is None or now == recorded


def live_holder(path: Path) -> str | None:
    """The training that holds the lock file ``path`` now (host, pid, start), described;
    None where none does. Read alone, neither locked nor written: a description is left
    only by a holder, which empties it as it ends; one of this host whose process is gone
    (:func:`alive`), or of another host whose heartbeat (the file's mtime) is older than
    :data:`FOREIGN_STALE_S`, is a killed run's. One of this host that no process holds
    (:func:`locking_pids`) is a killed run's, or a copy's: a run directory copied while it
    trained carries its holder's description, whose process lives on, holding the original.
    A damaged one names no process: held by none, it is a killed run's too."""
    holder = read_holder(path)
    if DAMAGED in holder:
        holder = with_locking_pid(path, holder)
        return describe(holder) if "pid" in holder else None
    if not holder:
        return None
    if holder.get("host") == socket.gethostname():
        live = alive(holder) and locking_pids(path) != []
    else:
        live = time.time() - heartbeat_time(path) <= FOREIGN_STALE_S
    return describe(holder) if live else None


def heartbeat_time(path: Path) -> float:
    """When the holder of the lock file ``path`` last touched it (0 where there is none)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def describe(holder: dict[str, Any]) -> str:
    """A holder in words: host, pid, start, and its SLURM job where it has one; for a
    damaged description (:func:`read_holder`), what is wrong with it."""
    if DAMAGED in holder:
        pid = f"host {holder['host']}, pid {holder['pid']}, " if "pid" in holder else ""
        return f"{pid}description unreadable ({holder[DAMAGED]})"
    text = (
        f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, "
        f"started {holder.get('started', '?')}"
    )
    return f"{text}, SLURM job {holder['slurm_job']}" if holder.get("slurm_job") else text
