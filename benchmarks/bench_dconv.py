"""Cost of one CloudLSTM cell step (forward + backward) at the paper's size, on this machine.

    python benchmarks/bench_dconv.py [--batch 32] [--points 274] [--k 9] [--repeats 5]

Prints, measured in this one run on clouds shaped like a CloudLSTM's hidden states: the
cell step (searching all its input and hidden channels, and as CloudSeq2Seq runs it:
neighbours of its input and state given, its new state searched once for the layer above
and the next step); its breakdown into neighbour search, gather (+ its backward) and
weighting (the matmul + its backward); the bare matmul with the same FLOPs, as DConv runs
it (the floor) and as torch's own ``addmm`` (MKL) would; a plain reference written
straight from Algorithm 1 (all-pairs distances + topk + advanced indexing); and neighbour
search for large N, where the reference would need a B x U x N x N distance tensor.
Ratios are what matter: absolute times depend on the CPU.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from cloudlstm.cli.arguments import at_least_one
from cloudlstm.nn import (
    CloudLSTMCell,
    channel_neighbours,
    gather_neighbourhoods,
    knn,
    onednn_matmul,
)
from cloudlstm.nn.cells import search
from cloudlstm.nn.knn_brute import knn_reference


def timed(fn: Callable[[], object], repeats: int) -> float:
    """Best wall time in ms after one warm-up call."""
    return timed_together({"fn": fn}, repeats)["fn"]


def timed_together(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Best wall time in ms of each function, measured round-robin.

    Interleaving puts every part under the same background load, and the minimum is the
    least disturbed run, so the parts of one step can be compared with each other.
    """
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: t * 1e3 for name, t in best.items()}


def reference_cell_step(cell: CloudLSTMCell, x: torch.Tensor, state) -> torch.Tensor:
    """CloudLSTM step as Algorithm 1 reads: cdist + topk neighbours, index, reshape, conv."""
    hidden, memory = state
    cloud = torch.cat([x, hidden], dim=2).transpose(1, 2)  # (B, U, N, F)
    b, u, n, f = cloud.shape
    k = cell.k
    idx = knn_reference(cloud[..., 1:], k)  # (B, U, N, K)
    batch = torch.arange(b)[:, None, None, None]
    chan = torch.arange(u)[None, :, None, None]
    neigh = cloud[batch, chan, idx]  # (B, U, N, K, F)
    inp = neigh.permute(0, 2, 1, 3, 4).reshape(b * n, u * k * f)
    w = cell.gates.weight.transpose(3, 4).reshape(u * k * f, -1)
    z = (inp @ w + cell.gates.bias.reshape(-1)).view(b, n, 4 * cell.hidden_channels, f)
    i, fg, o, g = z.chunk(4, dim=2)
    memory = torch.sigmoid(fg) * memory + torch.sigmoid(i) * cell._candidate(g)
    return torch.sigmoid(o) * torch.tanh(memory)


