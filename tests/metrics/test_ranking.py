import math

import pytest
import torch

from seqrec.metrics.ranking import RankingMetrics, parse_metric, rank_of_target


def test_metrics_against_hand_values():
    metric = RankingMetrics(["hr@1", "hr@3", "ndcg@3", "mrr@3", "map@20", "recall@3"])
    metric.update(torch.tensor([1, 2, 4]))
    out = metric.compute()
    assert out["hr@1"].item() == pytest.approx(1 / 3)
    assert out["hr@3"].item() == pytest.approx(2 / 3)
    assert out["recall@3"].item() == pytest.approx(2 / 3)
    assert out["ndcg@3"].item() == pytest.approx((1.0 + 1 / math.log2(3)) / 3)
    assert out["mrr@3"].item() == pytest.approx((1.0 + 0.5) / 3)
    assert out["map@20"].item() == pytest.approx((1.0 + 0.5 + 0.25) / 3)


def test_k_larger_than_candidate_count():
    # 5 candidates only: every rank is <= 6, so HR@50 is 1 and NDCG@50 equals the untruncated NDCG.
    scores = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.5]])
    ranks = rank_of_target(scores, torch.tensor([0.0]))
    assert ranks.tolist() == [6]
    metric = RankingMetrics(["hr@50", "ndcg@50"])
    metric.update(ranks)
    assert metric.compute()["hr@50"].item() == 1.0
    assert metric.compute()["ndcg@50"].item() == pytest.approx(1 / math.log2(7))


def test_ties_count_for_the_target():
    scores = torch.tensor([[1.0, 1.0, 2.0, 0.5]])
    assert rank_of_target(scores, torch.tensor([1.0])).tolist() == [2]  # only 2.0 is strictly above


def test_accumulates_sums_not_means_of_means():
    a, b = RankingMetrics(["hr@1"]), RankingMetrics(["hr@1"])
    a.update(torch.tensor([1]))
    a.update(torch.tensor([2, 2, 2]))
    b.update(torch.tensor([1, 2, 2, 2]))
    assert a.compute()["hr@1"].item() == b.compute()["hr@1"].item() == 0.25


def test_bad_names_and_ranks():
    with pytest.raises(ValueError, match="unknown ranking metric"):
        parse_metric("precision@10")
    with pytest.raises(ValueError, match="1-based"):
        RankingMetrics(["hr@1"]).update(torch.tensor([0]))
    with pytest.raises(ValueError, match="empty"):
        RankingMetrics(["hr@1"]).compute()
