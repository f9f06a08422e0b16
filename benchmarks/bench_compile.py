"""Does ``model.compile`` pay here? CloudLSTM eager against compiled, with and without
``model.checkpointing``, measured in one run.

    python benchmarks/bench_compile.py [--points 274] [--batch 8] [--steps 3]
        [--mode default|reduce-overhead|...] [--device cpu|cuda] [--warm-cache]

For each configuration: the first training step (forward, MSE, backward; compiling, when
compiled), the best of ``--steps`` later steps, and the memory the step keeps for its
backward (the unique storages autograd saves, counted by ``saved_tensors_hooks``: what
activation checkpointing exists to cut, counted the same way eager and compiled), then the
compiled / eager ratios. The model is the paper's (conf/model/cloudlstm.yaml: K = 9, 36
channels, 2 layers) at the air-quality size, C = 6, M = J = 12, built as a run builds it
(:func:`cloudlstm.cli.models_table.model_for_shape`).
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable

import torch

from cloudlstm.cli.arguments import at_least_one
from cloudlstm.cli.models_table import model_for_shape


def saved_mb(step: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, float]:
    """``step()``'s loss and the MB of unique storages autograd saved while it ran."""
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = step()
    return loss, sum(storages.values()) / 2**20


def run(args: argparse.Namespace, compiled: bool, checkpointing: bool) -> dict[str, float]:
    torch.manual_seed(0)
    n, c, m = args.points, 6, 12
    model = model_for_shape(
        "cloudlstm", num_points=n, num_channels=c, input_steps=m, output_steps=m,
        checkpointing=checkpointing,
    ).to(args.device)  # fmt: skip
    x = torch.randn(args.batch, m, n, c, device=args.device)
    y = torch.randn(args.batch, m, n, c, device=args.device)
    coords = torch.rand(args.batch, n, 2, device=args.device)
    if compiled:
        torch._dynamo.reset()
        model.compile(mode=None if args.mode == "default" else args.mode)

    def sync() -> None:
        if args.device == "cuda":
            torch.cuda.synchronize()

    def step() -> tuple[float, float]:
        """Seconds of one training step, MB it saved for its backward."""
        sync()
        start = time.perf_counter()
        loss, saved = saved_mb(lambda: torch.nn.functional.mse_loss(model(x, coords), y))
        loss.backward()
        model.zero_grad(set_to_none=True)
        sync()
        return time.perf_counter() - start, saved

    first, _ = step()
    timed = [step() for _ in range(args.steps)]
    return {"first": first, "step": min(t for t, _ in timed), "saved": timed[-1][1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=at_least_one, default=274)
    parser.add_argument("--batch", type=at_least_one, default=8)
    parser.add_argument("--steps", type=at_least_one, default=3, help="timed steps after the first")
    parser.add_argument("--mode", default="default", help="torch.compile's mode")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--warm-cache",
        action="store_true",
        help="let Inductor reuse its on-disk caches (a second run of the same model compiles "
        "in seconds); by default they are off, so the first step times a cold compile",
    )
    args = parser.parse_args()
    torch._inductor.config.force_disable_caches = not args.warm_cache
    warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")  # the line above
    print(
        f"torch {torch.__version__} on {args.device} ({torch.get_num_threads()} threads); "
        f"N={args.points}, C=6, M=J=12, batch {args.batch}, compile mode {args.mode}"
    )
    print(f"   {'':<30} {'first step s':>12} {'step s':>8} {'saved for backward MB':>22}")
    results = {}
    for checkpointing in (False, True):
        for compiled in (False, True):
            label = f"{'compiled' if compiled else 'eager'}, checkpointing {checkpointing}"
            r = results[compiled, checkpointing] = run(args, compiled, checkpointing)
            print(f"   {label:<30} {r['first']:12.1f} {r['step']:8.2f} {r['saved']:22.0f}")
    for checkpointing in (False, True):
        eager, compiled = results[False, checkpointing], results[True, checkpointing]
        print(
            f"   checkpointing {str(checkpointing):<5}: compiled / eager step time "
            f"{compiled['step'] / eager['step']:.2f}x, memory saved for backward "
            f"{compiled['saved'] / eager['saved']:.2f}x; compiling took "
            f"{compiled['first'] - compiled['step']:.0f} s"
        )


if __name__ == "__main__":
    main()
