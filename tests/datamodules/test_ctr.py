"""DIN-style CTR samples: negatives never touched by the user, histories before the target, windows, caches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from seqrec.data.ctr_rows import CTRRows, clean_validation
from seqrec.data.ctr_samples import sample_unseen, user_of_offsets
from seqrec.data.preprocess import Preprocessing
from seqrec.data.sequences import Sequences
from seqrec.data.sources.movielens import MovieLens100K
from seqrec.data.sources.sasrec_text import SASRecText
from seqrec.datamodules.ctr import CTRDataModule


def tiny_sequences() -> Sequences:
    lengths = [5, 2, 7]
    items = np.array([1, 2, 3, 4, 5, 6, 7, 2, 4, 6, 8, 9, 1, 3], dtype=np.int64)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return Sequences(indptr, items, np.arange(len(items), dtype=np.float64), np.array(["a", "b", "c"]),
                     np.array([""] + [str(i) for i in range(1, 11)]))


def make(ml100k_root, **kwargs) -> CTRDataModule:
    data = CTRDataModule(MovieLens100K(root=str(ml100k_root)), Preprocessing(min_user_interactions=5), **kwargs)
    data.prepare_data()
    data.setup("fit")
    return data


def test_sample_unseen_excludes_whole_sequence_and_repeats():
    seq = tiny_sequences()
    rng = np.random.default_rng(0)
    users = np.repeat(np.arange(3), 200)
    out = sample_unseen(seq, users, 3, rng)
    for row, user in zip(out, users):
        assert not set(row) & set(seq.sequence(int(user)).tolist())
        assert len(set(row)) == 3 and row.min() >= 1 and row.max() <= 10
    with pytest.raises(ValueError, match="fewer than"):
        sample_unseen(seq, np.array([2]), 4, rng)  # user 2 touched 7 of 10 items


def test_negatives_never_in_user_history_and_samples_are_din_style(ml100k_root):
    data = make(ml100k_root, max_len=8, eval_negatives=3)
    seq = data.sequences
    users = user_of_offsets(seq)
    for name in ("train", "valid", "test"):
        ds = data.datasets[name]
        for i in range(len(ds)):
            sample = ds[i]
            user = int(sample["user"])
            whole = set(seq.sequence(user).tolist())
            negatives = sample["targets"][1:].tolist()
            assert not set(negatives) & whole, "a negative is an item of the user's sequence"
            assert sample["labels"].tolist() == [1.0] + [0.0] * len(negatives)
            offset = int(ds.offsets[i])
            assert int(users[offset]) == user and int(sample["targets"][0]) == int(seq.items[offset])
            before = seq.items[seq.indptr[user] : offset][-8:]
            history = sample["history"].numpy()
            assert (history[8 - len(before) :] == before).all() and (history[: 8 - len(before)] == 0).all()
    # leave-last-out positions: test = last event, valid = the one before, train strictly earlier, never position 0
    valid, test, train = data.datasets["valid"], data.datasets["test"], data.datasets["train"]
    assert (test.offsets == seq.indptr[test.users + 1] - 1).all()
    assert (valid.offsets == seq.indptr[valid.users + 1] - 2).all()
    assert (train.offsets < seq.indptr[users[train.offsets] + 1] - 2).all()
    assert (train.offsets > seq.indptr[users[train.offsets]]).all()
    assert len(test[0]["targets"]) == 4


def test_windows_match_samples(ml100k_root):
    samples = make(ml100k_root, max_len=6)
    windows = make(ml100k_root, max_len=6, train_mode="windows")
    seq = samples.sequences
    by_offset = {int(o): i for i, o in enumerate(samples.datasets["train"].offsets)}
    ds = windows.datasets["train"]
    checked = 0
    for w in range(len(ds)):
        item = ds[w]
        start = int(ds.span_start[w])
        n = int(ds.span_stop[w]) - start - 1
        for t in range(6 - n, 6):
            offset = start + 1 + (t - (6 - n))
            assert int(item["targets"][t, 0]) == int(seq.items[offset])
            assert bool(item["target_mask"][t])
            # the window's negatives are the frozen ones of that event, shared with samples mode
            if offset in by_offset:
                sample = samples.datasets["train"][by_offset[offset]]
                assert item["targets"][t, 1:].tolist() == sample["targets"][1:].tolist()
                checked += 1
        assert not item["target_mask"][: 6 - n].any()
    assert checked > 100


def test_negatives_cached_and_rebuilt_when_corrupt(ml100k_root, isolated_cache):
    first = make(ml100k_root, max_len=5)
    cache = list((isolated_cache / "ctr").glob("din-*"))
    assert len(cache) == 1
    again = make(ml100k_root, max_len=5)
    assert np.array_equal(first.datasets["test"].negatives, again.datasets["test"].negatives)
    (cache[0] / "test_negatives.npy").write_bytes(b"garbage")
    rebuilt = make(ml100k_root, max_len=5)
    assert np.array_equal(first.datasets["test"].negatives, rebuilt.datasets["test"].negatives)


def test_user_subset_and_recent_events(ml100k_root):
    data = make(ml100k_root, max_len=5, max_users=10, recent_train_events=3)
    assert len(np.unique(data.datasets["test"].users)) == 10
    assert set(data.datasets["train"].users) <= set(data.datasets["test"].users)
    counts = np.bincount(data.datasets["train"].users)
    assert counts.max() <= 3


def test_clean_validation_takes_each_users_time_tail():
    rows = CTRRows(
        user=np.array([0, 0, 0, 0, 1, 1, 2]), target=np.arange(1, 8), label=np.zeros(7, dtype=np.float32),
        hist_indptr=np.zeros(8, dtype=np.int64), hist_items=np.zeros(0, dtype=np.int64),
        time=np.array([3.0, 1.0, 4.0, 2.0, 5.0, 6.0, 7.0]),
    )
    held = clean_validation(rows, 0.5, "user_tail")
    assert held.tolist() == [True, False, True, False, False, True, False]
    assert clean_validation(rows, 0.3, "global_tail").tolist() == [False] * 4 + [True, True, True]


def test_batches_collate(ml100k_root):
    data = make(ml100k_root, max_len=7, batch_size=4, train_mode="windows")
    batch = next(iter(data.train_dataloader()))
    assert batch["items"].shape == (4, 7) and batch["targets"].shape == (4, 7, 2)
    batch = next(iter(data.test_dataloader()))
    assert batch["history"].dtype == torch.int64 and batch["targets"].shape[1] == 2


def test_real_ml1m_long_histories(shared_data):
    source = SASRecText(name="ml-1m", path=str(shared_data / "lrurec" / "ml-1m.txt.gz"))
    data = CTRDataModule(source, Preprocessing(sort_by="time"), max_len=200, eval_negatives=1)
    data.setup("fit")
    seq = data.sequences
    assert (seq.num_users, seq.num_items, seq.num_interactions) == (6040, 3416, 999_611)
    assert np.median(seq.lengths()) == 96
    test = data.datasets["test"]
    assert len(test) == 6040 and len(data.datasets["train"]) == 999_611 - 3 * 6040
    history = test[int(np.argmax(seq.lengths()))]["history"]
    assert (history > 0).all()  # the longest user fills all 200 slots


def test_target_windows_cover_every_event_once():
    from seqrec.data.ctr_samples import target_windows

    start, stop = np.array([0, 10, 30, 31]), np.array([10, 30, 31, 33])
    begins, ends = target_windows(start, stop, max_len=4, step=4)
    assert ((ends - begins) <= 5).all() and ((ends - begins) >= 2).all()
    targets = np.concatenate([np.arange(b + 1, e) for b, e in zip(begins, ends)])
    expected = np.concatenate([np.arange(s + 1, e) for s, e in zip(start, stop)])
    assert sorted(targets.tolist()) == sorted(expected.tolist())  # each non-first event exactly once
