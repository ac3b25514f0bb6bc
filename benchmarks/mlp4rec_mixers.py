"""MLP4Rec's mixer paths at the official size: peak RSS and step time of one training step, side by side.

The official size (d 128, 4 layers, shared mixers, dropout 0.5, batch 256, L 50) with three item features shaped
like ML-100k's (genres and title words as token sequences, the release year as a token; synthetic ids, since the
cost does not depend on their values); one step = forward, full-softmax cross-entropy over 1,682 items, backward,
Adam. Three paths of ``MLP4Rec``: ``reference`` (the (C, B, L, d) layout, plain autograd), ``positions_first``
(the default) and ``recompute`` (positions_first with ``mixer_recompute``).

    python benchmarks/mlp4rec_mixers.py memory     # each path in its own process: peak RSS (ru_maxrss)
    python benchmarks/mlp4rec_mixers.py time 5     # one process, the paths alternating step by step: medians

Time only on a quiet machine (the report prints the load average). One thread, as the speed benchmark.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from seqrec.models.next_item.mlp4rec import MLP4Rec

N, L, B = 1682, 50, 256
PATHS = ("reference", "positions_first", "recompute")
SPEC = [
    {"name": "genres", "kind": "token_seq", "vocab_size": 20, "max_tokens": 6},
    {"name": "title", "kind": "token_seq", "vocab_size": 3000, "max_tokens": 12},
    {"name": "year", "kind": "token", "vocab_size": 80, "max_tokens": 1},
]


def build(path: str) -> tuple[MLP4Rec, torch.optim.Optimizer]:
    """The official-size model on ``path`` (same seed, same weights on every path) and its Adam."""
    torch.manual_seed(0)
    model = MLP4Rec(
        N, L, 128, 4, dropout=0.5, feature_spec=SPEC, share_mixers=True, padding_side="right", mask_padding=False,
        mixer_layer_norm_eps=1e-5, zero_padding_row=False,
        mixer_layout="reference" if path == "reference" else "positions_first", mixer_recompute=path == "recompute",
    )
    g = torch.Generator().manual_seed(1)
    model.set_item_features({
        "genres": torch.randint(0, 20, (N + 1, 6), generator=g),
        "title": torch.randint(0, 3000, (N + 1, 12), generator=g),
        "year": torch.randint(1, 80, (N + 1,), generator=g),
    })
    return model.train(), torch.optim.Adam(model.parameters(), lr=1e-4)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """items (B, L) with 10 leading padding positions, targets (B,)."""
    g = torch.Generator().manual_seed(2)
    items = torch.randint(1, N + 1, (B, L), generator=g)
    items[:, :10] = 0
    return items, torch.randint(1, N + 1, (B,), generator=g)


def step(model: MLP4Rec, optimizer: torch.optim.Optimizer, items: torch.Tensor, target: torch.Tensor) -> None:
    """One training step: CE over every item of the newest position's scores."""
    loss = F.cross_entropy(model.score(model(items)[:, -1]), target)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    mode = argv[0] if argv else "memory"
    if mode in PATHS:  # one path in this process: two steps, then the peak RSS
        model, optimizer = build(mode)
        for _ in range(2):
            step(model, optimizer, *batch())
        print(f"{mode}\t{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")
    elif mode == "memory":
        print("path\tpeak RSS")
        for path in PATHS:
            subprocess.run([sys.executable, __file__, path], check=True)
    elif mode == "time":
        steps = int(argv[1]) if len(argv) > 1 else 5
        models, data = {p: build(p) for p in PATHS}, batch()
        times: dict[str, list[float]] = {p: [] for p in PATHS}
        for p in PATHS:
            step(*models[p], *data)  # warm-up
        for _ in range(steps):
            for p in PATHS:
                start = time.perf_counter()
                step(*models[p], *data)
                times[p].append(time.perf_counter() - start)
        ref = statistics.median(times["reference"])
        for p in PATHS:
            med = statistics.median(times[p])
            print(f"{p}\t{med * 1000:.0f} ms\t{med / ref:.3f}x reference")
        print("load average", " ".join(open("/proc/loadavg").read().split()[:3]))
    else:
        raise SystemExit(f"error: unknown mode {mode!r}: memory, time [STEPS], or one of {', '.join(PATHS)}")


if __name__ == "__main__":
    main(sys.argv[1:])
