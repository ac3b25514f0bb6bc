"""QueryRanks: per-query ranks kept by index, gathered in index order; the CSV round trip."""

import numpy as np
import pytest
import torch

from seqrec.metrics.query_ranks import QueryRanks, read_ranks_csv, write_ranks_csv
from seqrec.metrics.ranking import RankingMetrics, metric_values


def test_ranks_come_back_in_index_order_and_give_the_aggregate_metrics():
    ranks = QueryRanks()
    totals = RankingMetrics(["ndcg@10", "mrr@10"])
    batches = [(torch.tensor([4, 0, 2]), torch.tensor([1, 12, 3])), (torch.tensor([1, 3]), torch.tensor([7, 2]))]
    for index, rank in batches:
        ranks.update(index, rank)
        totals.update(rank)
    table = ranks.compute()
    assert table.tolist() == [[0, 12], [1, 7], [2, 3], [3, 2], [4, 1]]
    # the per-query values average to exactly what the sums-and-counts metric reports
    for name, kind, k in (("ndcg@10", "ndcg", 10), ("mrr@10", "mrr", 10)):
        assert metric_values(kind, k, table[:, 1]).mean() == pytest.approx(float(totals.compute()[name]))


def test_a_query_ranked_twice_is_refused():
    ranks = QueryRanks()
    ranks.update(torch.tensor([0, 1]), torch.tensor([1, 2]))
    ranks.update(torch.tensor([1]), torch.tensor([2]))
    with pytest.raises(ValueError, match="query 1 was ranked twice"):
        ranks.compute()


def test_shapes_must_agree():
    with pytest.raises(ValueError, match="differ"):
        QueryRanks().update(torch.tensor([0, 1]), torch.tensor([1]))


def test_csv_round_trip_and_a_foreign_file(tmp_path):
    table = np.array([[0, 3], [5, 1], [9, 1200]], dtype=np.int64)
    write_ranks_csv(tmp_path / "r.csv", table)
    assert np.array_equal(read_ranks_csv(tmp_path / "r.csv"), table)
    write_ranks_csv(tmp_path / "one.csv", table[:1])
    assert read_ranks_csv(tmp_path / "one.csv").shape == (1, 2)
    (tmp_path / "x.csv").write_text("user,score\n1,2\n")
    with pytest.raises(ValueError, match="not a ranks file"):
        read_ranks_csv(tmp_path / "x.csv")
