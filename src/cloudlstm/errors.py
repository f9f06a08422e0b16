"""User errors: bad input or settings, reported as one message without a traceback.

:class:`UserError` derives from Hydra's ``CompactHydraException``, so when it escapes a
``@hydra.main`` entry point Hydra prints only its message and exits with status 1. Any
other exception is a bug and keeps its traceback. It is also a ``ValueError``: a bad value
given by the user, which callers that catch ``ValueError`` keep handling.

A write that finds no room (a full disk, a quota, a file size limit) is the user's to fix
too: :func:`out_of_space` makes it an :class:`OutOfSpaceError` naming the file, the room
left or the limit, and what to do; :func:`replacing` writes a file whole or not at all, so
that such a write leaves the earlier file as it was. An allocation that finds no memory,
on the CPU or a GPU, is the user's to fix as well (:func:`out_of_memory`): the sizes asked
for more than the machine has.
"""

from __future__ import annotations

import difflib
import errno
import os
import pkgutil
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra.errors import CompactHydraException, InstantiationException
from omegaconf import DictConfig


class UserError(CompactHydraException, ValueError):
    """Something the user can fix; the message names the problem and the fix.

    ``rerun_may_pass``: whether the same command, run again, may pass once something outside
    it is mended (room made, a file put in place, a run that held its folder gone). False
    for a refusal of the command's own settings, which a rerun meets again."""

    rerun_may_pass = False


class MissingFileError(UserError, FileNotFoundError):
    """A file or folder the user named does not exist (still a ``FileNotFoundError``)."""

    rerun_may_pass = True


class MissingPackageError(UserError, ImportError):
    """An optional package the requested feature needs is not installed."""

    rerun_may_pass = True


class DownloadError(UserError, RuntimeError):
    """A data set could not be downloaded (address, network or the server)."""

    rerun_may_pass = True


class OutOfSpaceError(UserError):
    """A file could not be written for want of room: a full disk, a quota, a file size limit."""

    rerun_may_pass = True


class OutOfMemoryError(UserError):
    """A tensor or an array could not be allocated: the sizes asked for more memory than the
    device, or this process, has."""

    rerun_may_pass = True  # with fewer jobs at once, or on a larger device


# errno values of a write that failed for want of room (the disk, a quota, a file size limit)
OUT_OF_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
AGAIN = "Make room (or raise the limit), then run the same command again."


def out_of_space(
    err: BaseException, path: str | Path | None = None, then: str = AGAIN
) -> OutOfSpaceError | None:
    """The one-line error of a write that failed for want of room, or None for any other error.

    Args:
        err: the error of the write (an ``OSError`` with errno ENOSPC, EDQUOT or EFBIG).
        path: the file written (a failed ``write`` names none); by default ``err.filename``.
        then: what to do, ending the line.
    """
    if not isinstance(err, OSError) or err.errno not in OUT_OF_SPACE:
        return None
    path = path if path is not None else err.filename
    target = f"Cannot write {path}" if path else "Cannot write a file"
    if err.errno == errno.EFBIG:
        limit = _file_size_limit()
        why = (
            f"it would exceed this process's file size limit of {readable_size(limit)} "
            "(`ulimit -f`)"
            if limit is not None
            else "it would be larger than its file system takes"
        )
    else:
        quota = "your disk quota is exceeded" if err.errno == errno.EDQUOT else "the disk is full"
        why = f"{quota} ({_room_left(path)})"
    reason = err.strerror or errno.errorcode[err.errno]
    return OutOfSpaceError(f"{target}: {why} [{reason}]. {then}")


# SQLite's primary result codes (https://sqlite.org/rescode.html) of a write that the disk
# refused: SQLITE_FULL (no room: ENOSPC, or a short write at a file size limit) and
# SQLITE_IOERR (EDQUOT, EFBIG at a limit, an I/O error)
SQLITE_WRITE_FAULTS = {13: "no room", 10: "a failed write"}


