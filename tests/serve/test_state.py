"""State adapters: fed event by event (through the blob format) they give what the model computes offline."""

from __future__ import annotations

import pytest
import torch

from seqrec.compress import build as compressed
from seqrec.models.base import CTRBackbone, RecurrentRecommender, SequenceRecommender
from seqrec.models.ctr.lru import CTRLRU
from seqrec.models.ctr.transformer import CTRTransformer
from seqrec.models.next_item.evornn import EvoRNN
from seqrec.models.next_item.fmlprec import FMLPRec
from seqrec.models.next_item.gru4rec import GRU4Rec
from seqrec.models.next_item.lru import LRURec
from seqrec.models.next_item.narm import NARM
from seqrec.models.next_item.sasrec import SASRec
from seqrec.serve.state import (
    ADAPTERS,
    AppendsKV,
    CompressedKVAdapter,
    CompressesKV,
    CTRRecomputeAdapter,
    CTRRecurrentAdapter,
    KVCacheAdapter,
    RecomputeAdapter,
    RecurrentAdapter,
    StepsCTRState,
    adapter_for,
    adapter_kind,
    left_padded,
    pack_tensors,
    unpack_tensors,
)

N = 40
HISTORY = [3, 17, 5, 9, 22, 31, 2, 8, 14, 27, 39, 1, 6]  # 13 events


def replay(adapter, history, batch_with=None):
    """Feed ``history`` event by event, round-tripping the state through its blob each time; the states after
    every event. ``batch_with``: another user's (state, history) advanced in the same batch at every step."""
    state, seen, states = adapter.empty(), [], []
    other_state, other_seen = (adapter.empty(), []) if batch_with is not None else (None, None)
    with torch.inference_mode():
        for n, item in enumerate(history):
            if batch_with is None:
                state = adapter.advance([state], [seen], torch.tensor([item]))[0]
            else:
                other_item = batch_with[n % len(batch_with)]
                state, other_state = adapter.advance([state, other_state], [seen, other_seen], torch.tensor([item, other_item]))
                other_seen.append(other_item)
            state = unpack_tensors(pack_tensors(state))
            seen.append(item)
            states.append((state, list(seen)))
    return states


def test_blobs_round_trip_every_dtype_and_refuse_garbage():
    tensors = (torch.randn(1, 3), torch.randn(1, 2, dtype=torch.complex64), torch.tensor([[True, False]]),
               torch.arange(4, dtype=torch.int32).view(1, 1, 4), torch.zeros(0), torch.tensor([7]))
    back = unpack_tensors(pack_tensors(tensors))
    assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(tensors, back))
    blob = pack_tensors(tensors)
    for bad in (blob[:-3], blob + b"x", b"\x09" + blob[1:]):
        with pytest.raises(ValueError):
            unpack_tensors(bad)


@pytest.mark.parametrize("make", [lambda: LRURec(N, d_model=16, num_layers=2),
                                  lambda: GRU4Rec(N, d_model=8, hidden_size=12, num_layers=2)])
def test_recurrent_state_equals_the_model_on_the_history(make):
    torch.manual_seed(0)
    model = make().eval()
    adapter = adapter_for(model, max_len=50)
    assert isinstance(adapter, RecurrentAdapter)
    for batch_with in (None, [4, 5, 6]):  # alone, and batched with another user
        for state, seen in replay(adapter, HISTORY, batch_with):
            with torch.inference_mode():
                offline = model.query_hidden(left_padded([seen], 50, torch.device("cpu")))
                served = adapter.query_hidden([state], [seen])
            torch.testing.assert_close(served, offline, atol=2e-5, rtol=1e-4)
    # several events at once (prefill) equal one at a time
    with torch.inference_mode():
        at_once = adapter.extend(adapter.empty(), [], HISTORY)
        more = adapter.extend(at_once, HISTORY, [11, 12])
    one_by_one = replay(adapter, [*HISTORY, 11, 12])
    for state, (expected, seen) in ((at_once, one_by_one[len(HISTORY) - 1]), (more, one_by_one[-1])):
        torch.testing.assert_close(adapter.query_hidden([state], [seen]), adapter.query_hidden([expected], [seen]),
                                   atol=2e-5, rtol=1e-4)


def test_lru_state_over_a_history_longer_than_max_len_is_the_model_on_the_whole_history():
    torch.manual_seed(0)
    model = LRURec(N, d_model=16).eval()
    adapter = adapter_for(model, max_len=5)  # the evaluation would read 5 events; the state reads all 13
    state, seen = replay(adapter, HISTORY)[-1]
    with torch.inference_mode():
        whole = model.query_hidden(torch.tensor([HISTORY]))
    torch.testing.assert_close(adapter.query_hidden([state], [seen]), whole, atol=2e-5, rtol=1e-4)
    assert adapter.exact_window == 5


@pytest.mark.parametrize("make", [lambda: SASRec(N, max_len=6, d_model=16, num_heads=2),
                                  lambda: EvoRNN(N, max_len=6, d_model=16),
                                  lambda: NARM(N, d_model=16),
                                  lambda: FMLPRec(N, max_len=6, d_model=16)])
def test_recompute_adapters_read_the_window_as_the_evaluation_does(make):
    torch.manual_seed(0)
    model = make().eval()
    adapter = adapter_for(model, max_len=6)
    assert isinstance(adapter, RecomputeAdapter) and adapter.empty() == ()
    for state, seen in replay(adapter, HISTORY):  # past max_len: the newest 6 events
        with torch.inference_mode():
            offline = model.query_hidden(left_padded([seen], 6, torch.device("cpu")))
        assert torch.equal(adapter.query_hidden([state], [seen]), offline)


