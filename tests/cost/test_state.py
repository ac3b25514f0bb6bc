"""Per-user state bytes (seqrec.cost.state) by hand for every kind of model: declared, KV cache, recurrent, none."""

import pytest
import torch
from torch import nn

from seqrec.compress import build
from seqrec.cost.state import state_bytes_per_user
from seqrec.models.ctr.lru import CTRLRU
from seqrec.models.ctr.transformer import CTRTransformer
from seqrec.models.next_item.gru4rec import GRU4Rec
from seqrec.models.next_item.lru import LRURec
from seqrec.models.next_item.popularity import Popularity
from seqrec.models.next_item.sasrec import SASRec


def test_attention_model_keeps_a_kv_cache():
    model = SASRec(num_items=20, max_len=50, d_model=16, num_blocks=3)
    state = state_bytes_per_user(model, seq_len=50)
    assert state.per_user == 3 * 50 * (16 + 16) * 4  # layers · tokens · (K + V) · float32
    assert state.source == "kv_cache"
    assert state_bytes_per_user(model, 50, torch.bfloat16).per_user == state.per_user // 2


def test_lru_declares_its_recurrent_state():
    model = LRURec(num_items=20, d_model=16, num_layers=2)  # H = 2d complex64 states per layer
    state = state_bytes_per_user(model, seq_len=200)
    assert state.per_user == 2 * 32 * 8 and state.source == "declared"
    assert state_bytes_per_user(model, seq_len=10).per_user == state.per_user  # O(1) in the history length


def test_recurrent_layers_are_recognised():
    gru = GRU4Rec(num_items=20, d_model=8, hidden_size=12, num_layers=2)
    assert state_bytes_per_user(gru, seq_len=50).per_user == 2 * 12 * 4
    lstm = nn.LSTM(8, 6, num_layers=2, bidirectional=True)
    assert state_bytes_per_user(lstm, seq_len=50).per_user == 2 * (2 * 2 * 6) * 4  # hidden + cell


def test_multihead_attention_and_a_model_without_state():
    mha = nn.MultiheadAttention(8, 2, kdim=6, vdim=4)
    assert state_bytes_per_user(mha, seq_len=10).per_user == 10 * (6 + 4) * 4
    state = state_bytes_per_user(Popularity(num_items=5), seq_len=10)
    assert state.per_user == 0 and state.source == "none"


class Pruned(nn.Module):
    """A compression wrapper reporting the tokens each attention layer keeps."""

    def __init__(self, model, kept):
        super().__init__()
        self.model, self.kept = model, kept

    def kept_lengths(self):
        return self.kept


def test_compression_wrapper_kept_lengths_shrink_the_cache():
    model = SASRec(num_items=20, max_len=50, d_model=16, num_blocks=2)
    assert state_bytes_per_user(Pruned(model, [50, 12]), seq_len=50).per_user == (50 + 12) * 32 * 4
    with pytest.raises(ValueError, match="one kept-token count per attention layer"):
        state_bytes_per_user(Pruned(model, [50]), seq_len=50)


def test_ctr_backbones_and_wrappers_declare_their_state():
    """CTR backbones and compression wrappers are ``DeclaresStateBytes``: their own formula, not the layer scan."""
    transformer = CTRTransformer(num_items=20, max_len=50, d_model=16, num_layers=2, num_heads=2)
    state = state_bytes_per_user(transformer, seq_len=30)
    assert state.source == "declared" and state.per_user == 2 * 30 * (16 + 16) * 4  # layers · L · (K + V) · float32
    half = state_bytes_per_user(build("snapkv", transformer, 0.5), seq_len=30)
    assert half.source == "declared" and half.per_user == state.per_user // 2
    recurrent = state_bytes_per_user(CTRLRU(num_items=20, d_model=16, num_layers=2), seq_len=30)
    assert recurrent.per_user == 2 * 32 * 8 + 16 * 4  # complex64 states and the newest output u
