"""LRURec speed: training throughput, parallel vs sequential scan, O(1) recurrent inference.

    python -m benchmarks.lru_speed [--out PATH] [--repeats 3] [--lengths 200,1000] [--histories 50,1000]
        [--threads N]

Every number is the median of ``--repeats`` timings; the cases of one table are timed interleaved
(repeat r runs every case once), so load from other processes hits all of them alike. Inputs are
full-length random sequences (no padding), the worst case for the scan.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.flags import Parser
from seqrec.bench.report import write_section
from seqrec.models.next_item.lru import LRULayer, LRURec

NUM_ITEMS = 3416  # ML-1M after LRURec's preprocessing
D_MODEL = 64
BATCH = 32


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved_medians(
    cases: dict[str, Callable[[], object]], repeats: int, warmup: set[str] | None = None
) -> dict[str, float]:
    """Median seconds per case; round r runs every case once. ``warmup`` cases get one untimed call."""
    for name in warmup if warmup is not None else cases:
        cases[name]()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            times[name].append(_timed(fn))
    return {name: statistics.median(ts) for name, ts in times.items()}


def training_table(lengths: list[int], repeats: int) -> str:
    """Samples/s of forward + backward with full-softmax CE over num_items + 1 logits, per scan."""
    torch.manual_seed(0)
    model = LRURec(NUM_ITEMS, d_model=D_MODEL).train()

    def step(items: torch.Tensor, labels: torch.Tensor, scan: str) -> None:
        model.set_scan(scan)
        logits = model.score(model(items))  # (B, L, N+1)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=0)
        loss.backward()
        model.zero_grad(set_to_none=True)

    cases: dict[str, Callable[[], object]] = {}
    for length in lengths:
        items = torch.randint(1, NUM_ITEMS + 1, (BATCH, length))
        labels = torch.randint(1, NUM_ITEMS + 1, (BATCH, length))
        for scan in ("parallel", "sequential"):
            cases[f"{length}/{scan}"] = lambda i=items, y=labels, s=scan: step(i, y, s)
    med = interleaved_medians(cases, repeats)
    rows = []
    for length in lengths:
        par, seq = med[f"{length}/parallel"], med[f"{length}/sequential"]
        rows.append(
            f"| {length} | {par * 1e3:.0f} | {BATCH / par:.1f} | {BATCH * length / par:,.0f} | "
            f"{seq * 1e3:.0f} | {BATCH / seq:.1f} |"
        )
    head = (
        f"### Training (LRURec d={D_MODEL}, 2 layers, {NUM_ITEMS} items, batch {BATCH}, "
        "forward + backward, full-softmax CE)\n\n"
        "| max_len | parallel: ms / step | parallel: samples / s | parallel: positions / s "
        "| sequential: ms / step | sequential: samples / s |\n|---|---|---|---|---|---|"
    )
    return "\n".join([head, *rows])


def scan_table(lengths: list[int], repeats: int) -> str:
    """One LRU layer (d=64, H=128, batch 32): parallel vs sequential scan, forward and forward + backward."""
    torch.manual_seed(0)
    layer = LRULayer(D_MODEL)
    cases: dict[str, Callable[[], object]] = {}
    warm: set[str] = set()
    for length in lengths:
        x = torch.randn(BATCH, length, D_MODEL)
        mask = torch.ones(BATCH, length, dtype=torch.bool)
        for scan in ("parallel", "sequential"):

            def forward(x: torch.Tensor = x, mask: torch.Tensor = mask, scan: str = scan) -> None:
                layer.scan = scan
                with torch.no_grad():
                    layer(x, mask)

            def train(x: torch.Tensor = x, mask: torch.Tensor = mask, scan: str = scan) -> None:
                layer.scan = scan
                layer(x, mask).square().mean().backward()
                layer.zero_grad(set_to_none=True)

            cases[f"{length}/{scan}/fwd"] = forward
            cases[f"{length}/{scan}/train"] = train
            warm.add(f"{length}/{scan}/fwd")
    med = interleaved_medians(cases, repeats, warmup=warm)
    rows = []
    for length in lengths:
        par_f, seq_f = med[f"{length}/parallel/fwd"], med[f"{length}/sequential/fwd"]
        par_t, seq_t = med[f"{length}/parallel/train"], med[f"{length}/sequential/train"]
        rows.append(
            f"| {length} | {par_f * 1e3:.1f} | {seq_f * 1e3:.1f} | {seq_f / par_f:.2f}× | "
            f"{par_t * 1e3:.1f} | {seq_t * 1e3:.1f} | {seq_t / par_t:.2f}× |"
        )
    head = (
        f"### LRU layer scan (d={D_MODEL}, H={2 * D_MODEL}, batch {BATCH}; times in ms)\n\n"
        "| L | parallel fwd | sequential fwd | seq/par | parallel fwd+bwd | sequential fwd+bwd | seq/par |\n"
        "|---|---|---|---|---|---|---|"
    )
    return "\n".join([head, *rows])


def inference_table(histories: list[int], repeats: int, events: int = 100) -> str:
    """Per-event cost for one user: recurrent ``step`` from a stored state vs recomputing ``forward``."""
    torch.manual_seed(0)
    model = LRURec(NUM_ITEMS, d_model=D_MODEL).eval()
    new_items = torch.randint(1, NUM_ITEMS + 1, (events, 1))
    cases: dict[str, Callable[[], object]] = {}
    for n in histories:
        history = torch.randint(1, NUM_ITEMS + 1, (1, n))
        with torch.no_grad():
            primed, _ = model.prefill(history)

        def stream(primed: tuple[torch.Tensor, ...] = primed) -> None:
            state = primed
            with torch.no_grad():
                for item in new_items:
                    state, _ = model.step(state, item)

        def recompute(history: torch.Tensor = history) -> None:
            window = torch.cat([history[:, 1:], new_items[:1]], dim=1)  # the last n events
            with torch.no_grad():
                model(window)[:, -1]

        cases[f"{n}/step"] = stream
        cases[f"{n}/forward"] = recompute
    med = interleaved_medians(cases, repeats)
    rows = [
        f"| {n} | {med[f'{n}/step'] / events * 1e6:.0f} | {med[f'{n}/forward'] * 1e6:.0f} | "
        f"{model.state_bytes()} |"
        for n in histories
    ]
    head = (
        f"### Recurrent inference (batch 1, eval; step cost = mean over {events} streamed events)\n\n"
        "| history length | µs / event, `step` (O(1) state) | µs / event, full `forward` over history | "
        "state bytes / user |\n|---|---|---|---|"
    )
    return "\n".join([head, *rows])


def main(argv: list[str] | None = None) -> str:
    """Run the three tables, print them as markdown and optionally write them to ``--out``."""
    parser = Parser("benchmarks.lru_speed", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="write the markdown report here")
    parser.add_argument("--repeats", type=int, default=3, help="timings per case (median reported)")
    parser.add_argument("--lengths", default="200,1000", help="max_len values for training and scan tables")
    parser.add_argument("--histories", default="50,1000", help="history lengths for the inference table")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads (default: leave torch's default)"
    )
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    lengths = [int(v) for v in args.lengths.split(",")]
    histories = [int(v) for v in args.histories.split(",")]

    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    start = time.perf_counter()
    tables = [
        training_table(lengths, args.repeats),
        scan_table(lengths, args.repeats),
        inference_table(histories, args.repeats),
    ]
    header = (
        f"torch {torch.__version__}, {platform.machine()} CPU, {torch.get_num_threads()} threads, "
        f"median of {args.repeats}, total {time.perf_counter() - start:.0f} s. "
        f"Command: `{parser.command()}`"
    )
    if hasattr(os, "getloadavg"):  # other processes on a shared machine slow every case alike
        header += f"\n\nLoad average (1 min) at start / end: {load_before:.1f} / {os.getloadavg()[0]:.1f}."

    report = "\n\n".join([header, *tables]) + "\n"
    print(report)
    if args.out is not None:  # its own section: other benchmarks share the file
        write_section(args.out, "LRURec speed", report)
    return report


if __name__ == "__main__":
    main()
