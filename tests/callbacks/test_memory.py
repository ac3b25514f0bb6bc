"""Per-user state bytes by hand for every kind of model, peak RSS, and the memory callback's cost/* values."""

import lightning as L
import pytest
import torch
from torch import nn

from seqrec.callbacks.memory import MIB, MemoryCallback, peak_rss_bytes
from seqrec.cost.state import state_bytes_per_user
from seqrec.models.next_item.gru4rec import GRU4Rec
from seqrec.models.next_item.lru import LRURec
from seqrec.models.next_item.popularity import Popularity
from seqrec.models.next_item.sasrec import SASRec
from seqrec.tasks.next_item import NextItemTask


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


def test_peak_rss_is_at_least_the_current_rss():
    with open("/proc/self/status") as status:
        current = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS"))
    assert peak_rss_bytes() >= 0.95 * current > 10 * MIB  # the kernel updates its high-water mark lazily


def test_memory_callback_logs_cost_values_with_the_test(ml100k_root, tmp_path):
    from seqrec.data.sources.movielens import MovieLens100K
    from seqrec.datamodules.next_item import NextItemDataModule

    data = NextItemDataModule(MovieLens100K(root=str(ml100k_root)), max_len=10, eval_batch_size=7)
    task = NextItemTask(SASRec(num_items=data.num_items, max_len=10, d_model=8))
    callback = MemoryCallback()
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[callback], default_root_dir=tmp_path)
    [result] = trainer.test(task, datamodule=data, verbose=False)
    users = len(data.datasets["test"])
    per_user = 2 * 10 * 16 * 4
    assert result["cost/state_bytes_per_user"] == per_user
    assert result["cost/state_mib_all_users"] == pytest.approx(per_user * users / MIB)
    # peaks vary between runs: logged, but not among the (reproducible) returned test metrics
    assert callback.test_peaks["cost/peak_rss_mib"] >= 10 and "cost/peak_rss_mib" not in result
    assert ("cost/peak_accelerator_memory_mib" in callback.test_peaks) == torch.cuda.is_available()


def test_bad_state_dtype_is_a_clear_error():
    with pytest.raises(ValueError, match="torch dtype"):
        MemoryCallback(state_dtype="float31")
