"""One config's training step under switched settings, side by side in one process, steps alternating.

    python -m benchmarks.step_ab CONFIG VARIANT [VARIANT ...] [--steps 10] [--threads 1] [--ml1m_data ml-1m-lrurec]

A VARIANT is ``+``-joined switches, applied before each of its steps:
``kernels=on|off`` (the compiled CPU kernels, or the eager torch paths: ``SEQREC_KERNELS``),
``malloc=on|off`` (``seqrec.allocator``'s glibc thresholds, or glibc's defaults), and
``chunk=auto|N|none`` (``ce_chunk_rows``). Example, what each of this project's CPU speed changes is worth:

    python -m benchmarks.step_ab lru_ml1m kernels=off+malloc=off+chunk=2048 kernels=on+malloc=on+chunk=auto

The task is built once; round r runs one step of every variant, in reverse order on odd rounds, after two
untimed steps of each. Prints each variant's median ms/step (min–max) and its ratio to the first, with the
load average: a development measurement, not a results table (``benchmarks.speed`` writes those).
ML-1M configs read ``--ml1m_data`` (the shared LRURec file by default, as ``benchmarks.speed``); others their own.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import time
from typing import Any

from benchmarks.flags import Parser
from benchmarks.pipeline import data_source_overrides
from seqrec import allocator

SWITCHES = ("kernels", "malloc", "chunk")
GLIBC_DEFAULTS = {allocator.M_MMAP_THRESHOLD: 128 << 10, allocator.M_TRIM_THRESHOLD: 128 << 10}


def parse_variant(text: str) -> dict[str, str]:
    """``kernels=off+chunk=2048`` -> {"kernels": "off", "chunk": "2048"}; unknown switches are refused."""
    switches = {}
    for part in text.split("+"):
        name, _, value = part.partition("=")
        if name not in SWITCHES or not value:
            raise SystemExit(f"error: {part!r}: a switch is one of {', '.join(f'{s}=...' for s in SWITCHES)}")
        switches[name] = value
    return switches


def apply(switches: dict[str, str], task: Any) -> None:
    """Set the process and the task as the switches say."""
    if "kernels" in switches:
        os.environ["SEQREC_KERNELS"] = "1" if switches["kernels"] == "on" else "0"
    if "malloc" in switches:
        if switches["malloc"] == "on":
            os.environ.pop(allocator.ENV, None)
            allocator.keep_freed_memory()
        else:
            libc = ctypes.CDLL("libc.so.6")
            for parameter, value in GLIBC_DEFAULTS.items():
                libc.mallopt(parameter, value)
    if "chunk" in switches:
        value = switches["chunk"]
        task.ce_chunk_rows = None if value == "none" else value if value == "auto" else int(value)


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    """Build, alternate, print; returns each variant's step seconds."""
    parser = Parser("benchmarks.step_ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("variants", nargs="+")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per variant")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ml1m_data", default="ml-1m-lrurec", help="ML-1M configs' data (benchmarks.speed's presets)")
    args = parser.parse_args(argv)
    variants = {text: parse_variant(text) for text in args.variants}

    import torch

    from benchmarks.speed import _built, _endless, _quiet_logging_calls, _training_step

    torch.set_num_threads(args.threads)
    torch.manual_seed(42)
    data_args = data_source_overrides(args.ml1m_data, None)[0] if "ml1m" in args.config else []
    run, data, task = _built(["--config", args.config, "--threads", str(args.threads), *data_args,
                              "--trainer.logger", "false"])
    task.train()
    step = _training_step(run, task)
    batches = _endless(data.train_dataloader())
    seconds: dict[str, list[float]] = {text: [] for text in variants}
    with _quiet_logging_calls():
        for switches in variants.values():
            apply(switches, task)
            step(next(batches))
            step(next(batches))
        order = list(variants)
        for r in range(args.steps):
            for text in order if r % 2 == 0 else order[::-1]:
                apply(variants[text], task)
                batch = next(batches)
                started = time.perf_counter()
                step(batch)
                seconds[text].append(time.perf_counter() - started)
    first = statistics.median(seconds[order[0]])
    for text in order:
        values = seconds[text]
        print(f"{args.config} {text}: {1e3 * statistics.median(values):,.1f} ms/step "
              f"({1e3 * min(values):,.0f}–{1e3 * max(values):,.0f}), {statistics.median(values) / first:.2f}×")
    print("load average (1 / 5 / 15 min): " + " / ".join(f"{v:.2f}" for v in os.getloadavg()))
    return seconds


if __name__ == "__main__":
    main()
