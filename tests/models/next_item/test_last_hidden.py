"""Evaluation shortcuts are exact: ``last_hidden`` equals ``forward(...)[:, -1]`` and left-padding-invariant
models give the same newest hidden state with leading padding columns dropped."""

import pytest
import torch

from seqrec.models.base import SequenceRecommender
from seqrec.models.next_item.evornn import EvoRNN
from seqrec.models.next_item.fmlprec import FMLPRec
from seqrec.models.next_item.gru4rec import GRU4Rec
from seqrec.models.next_item.lru import LRURec
from seqrec.models.next_item.lrurec_sasrec import LRURecSASRec
from seqrec.models.next_item.narm import NARM
from seqrec.models.next_item.sasrec import SASRec

N, L = 40, 12


def models() -> dict[str, SequenceRecommender]:
    torch.manual_seed(0)
    return {
        "lru": LRURec(N, d_model=16, num_layers=2, scan="sequential"),
        "lru-parallel": LRURec(N, d_model=16, num_layers=2, scan="parallel"),
        "sasrec": SASRec(N, max_len=L, d_model=16, num_blocks=2, num_heads=2),
        "lrurec-sasrec": LRURecSASRec(N, max_len=L, d_model=16, num_blocks=2, num_heads=2),
        "lrurec-sasrec-official": LRURecSASRec(N, max_len=L, d_model=16, num_blocks=2, num_heads=2, padding="official"),
        "gru4rec": GRU4Rec(N, d_model=16),
        "evornn": EvoRNN(N, max_len=L, d_model=16),
        "narm": NARM(N, d_model=16),
        "fmlprec": FMLPRec(N, max_len=L, d_model=16),
    }


def batch() -> torch.Tensor:
    torch.manual_seed(1)
    items = torch.randint(1, N + 1, (5, L))
    for row, pad in enumerate([0, 3, 7, 11, 5]):
        items[row, :pad] = 0
    return items


@pytest.mark.parametrize("name", list(models()))
def test_last_hidden_equals_the_last_position_of_forward(name):
    model = models()[name].eval()
    items = batch()
    with torch.no_grad():
        torch.testing.assert_close(model.last_hidden(items), model(items)[:, -1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", [n for n, m in models().items() if m.left_padding_invariant])
def test_dropping_common_leading_padding_changes_nothing(name):
    model = models()[name].eval()
    items = batch()[2:4]  # both rows start with at least 7 padding columns
    with torch.no_grad():
        full = model(items)
        trimmed = model(items[:, 7:])
    real = items[:, 7:] != 0  # the contract: no real position changes (a padded one may: LRURecSASRec's official padding)
    torch.testing.assert_close(trimmed[real], full[:, 7:][real], rtol=1e-5, atol=1e-5)


def test_invariance_is_declared_by_lru_the_sasrecs_and_narm_only():
    flags = {name: m.left_padding_invariant for name, m in models().items()}
    assert flags == {"lru": True, "lru-parallel": True, "sasrec": True, "lrurec-sasrec": True,
                     "lrurec-sasrec-official": True, "gru4rec": False, "evornn": False, "narm": True, "fmlprec": False}


@pytest.mark.parametrize("name", list(models()))
def test_query_hidden_in_slices_equals_the_whole_batch(name, monkeypatch):
    """Out of training, ``query_hidden`` runs the rows in slices of QUERY_CHUNK_TOKENS tokens (each trimmed of its
    own leading padding): the same states as ``last_hidden`` of the whole batch."""
    import seqrec.models.base as base

    model = models()[name].eval()
    items = batch()
    with torch.no_grad():
        whole = model.last_hidden(items)
        monkeypatch.setattr(base, "QUERY_CHUNK_TOKENS", 2 * L)  # slices of 2 rows: (2, 2, 1)
        calls = []
        monkeypatch.setattr(model, "last_hidden", lambda x, f=model.last_hidden: calls.append(x.shape) or f(x))
        sliced = model.query_hidden(items)
    assert [shape[0] for shape in calls] == [2, 2, 1]
    if model.left_padding_invariant:  # rows 2-3 share 7 leading padding columns, row 4 has 5
        assert [shape[1] for shape in calls] == [L, L - 7, L - 5]
    torch.testing.assert_close(sliced, whole, rtol=1e-5, atol=1e-5)


def test_query_hidden_in_training_keeps_the_batch_whole(monkeypatch):
    """In training the batch is not sliced, so dropout draws the same masks as ``last_hidden`` of the batch."""
    import seqrec.models.base as base

    model = LRURec(N, d_model=16, num_layers=2, dropout=0.3, scan="sequential").train()
    items = batch()
    monkeypatch.setattr(base, "QUERY_CHUNK_TOKENS", 2 * L)
    torch.manual_seed(5)
    queried = model.query_hidden(items)
    torch.manual_seed(5)
    assert torch.equal(queried, model.last_hidden(items))
