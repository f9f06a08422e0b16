"""What produced a run's numbers: the code, the packages, the machine and the command of
every process that trained it, recorded in the run directory.

A number put in a paper must say which code made it, on what, and how; a run stopped and
resumed may have been continued by other code (a pull between the two) or on another
machine, which its numbers alone cannot show. So each training process appends one line to
``<run dir>/provenance.jsonl`` as it starts training (a fresh run starts the file anew),
with the step it starts from; ``metrics.json`` lists them all under ``provenance``, and a
resume under other code says so in the log. An evaluation records its own process in its
own ``metrics.json``.

The code's commit is read from git where the package runs from a checkout (``changed``:
the package's files differ from that commit, or it has files git does not track; a
changed config is the run's ``config.yaml``), else it is ``null`` and the package's
version stands for it (an installed wheel).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import cloudlstm
from cloudlstm.errors import out_of_space
from cloudlstm.rundir.layout import PROVENANCE_FILE, checkpoint_run

if TYPE_CHECKING:
    import lightning as L

log = logging.getLogger(__name__)

_PACKAGES = ("torch", "lightning", "numpy", "pandas", "hydra-core", "triton")


def this_process(trainer: L.Trainer, from_step: int = 0) -> dict[str, Any]:
    """This process's entry: when it started, what it ran, on what (the trainer's device,
    and how many DDP processes run it together, this one the first), from which step."""
    machine = _machine(trainer.strategy.root_device)
    return {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "from_step": from_step,
        "command": _command(),
        "code": dict(code_version()),  # copies: the cached ones stay as read
        "packages": dict(_packages()),
        "machine": {**machine, "processes": trainer.world_size},
    }


def record_process(run_dir: Path, entry: dict[str, Any], resume_from: str | None) -> None:
    """Record this process (``entry``) after those whose training it continues: appended to
    the run directory's own where it resumes one of its checkpoints, after another run's
    processes that started before the checkpoint's step where it resumes that run's (in its
    ``checkpoints/``, or moved into ``.replaced/``), in a file started anew otherwise. A
    resume under other code than the last earlier process's says so in the log.

    Raises:
        OutOfSpaceError: no room for the file.
    """
    if resume_from is None:
        record_training(run_dir, entry, resumed=False)
        return
    source = checkpoint_run(Path(resume_from))
    own = source is None or source.resolve() == Path(run_dir).resolve()
    earlier = training_processes(run_dir if own else source)
    if not own:
        earlier = [e for e in earlier if e.get("from_step", 0) < entry["from_step"]]
    warn_if_the_code_changed(earlier, entry)
    record_training(run_dir, entry, resumed=own, earlier=() if own else earlier)


def record_training(
    run_dir: Path, entry: dict[str, Any], resumed: bool, earlier: Sequence[dict[str, Any]] = ()
) -> None:
    """Append ``entry`` to the run's file; a fresh run (``resumed`` False) starts it anew,
    with the ``earlier`` entries (another run's processes, which it continues) first.

    Raises:
        OutOfSpaceError: no room for the line (the training would find none either).
    """
    path = Path(run_dir) / PROVENANCE_FILE
    line = "".join(json.dumps(e) + "\n" for e in [*earlier, entry])
    if resumed and _ends_inside_a_line(path):  # a process killed as it wrote its line
        line = "\n" + line
    try:
        with path.open("a" if resumed else "w") as out:
            out.write(line)
    except OSError as err:
        full = out_of_space(err, path)
        if full is None:
            raise
        raise full from err


def _ends_inside_a_line(path: Path) -> bool:
    try:
        with path.open("rb") as file:
            file.seek(-1, os.SEEK_END)
            return file.read(1) != b"\n"
    except OSError:  # no file, or an empty one
        return False


def training_processes(run_dir: Path) -> list[dict[str, Any]]:
    """The entries of the processes that trained the run, first to last. A line cut short
    (a process killed as it wrote it) is left out: it recorded no training."""
    path = Path(run_dir) / PROVENANCE_FILE
    if not path.is_file():
        return []
    entries = []
    for line in path.read_text().splitlines():
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return entries


def warn_if_the_code_changed(earlier: list[dict[str, Any]], now: dict[str, Any]) -> None:
    """A log line where this process resumes a run that an earlier one trained with other
    code (another commit, or changes not committed), naming both."""
    if not earlier:
        return
    before, after = earlier[-1]["code"], now["code"]
    if _same_code(before, after):
        return
    log.warning(
        "This run was trained up to step %d by %s, and continues under %s: its numbers come "
        "from both (metrics.json lists them under provenance).",
        now["from_step"], _describe(before), _describe(after),
    )  # fmt: skip


def _same_code(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.get("changed") or b.get("changed"):
        return False  # uncommitted changes may differ: no way to tell
    return (a.get("commit"), a.get("version")) == (b.get("commit"), b.get("version"))


def _describe(code: dict[str, Any]) -> str:
    if code.get("commit") is None:
        return f"cloudlstm {code.get('version')}"
    changed = " with uncommitted changes" if code.get("changed") else ""
    return f"commit {code['commit'][:10]}{changed}"


@cache
def code_version() -> dict[str, Any]:
    """``{"version", "commit", "changed"}`` of the running package: the commit of the git
    checkout it runs from, None when it is installed (no checkout of its own)."""
    package = Path(cloudlstm.__file__).resolve().parent
    top = _git(package, "rev-parse", "--show-toplevel")
    own_checkout = top is not None and _is_own_checkout(package, Path(top))
    commit = _git(package, "rev-parse", "HEAD") if own_checkout else None
    changed = None
    if commit is not None:
        # the code only: a changed config is in the run's config.yaml already
        status = _git(package, "status", "--porcelain", "--", str(package))
        changed = None if status is None else bool(status)
    return {"version": cloudlstm.__version__, "commit": commit, "changed": changed}


def _is_own_checkout(package: Path, top: Path) -> bool:
    """Whether ``top`` is this project's checkout, not a repository that happens to hold an
    installed copy (a virtual environment inside a user's own repository)."""
    try:
        inside = package.relative_to(top.resolve())
    except ValueError:
        return False
    return "site-packages" not in inside.parts and "dist-packages" not in inside.parts


def _git(where: Path, *args: str) -> str | None:
    """``git <args>``'s output in ``where``, or None where git fails or is missing.

    ``--no-optional-locks``: a read alone. ``git status`` otherwise rewrites the index under
    ``.git/index.lock`` where file times changed; every process of a DDP run and every job
    of a sweep does this at once in the same checkout, and the user's own git commands
    meanwhile fail on that lock; on a full disk the rewrite fails and the status with it.
    """
    try:
        done = subprocess.run(
            ["git", "--no-optional-locks", "-C", str(where), *args],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):  # no git, or a hung file system
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _command() -> str:
    """The command of this job as a user would type it: the program and the job's own
    overrides (in a sweep, those of this job, not the sweep's command a worker of a joblib
    launcher does not even have)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    name = Path(sys.argv[0]).name
    if name.endswith(".py"):
        program = ["python", sys.argv[0]]
    elif name.startswith("cloudlstm-"):
        program = [name]
    else:  # a sweep's worker process: only training sweeps
        program = ["python", "train.py"]
    if not HydraConfig.initialized():  # called from Python
        return shlex.join([*program, *sys.argv[1:]])
    given = OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False)
    return shlex.join([*program, *given])


@cache
def _packages() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def _machine(device: torch.device) -> dict[str, Any]:
    machine: dict[str, Any] = {
        "system": f"{platform.system()} {platform.machine()}",
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
    }
    if device.type == "cuda":
        machine["gpu"] = torch.cuda.get_device_name(device)
        machine["cuda"] = torch.version.cuda
    return machine


@cache
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
