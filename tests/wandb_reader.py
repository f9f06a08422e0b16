"""Read an offline W&B run file (``run-<id>.wandb``): what ``wandb sync`` would upload.

The file is a LevelDB-style log: a 7-byte header (``:W&B``, magic 0xBEE1, version 0), then
32 KiB blocks of records, each with a 7-byte header (crc32, length, type: full / first /
middle / last chunk), whose payloads are ``wandb_internal_pb2.Record`` protobufs.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError
from wandb.proto import wandb_internal_pb2 as pb

HEADER = struct.Struct("<4sHB")
RECORD = struct.Struct("<IHB")
BLOCK = 32 * 1024
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


@dataclass
class OfflineRun:
    run_id: str = ""
    name: str = ""
    group: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    metric_summaries: dict[str, list[str]] = field(default_factory=dict)  # define_metric
    files: list[str] = field(default_factory=list)
    exited: bool = False  # the file ends with the run's exit record: it is complete
    exit_code: int | None = None  # the exit record's: not 0 for a run that failed

    def history_keys(self) -> set[str]:
        return set().union(*self.history) if self.history else set()

    def series(self, key: str) -> list[Any]:
        return [row[key] for row in self.history if key in row]


def payloads(path: Path) -> list[bytes]:
    data = path.read_bytes()
    ident, magic, version = HEADER.unpack_from(data)
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), "not a W&B run file"
    pos, out, partial = HEADER.size, [], b""
    while pos + RECORD.size <= len(data):
        left = BLOCK - pos % BLOCK
        if left < RECORD.size:  # block trailer padding
            pos += left
            continue
        _, length, kind = RECORD.unpack_from(data, pos)
        if kind == 0 and length == 0:  # zero padding at the end of a block
            pos += left
            continue
        chunk = data[pos + RECORD.size : pos + RECORD.size + length]
        pos += RECORD.size + length
        if kind == FULL:
            out.append(chunk)
        elif kind == FIRST:
            partial = chunk
        elif kind == MIDDLE:
            partial += chunk
        elif kind == LAST:
            out.append(partial + chunk)
    return out


def _key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


def read_offline_run(path: Path) -> OfflineRun:
    run = OfflineRun()
    for payload in payloads(path):
        rec = pb.Record()
        rec.ParseFromString(payload)
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            run.run_id, run.name, run.group = (
                rec.run.run_id,
                rec.run.display_name,
                rec.run.run_group,
            )
            run.tags = list(rec.run.tags)
            run.config.update({_key(i): json.loads(i.value_json) for i in rec.run.config.update})
        elif kind == "config":
            run.config.update({_key(i): json.loads(i.value_json) for i in rec.config.update})
        elif kind == "history":
            run.history.append({_key(i): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "summary":
            run.summary.update({_key(i): json.loads(i.value_json) for i in rec.summary.update})
        elif kind == "metric":
            summary = rec.metric.summary
            run.metric_summaries[rec.metric.name] = [
                f.name for f, v in summary.ListFields() if v is True
            ]
        elif kind == "files":
            run.files += [f.path for f in rec.files.files]
        elif kind == "exit":
            run.exited, run.exit_code = True, rec.exit.exit_code
    return run


def finished_run(folder: Path, timeout_s: float = 60) -> tuple[Path, OfflineRun]:
    """The one offline run under ``folder/wandb``, its file and what it holds, once the file
    ends with the exit record: W&B's service process writes the file, and may finish it
    after ``finish()`` returns in this process (the process's exit waits for it).

    Raises:
        AssertionError: no single complete run within ``timeout_s``, with what the folder
            holds and W&B's state in this process, to tell why.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        files = sorted(folder.glob("wandb/offline-run-*/run-*.wandb"))
        run = OfflineRun()
        if len(files) == 1:
            with contextlib.suppress(DecodeError):  # a record half written
                run = read_offline_run(files[0])
            if run.exited:
                return files[0], run
        if time.monotonic() > deadline:
            raise AssertionError(_no_finished_run(folder, files, timeout_s))
        time.sleep(0.2)


def _no_finished_run(folder: Path, files: list[Path], timeout_s: float) -> str:
    import wandb

    held = sorted(str(p.relative_to(folder)) for p in folder.glob("wandb/**/*"))
    env = {k: v for k, v in os.environ.items() if k.startswith("WANDB_")}
    state = "none" if wandb.run is None else f"{wandb.run.id} in {wandb.run.dir}"
    return (
        f"{len(files)} run files under {folder}/wandb, none complete after {timeout_s} s; "
        f"it holds {held}; the W&B run in progress: {state}; W&B's variables: {env}"
    )
