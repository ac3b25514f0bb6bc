"""Development benchmarks, outside the installed package: run them from a source checkout's root.

    python -m benchmarks.pipeline --out results/BENCHMARKS.md    data pipeline: preprocess, cache, train, evaluate
    python -m benchmarks.speed --out results/BENCHMARKS.md       ML-1M speed and memory (and the official LRURec)
    python -m benchmarks.xlong --out results/BENCHMARKS.md       the XLong-size pipeline on a synthetic corpus
    python -m benchmarks.lru_speed --out results/BENCHMARKS.md   LRURec's parallel scan vs the sequential loop
    python -m benchmarks.compress                                long-sequence CTR under state compression
    python -m benchmarks.serve --out results/SERVING.md          serving latency, throughput, state, hostile requests

``make bench`` runs the first three. Reports are written through ``seqrec.bench.report`` (one ``## <title>``
section per benchmark, shared with ``python -m seqrec repro``, the paper reproductions, which stay a command).
"""
