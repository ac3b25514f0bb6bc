import math

import pytest
import torch

from seqrec.metrics.ranking import RankingMetrics, parse_metric, rank_of_target
from seqrec.models.base import SequenceRecommender
from seqrec.tasks.next_item import full_catalogue_ranks


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


class FixedScores(SequenceRecommender):
    """A model whose score for item i is table[i] (1-d hidden of ones)."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.num_items = len(table) - 1
        self.table = table.view(-1, 1)

    def item_embeddings(self):
        return self.table


def test_full_ranking_masks_padding_history_and_is_chunk_invariant():
    table = torch.tensor([100.0, 5.0, 9.0, 1.0, 7.0, 8.0, 3.0])  # padding would be first if not masked
    model = FixedScores(table)
    hidden = torch.ones(2, 1)
    target = torch.tensor([4, 3])  # scores 7 and 1
    history = torch.tensor([[0, 2], [0, 0]])  # user 0 saw item 2 (score 9): masked
    expected_masked = [2, 6]  # user 0: only item 5 (8) above; user 1: 5 items above 1
    for chunk in (1, 2, 3, 100):
        ranks = full_catalogue_ranks(model, hidden, target, history, chunk)
        assert ranks.tolist() == expected_masked
    unmasked = full_catalogue_ranks(model, hidden, target, None, 3)
    assert unmasked.tolist() == [3, 6]  # item 2 (9) and item 5 (8) above 7; padding never counts
