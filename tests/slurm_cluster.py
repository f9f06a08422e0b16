"""A real one-node SLURM cluster on this machine, for tests (``tests/test_slurm.py``).

:class:`SlurmCluster` installs ``slurm-wlm`` and ``munge`` with apt where they are missing,
then starts a private ``munged`` (as the munge user) and ``slurmctld`` + ``slurmd`` (as root)
from a ``slurm.conf`` in a temporary directory, on free ports, so it neither needs nor
touches a system-wide SLURM or munge set-up. It needs root (slurmd starts jobs as their
user) and no systemd or cgroups: processes are tracked by parent pid
(``proctrack/linuxproc``) and tasks are not confined (``task/none``). There is no
accounting database, so ``sacct`` is missing and submitit sees every state as UNKNOWN.

Run it by hand to keep a cluster up (Ctrl-C stops it)::

    .venv/bin/python tests/slurm_cluster.py
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PACKAGES = ("slurm-wlm", "munge")
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch")

# How long a requeued job waits before it may start again is the credential lifetime
# (slurmctld refuses to reuse a job's credential before it expires); 120 s by default.
CRED_EXPIRE_S = 10

SLURM_CONF = """\
ClusterName=cloudlstm-test
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket},cred_expire={cred_expire}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2,sched_min_interval=100000
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MessageTimeout=5
KillWait=5
MinJobAge=600
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
{node_line}
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


class ClusterUnavailable(RuntimeError):
    """SLURM cannot run here (no apt, not root, or a daemon failed): tests skip with this."""


def install_packages() -> None:
    """``apt-get install slurm-wlm munge`` unless their programs are already on PATH.

    Raises:
        ClusterUnavailable: not root, no apt-get, or the installation failed.
    """
    if all(shutil.which(tool) for tool in DAEMONS):
        return
    if os.geteuid() != 0:
        raise ClusterUnavailable("SLURM is not installed and installing it needs root")
    if shutil.which("apt-get") is None:
        raise ClusterUnavailable("SLURM is not installed and there is no apt-get here")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES],
    ):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise ClusterUnavailable(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}")


