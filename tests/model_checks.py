"""Checks every forecaster must pass: the interface shape and that it can learn.

Used by the per-model test files (``tests/test_models_*.py``)::

    from model_checks import check_forecaster
    check_forecaster(MyModel(num_channels=2, output_steps=3, ...), m=4, n=12, c=2, j=3)
"""

from __future__ import annotations

import torch
from torch import nn


def tiny_batch(
    b: int = 4, m: int = 4, n: int = 12, c: int = 2, j: int = 3, dims: int = 2, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A learnable tiny problem: the target continues a smooth per-point signal.

    Returns ``x (b, m, n, c)``, ``coords (b, n, dims)`` in [0, 1] (shared across the batch)
    and ``y (b, j, n, c)``.
    """
    gen = torch.Generator().manual_seed(seed)
    coords = torch.rand(n, dims, generator=gen).expand(b, n, dims).contiguous()
    phase = torch.rand(b, 1, n, c, generator=gen) * 6.28
    t = torch.arange(m + j, dtype=torch.float32).view(1, -1, 1, 1)
    series = torch.sin(0.5 * t + phase) + coords[:, None, :, :1]
    return series[:, :m].contiguous(), coords, series[:, m:].contiguous()


def check_forecaster(
    model: nn.Module,
    m: int = 4,
    n: int = 12,
    c: int = 2,
    j: int = 3,
    dims: int = 2,
    steps: int = 30,
    lr: float = 3e-3,
) -> None:
    """Output is ``(B, J, N, C)`` and finite; if the model has parameters, Adam lowers the
    MSE on a fixed tiny batch within ``steps`` steps (to below 90 % of the start)."""
    torch.manual_seed(0)
    x, coords, y = tiny_batch(m=m, n=n, c=c, j=j, dims=dims)
    out = model(x, coords)
    assert out.shape == y.shape, f"expected {tuple(y.shape)}, got {tuple(out.shape)}"
    assert torch.isfinite(out).all()
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        return
    opt = torch.optim.Adam(params, lr=lr)
    model.train()
    first = None
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x, coords) - y) ** 2).mean()
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
    model.eval()
    with torch.no_grad():
        final = ((model(x, coords) - y) ** 2).mean().item()
    assert final < 0.9 * first, f"loss did not fall: {first:.4f} -> {final:.4f}"
