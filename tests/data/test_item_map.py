"""``ItemMap``: the one raw-id <-> row map of the Python API, predict and serving (a dict lookup on the ids' text)."""

from __future__ import annotations

import tracemalloc

import numpy as np

from seqrec.data.item_map import LOOKUP_CHUNK, ItemMap
from seqrec.data.sequences import RawIdIndex


def test_rows_match_the_ids_text_and_unknown_ids_and_padding_are_0():
    ids = np.array(["", "m1", "m2", "7", "alice"])
    items = ItemMap(ids, lambda rows: ids[rows])
    assert items.size == 4
    assert items.rows(["m2", 7, "7", np.int64(7), "alice", "nope", ""]).tolist() == [2, 3, 3, 3, 4, 0, 0]
    assert items.rows(np.array(["alice", "m1"])).tolist() == [4, 1]
    assert items.rows(("m1", "m2")).tolist() == [1, 2] and items.rows(iter(["m2"])).tolist() == [2]  # any iterable
    assert items.rows([]).dtype == np.int64 and len(items.rows([])) == 0
    assert items.raw(np.array([4, 1])) == ["alice", "m1"]


def test_the_map_answers_as_the_sorted_index_it_replaced_across_lookup_slices():
    ids = np.array([""] + [f"i{n}" for n in range(1, 3 * LOOKUP_CHUNK)] + ["17"])
    items = ItemMap(ids, lambda rows: ids[rows])
    rng = np.random.default_rng(0)
    keys = [f"i{n}" for n in rng.integers(0, 4 * LOOKUP_CHUNK, size=2 * LOOKUP_CHUNK + 7)] + [17, "17", "x", "i0"]
    old = np.maximum(RawIdIndex(ids).lookup(np.array(keys, dtype=object)), 0)  # TrainedRun.item_rows before
    assert np.array_equal(items.rows(keys), old)
    assert (old == 0).any() and (old > 0).any()


def test_numbered_items_are_their_own_ids():
    items = ItemMap.numbered(5)
    assert items.rows([1, "5", 6, 0]).tolist() == [1, 5, 0, 0]
    assert items.raw(np.array([3, 1])) == [3, 1]


def test_a_long_key_costs_no_memory_in_the_catalogue_times_its_length():
    ids = np.array([""] + [f"item{i}" for i in range(1, 3001)])
    items = ItemMap(ids, lambda rows: ids[rows])
    tracemalloc.start()
    try:
        assert items.rows(["x" * 10_000, "item5"]).tolist() == [0, 5]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"a 10k-character key allocated {peak:,} bytes"
