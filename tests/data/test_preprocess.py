import numpy as np
import pytest

from seqrec.data.interactions import Interactions
from seqrec.data.preprocess import Preprocessing, kcore_mask, preprocess


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
