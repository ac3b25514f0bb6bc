"""DIN-style CTR samples: training windows cover every event once; samples are cached and drawn reproducibly."""

import numpy as np

from seqrec.data.ctr_samples import din_samples, target_windows, train_event_offsets
from seqrec.data.splits import leave_last_out
from tests.data.test_negatives import data


def test_target_windows_cover_every_event_once():
    start, stop = np.array([0, 10, 30, 31]), np.array([10, 30, 31, 33])
    begins, ends = target_windows(start, stop, max_len=4, step=4)
    assert ((ends - begins) <= 5).all() and ((ends - begins) >= 2).all()
    targets = np.concatenate([np.arange(b + 1, e) for b, e in zip(begins, ends)])
    expected = np.concatenate([np.arange(s + 1, e) for s, e in zip(start, stop)])
    assert sorted(targets.tolist()) == sorted(expected.tolist())  # each non-first event exactly once


def test_din_samples_are_cached_and_reproducible(tmp_path):
    seqs = data()
    first = din_samples(seqs, 2, 3, "popularity", seed=5, cache_dir=tmp_path, tag="t")
    [entry] = list(tmp_path.iterdir())
    again = din_samples(seqs, 2, 3, "popularity", seed=5, cache_dir=tmp_path, tag="t")
    fresh = din_samples(seqs, 2, 3, "popularity", seed=5, cache_dir=None, tag="t")
    for name in ("negatives_by_offset", "valid_negatives", "test_negatives"):
        assert np.array_equal(getattr(first, name), getattr(again, name))
        assert np.array_equal(getattr(first, name), getattr(fresh, name))
    assert first.negatives_by_offset.shape == (seqs.num_interactions, 2) and first.test_negatives.shape[1] == 3
    assert (entry / "manifest.json").is_file()


def test_train_event_offsets_skip_short_histories_and_keep_the_newest():
    split = leave_last_out(data())
    offsets = train_event_offsets(split, min_history=2, recent=3)
    users = np.searchsorted(split.sequences.indptr, offsets, side="right") - 1
    assert np.all(offsets - split.train_start[users] >= 2) and np.all(offsets < split.train_stop[users])
    assert np.bincount(users).max() <= 3
