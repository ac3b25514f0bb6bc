import logging

import numpy as np
import pytest

from seqrec.data.interactions import Interactions
from seqrec.data.preprocess import Preprocessing, kcore_mask, load_sequences, preprocess
from seqrec.data.sources.movielens import MovieLens100K


def table(rows, ratings=None):
    users, items, times = (np.array(col) for col in zip(*rows))
    return Interactions(users=users, items=items, times=times, ratings=None if ratings is None else np.array(ratings, dtype=np.float32))


def test_orders_by_time_then_item_and_remaps_from_one():
    inter = table([("u2", 30, 5), ("u1", 20, 2), ("u1", 10, 2), ("u1", 40, 1)])
    seqs = preprocess(inter, Preprocessing())
    assert list(seqs.user_ids) == ["u1", "u2"]
    assert list(seqs.item_ids) == ["", "10", "20", "30", "40"]
    # u1: time 1 -> item 40, time 2 -> items 10, 20 ordered by item id
    assert [seqs.item_ids[i] for i in seqs.sequence(0)] == ["40", "10", "20"]
    assert [seqs.item_ids[i] for i in seqs.sequence(1)] == ["30"]
    assert seqs.items.min() == 1


def test_stable_time_sort_keeps_source_order():
    inter = table([("u", 9, 0), ("u", 3, 0), ("u", 5, 0)])
    seqs = preprocess(inter, Preprocessing(sort_by="time"))
    assert [seqs.item_ids[i] for i in seqs.sequence(0)] == ["9", "3", "5"]


def test_rating_filter_and_consecutive_duplicates():
    inter = table([("u", 1, 1), ("u", 1, 2), ("u", 2, 3), ("u", 1, 4), ("u", 3, 5)], ratings=[5, 5, 1, 4, 4])
    seqs = preprocess(inter, Preprocessing(min_rating=4, dedupe_consecutive=True))
    # item 2 (rating 1) dropped; then 1,1,1,3 -> consecutive duplicates of 1 collapse to one
    assert [seqs.item_ids[i] for i in seqs.sequence(0)] == ["1", "3"]


def test_one_pass_versus_iterative_kcore():
    # item 9 has 1 event; once removed, user b drops below 2 events, which then leaves item 7 with 1 event.
    users = np.array([0, 0, 1, 1, 2, 2, 2])
    items = np.array([7, 8, 7, 9, 8, 8, 8])
    one = kcore_mask(users, items, min_user=2, min_item=2, mode="one_pass")
    assert one.tolist() == [True, True, False, False, True, True, True]
    full = kcore_mask(users, items, min_user=2, min_item=2, mode="iterative")
    assert full.tolist() == [False, False, False, False, True, True, True]


def test_empty_result_is_a_clear_error():
    inter = table([("u", 1, 1)])
    with pytest.raises(ValueError, match="no interactions survive"):
        preprocess(inter, Preprocessing(min_user_interactions=5))


def test_preprocessing_key_changes_with_options():
    assert Preprocessing().key() != Preprocessing(min_rating=4).key()
    assert Preprocessing().key() == Preprocessing().key()


def test_cache_is_reused_and_a_corrupt_entry_rebuilt(ml100k_root, isolated_cache, caplog):
    source = MovieLens100K(root=str(ml100k_root))
    options = Preprocessing(min_user_interactions=5, min_item_interactions=5)
    first = load_sequences(source, options, None)
    [entry] = (isolated_cache / "sequences").iterdir()
    # second call: served from the cache, the source is never parsed again
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MovieLens100K, "load", lambda self: pytest.fail("cache not used"))
        again = load_sequences(source, options, None)
    assert np.array_equal(first.items, again.items)
    # corrupt one array: detected, reported, rebuilt identically
    path = entry / "items.npy"
    path.write_bytes(path.read_bytes()[:-8])
    with caplog.at_level(logging.WARNING):
        rebuilt = load_sequences(MovieLens100K(root=str(ml100k_root)), options, None)
    assert "does not match its manifest" in caplog.text
    assert np.array_equal(first.items, rebuilt.items)
    # a different option set is a different cache entry
    load_sequences(source, Preprocessing(), None)
    assert len(list((isolated_cache / "sequences").iterdir())) == 2
