"""Each test query's target rank, kept by query index, for paired comparisons of two runs (``seqrec compare``).

The aggregate metrics (``RankingMetrics``) keep only sums and counts. Whether model A beats model B on the same
queries needs the per-query values: with per-query differences d_q = m_A(r_A,q) − m_B(r_B,q) over Q shared
queries, the paired standard error is std(d) / √Q, much tighter than comparing two unpaired means when the
models agree on which queries are hard. Every ranking metric with one target is a function of the rank alone
(``metric_values``), so the (index, rank) pairs carry everything.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from seqrec.atomic import write_text


class QueryRanks(Metric):
    """(query index, 1-based target rank) of every query seen, gathered from every process.

    States are lists concatenated across processes (``dist_reduce_fx="cat"``); ``compute()`` sorts by query
    index and refuses a query seen twice (the distributed sampler's padding copies are dropped before
    ``update``, ``seqrec.tasks.padding.drop_padding``).
    """

    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("index", default=[], dist_reduce_fx="cat")
        self.add_state("rank", default=[], dist_reduce_fx="cat")

    def update(self, index: Tensor, ranks: Tensor) -> None:
        """Query indexes (B,) and their targets' 1-based ranks (B,)."""
        if index.shape != ranks.shape:
            raise ValueError(f"QueryRanks.update: index {tuple(index.shape)} and ranks {tuple(ranks.shape)} differ")
        self.index.append(index.detach().to(torch.int64).reshape(-1))
        self.rank.append(ranks.detach().to(torch.int64).reshape(-1))

    def compute(self) -> Tensor:
        """(Q, 2) int64: query index and rank, in order of index."""
        # a list of batches in one process; one tensor after the states were gathered from several (torchmetrics)
        if isinstance(self.index, list) and not self.index:
            return torch.zeros((0, 2), dtype=torch.int64)
        index, rank = dim_zero_cat(self.index), dim_zero_cat(self.rank)  # (Q,), (Q,)
        order = torch.argsort(index, stable=True)
        index, rank = index[order], rank[order]
        repeats = index[1:][index[1:] == index[:-1]]  # sorted: a repeated index sits next to itself
        if repeats.numel():
            repeated = int(repeats[0])
            raise ValueError(f"QueryRanks: query {repeated} was ranked twice (a sampler padding copy was not dropped)")
        return torch.stack([index, rank], dim=1)


def write_ranks_csv(path: str | Path, table: np.ndarray) -> None:
    """Write (Q, 2) index/rank rows as ``index,rank`` CSV, atomically (``seqrec.atomic``)."""
    lines = ["index,rank", *(f"{int(i)},{int(r)}" for i, r in table)]
    write_text(path, "\n".join(lines) + "\n")


def read_ranks_csv(path: str | Path) -> np.ndarray:
    """(Q, 2) int64 index/rank rows of a ``test_ranks.csv``; ValueError naming the file when it is not one."""
    with open(path, encoding="utf-8") as handle:
        header = handle.readline().strip()
        if header != "index,rank":
            raise ValueError(f"{path} is not a ranks file (its first line is {header!r}, expected 'index,rank')")
        table = np.loadtxt(handle, delimiter=",", dtype=np.int64, ndmin=2)
    return table.reshape(-1, 2)
