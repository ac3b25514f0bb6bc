"""``RecommendationData``: the contract every datamodule declares (catalogue, window, batch sizes, optional capabilities)."""

from __future__ import annotations

import pytest
import torch

from seqrec.data.sources.movielens import MovieLens100K
from seqrec.datamodules.base import RecommendationData
from seqrec.datamodules.ctr import CTRDataModule, CTRRowsDataModule
from seqrec.datamodules.lm import LMDataModule
from seqrec.datamodules.next_item import NextItemDataModule


class TinyData(RecommendationData):
    """A catalogue of ``num_items`` items and nothing else (a test double for code that reads the contract)."""

    def __init__(self, num_items: int, max_len: int = 4, cloze: bool = False, tables: dict | None = None) -> None:
        super().__init__(max_len, batch_size=2, eval_batch_size=3, num_workers=0)
        self._num_items, self._cloze, self._tables = num_items, cloze, tables or {}

    @property
    def num_items(self) -> int:
        return self._num_items

    @property
    def cloze_inputs(self) -> bool:
        return self._cloze

    def item_feature_tables(self) -> dict:
        return self._tables


@pytest.mark.parametrize("cls", [NextItemDataModule, CTRDataModule, CTRRowsDataModule, LMDataModule])
def test_every_datamodule_declares_the_contract(cls):
    assert issubclass(cls, RecommendationData) and not cls.__abstractmethods__


def test_the_defaults_of_the_optional_capabilities():
    data = TinyData(7, max_len=5)
    assert (data.num_items, data.max_len, data.history_len, data.eval_batch_size) == (7, 5, 5, 3)
    assert data.cloze_inputs is False
    assert RecommendationData.item_feature_spec.fget(data) == [] and RecommendationData.item_feature_tables(data) == {}


def test_a_datamodule_without_a_catalogue_cannot_be_built_and_a_window_must_be_positive():
    class NoCatalogue(RecommendationData):
        pass

    with pytest.raises(TypeError, match="num_items"):
        NoCatalogue(5, 1, 1, 0)  # type: ignore[abstract]
    with pytest.raises(ValueError, match="max_len must be >= 1, got 0"):
        TinyData(3, max_len=0)


def test_next_item_cloze_data_declares_masked_inputs_and_a_query_one_event_shorter(tmp_path):
    source = MovieLens100K(root=str(tmp_path))  # nothing is read until the sequences are asked for
    windows = NextItemDataModule(source, max_len=6)
    cloze = NextItemDataModule(source, max_len=6, train_mode="cloze")
    assert (windows.cloze_inputs, windows.history_len) == (False, 6)
    assert (cloze.cloze_inputs, cloze.history_len) == (True, 5)  # the model appends its [mask]
    assert windows.item_feature_spec == [] and windows.item_feature_tables() == {}  # no features configured
    assert isinstance(TinyData(3, tables={"genre": torch.zeros(4, 2)}).item_feature_tables()["genre"], torch.Tensor)
