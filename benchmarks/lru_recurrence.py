"""LRURec's recurrence alone, forward + backward: the compiled kernel vs the torch loop vs the parallel scan.

    python -m benchmarks.lru_recurrence [--batch 128] [--length 200] [--width 64] [--repeats 20] [--threads 1]

Times h_t = λ ⊙ h_{t-1} + u_t (complex64, u (B, L, H)) and its adjoint for a fixed upstream gradient
(``torch.autograd.grad(h, (log λ, u), G)``), through ``sequential_scan(compiled=True)``, ``sequential_scan``
(the torch loop) and ``parallel_scan``. The cases run interleaved (round r times each once); the medians of
wall time and of this thread's CPU time (less sensitive to other processes on a loaded machine) are printed
with the load average. Prints only: a development measurement, not a results table.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from benchmarks.flags import Parser
from seqrec.bench.report import load_average
from seqrec.models.kernels.linear_recurrence import compiled_recurrence
from seqrec.models.next_item.lru import parallel_scan, sequential_scan


def recurrence_medians(batch: int, length: int, width: int, repeats: int) -> dict[str, tuple[float, float]]:
    """(wall, CPU) median seconds of forward + backward per evaluation of the recurrence (one warm-up each)."""
    torch.manual_seed(0)
    log_lambda = torch.complex(-torch.rand(width) * 0.2, torch.rand(width) * 6.28).requires_grad_()
    u = torch.randn(batch, length, width, dtype=torch.complex64, requires_grad=True)
    upstream = torch.randn(batch, length, width, dtype=torch.complex64)  # G = ∂ℓ/∂h*

    def run(scan: Callable[[], torch.Tensor]) -> None:
        torch.autograd.grad(scan(), (log_lambda, u), upstream)

    cases = {"torch loop (sequential)": lambda: run(lambda: sequential_scan(log_lambda, u)),
             "parallel scan": lambda: run(lambda: parallel_scan(log_lambda, u))}
    if compiled_recurrence() is not None:
        cases["compiled kernel"] = lambda: run(lambda: sequential_scan(log_lambda, u, compiled=True))
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for fn in cases.values():
        fn()
    for _ in range(repeats):
        for name, fn in cases.items():
            wall, cpu = time.perf_counter(), time.thread_time()
            fn()
            times[name].append((time.perf_counter() - wall, time.thread_time() - cpu))
    return {name: (statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts))
            for name, ts in times.items()}


def main(argv: list[str] | None = None) -> None:
    """Print the medians (ms, wall and CPU) and each case's ratio to the torch loop."""
    parser = Parser("benchmarks.lru_recurrence", description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--length", type=int, default=200)
    parser.add_argument("--width", type=int, default=64, help="complex state size H")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    medians = recurrence_medians(args.batch, args.length, args.width, args.repeats)
    loop_wall, loop_cpu = medians["torch loop (sequential)"]
    load = load_average()
    print(f"recurrence forward+backward, B {args.batch} x L {args.length} x H {args.width} complex64, "
          f"{args.threads} thread(s), median of {args.repeats}; load average {load}")
    for name, (wall, cpu) in medians.items():
        print(f"  {name:24s} wall {wall * 1e3:8.2f} ms ({wall / loop_wall:5.2f}x the torch loop)   "
              f"CPU {cpu * 1e3:8.2f} ms ({cpu / loop_cpu:5.2f}x)")


if __name__ == "__main__":
    main()
