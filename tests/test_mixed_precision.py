"""bf16 autocast on CPU against float32 (``model.compile``: tests/test_compile.py).

Stated tolerances: one DConv with given neighbours, relative to the output's scale, within
1e-2 forward (bf16 keeps 8 bits of mantissa: ~4e-3 per rounding) and 3e-2 for the weight
gradient. A whole seq2seq forecast is compared on its mean absolute difference relative to
its mean magnitude, within 0.15: bf16 rounding moves hidden coordinates by ~1e-3, which
reorders near-tied neighbours, and the recurrence carries each reordering forward; such a
flip is a discontinuity of the K-nearest rule, not an operator's error, so it is bounded,
not removed. The neighbour search itself always runs on float32 coordinates.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from cloudlstm.cli.train import train
from cloudlstm.models import CloudSeq2Seq
from cloudlstm.nn import DConv, channel_neighbours
from cloudlstm.nn.knn import knn
from cloudlstm.nn.knn_brute import knn_reference


def _bf16() -> torch.autocast:
    return torch.autocast("cpu", dtype=torch.bfloat16)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().float(), b.detach()
    return float((a - b).abs().max() / b.abs().max())


def test_dconv_under_autocast_matches_float32() -> None:
    torch.manual_seed(0)
    conv = DConv(8, 16, 9)
    cloud = torch.rand(4, 100, 8, 3)
    neighbours = channel_neighbours(cloud, 9, 1)
    reference = conv(cloud, neighbours)
    reference.square().sum().backward()
    grad32 = conv.weight.grad.clone()
    conv.zero_grad()
    with _bf16():
        out = conv(cloud, neighbours)
    assert out.dtype == torch.bfloat16
    out.float().square().sum().backward()
    assert _relative(out, reference) < 1e-2
    assert _relative(conv.weight.grad, grad32) < 3e-2


def test_neighbour_search_runs_on_float32_coordinates() -> None:
    """bf16 coordinates are searched after an exact cast to float32, never in bf16, where
    squared distances of close points would collapse into ties."""
    coords = torch.rand(6, 200, 2).bfloat16()
    expected = knn_reference(coords.float(), 9)
    assert torch.equal(knn(coords, 9), expected)
    assert torch.equal(knn(coords, 9, method="cells"), expected)
    cloud = torch.cat([torch.rand(6, 200, 1), coords.float()], -1)[:, :, None]  # (B, N, 1, 3)
    with _bf16():  # DConv's own search, inside autocast
        assert torch.equal(channel_neighbours(cloud.bfloat16(), 9, 1)[:, :, 0], expected)


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_seq2seq_trains_under_autocast(cell: str) -> None:
    torch.manual_seed(0)
    model = CloudSeq2Seq(num_channels=3, output_steps=4, k=6, cell=cell, hidden_channels=8)
    x, coords = torch.randn(2, 5, 40, 3), torch.rand(2, 40, 2)
    reference = model(x, coords).detach()
    with _bf16():
        out = model(x, coords)
        loss = out.float().square().mean()
    loss.backward()
    assert out.dtype == torch.bfloat16 and out.shape == reference.shape
    error = (out.detach().float() - reference).abs().mean() / reference.abs().mean()
    assert float(error) < 0.15
    for name, param in model.named_parameters():
        assert param.grad is not None and bool(torch.isfinite(param.grad).all()), name


@pytest.mark.parametrize(
    ("precision", "dtype"), [("64", torch.float64), ("bf16-true", torch.bfloat16)]
)
def test_train_py_trains_tests_and_reports_in_the_precision_asked(tiny_cfg, precision, dtype):
    """Weights held in float64 or bf16 (``-true``): the run trains, tests and reports its
    forecast's cost, whose stand-in batch (the run's first test windows) is cast to the
    weights' type as the Trainer casts the batches."""
    cfg = tiny_cfg(f"trainer.precision={precision}", "logger=none")
    results = train(cfg)
    run = Path(cfg.paths.output_dir)
    weights = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    assert {w.dtype for w in weights.values() if w.is_floating_point()} == {dtype}
    assert math.isfinite(results["test"]["overall"]["mae"]["mean"])
    assert results["cost"]["inference_ms_per_sample"] > 0
