"""Conformal offsets measured under DDP: every rank's validation residuals, gathered."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from cloudlstm.engine.quantiles import ResidualBank

LEVELS = (0.1, 0.5, 0.9)
CENTRE = 1
RANKS = 2


def residual_batches(rank: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``forecast (B, J, N, C, Q)``, ``target (B, J, N, C)`` and ``mask`` of one rank's
    validation windows: each rank's residuals differ, so a rank's own would give other
    offsets than all of them."""
    gen = torch.Generator().manual_seed(rank)
    forecast = torch.randn(4, 3, 5, 2, len(LEVELS), generator=gen)
    target = (1 + 3 * rank) * torch.randn(4, 3, 5, 2, generator=gen)
    return forecast, target, torch.ones_like(target, dtype=torch.bool)


def rank_offsets(rank: int, init_file: str, out: str) -> None:
    """One DDP rank: collects its own residuals, saves the offsets the bank gives."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=RANKS)
    try:
        bank = ResidualBank()  # synced over the ranks at compute(), as in a validation
        bank.update(*residual_batches(rank))
        torch.save(bank.offsets(LEVELS, CENTRE), f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def test_two_ranks_calibrate_on_every_ranks_residuals(tmp_path: Path) -> None:
    out = str(tmp_path / "offsets")
    mp.spawn(rank_offsets, args=(str(tmp_path / "init"), out), nprocs=RANKS)

    whole = ResidualBank()  # one process reading both ranks' windows
    for rank in range(RANKS):
        whole.update(*residual_batches(rank))
    expected = whole.offsets(LEVELS, CENTRE)
    for rank in range(RANKS):
        torch.testing.assert_close(torch.load(f"{out}.{rank}"), expected)
