"""``seqrec compare BASE RUN [RUN ...]``: each run's test metrics against a base run's, paired on the same queries.

    seqrec compare runs/gru64/version_0 runs/evo_pl05/version_0 --metrics map@20 ndcg@10

Reads each run's ``test_ranks.csv`` (written by ``fit`` and ``test`` for ranking tasks: the target's rank per test
query, by query index). For a metric m and the Q queries both runs ranked, the per-query difference is
d_q = m(r_run,q) − m(r_base,q); the report gives mean(d) and its paired standard error s.e. = std(d, ddof=1) / √Q,
with the normal 95% interval mean(d) ± 1.96 s.e. Pairing removes the spread of query difficulty that two
unpaired means would carry, so it detects far smaller differences on the same queries.

Two limits, stated because they matter:
- the s.e. treats queries as independent draws; where a split has several queries per user (a temporal split),
  queries of one user are correlated and the true uncertainty is larger;
- it measures the sampling of the test queries, not the randomness of training: two seeds of the same SASRec
  config on ML-100k differ by +0.0131 NDCG@10 with a paired s.e. of 0.0051 (results/BASELINES.md). To say that
  one configuration beats another, compare several seeds of each (``benchmarks.fit_grid.paired`` averages the
  per-query differences over seed pairs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from seqrec.atomic import write_json
from seqrec.metrics.query_ranks import read_ranks_csv
from seqrec.metrics.ranking import metric_values, parse_metric
from seqrec.run_files import CONFIG, TEST_RANKS
from seqrec.runs import best_checkpoint, find_run_dir

Z95 = 1.959964  # two-sided 95% quantile of the standard normal


@dataclass(frozen=True)
class Paired:
    """One metric of one run against the base, over the queries both ranked."""

    run: str
    metric: str
    queries: int
    base: float  # mean over the queries of the base run
    value: float  # mean over the queries of this run
    difference: float  # value − base = mean of the per-query differences
    se: float  # paired standard error of ``difference``

    @property
    def interval(self) -> tuple[float, float]:
        """Normal 95% interval of the difference."""
        return self.difference - Z95 * self.se, self.difference + Z95 * self.se


def run_ranks(run: str | Path) -> tuple[Path, np.ndarray]:
    """A run directory (or experiment folder: its newest run) and its (Q, 2) index/rank rows."""
    run_dir = find_run_dir(run)
    path = run_dir / TEST_RANKS
    if not path.is_file():
        best = best_checkpoint(run_dir)
        how = (f"test it again (python -m seqrec test --config {run_dir / CONFIG} --ckpt_path {best}) and compare the "
               "run directory that writes" if best else "fit it again")
        raise FileNotFoundError(f"{run_dir} has no {TEST_RANKS} (tested before per-query ranks were kept): {how}")
    return run_dir, read_ranks_csv(path)


def seed_averaged(pairs: Sequence[tuple[np.ndarray, np.ndarray]], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-query ``metric`` of the bases and of the runs, each averaged over the (base, run) pairs of (Q, 2) rank tables
    (one pair per seed): ((Q,), (Q,)). ValueError when a pair holds different query sets (other data or split)."""
    kind, k = parse_metric(metric)
    bases, values = [], []
    for base, ranks in pairs:
        if not np.array_equal(base[:, 0], ranks[:, 0]):
            raise ValueError(f"a run ranked other test queries than its base ({len(ranks)} vs {len(base)} queries): "
                             "compare runs of the same data, split and seed of the data")
        bases.append(metric_values(kind, k, torch.from_numpy(base[:, 1])).numpy())
        values.append(metric_values(kind, k, torch.from_numpy(ranks[:, 1])).numpy())
    if not pairs or len(bases[0]) == 0:
        raise ValueError("no test query to compare")
    return np.mean(bases, axis=0), np.mean(values, axis=0)


def paired(run: str, pairs: Sequence[tuple[np.ndarray, np.ndarray]], metric: str) -> Paired:
    """``metric`` of the runs against their bases over the queries both ranked: d_q = mean over the pairs of
    m(run, q) − m(base, q), the difference mean(d) and its s.e. std(d, ddof=1)/√Q (module docstring)."""
    base, value = seed_averaged(pairs, metric)  # (Q,), (Q,)
    diff = value - base  # (Q,)
    se = float(diff.std(ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else float("nan")
    return Paired(run, metric, len(diff), float(base.mean()), float(value.mean()), float(diff.mean()), se)


def compare(base: str | Path, runs: list[str | Path], metrics: list[str]) -> list[Paired]:
    """Every metric of every run against ``base`` (run directories or experiment folders)."""
    _, base_ranks = run_ranks(base)
    rows = []
    for run in runs:
        run_dir, ranks = run_ranks(run)
        rows.extend(paired(str(run_dir), [(base_ranks, ranks)], metric) for metric in metrics)
    return rows


def command(base: str, runs: list[str], metrics: list[str] | None = None, json: Path | None = None) -> list[Paired]:
    """Each run's test metrics against the base run's, paired per query: difference, paired s.e., 95% interval.

    Args:
        base: the reference run directory (or experiment folder: its newest run)
        runs: the runs to compare with it (same data and split)
        metrics: ranking metrics (default ndcg@10 hr@10 mrr@10)
        json: also write the rows here (atomically)
    """
    rows = compare(base, list(runs), list(metrics or ["ndcg@10", "hr@10", "mrr@10"]))
    print(f"base: {find_run_dir(base)}")
    print("run | metric | queries | base | run | difference | paired s.e. | 95% interval")
    for row in rows:
        low, high = row.interval
        print(f"{row.run} | {row.metric} | {row.queries} | {row.base:.4f} | {row.value:.4f} | {row.difference:+.4f} | "
              f"{row.se:.4f} | [{low:+.4f}, {high:+.4f}]")
    if json is not None:
        write_json(json, [asdict(row) for row in rows])
    return rows
