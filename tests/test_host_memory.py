"""Freed memory kept for the next training step (cloudlstm.engine.host_memory)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from cloudlstm.assembly import build
from cloudlstm.errors import UserError

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# Current RSS (not the peak) after a 256 MB tensor is written and freed, minus before it.
FREED_AND_KEPT = """
import os, sys
import torch
from cloudlstm.engine.host_memory import keep_freed_memory

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

if sys.argv[1] == "keep":
    assert keep_freed_memory()
before = rss_mb()
block = torch.ones(64 * 2**20)  # 256 MB, every page written
del block
print(rss_mb() - before)
"""


def rss_left_after_free(mode: str) -> float:
    result = subprocess.run(
        [sys.executable, "-c", FREED_AND_KEPT, mode], capture_output=True, text=True, check=True
    )
    return float(result.stdout)


@pytest.mark.skipif(not GLIBC, reason="keep_freed_memory tunes glibc's malloc (Linux only)")
def test_freed_block_stays_in_the_process_only_when_asked():
    assert rss_left_after_free("default") < 64  # glibc unmapped the block on free
    assert rss_left_after_free("keep") > 200  # kept, for the next step to reuse


@pytest.mark.parametrize(
    "setting,applied",
    [
        ({}, True),
        ({"keep_freed_memory": "auto", "model": {"checkpointing": False}}, True),
        ({"keep_freed_memory": "auto", "model": {"checkpointing": True}}, False),
        ({"model": {"checkpointing": True}}, False),
        ({"keep_freed_memory": True, "model": {"checkpointing": True}}, True),
        ({"keep_freed_memory": False}, False),
    ],
)
def test_jobs_apply_it_unless_switched_off(monkeypatch, setting, applied):
    """On by default (also for a run saved before the key existed, which eval.py reads),
    off where the run checkpoints to save memory, or when switched off."""
    calls = []
    monkeypatch.setattr(build, "keep_freed_memory", lambda: calls.append(1))
    build.configure_process(OmegaConf.create(setting))
    assert bool(calls) == applied


def test_an_unreadable_setting_is_refused_by_name():
    with pytest.raises(UserError, match="keep_freed_memory='yes' is not one of auto, true, false"):
        build.configure_process(OmegaConf.create({"keep_freed_memory": "yes"}))