@torch.no_grad()
def model_like_clouds(cell: CloudLSTMCell, b: int, n: int) -> tuple[torch.Tensor, tuple]:
    """An input ``(B, N, U, 3)`` and a state ``(H, C)`` shaped like those a CloudLSTM
    passes between its cells: hidden states made by this cell from random clouds.

    Their coordinates are ``o * tanh(c)``, bunched around the middle of their range, not
    uniform: such clouds take ~1.3x longer to search than uniform ones, so uniform
    stand-ins would flatter the search's share of a step.
    """
    u = cell.hidden_channels
    start = (torch.rand(b, n, u, 3), torch.rand(b, n, u, 3))
    x, _ = cell(torch.rand(b, n, cell.input_channels, 3), start)
    hidden, state = cell(x, start)
    return x, (hidden.clone().requires_grad_(True), state[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=at_least_one, default=32)
    parser.add_argument("--points", type=at_least_one, default=274)
    parser.add_argument("--channels", type=at_least_one, default=36)
    parser.add_argument("--k", type=at_least_one, default=9)
    parser.add_argument("--repeats", type=at_least_one, default=7)
    args = parser.parse_args()
    if args.k > args.points:
        parser.error(f"--k {args.k} neighbours need at least as many --points ({args.points})")
    torch.manual_seed(0)
    b, n, u, k = args.batch, args.points, args.channels, args.k
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"B={b}, N={n}, U_in={u} + U_h={u}, K={k}, H=1, L=2"
    )

    cell = CloudLSTMCell(u, u, k)
    x, state = model_like_clouds(cell, b, n)
    cloud = torch.cat([x, state[0]], dim=2).detach().requires_grad_(True)

    def cell_step():
        hidden, _ = cell(x, state)
        hidden.sum().backward()

    x_neighbours, hidden_neighbours = search(x, k), search(state[0].detach(), k)

    def model_cell_step():
        # As CloudSeq2Seq runs a cell: its input's and state's neighbours were searched
        # when they were made, and its new state is searched once, for the layer above
        # and for its own next step.
        hidden, _ = cell(x, state, x_neighbours, hidden_neighbours)
        search(hidden.detach(), k)
        hidden.sum().backward()

    def reference_step():
        reference_cell_step(cell, x, state).sum().backward()

    neighbours = channel_neighbours(cloud, k, 1)

    def gather():
        gather_neighbourhoods(cloud, neighbours).sum().backward()

    rows = gather_neighbourhoods(cloud, neighbours).detach().requires_grad_(True)
    weight = cell.gates.weight.detach().transpose(3, 4).reshape(rows.shape[1], -1)
    weight.requires_grad_(True)

    def matmul():  # as DConv runs it (oneDNN on x86 CPUs, see nn/onednn_matmul.py)
        onednn_matmul.addmm(None, rows, weight).sum().backward()

    def matmul_torch():  # torch's own product (MKL on CPU)
        (rows @ weight).sum().backward()

    times = timed_together(
        {
            "cell": cell_step,
            "model cell": model_cell_step,
            "knn": lambda: channel_neighbours(cloud, k, 1),
            "gather": gather,
            "matmul": matmul,
            "torch matmul": matmul_torch,
        },
        args.repeats,
    )
    t_cell, t_knn, t_gather, t_mm = (times[n] for n in ("cell", "knn", "gather", "matmul"))
    t_model = times["model cell"]
    ref = timed_together(
        {"step": reference_step, "knn": lambda: knn_reference(cloud[..., 1:].transpose(1, 2), k)},
        max(1, args.repeats // 3),
    )
    t_ref, t_ref_knn = ref["step"], ref["knn"]
    rest = t_cell - t_knn - t_gather - t_mm

    print("\nOne CloudLSTM cell step, forward + backward (best of round-robin repeats, ms):")
    print(f"  cell step                     {t_cell:9.1f}")
    print(f"    neighbour search            {t_knn:9.1f}  ({t_knn / t_cell:5.1%})")
    print(f"    gather + backward           {t_gather:9.1f}  ({t_gather / t_cell:5.1%})")
    print(f"    weighting (matmul + bwd)    {t_mm:9.1f}  ({t_mm / t_cell:5.1%})")
    print(f"    gates and the rest          {rest:9.1f}  ({rest / t_cell:5.1%})")
    print(f"  bare matmul, same FLOPs       {t_mm:9.1f}  (the floor)")
    t_torch = times["torch matmul"]
    print(
        f"  ... as torch.addmm            {t_torch:9.1f}  ({t_torch / t_mm:.2f}x;"
        f" DConv uses oneDNN: {onednn_matmul.ENABLED})"
    )
    print(
        f"  reference (cdist+topk+index)  {t_ref:9.1f}  of which neighbours {t_ref_knn:.1f}"
        f" ({t_ref_knn / t_ref:.0%})"
    )
    print(
        f"  cell step in CloudSeq2Seq     {t_model:9.1f}  (its output's {u} channels searched"
        f" once, reused by the layer above and the next step)"
    )
    print(f"\n  cell step / matmul floor      {t_cell / t_mm:9.2f}x")
    print(f"  ... in CloudSeq2Seq           {t_model / t_mm:9.2f}x")
    print(f"  reference / cell step         {t_ref / t_cell:9.2f}x")
    print(f"  reference kNN / our kNN       {t_ref_knn / t_knn:9.2f}x")

    print("\nNeighbour search alone for larger clouds (B*U clouds of N points, K=9):")
    for clouds, big_n in [(b * 2 * u, 1000), (64, 5000), (8, 20000)]:
        coords = torch.rand(clouds, big_n, 2)
        t = timed(lambda c=coords: knn(c, k), 2)
        dense_gb = clouds * big_n * big_n * 4 / 1e9
        print(
            f"  {clouds:5d} clouds x N={big_n:6d}: {t:8.1f} ms "
            f"(a dense distance tensor would need {dense_gb:,.1f} GB)"
        )


if __name__ == "__main__":
    main()
