"""The memory callback: peak RSS, and the cost/* values it logs with the test.

Per-user state bytes for every kind of model (seqrec.cost.state) are tested in tests/cost/test_state.py.
"""

import lightning as L
import pytest
import torch

from seqrec.callbacks.memory import MIB, MemoryCallback, peak_rss_bytes
from seqrec.models.next_item.sasrec import SASRec
from seqrec.tasks.next_item import NextItemTask


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


def test_the_state_is_measured_at_the_data_window_else_the_model_window():
    from types import SimpleNamespace

    from seqrec.models.ctr.transformer import CTRTransformer
    from seqrec.models.next_item.gru4rec import GRU4Rec
    from seqrec.tasks.ctr import CTRTask
    from tests.datamodules.test_base import TinyData

    task = NextItemTask(SASRec(num_items=9, max_len=10, d_model=8))
    callback = MemoryCallback()
    with_data = SimpleNamespace(datamodule=TinyData(9, max_len=6))  # what the callback reads of the trainer
    assert callback.measure_state(with_data, task).per_user == 2 * 6 * 16 * 4  # 2 blocks, K and V of width 8
    assert MemoryCallback(seq_len=3).measure_state(with_data, task).per_user == 2 * 3 * 16 * 4
    no_data = SimpleNamespace(datamodule=None)
    assert callback.measure_state(no_data, task).per_user == 2 * 10 * 16 * 4  # SASRec's own window, max_len 10
    ctr = CTRTask(CTRTransformer(9, max_len=5, d_model=8, num_heads=2, num_layers=1))
    assert callback.measure_state(no_data, ctr).per_user == callback.measure_state(
        SimpleNamespace(datamodule=TinyData(9, max_len=5)), ctr).per_user  # the transformer's own window, 5
    assert callback.measure_state(no_data, NextItemTask(GRU4Rec(num_items=9, d_model=8))) is None  # no window at all
    assert callback.measure_state(with_data, L.LightningModule()) is None  # not a RecommendationTask
