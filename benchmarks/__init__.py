"""Development benchmarks, outside the installed package: run them from a source checkout's root.

    python -m benchmarks.pipeline --out results/BENCHMARKS.md    data pipeline: preprocess, cache, train, evaluate
    python -m benchmarks.speed --out results/BENCHMARKS.md       ML-1M speed and memory (and the official LRURec)
    python -m benchmarks.xlong --out results/BENCHMARKS.md       the XLong-size pipeline on a synthetic corpus
    python -m benchmarks.lru_speed --out results/BENCHMARKS.md   LRURec's parallel scan vs the sequential loop
    python -m benchmarks.compress                                long-sequence CTR under state compression
    python -m benchmarks.serve --out results/SERVING.md          serving latency, throughput, state, hostile requests
    python -m benchmarks.baselines                               results/BASELINES.md: `make fit` over seeds, popularity
    python -m benchmarks.evornn --jobs 2                         results/EVORNN.md: EvoRNN vs fixed GRUs, MAP@20 vs MACs
    python -m benchmarks.mlp4rec --jobs 2                        results/MLP4REC.md: MLP4Rec, SASRec, GRU4Rec (ML-100k)

``make bench`` runs the first three. The last three are grids of fits (``benchmarks/fit_grid.py``: resumable, each
fit's run directory kept, paired per-query differences from ``test_ranks.csv``). Reports are written through ``seqrec.bench.report`` (one ``## <title>``
section per benchmark, shared with ``python -m seqrec repro``, the paper reproductions, which stay a command).
"""
