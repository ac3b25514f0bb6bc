import torch

from seqrec.models.next_item.popularity import Popularity
from seqrec.models.next_item.sasrec import SASRec


def model(**kw) -> SASRec:
    torch.manual_seed(0)
    m = SASRec(num_items=30, max_len=8, d_model=16, num_blocks=2, num_heads=2, dropout=0.0, **kw)
    return m.eval()


def test_shapes_and_tied_scores():
    m = model()
    items = torch.tensor([[0, 0, 3, 4, 5, 6, 7, 8]])
    hidden = m(items)
    assert hidden.shape == (1, 8, 16)
    scores = m.score(hidden)
    assert scores.shape == (1, 8, 31)
    assert torch.allclose(scores[0, -1, 5], hidden[0, -1] @ m.item_embedding.weight[5])
    assert torch.allclose(m.score(hidden[:, -1], torch.tensor([[5, 7]])), scores[:, -1, [5, 7]])


def test_causal_no_future_leaks_into_the_past():
    m = model()
    a = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7]])
    b = a.clone()
    b[0, -1] = 20  # change only the newest item
    ha, hb = m(a), m(b)
    assert torch.allclose(ha[0, :-1], hb[0, :-1], atol=1e-6)
    assert not torch.allclose(ha[0, -1], hb[0, -1])


def test_padding_is_never_attended():
    m = model()
    # same real items, right-aligned; what sits in padded slots' embeddings must not matter
    a = torch.tensor([[0, 0, 0, 0, 5, 6, 7, 8]])
    with torch.no_grad():
        before = m(a)[0, -1].clone()
        m.item_embedding.weight[0].normal_()
        after = m(a)[0, -1]
    assert torch.allclose(before, after, atol=1e-6)


def test_popularity_ranks_by_count_with_fixed_tie_break():
    p = Popularity(num_items=4)
    p.observe(torch.tensor([[0, 2, 2, 3], [0, 0, 3, 3]]))
    scores = p.score(p(torch.zeros(1, 1, dtype=torch.long))[:, -1])[0]
    assert scores.argsort(descending=True).tolist()[:3] == [3, 2, 4]
    assert scores[0] < 0  # padding never ranks