def free_port() -> int:
    """A TCP port nobody listens on now (the daemons bind it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def node_line() -> str:
    """This machine's CPUs and memory as a slurm.conf node line, for the node ``localhost``.

    ``slurmd -C`` measures them; the memory is rounded down a little so that the node is
    not drained for having less than it declares.
    """
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("NodeName="))
    line = re.sub(r"^NodeName=\S+", "NodeName=localhost", line)
    return re.sub(r"RealMemory=(\d+)", lambda m: f"RealMemory={int(m[1]) * 95 // 100}", line)


class SlurmCluster:
    """munged, slurmctld and slurmd of one node, ``localhost``, with a private config.

    ``env`` is what a client (``sbatch``, ``squeue``, submitit) needs to reach it:
    ``SLURM_CONF`` pointing at the private ``slurm.conf``.
    """

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="cloudlstm-slurm-"))
        # the munge user must reach its key and socket under the (0700) temporary dir
        self.root.chmod(0o755)
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self._procs: list[subprocess.Popen] = []

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self, timeout_s: float = 60) -> None:
        """Install what is missing, start the three daemons and wait for the node to be idle.

        Raises:
            ClusterUnavailable: it cannot run here; the message says why.
        """
        if os.geteuid() != 0:
            raise ClusterUnavailable("a SLURM node needs root (slurmd runs jobs as their user)")
        install_packages()
        self._start_munged()
        for folder in ("state", "spool"):
            (self.root / folder).mkdir()
        self.conf.write_text(
            SLURM_CONF.format(
                root=self.root,
                ctld_port=free_port(),
                slurmd_port=free_port(),
                munge_socket=self.munge_socket,
                cred_expire=CRED_EXPIRE_S,
                node_line=node_line(),
            )
        )
        # -D: in the foreground, so that these Popen objects are the daemons; -c: no state
        # of an earlier cluster; -i: ignore what cannot be recovered
        self._spawn(["slurmctld", "-D", "-c", "-i", "-f", str(self.conf)], "slurmctld.out")
        self._spawn(["slurmd", "-D", "-N", "localhost", "-f", str(self.conf)], "slurmd.out")
        self._wait_idle(timeout_s)

    def _start_munged(self) -> None:
        """munged as the munge user, with its own key, socket, pid and log files."""
        munge = self.root / "munge"
        munge.mkdir(mode=0o755)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        user = pwd.getpwnam("munge")
        for path in (munge, key):
            os.chown(path, user.pw_uid, user.pw_gid)
        key.chmod(0o400)
        cmd = [
            "munged", "--foreground",
            f"--socket={self.munge_socket}", f"--key-file={key}",
            f"--pid-file={munge / 'munged.pid'}", f"--log-file={munge / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
        ]  # fmt: skip
        # a child of ours (not a daemon), so that stop() can end and reap it
        self._spawn(cmd, "munge/munged.out", user=user.pw_uid, group=user.pw_gid)
        deadline = time.monotonic() + 30
        while not self.munge_socket.exists():
            if self._procs[-1].poll() is not None or time.monotonic() > deadline:
                raise ClusterUnavailable(f"munged did not start: {self.log_tail()}")
            time.sleep(0.1)

    def _spawn(self, cmd: list[str], log_name: str, **popen: object) -> None:
        with (self.root / log_name).open("w") as log:
            # SLURM_CONF in the environment of the daemons is inherited by the job steps
            # and jobs, which is how stop() finds what outlives slurmd
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, **popen
            )
        self._procs.append(proc)

    def _wait_idle(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        state = ""
        while time.monotonic() < deadline:
            for proc in self._procs:
                if proc.poll() is not None:
                    raise ClusterUnavailable(f"{proc.args[0]} exited: {self.log_tail()}")
            state = self.run("sinfo", "-h", "-N", "-o", "%t", check=False).stdout.strip()
            if state == "idle":
                return
            time.sleep(0.5)
        raise ClusterUnavailable(f"the node is not idle after {timeout_s} s ({state!r})")

    def run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        """A SLURM command (``squeue``, ``scontrol``, ``scancel``) against this cluster."""
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, check=check)

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the daemons' logs, for a failing test's message."""
        parts = []
        for name in ("munge/munged.out", "slurmctld.out", "slurmd.out"):
            path = self.root / name
            if path.is_file():
                parts.append(f"--- {name}\n{path.read_text()[-chars:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel the jobs, stop the daemons, and end what is left of their jobs."""
        if self._procs:
            self.run("scancel", "--user=root", check=False)
            deadline = time.monotonic() + 30
            while self._procs[-1].poll() is None and time.monotonic() < deadline:
                if not self.run("squeue", "-h", check=False).stdout.strip():
                    break
                time.sleep(0.5)
        for proc in reversed(self._procs):
            proc.terminate()
        for proc in reversed(self._procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs = []
        self._kill_leftovers()
        shutil.rmtree(self.root, ignore_errors=True)

    def _kill_leftovers(self) -> None:
        """SIGKILL processes still running with this cluster's SLURM_CONF: job steps
        (slurmstepd outlives slurmd) and their jobs, found by their environment."""
        mine = f"SLURM_CONF={self.conf}".encode()
        for proc_dir in Path("/proc").iterdir():
            if not proc_dir.name.isdigit() or int(proc_dir.name) == os.getpid():
                continue
            try:
                if mine in (proc_dir / "environ").read_bytes().split(b"\0"):
                    os.kill(int(proc_dir.name), 9)
            except (OSError, ValueError):
                continue  # gone meanwhile, or not ours to read


if __name__ == "__main__":  # pragma: no cover - a manual aid
    import signal

    cluster = SlurmCluster()
    cluster.start()
    print(f"export SLURM_CONF={cluster.conf}", flush=True)
    # SIGTERM too: a background shell job ignores SIGINT
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        signal.pause()
    except KeyboardInterrupt:
        cluster.stop()
