"""``python -S -E tests/warm_python.py <python's arguments>``: runs a program as
``python <arguments>`` does, in a child of ``tests/warm_server.py``, which has imported
torch, Lightning and Hydra already (the tests' :data:`conftest.PYTHON`).

The program gets this process's stdin, stdout, stderr, environment, directory and command
line; this process forwards the signals a test sends it (SIGTERM, Ctrl-C's SIGINT...) and
ends as the program ended: its exit status, or killed by the same signal. Killed itself, it
takes the program with it. Anything a preloaded Python would run differently is started as
a fresh ``python`` instead: no server (``WARM_PYTHON_SOCKET`` unset), interpreter options
other than ``-m`` and ``-c``, or an environment variable read while the server imported
(``PYTHON*``, the thread and CUDA settings...) that differs from the server's.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import sys

SOCKET_VARIABLE = "WARM_PYTHON_SOCKET"
# what the server's imports read: a program whose environment differs in them starts fresh
_READ_AT_IMPORT = (
    "PYTHON",
    "CLOUDLSTM_",
    "OMP_",
    "GOMP_",
    "KMP_",
    "MKL_",
    "CUDA_",
    "TORCH",
    "TRITON",
    "LD_",
    "THP_",
)
_EMULATED = {"PYTHONUNBUFFERED", "PYTHONIOENCODING", "OMP_NUM_THREADS"}
# the server records its environment here, read by the clients
ENV_FILE_SUFFIX = ".env.json"
# and the clients write here why they started a fresh Python
FRESH_LOG_SUFFIX = ".fresh.log"
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


def _fresh(args: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, *args])


def _startup_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_READ_AT_IMPORT) and k not in _EMULATED}


def _why_fresh(args: list[str], env: dict[str, str], server_env: dict[str, str]) -> str:
    """Why a Python that has imported what the server did would run ``args`` differently
    under ``env``; "" when it would not."""
    if not args or (args[0].startswith("-") and args[0] not in ("-m", "-c")):
        return "an interpreter option"
    if args[0] in ("-m", "-c") and len(args) < 2:
        return "no module or code"
    ours, its = _startup_env(env), _startup_env(server_env)
    differ = sorted(k for k in ours.keys() | its.keys() if ours.get(k) != its.get(k))
    return f"{', '.join(differ)} differ from the server's" if differ else ""


def _server_env(path: str, conn: socket.socket) -> dict | None:
    """The server's environment once it has imported (the file it then writes), or None
    when the server has gone (it closes the connection)."""
    while True:
        try:
            with open(path + ENV_FILE_SUFFIX) as f:
                return json.load(f)
        except OSError:
            pass
        readable, _, _ = select.select([conn], [], [], 0.05)
        if readable:  # before the request: only the end of a server that has stopped
            return None


def _recv_int(conn: socket.socket) -> int | None:
    data = b""
    while len(data) < 4:
        chunk = conn.recv(4 - len(data))
        if not chunk:
            return None
        data += chunk
    return struct.unpack("!i", data)[0]


def main(args: list[str]) -> None:
    path = os.environ.get(SOCKET_VARIABLE)
    if not path:
        _fresh(args)
    env = {k: v for k, v in os.environ.items() if k != SOCKET_VARIABLE}
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:  # no server
        _fresh(args)
    server = _server_env(path, conn)
    # what the preloaded imports added, the program's imports would add too
    if server is None:
        _fresh(args)
    differs = _why_fresh(args, {**server["added"], **env}, server["env"])
    if differs:
        with open(path + FRESH_LOG_SUFFIX, "a") as log:  # why a test's program is slow
            log.write(f"{differs}: {json.dumps(args)[:200]}\n")
        _fresh(args)
    # a Python started with SIGINT ignored (`cmd &` in a script) leaves it so
    sigint_ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    request = {"argv": args, "cwd": os.getcwd(), "env": env, "sigint_ignored": sigint_ignored}
    body = json.dumps(request).encode()
    # forwarding is set before the program starts: a signal sent once the program is ready
    # (it may be, before its pid reaches this process) is held until its pid is known
    child: list[int] = []
    held: list[int] = []

    def forward(number: int, _frame: object) -> None:
        if not child:
            held.append(number)
            return
        with contextlib.suppress(ProcessLookupError):  # it has just ended: its status follows
            os.kill(child[0], number)

    forwarded = [sig for sig in FORWARDED if signal.getsignal(sig) != signal.SIG_IGN]
    for sig in forwarded:
        signal.signal(sig, forward)
    socket.send_fds(conn, [struct.pack("!I", len(body)) + body], [0, 1, 2])
    pid = _recv_int(conn)
    if pid is None:
        for sig in forwarded:
            signal.signal(sig, signal.SIG_DFL)
        for number in held:  # a fresh Python never started: the signal ends this process
            os.kill(os.getpid(), number)
        _fresh(args)
    child.append(pid)
    for number in held:
        forward(number, None)
    status = _recv_int(conn)
    if status is None:
        sys.stderr.write("warm_python: the server ended before the program did\n")
        os._exit(1)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        with contextlib.suppress(OSError):  # SIGKILL has no handler to reset
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    os._exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main(sys.argv[1:])
