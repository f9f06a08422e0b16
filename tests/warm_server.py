"""The server behind ``tests/warm_python.py``: a Python that has imported the programs once.

Each program the tests start (``python train.py ...``) would spend most of its seconds
importing torch, Lightning and Hydra. This server imports them once, then forks one child
per request: the child takes the client's stdin, stdout and stderr, its environment, working
directory and command line, and runs the program at this script's top level, so that an
exit, an uncaught exception, ``atexit`` and the end of the interpreter behave as in a Python
started for it. The server never runs a torch operation, so no thread pool is forked.

``python tests/warm_server.py SOCKET``; it stops when the process that started it ends.
Protocol, per connection: the client sends its three descriptors and one JSON message
(``argv``, ``cwd``, ``env``); a supervisor forked for the connection answers the program's
pid, then its wait status (4 bytes each, big-endian), and kills the program with SIGKILL if
the client goes away first (a test that kills the client kills the program).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import signal
import socket
import struct
import sys
import types
from typing import Any

from warm_python import ENV_FILE_SUFFIX  # this script's folder, tests/

# what the programs import; importing them again in a fork costs nothing. Not W&B: it makes
# a media folder when imported, which the first program to end would delete for all.
PRELOAD = (
    "cloudlstm.cli.scripts",
    "cloudlstm.cli.train",
    "cloudlstm.cli.evaluate",
    "cloudlstm.cli.predict",
    "cloudlstm.cli.compare.command",
)


def _preload() -> dict[str, str]:
    """Import :data:`PRELOAD`; returns the variables those imports added to the environment,
    which a fresh Python's imports would add to the program's (``os.environ.setdefault``)."""
    before = dict(os.environ)
    for name in PRELOAD:
        __import__(name)
    return {k: v for k, v in os.environ.items() if k not in before}


def _receive(conn: socket.socket) -> dict[str, Any]:
    """The request: the client's stdin, stdout and stderr become this process's 0, 1, 2."""
    head, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    if len(head) < 4 or len(fds) != 3:
        raise EOFError("the client left without a request")
    size = struct.unpack("!I", head[:4])[0]
    body = head[4:]
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise EOFError("the client left before its request was read")
        body += chunk
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    return json.loads(body)


def _supervise(conn: socket.socket, pid: int) -> None:
    """Send the program's pid, then its wait status; kill it if the client goes away."""
    conn.sendall(struct.pack("!i", pid))
    pidfd = os.pidfd_open(pid)
    while True:
        ready, _, _ = select.select([conn, pidfd], [], [])
        if pidfd in ready:
            _, status = os.waitpid(pid, 0)
            with contextlib.suppress(OSError):
                conn.sendall(struct.pack("!i", status))
            return
        if not conn.recv(1):  # the client ended (killed): so does the program
            os.kill(pid, signal.SIGKILL)


def _serve(listener: socket.socket, parent: int) -> dict[str, Any]:
    """Accept requests until the starting process ends; returns in a program's process."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the supervisors are reaped by the kernel
    listener.settimeout(1.0)
    while os.getppid() == parent:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        if os.fork() != 0:
            conn.close()
            continue
        # the supervisor of this request
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        try:
            request = _receive(conn)
        except (EOFError, OSError, ValueError):  # a client that started a fresh Python
            os._exit(0)
        pid = os.fork()
        if pid == 0:
            conn.close()
            return request
        for fd in (0, 1, 2):
            os.close(fd)
        _supervise(conn, pid)
        os._exit(0)
    sys.exit(0)


def _stdio(env: dict[str, str]) -> None:
    """sys.stdin, stdout and stderr as a Python started with ``env`` makes them."""
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    encoding = env.get("PYTHONIOENCODING", "utf-8").split(":")[0] or "utf-8"

    def text(fd: int, mode: str, **options: Any) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        if "w" in mode and unbuffered:
            stream = raw
        else:
            stream = io.BufferedWriter(raw) if "w" in mode else io.BufferedReader(raw)
        return io.TextIOWrapper(stream, encoding=encoding, **options)

    tty = os.isatty(1)
    sys.stdin = sys.__stdin__ = text(0, "r")
    sys.stdout = sys.__stdout__ = text(1, "w", line_buffering=tty, write_through=unbuffered)
    sys.stderr = sys.__stderr__ = text(
        2, "w", errors="backslashreplace", line_buffering=True, write_through=unbuffered
    )


def _become(request: dict[str, Any], added_env: dict[str, str]) -> tuple[str, Any]:
    """Take the request's environment, directory, streams and command line; returns what
    to run: ``("file", path)``, ``("module", name)`` or ``("code", source)``."""
    env = request["env"]
    os.environ.clear()
    os.environ.update(env)
    for key, value in added_env.items():
        os.environ.setdefault(key, value)
    os.chdir(request["cwd"])
    sigint = signal.SIG_IGN if request["sigint_ignored"] else signal.default_int_handler
    signal.signal(signal.SIGINT, sigint)
    if "OMP_NUM_THREADS" in env:
        import torch

        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    _stdio(env)
    args = request["argv"]
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    if args[0] == "-c":
        sys.argv = ["-c", *args[2:]]
        sys.path[0] = ""
        return "code", args[1]
    if args[0] == "-m":
        sys.argv = ["-m", *args[2:]]
        sys.path[0] = os.getcwd()
        return "module", args[1]
    sys.argv = list(args)
    sys.path[0] = os.path.dirname(os.path.realpath(args[0]))
    main.__file__ = args[0]
    return "file", args[0]


if __name__ == "__main__":
    _listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    _listener.bind(sys.argv[1])
    _listener.listen(64)
    _added_env = _preload()
    # what the clients compare theirs with: written aside and renamed, so that a client
    # polling for the file never reads it half written (a JSONDecodeError in the client)
    with open(sys.argv[1] + ENV_FILE_SUFFIX + ".part", "w") as _f:
        json.dump({"env": dict(os.environ), "added": _added_env}, _f)
    os.replace(sys.argv[1] + ENV_FILE_SUFFIX + ".part", sys.argv[1] + ENV_FILE_SUFFIX)
    _kind, _what = _become(_serve(_listener, os.getppid()), _added_env)
    del _listener
    if _kind == "module":
        import runpy

        runpy._run_module_as_main(_what, alter_argv=True)
    else:
        _source = open(_what).read() if _kind == "file" else _what  # noqa: SIM115
        _name = _what if _kind == "file" else "<string>"
        exec(compile(_source, _name, "exec"), sys.modules["__main__"].__dict__)
