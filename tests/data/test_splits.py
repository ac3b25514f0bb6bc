"""Leave-last-out: a target never reaches its own input; validation and test items never reach training."""

import numpy as np
import pytest

from seqrec.data.examples import EvalQueries, TrainExamples, training_spans
from seqrec.data.sequences import Sequences
from seqrec.data.splits import leave_last_out


def make(seqs: list[list[int]]) -> Sequences:
    lengths = [len(s) for s in seqs]
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    n = max(max(s) for s in seqs)
    return Sequences(
        indptr=indptr,
        items=np.concatenate([np.array(s) for s in seqs]),
        times=np.arange(indptr[-1], dtype=np.float64),
        user_ids=np.array([str(i) for i in range(len(seqs))]),
        item_ids=np.array([""] + [str(i) for i in range(1, n + 1)]),
    )


def test_leave_last_out_targets_never_in_their_input():
    rng = np.random.default_rng(0)
    seqs = make([list(rng.permutation(50)[: rng.integers(1, 30)] + 1) for _ in range(40)])
    split = leave_last_out(seqs)
    for examples in (split.valid, split.test):
        queries = EvalQueries(seqs.items, examples, max_len=10)
        for j in range(len(examples)):
            q = queries[j]
            # the target's offset is stop: the input ends right before it (items are distinct per user)
            assert int(q["target"]) not in q["items"].tolist()
            assert examples.stop[j] < seqs.indptr[examples.user[j] + 1]
            assert seqs.items[examples.stop[j]] == examples.target[j]
    # short users (< 3 events) are trained on but never evaluated
    short = np.flatnonzero(seqs.lengths() < 3)
    assert not set(short) & set(split.valid.user)


def test_test_input_contains_validation_item_and_train_excludes_both():
    seqs = make([[1, 2, 3, 4, 5, 6]])
    split = leave_last_out(seqs)
    test = EvalQueries(seqs.items, split.test, max_len=4)[0]
    valid = EvalQueries(seqs.items, split.valid, max_len=4)[0]
    assert valid["items"].tolist() == [1, 2, 3, 4] and int(valid["target"]) == 5
    assert test["items"].tolist() == [2, 3, 4, 5] and int(test["target"]) == 6
    start, stop = training_spans(split, max_len=10, mode="windows", window_step=10)
    train = TrainExamples(seqs.items, start, stop, 10, "windows")
    seen = {int(v) for ex in train for key in ("items", "labels") for v in ex[key] if v}
    assert seen == {1, 2, 3, 4}  # neither the validation (5) nor the test (6) item reaches training


def test_no_user_long_enough_is_a_clear_error():
    with pytest.raises(ValueError, match="validation and test would be empty"):
        leave_last_out(make([[1, 2], [3]]))
