"""The global temporal split: nothing at or after the cut reaches training; queries see only their past."""

import dataclasses

import numpy as np
import pytest

from seqrec.data.examples import EvalQueries
from seqrec.data.sequences import Sequences
from seqrec.data.temporal import TemporalSplit, describe_split, temporal_split

DAY = 86400.0


def make(seqs: list[list[tuple[int, float]]]) -> Sequences:
    """Sequences from per-user lists of (item, time) already in time order."""
    lengths = [len(s) for s in seqs]
    items = np.array([i for s in seqs for i, _ in s], dtype=np.int64)
    return Sequences(
        indptr=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        items=items,
        times=np.array([t for s in seqs for _, t in s], dtype=np.float64),
        user_ids=np.array([str(u) for u in range(len(seqs))]),
        item_ids=np.array([""] + [str(i) for i in range(1, items.max() + 1)]),
    )


def random_sequences(seed: int = 0, users: int = 50, days: float = 30.0) -> Sequences:
    rng = np.random.default_rng(seed)
    seqs = []
    for _ in range(users):
        n = int(rng.integers(1, 40))
        times = np.sort(np.round(rng.uniform(0, days, n) * 4) / 4 * DAY)  # quarter-day grid: many ties
        seqs.append([(int(rng.integers(1, 60)), float(t)) for t in times])
    return make(seqs)


@pytest.mark.parametrize("train_days", [None, 10.0])
def test_training_spans_are_exactly_the_events_before_the_cut(train_days):
    seqs = random_sequences()
    split = temporal_split(seqs, test_days=3, valid_days=4, train_days=train_days)
    assert split.test_cut == seqs.times.max() - 3 * DAY and split.valid_cut == split.test_cut - 4 * DAY
    in_train = split.train_mask()
    lower = -np.inf if train_days is None else split.valid_cut - train_days * DAY
    expected = (seqs.times < split.valid_cut) & (seqs.times >= lower)
    np.testing.assert_array_equal(in_train, expected)  # nothing at/after the cut, nothing lost before it


def test_queries_fall_in_their_windows_and_see_only_strictly_earlier_events():
    seqs = random_sequences(seed=1)
    split = temporal_split(seqs, test_days=3, valid_days=4)
    users = np.repeat(np.arange(seqs.num_users), seqs.lengths())
    has_past = seqs.times > seqs.times[seqs.indptr[:-1]][users]  # some event of the user strictly earlier
    for examples, low, high in ((split.valid, split.valid_cut, split.test_cut), (split.test, split.test_cut, np.inf)):
        assert len(examples) > 0
        np.testing.assert_array_equal(examples.start, seqs.indptr[examples.user])
        for j in range(len(examples)):
            query_time = seqs.times[examples.stop[j]]  # the history stops at the first event of the query's time
            assert low <= query_time < high
            assert np.all(seqs.times[examples.start[j] : examples.stop[j]] < query_time)
        # every event of the window with some earlier event is a query (no cap), each once
        assert len(examples) == int(np.sum((seqs.times >= low) & (seqs.times < high) & has_past))


def test_history_includes_earlier_window_events_and_excludes_same_time_ties():
    # user 0: two training events, one validation event, then two test events at the same second and one later
    seqs = make([[(1, 0.0), (2, 1 * DAY), (3, 5.5 * DAY), (4, 8.5 * DAY), (5, 8.5 * DAY), (6, 9 * DAY)],
                 [(7, 0.0), (8, 0.5 * DAY), (9, 2 * DAY)]])
    split = temporal_split(seqs, test_days=1, valid_days=3)  # test >= 8 days, valid in [5, 8)
    assert split.train_stop.tolist() == [2, 9] and split.train_start.tolist() == [0, 6]
    assert split.valid.target.tolist() == [3]
    test = EvalQueries(seqs.items, split.test, max_len=5)
    got = [(int(q["target"]), [i for i in q["items"].tolist() if i]) for q in test]
    assert got == [(4, [1, 2, 3]), (5, [1, 2, 3]), (6, [1, 2, 3, 4, 5])]
    by_event = temporal_split(seqs, test_days=1, valid_days=3, history="before_event")
    assert [int(q["target"]) for q in EvalQueries(seqs.items, by_event.test, 5)] == [4, 5, 6]
    assert by_event.test.stop.tolist() == [3, 4, 5]  # item 5 now sees item 4 (same second, earlier in order)


def test_query_cap_keeps_the_first_events_after_the_cut():
    seqs = make([[(i, float(i) * DAY) for i in range(1, 11)]])
    split = temporal_split(seqs, test_days=3.5, valid_days=2, max_queries_per_user=2)
    assert split.test.target.tolist() == [7, 8]
    assert split.valid.target.tolist() == [5, 6]


def test_drop_unseen_targets_and_clear_errors():
    seqs = make([[(1, 0.0), (2, DAY), (3, 2 * DAY), (9, 9 * DAY)], [(1, 0.5 * DAY), (2, 9.5 * DAY)]])
    kept = temporal_split(seqs, test_days=1, valid_days=1)
    assert sorted(kept.test.target.tolist()) == [2, 9]
    dropped = temporal_split(seqs, test_days=1, valid_days=1, drop_unseen_targets=True)
    assert dropped.test.target.tolist() == [2]  # item 9 never occurs before the cut
    with pytest.raises(ValueError, match="no test query"):
        temporal_split(make([[(1, 0.0), (2, DAY)], [(3, 5 * DAY)]]), test_days=0.5, valid_days=1)
    with pytest.raises(ValueError, match="widen"):
        temporal_split(seqs, test_days=9, valid_days=1)
    unsorted = make([[(1, 2 * DAY), (2, DAY), (3, 3 * DAY)]])
    with pytest.raises(ValueError, match="out of time order"):
        temporal_split(unsorted, test_days=1, valid_days=0.5)


def test_default_options_give_a_valid_split_and_cannot_be_mutated():
    options = TemporalSplit()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.test_days = 5.0  # type: ignore[misc]  # frozen: a shared default cannot change under anyone
    seqs = random_sequences(seed=2)
    split = options.apply(seqs)
    assert (split.test_cut, split.valid_cut) == (seqs.times.max() - 2 * DAY, seqs.times.max() - 4 * DAY)
    np.testing.assert_array_equal(split.train_mask(), seqs.times < split.valid_cut)  # all of the past, nothing after
    assert len(split.test) > 0 and np.all(seqs.times[split.test.stop] >= split.test_cut)
    assert np.all(seqs.times[split.test.stop - 1] < seqs.times[split.test.stop])  # history strictly earlier
    assert options.key() == TemporalSplit().key() != TemporalSplit(test_days=3).key()
    assert "temporal split: train [-inf," in describe_split(split)
