"""The interactions table: equal-length columns, row selection, file-order times, unset source options."""

from __future__ import annotations

import numpy as np
import pytest

from seqrec.data.interactions import Interactions, optional, positions_within_user


def test_times_of_a_source_without_timestamps_are_positions_within_each_user_when_users_are_not_contiguous():
    np.testing.assert_array_equal(positions_within_user(np.array([5, 7, 5, 7, 7, 1])), [0, 0, 1, 1, 2, 0])
    np.testing.assert_array_equal(positions_within_user(np.array(["b", "a", "b"])), [0, 0, 1])
    assert positions_within_user(np.zeros(0, dtype=np.int64)).shape == (0,)


def test_columns_of_unequal_length_are_refused_and_take_keeps_them_parallel():
    with pytest.raises(ValueError, match="equal lengths"):
        Interactions(users=np.array([1, 2]), items=np.array([3]), times=np.array([0, 1]))
    table = Interactions(users=np.array([1, 2, 3]), items=np.array([4, 5, 6]), times=np.array([7, 8, 9]),
                         ratings=np.array([1.0, 2.0, 3.0], dtype=np.float32))
    picked = table.take(np.array([True, False, True]))
    assert list(picked.users) == [1, 3] and list(picked.items) == [4, 6] and list(picked.ratings) == [1.0, 3.0]


@pytest.mark.parametrize("unset", [None, "", " ", "None", "null", "~"])
def test_an_unset_optional_source_option_is_none_whatever_the_cli_made_of_null(unset):
    assert optional(unset) is None
    assert optional("timestamp") == "timestamp"