def ctr_models():
    torch.manual_seed(0)
    backbone = CTRTransformer(N, max_len=8, d_model=16, num_layers=2, num_heads=2).eval()
    return backbone, [
        (backbone, KVCacheAdapter),
        (compressed("snapkv", backbone, 1.0), KVCacheAdapter),  # 100% budget: the cache grows token by token
        (compressed("streaming", backbone, 0.5), CompressedKVAdapter),
        (compressed("tome", backbone, 0.5), CompressedKVAdapter),
        (compressed("prune-target", backbone, 0.5), CTRRecomputeAdapter),
        (CTRLRU(N, d_model=16).eval(), CTRRecurrentAdapter),
    ]


@pytest.mark.parametrize("index", range(6))
def test_ctr_states_score_as_the_model_scores_the_window(index):
    _, models = ctr_models()
    model, kind = models[index]
    adapter = adapter_for(model, max_len=8)
    assert type(adapter) is kind
    targets = torch.arange(1, N + 1)
    history = HISTORY if kind is not CTRRecurrentAdapter else HISTORY[:8]  # CTRLRU's state reads every event
    for state, seen in replay(adapter, history):  # 13 events: the KV window slides after 8
        with torch.inference_mode():
            offline = model(left_padded([seen], min(len(seen), 8), torch.device("cpu")), targets.unsqueeze(0))[0]
            served = adapter.score(state, seen, targets)
        torch.testing.assert_close(served, offline, atol=1e-5, rtol=1e-4)


def test_kv_cache_holds_the_entries_the_compression_benchmark_counts():
    backbone, models = ctr_models()
    full = adapter_for(backbone, max_len=8)
    state, _ = replay(full, HISTORY[:6])[-1]
    keys = state[1::5]
    assert [k.shape[2] for k in keys] == [6, 6]  # 6 events: 6 entries per layer
    values_bytes = sum(t.numel() * t.element_size() for t in (*state[1::5], *state[2::5]))
    assert values_bytes == backbone.state_bytes_per_user(6)
    snap = compressed("snapkv", backbone, 0.5)
    small, _ = replay(adapter_for(snap, max_len=8), HISTORY[:6])[-1]
    kept = [int(m.sum(-1).max()) for m in small[3::5]]
    assert kept == snap.kept_lengths(6) == [3, 3]


# --- the adapter table: chosen from what a model declares ------------------------------------------------------
class _Table(SequenceRecommender):
    """A next-item model that is nothing but an item table (hidden = the newest item's row)."""

    def __init__(self) -> None:
        super().__init__()
        self.num_items = N
        self.table = torch.nn.Embedding(N + 1, 4)

    def forward(self, items):
        return self.table(items)

    def item_embeddings(self):
        return self.table.weight


class _SteppedTable(_Table):
    """The same model declaring ``RecurrentRecommender`` (its state: the newest item's row), with no base class for it."""

    def init_state(self, batch_size):
        return (torch.zeros(batch_size, 4),)

    def step(self, state, item):
        out = torch.where((item > 0).unsqueeze(1), self.table(item), state[0])
        return (out,), out

    def prefill(self, items):
        hidden = self.table(items)
        return (hidden[:, -1],), hidden


class _Ctr(CTRBackbone):
    """A CTR model declaring no stateful capability."""

    def prefill(self, history):
        return history

    def score_state(self, state, targets):
        return targets.float()

    def forward_windows(self, items, targets):
        return targets.float()

    def macs_per_request(self, L=None):
        return 0.0

    def state_bytes_per_user(self, L=None):
        return 0.0

    def kept_lengths(self, L=None):
        return []


def test_every_row_of_the_table_is_a_class_or_a_runtime_checkable_protocol():
    for kinds, factory in ADAPTERS:
        assert kinds and callable(factory)
        for kind in kinds:
            assert isinstance(kind, type)
            if getattr(kind, "_is_protocol", False):
                assert getattr(kind, "_is_runtime_protocol", False), kind
    assert ADAPTERS[-1][0] == (SequenceRecommender,)  # the fallback of next-item models: re-encode the window


def test_the_adapter_follows_the_declared_protocols_not_the_class():
    assert adapter_kind(_Table()) is not RecurrentAdapter
    assert type(adapter_for(_Table(), max_len=4)) is RecomputeAdapter
    assert isinstance(_SteppedTable(), RecurrentRecommender) and not isinstance(_Table(), RecurrentRecommender)
    adapter = adapter_for(_SteppedTable(), max_len=4)
    assert type(adapter) is RecurrentAdapter
    state, seen = replay(adapter, [3, 9])[-1]
    assert torch.equal(adapter.query_hidden([state], [seen]), adapter.net.table.weight[9].unsqueeze(0).detach())
    assert type(adapter_for(_Ctr(), max_len=4)) is CTRRecomputeAdapter
    backbone, _ = ctr_models()
    assert isinstance(backbone, AppendsKV) and not isinstance(backbone, StepsCTRState | CompressesKV)
    lru = CTRLRU(N, d_model=8)
    assert isinstance(lru, StepsCTRState) and not isinstance(lru, AppendsKV | CompressesKV)
    assert isinstance(compressed("snapkv", backbone, 0.5), CompressesKV)


def test_the_table_refuses_what_it_cannot_serve_in_one_line():
    with pytest.raises(TypeError, match=r"^cannot serve a Linear: neither a SequenceRecommender nor a CTRBackbone$"):
        adapter_for(torch.nn.Linear(2, 2), max_len=4)
    with pytest.raises(ValueError, match=r"^_Table is served by recomputing its window: give max_len$"):
        adapter_for(_Table(), max_len=None)
    with pytest.raises(TypeError, match="not a recurrent model"):
        RecurrentAdapter(_Table(), max_len=4)
