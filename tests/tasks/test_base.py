"""What every task shares (binding the data: catalogue, cloze inputs, item features) and what a task declares
(``RanksTargets``, ``ProbesMACs``): asked with isinstance by the MACs callback and the Python API."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from seqrec.models.ctr.transformer import CTRTransformer
from seqrec.models.next_item.bert4rec import BERT4Rec
from seqrec.models.next_item.evornn import EvoRNN
from seqrec.models.next_item.sasrec import SASRec
from seqrec.tasks.base import ProbesMACs, RanksTargets
from seqrec.tasks.ctr import CTRTask
from seqrec.tasks.lm import LanguageModelTask
from seqrec.tasks.next_item import NextItemTask
from tests.datamodules.test_base import TinyData


def test_tasks_declare_what_they_can_do():
    next_item = NextItemTask(SASRec(num_items=9, max_len=4, d_model=8), mask_history=False, score_chunk_size=7)
    assert isinstance(next_item, RanksTargets) and isinstance(next_item, ProbesMACs)
    assert (next_item.mask_history, next_item.score_chunk_size) == (False, 7)
    lm = LanguageModelTask(EvoRNN(num_items=9, max_len=6, d_model=4), num_targets=2)
    assert isinstance(lm, RanksTargets) and isinstance(lm, ProbesMACs)
    ctr = CTRTask(CTRTransformer(9, max_len=4, d_model=8, num_heads=2))
    assert isinstance(ctr, ProbesMACs) and not isinstance(ctr, RanksTargets)  # no catalogue ranking
    assert not isinstance(L.LightningModule(), ProbesMACs)


def test_binding_checks_the_catalogue():
    task = NextItemTask(SASRec(num_items=30, max_len=6, d_model=8))
    task.bind_data(TinyData(30))
    with pytest.raises(ValueError, match="the data has 31 items but the model was built for 30"):
        task.bind_data(TinyData(31))


def test_a_cloze_model_needs_cloze_data_and_cloze_data_a_cloze_model():
    bert = NextItemTask(BERT4Rec(num_items=30, max_len=6, d_model=8))
    with pytest.raises(ValueError, match="set data.init_args.train_mode: cloze"):
        bert.bind_data(TinyData(30, cloze=False))
    bert.bind_data(TinyData(30, cloze=True))
    sasrec = NextItemTask(SASRec(num_items=30, max_len=6, d_model=8))
    with pytest.raises(ValueError, match="does not have"):
        sasrec.bind_data(TinyData(30, cloze=True))


def test_a_feature_model_gets_the_data_tables_once():
    class FeatureSASRec(SASRec):
        def set_item_features(self, tables: dict) -> None:
            self.tables = tables

    model = FeatureSASRec(num_items=3, max_len=4, d_model=8)
    tables = {"genre": torch.arange(4).view(4, 1)}
    NextItemTask(model).bind_data(TinyData(3, tables=tables))
    assert model.tables is tables