def sqlite_write_fault(
    err: BaseException, path: str | Path, then: str = AGAIN, what: str = "the database"
) -> OutOfSpaceError | None:
    """The one-line error of an SQLite database at ``path`` (``what`` it holds) that could
    not be written (the disk full, a quota, a file size limit, an I/O error), found in
    ``err``'s chain of causes (SQLAlchemy and Optuna wrap it); None for any other error."""
    import sqlite3

    cause: BaseException | None = err
    while cause is not None:
        code = getattr(cause, "sqlite_errorcode", -1) & 0xFF
        if isinstance(cause, sqlite3.OperationalError) and code in SQLITE_WRITE_FAULTS:
            name = getattr(cause, "sqlite_errorname", "")
            return OutOfSpaceError(
                f"Cannot write {what} {path}: {SQLITE_WRITE_FAULTS[code]} "
                f"({_room_left(path)}) [{cause}, {name}]. {then}"
            )
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
    return None


# what torch's allocators (the CPU's, CUDA's, MPS's) and NumPy say when memory runs out
OUT_OF_MEMORY = (
    "can't allocate memory",
    "not enough memory",
    "out of memory",
    "unable to allocate",
)
SMALLER = (
    "Make the job smaller: fewer windows a batch (data.batch_size), a smaller model (its "
    "hidden channels, layers or K), or, on a GPU, trainer.precision=bf16-mixed; or run it "
    "where more memory is free."
)


def out_of_memory(err: BaseException) -> OutOfMemoryError | None:
    """The one-line error of an allocation that found no memory (torch on the CPU, a GPU,
    NumPy), or None for any other error.

    torch raises ``torch.OutOfMemoryError`` on a GPU and a ``RuntimeError`` of its CPU
    allocator (``DefaultCPUAllocator: can't allocate memory: you tried to allocate N
    bytes``) on the CPU, also where a memory limit (``ulimit -v``) refuses; NumPy raises a
    ``MemoryError``. A DataLoader worker's error reaches the main process as a
    ``RuntimeError`` that quotes it, and is matched by the same words.
    """
    text = str(err)
    torch_gpu = any(kind.__name__ == "OutOfMemoryError" for kind in type(err).__mro__)
    if not (
        isinstance(err, MemoryError)
        or torch_gpu  # matched by name: this module does not import torch
        or (isinstance(err, RuntimeError) and any(m in text.lower() for m in OUT_OF_MEMORY))
    ):
        return None
    return OutOfMemoryError(f"Out of memory: {_failed_allocation(text)}. {SMALLER}")


# gloo's words for a connection to another DDP process that ended (a closed or reset
# socket), and the words of the store that the processes meet at while they set up their
# process group (process 0 serves it: it ended as the others waited there)
PEER_LOST = (
    "connection closed by peer",
    "connection reset by peer",
    "connection was likely closed",
)


def process_lost(err: BaseException) -> UserError | None:
    """The one line of a DDP process whose collective operation failed because another
    process of the run ended (gloo: the peer closed its connection), or None for any other
    error.

    That process wrote why it ended (a full disk, a bad setting: one line; a bug: its
    traceback), or was killed; this one's traceback of a lost connection would only bury
    it.
    """
    if not isinstance(err, RuntimeError) or not any(m in str(err).lower() for m in PEER_LOST):
        return None
    return UserError(peer_ended_line())


def peer_ended_line() -> str:
    """The line of a DDP process that stops because another process of its run ended."""
    return (
        f"DDP process{_process_rank()} stopped: another process of the run ended (its own message, "
        "above, says why; none where it was killed). Run the same command again once that "
        "is mended (a training continues from its last checkpoint)."
    )


