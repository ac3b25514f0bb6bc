"""Training examples: LRURec windows counted from the end, prefixes labelled at their last position."""

import numpy as np

from seqrec.data.examples import TrainExamples, lrurec_windows, prefixes


def test_windows_follow_lrurec():
    # length 5 < max_len + step: one span; labels = span[-L:], tokens = span[:-1][-L:]
    start, stop = lrurec_windows(np.array([0]), np.array([5]), max_len=3, step=3)
    assert (start.tolist(), stop.tolist()) == ([0], [5])
    ex = TrainExamples(np.arange(1, 6), start, stop, 3, "windows")[0]
    assert ex["items"].tolist() == [2, 3, 4] and ex["labels"].tolist() == [3, 4, 5]
    # length 7 >= 6: windows of 3 counted from the end, [4,7), [1,4); the leftover head is dropped
    start, stop = lrurec_windows(np.array([0]), np.array([7]), max_len=3, step=3)
    assert list(zip(start.tolist(), stop.tolist())) == [(4, 7), (1, 4)]
    ex = TrainExamples(np.arange(1, 8), start, stop, 3, "windows")[0]
    assert ex["items"].tolist() == [0, 5, 6] and ex["labels"].tolist() == [5, 6, 7]
    ex = TrainExamples(np.arange(1, 8), start, stop, 3, "windows", label_first=False)[0]
    assert ex["labels"].tolist() == [0, 6, 7]


def test_prefixes_label_only_the_last_position():
    start, stop = prefixes(np.array([0, 4]), np.array([4, 5]))
    assert list(zip(start.tolist(), stop.tolist())) == [(0, 2), (0, 3), (0, 4)]
    ex = TrainExamples(np.array([1, 2, 3, 4, 9]), start, stop, 3, "prefix")[2]
    assert ex["items"].tolist() == [1, 2, 3] and ex["labels"].tolist() == [0, 0, 4]
