"""The chunked catalogue scan: ranks with padding and history masked, chunk invariance, exact NLL."""

import math

import torch
import torch.nn.functional as F

from seqrec.models.base import SequenceRecommender
from seqrec.models.next_item.evornn import EvoRNN
from seqrec.tasks.catalogue import catalogue_scan


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
        ranks = catalogue_scan(model, hidden, target, history, chunk)[0]
        assert ranks.tolist() == expected_masked
    unmasked = catalogue_scan(model, hidden, target, None, 3)[0]
    assert unmasked.tolist() == [3, 6]  # item 2 (9) and item 5 (8) above 7; padding never counts


def test_chunked_statistics_equal_the_full_softmax():
    torch.manual_seed(0)
    model = EvoRNN(num_items=37, max_len=8, d_model=6, dropout=0.0)
    hidden = torch.randn(10, 6)
    target = torch.randint(1, 38, (10,))
    ranks, nll = catalogue_scan(model, hidden, target, None, chunk_size=5, with_nll=True)
    logits = model.score(hidden)
    logits[:, 0] = -math.inf
    torch.testing.assert_close(nll, F.cross_entropy(logits, target, reduction="none"))
    target_scores = logits.gather(1, target[:, None])
    assert ranks.tolist() == (1 + (logits > target_scores).sum(1)).tolist()