def _process_rank() -> str:
    """`` <rank> of <processes>`` of this DDP process, where torch knows them (read from an
    imported torch: this module does not import it), else the rank (and the count, where
    still set) that the launcher's variables say (``LOCAL_RANK``, ``WORLD_SIZE``: a process
    Lightning started on this node, before its process group is set up; Lightning's
    clean-up after a failed set-up removes ``WORLD_SIZE``; ``RANK``, the rank itself, where
    torchrun started it), else ``""``."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return f" {dist.get_rank()} of {dist.get_world_size()}"
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None:
        rank = os.environ.get("LOCAL_RANK")
        if rank is None or os.environ.get("NODE_RANK", "0") != "0":
            return ""  # on another node, the local rank is not the rank
    return f" {rank} of {world}" if world is not None else f" {rank}"


def _failed_allocation(text: str) -> str:
    """What could not be allocated, where, and the memory there, from the allocator's
    message."""
    cuda = re.search(
        r"Tried to allocate ([\d.]+ \w+)\. GPU (\d+) has a total capacity of ([\d.]+ \w+) "
        r"of which ([\d.]+ \w+) is free",
        text,
    )
    if cuda:
        size, gpu, total, free = cuda.groups()
        return f"GPU {gpu} could not allocate {size} ({free} free of {total})"
    cpu = re.search(r"you tried to allocate (\d+) bytes", text)
    if cpu:
        return f"the CPU could not allocate {readable_size(int(cpu.group(1)))} ({_memory_left()})"
    line = next((line.strip() for line in text.splitlines() if line.strip()), "no memory")
    line = re.sub(r"^\[enforce fail at [^\]]*\]\s*(err == 0\.\s*)?", "", line)
    return f"{line[:300].rstrip('.')} ({_memory_left()})"


def memory_info() -> dict[str, int] | None:
    """The machine's ``MemAvailable``, ``MemTotal`` and ``SwapFree`` in bytes (Linux's
    ``/proc/meminfo``); None where it does not say."""
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
        fields = dict(line.split(":", 1) for line in lines)
        names = ("MemAvailable", "MemTotal", "SwapFree")
        return {name: int(fields[name].split()[0]) * 1024 for name in names}
    except (OSError, KeyError, ValueError):
        return None


def _memory_left() -> str:
    """The memory this machine has available, and this process's limit where it has one
    (``ulimit -v``)."""
    left = "memory available: unknown"
    memory = memory_info()
    if memory is not None:
        available, total = memory["MemAvailable"], memory["MemTotal"]
        left = f"{readable_size(available)} available of {readable_size(total)}"
    limit = process_limit("RLIMIT_AS")
    if limit is not None:
        left += f", and this process may use at most {readable_size(limit)}: `ulimit -v`"
    return left


def _room_left(path: str | Path | None) -> str:
    """``<size> free in <folder>``, the folder being the nearest existing one of ``path``; or
    ``no room`` where its file system does not say."""
    folder = _existing_folder(path)
    free = _free_space(folder)
    return f"{readable_size(free)} free in {folder}" if free is not None else "no room"


def _existing_folder(path: str | Path | None) -> Path:
    """The nearest folder of ``path`` that exists (the working directory without a path)."""
    folder = Path(path).expanduser().absolute().parent if path else Path.cwd()
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    return folder


def _free_space(folder: Path) -> int | None:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def _file_size_limit() -> int | None:
    """This process's file size limit (``RLIMIT_FSIZE``) in bytes; None where there is none."""
    return process_limit("RLIMIT_FSIZE")


def process_limit(name: str) -> int | None:
    """This process's soft limit ``resource.<name>``; None where there is none."""
    try:
        import resource
    except ImportError:  # not on a POSIX system
        return None
    soft, _ = resource.getrlimit(getattr(resource, name))
    return None if soft == resource.RLIM_INFINITY else soft


def readable_size(n: int) -> str:
    """``n`` bytes for a person: ``2.0 MB``, ``512 B``."""
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


# Hydra's flag for a sweep; the config may ask for one too (``hydra.mode: MULTIRUN``)
MULTIRUN_FLAGS = ("-m", "--multirun")


# the programs whose command line is Hydra's, which takes --cfg
HYDRA_PROGRAMS = (
    *("train.py", "eval.py", "predict.py"),
    *("cloudlstm-train", "cloudlstm-eval", "cloudlstm-predict"),
)


def settings_listing() -> str:
    """How the command just typed lists its settings, for a line refusing a name: ``--cfg
    job`` after it; in a sweep, which Hydra refuses beside ``--cfg`` (and whose comma lists
    it refuses without ``-m``), the program alone with it; from a tool that composes
    ``train.py``'s config on a command line of its own, ``train.py``'s."""
    name = Path(sys.argv[0]).name
    if name not in HYDRA_PROGRAMS:
        return "`python train.py --cfg job` prints the settings"
    if not any(arg in MULTIRUN_FLAGS for arg in sys.argv[1:]):
        return "`--cfg job` after the command prints the settings"
    program = f"python {name}" if name.endswith(".py") else name
    return f"`{program} --cfg job` prints the settings (Hydra takes --cfg without -m)"


