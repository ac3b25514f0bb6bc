"""CTR rows: re-packing histories when taking rows, and the clean (time-ordered tail) validation split."""

import numpy as np

from seqrec.data.ctr_rows import CTRRows, clean_validation


def test_clean_validation_takes_each_users_time_tail():
    rows = CTRRows(
        user=np.array([0, 0, 0, 0, 1, 1, 2]), target=np.arange(1, 8), label=np.zeros(7, dtype=np.float32),
        hist_indptr=np.zeros(8, dtype=np.int64), hist_items=np.zeros(0, dtype=np.int64),
        time=np.array([3.0, 1.0, 4.0, 2.0, 5.0, 6.0, 7.0]),
    )
    held = clean_validation(rows, 0.5, "user_tail")
    assert held.tolist() == [True, False, True, False, False, True, False]
    assert clean_validation(rows, 0.3, "global_tail").tolist() == [False] * 4 + [True, True, True]


def test_take_repacks_histories():
    rows = CTRRows(
        user=np.array([0, 1, 2]), target=np.array([4, 5, 6]), label=np.array([1, 0, 1], dtype=np.float32),
        hist_indptr=np.array([0, 2, 2, 5]), hist_items=np.array([1, 2, 3, 4, 5]), time=np.array([0.0, 1.0, 2.0]),
    )
    taken = rows.take(np.array([False, True, True]))
    assert taken.user.tolist() == [1, 2] and taken.hist_indptr.tolist() == [0, 0, 3]
    assert taken.hist_items.tolist() == [3, 4, 5]
    again = CTRRows.from_arrays(rows.arrays("x_"), "x_")
    assert np.array_equal(again.hist_items, rows.hist_items) and np.array_equal(again.label, rows.label)