def nearest_name(key: str, names: Iterable[str], path: str = "") -> str:
    """``" (did you mean <path>.<name>?)"`` for the closest of ``names``, or ``""``."""
    close = difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {path + '.' if path else ''}{close[0]}?)"


def locate(name: str, key: str) -> Any:
    """The class or function that ``_target_`` ``name`` (the setting ``key``, e.g.
    ``model._target_``) names.

    Raises:
        UserError: nothing of that name can be imported: a module not installed (or not on
            ``PYTHONPATH``), a misspelt module or class (the nearest name it has), or a
            module that fails to import for want of another.
    """
    import hydra.utils  # here: the errors of programs that never build an object import less

    quiet = hydra.utils.log.disabled
    hydra.utils.log.disabled = True  # its ERROR line would precede ours, saying less
    try:
        return hydra.utils.get_object(name)
    except ImportError as err:
        raise UserError(
            f"{key}={name!r} cannot be imported: {_why_not_imported(name, err)}. Correct the "
            "name, or install the package that has it (or put its folder on PYTHONPATH)."
        ) from None
    finally:
        hydra.utils.log.disabled = quiet


def _why_not_imported(name: str, err: ImportError) -> str:
    """Why ``name`` could not be imported (Hydra's ``err``): the missing module, or the
    module that lacks the next part of the name, with the nearest name it has."""
    cause = err.__cause__ if isinstance(err.__cause__, ImportError) else err
    missing = getattr(cause, "name", None)
    if not isinstance(cause, ModuleNotFoundError) or not missing:
        return str(cause).splitlines()[0]
    if not f"{name}.".startswith(f"{missing}."):
        return f"importing it needs the module {missing}, which is not installed"
    if "." not in missing:
        return f"there is no module {missing}"
    parent, part = missing.rsplit(".", 1)
    module = sys.modules.get(parent)
    names = {n for n in dir(module) if not n.startswith("_")}
    names |= {m.name for m in pkgutil.iter_modules(getattr(module, "__path__", []))}
    return f"{parent} has no {part}{nearest_name(part, names, parent)}"


def config_keys(node: DictConfig, path: str = "") -> Iterator[str]:
    """The dotted keys of a config's nodes, depth first, Hydra's own left out, read
    without resolving interpolations: the names a "did you mean" chooses among."""
    for key in node:
        if not path and key == "hydra":
            continue
        dotted = f"{path}.{key}" if path else str(key)
        yield dotted
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none() and not child._is_missing():
            yield from config_keys(child, dotted)


def no_gpu(setting: str, on_the_cpu: str) -> UserError:
    """The error of ``setting`` asking for a GPU where torch finds none: which torch and
    CUDA build this is, and the ways out (``on_the_cpu``, e.g. ``run on the CPU:
    trainer.accelerator=cpu``)."""
    import torch  # here: the errors of programs that never touch torch import no torch

    return UserError(
        f"{setting}, but torch finds no GPU (torch {torch.__version__}, CUDA build: "
        f"{torch.version.cuda or 'none'}): run on a machine with a GPU and a CUDA build of "
        f"torch, or {on_the_cpu}."
    )


def file_in_the_way(path: str | Path) -> Path | None:
    """``path`` or the nearest of its parents that exists, when that is a file, not a
    folder: what a "File exists" or "Not a directory" from making ``path``'s folders means."""
    for part in (Path(path), *Path(path).parents):
        if part.exists() or part.is_symlink():
            return None if part.is_dir() else part
    return None


def why_not_written(folder: str | Path, err: OSError) -> str:
    """Why a file in ``folder`` could not be written (``err``): the file that stands where
    a folder should (:func:`file_in_the_way`), else the system's reason."""
    blocker = file_in_the_way(folder)
    return f"{blocker} is a file, not a folder" if blocker else str(err.strerror or err)


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Where to write ``path``: a file of the same name (so a format or a compression read
    from its suffix, or a name NumPy would extend, stays that of ``path``) in a new hidden
    folder beside it, renamed over ``path`` when the block ends. ``path``'s folders are
    made first. Beside it, not in ``$TMPDIR``: a rename within one file system is atomic,
    where a move from another one copies, and a copy cut short by a full disk would leave
    part of a file at ``path``.

    Raises:
        OutOfSpaceError: the write failed for want of room (a full disk, a quota,
            ``ulimit -f``), naming ``path``; ``path`` is as it was.
        OSError: any other failure to write, ``path`` as it was too.
    """
    path = Path(path)
    folder = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent))
        yield folder / path.name
        os.replace(folder / path.name, path)
    except OSError as err:
        full = out_of_space(err, path)
        if full is None:
            raise
        raise full from None
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def one_line_errors() -> Iterator[None]:
    """A bad option of one of our own models or data sets, a write that failed for want of
    room (:func:`out_of_space`: a full disk, a quota, ``ulimit -f``), or an allocation that
    found no memory (:func:`out_of_memory`), reaches the user as one line.

    Our constructors refuse bad options with a ``ValueError`` that names the key
    (``model.cell='lstmm' is not one of [...]``); Hydra wraps it in an
    ``InstantiationException`` whose message is ``Error in call to target ...`` and the
    exception's repr. A ``ValueError`` raised by this package's code in a constructor of a
    ``cloudlstm.*`` target becomes a :class:`UserError` of its message here; one raised
    elsewhere (torch, a library) is left as it is, with its traceback.
    """
    try:
        yield
    except InstantiationException as err:
        user_error = user_error_of(err)
        if user_error is None:
            raise
        raise user_error from None
    except OSError as err:  # a file this package writes without naming it (a cache, a log)
        full = out_of_space(err)
        if full is None:
            raise
        raise full from None
    except (MemoryError, RuntimeError) as err:  # torch's and NumPy's allocations
        short = out_of_memory(err) or process_lost(err)
        if short is None:
            raise
        raise short from None


def user_error_of(err: InstantiationException) -> UserError | None:
    """The one-line error of a failed instantiation, or None where it is not a user's."""
    target = _target_of(err) or ""
    cause = err.__cause__
    while cause is not None:
        if isinstance(cause, UserError):
            return cause
        if (full := out_of_space(cause) or out_of_memory(cause)) is not None:
            return full
        if isinstance(cause, ValueError) and _raised_in(cause, __package__):
            if not target.startswith(f"{__package__}."):
                return None
            return UserError(f"{target.rsplit('.', 1)[-1]}: {cause}")
        if _refused_by_lightning(cause) and target.startswith("lightning."):
            return UserError(f"{_full_key_of(err) or target}: {cause}")
        cause = cause.__cause__
    return None


def _refused_by_lightning(err: BaseException) -> bool:
    """True for Lightning's refusal of a setting (``trainer.precision=17``,
    ``trainer.val_check_interval=-2``): a ``ValueError`` or a ``MisconfigurationException``
    (matched by name: this module does not import Lightning) raised in its own code."""
    kinds = {kind.__name__ for kind in type(err).__mro__}
    refused = "ValueError" in kinds or "MisconfigurationException" in kinds
    return refused and _raised_in(err, "lightning")


def _raised_in(err: BaseException, package: str) -> bool:
    """True if the innermost frame of ``err``'s traceback is in ``package``."""
    tb = err.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = tb.tb_frame.f_globals.get("__name__", "")
    return module == package or module.startswith(f"{package}.")


def _full_key_of(err: InstantiationException) -> str | None:
    """The config key Hydra names in its message (``full_key: trainer``)."""
    match = re.search(r"full_key: ([\w.]+)", str(err))
    return match.group(1) if match else None


def _target_of(err: InstantiationException) -> str | None:
    """The ``_target_`` Hydra names in its message (``Error in call to target 'a.B':``)."""
    match = re.search(r"target '([\w.]+)'", str(err))
    return match.group(1) if match else None


def wandb_error_reason(err: BaseException) -> str:
    """W&B's error in one line: its first line, which says what failed, and its last, which
    says why (``while retrying: ... dial tcp ...: connection refused``)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    lines = lines or [type(err).__name__]
    return "; ".join(dict.fromkeys([lines[0], lines[-1]])).rstrip(".")
