"""Negative sampling: never an item of the user, distinct, ∝ popularity, frozen and cached, bit-identical to before."""

import hashlib
import logging

import numpy as np
import pytest

from seqrec.data.negatives import frozen_negatives, item_distribution, sample_unseen
from seqrec.data.sequences import Sequences
from seqrec.data.splits import leave_last_out
from tests.data.test_splits import make


def data(num_users=30, num_items=60, seed=0):
    rng = np.random.default_rng(seed)
    return make([list(rng.permutation(num_items)[: rng.integers(3, 20)] + 1) for _ in range(num_users)])


def tiny_sequences() -> Sequences:
    lengths = [5, 2, 7]
    items = np.array([1, 2, 3, 4, 5, 6, 7, 2, 4, 6, 8, 9, 1, 3], dtype=np.int64)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return Sequences(indptr, items, np.arange(len(items), dtype=np.float64), np.array(["a", "b", "c"]),
                     np.array([""] + [str(i) for i in range(1, 11)]))


def per_user(seqs, examples, num, probabilities, seed):
    """The frozen evaluation candidates' draw (what ``frozen_negatives`` calls)."""
    return sample_unseen(seqs, examples.user, num, np.random.default_rng(seed), probabilities, order="per_user")


@pytest.mark.parametrize("order", ["per_user", "batched"])
def test_never_target_never_history_and_distinct(order):
    seqs = data()
    split = leave_last_out(seqs)
    rng = np.random.default_rng(1)
    negatives = sample_unseen(seqs, split.test.user, 20, rng, item_distribution(seqs, "uniform"), order=order)
    for j, user in enumerate(split.test.user):
        row = set(negatives[j].tolist())
        assert len(row) == 20
        assert not row & set(seqs.sequence(user).tolist())
        assert 0 not in row


def test_batched_uniform_excludes_whole_sequence_and_repeats():
    seq = tiny_sequences()
    rng = np.random.default_rng(0)
    users = np.repeat(np.arange(3), 200)
    out = sample_unseen(seq, users, 3, rng)
    for row, user in zip(out, users):
        assert not set(row) & set(seq.sequence(int(user)).tolist())
        assert len(set(row)) == 3 and row.min() >= 1 and row.max() <= 10
    with pytest.raises(ValueError, match="fewer than"):
        sample_unseen(seq, np.array([2]), 4, rng)  # user 2 touched 7 of 10 items


# Recorded before the two samplers were merged (sample_negatives → order="per_user", ctr_samples.sample_unseen →
# order="batched"): the same seed must keep giving the same arrays (cached candidates and reported metrics).
RECORDED = {
    ("per_user", "uniform"): ([[38, 54, 47, 14, 19], [19, 17, 16, 27, 31], [10, 37, 3, 28, 38]],
                              "9a78359d498efd3a36e18c02a56828abb93cb4c5da7cb8865308b04f1ce7a31b"),
    ("per_user", "popularity"): ([[38, 53, 46, 14, 1], [18, 16, 15, 25, 28], [37, 3, 29, 26, 55]],
                                 "9ee33286a0193bd985037fe5d29237993b8fd43287ea481f80528375bfe1fc02"),
    ("batched", "uniform"): ([[57, 38, 42, 54, 51], [47, 15, 14, 4, 19], [18, 53, 55, 29, 57]],
                             "36e29b2a1bfeebe0216fda692f077d30abf086654c5142cd87577a75cff1405a"),
    ("batched", "popularity"): ([[38, 53, 46, 14, 15], [52, 1, 49, 48, 26], [18, 16, 15, 25, 28]],
                                "93cfdedf44385425c270a42f20c384413bbdc48817b49273e0ee1ea55d4ca17d"),
}


@pytest.mark.parametrize(("order", "sampler"), list(RECORDED))
def test_same_seed_gives_the_recorded_arrays(order, sampler):
    seqs = data()
    users = leave_last_out(seqs).test.user
    assert users.tolist() == list(range(30))
    # the batched (CTR) caller passes None for uniform and draws with integers(); the per-user one always passes p
    probabilities = None if (order, sampler) == ("batched", "uniform") else item_distribution(seqs, sampler)
    out = sample_unseen(seqs, users, 5, np.random.default_rng(7), probabilities, order=order)
    first_rows, digest = RECORDED[order, sampler]
    assert out.dtype == np.int64 and out.shape == (30, 5)
    assert out[:3].tolist() == first_rows
    assert hashlib.sha256(out.tobytes()).hexdigest() == digest


def test_frozen_identical_across_runs_and_cached(tmp_path, caplog):
    seqs = data()
    split = leave_last_out(seqs)
    a = frozen_negatives(seqs, split.test, 10, "popularity", seed=3, cache_dir=tmp_path, tag="t")
    entries = list(tmp_path.glob("negatives-*"))
    assert len(entries) == 1 and (entries[0] / "manifest.json").is_file()
    b = frozen_negatives(seqs, split.test, 10, "popularity", seed=3, cache_dir=tmp_path, tag="t")
    c = frozen_negatives(seqs, split.test, 10, "popularity", seed=3, cache_dir=None, tag="t")
    assert np.array_equal(a, b) and np.array_equal(a, c)
    assert np.array_equal(a, per_user(seqs, split.test, 10, item_distribution(seqs, "popularity"), 3))
    d = frozen_negatives(seqs, split.test, 10, "popularity", seed=4, cache_dir=tmp_path, tag="t")
    assert not np.array_equal(a, d)
    # a corrupt entry is detected (CRC), reported and drawn again, identically
    path = entries[0] / "negatives.npy"
    path.write_bytes(path.read_bytes()[:-8] + b"\x00" * 8)
    with caplog.at_level(logging.WARNING):
        again = frozen_negatives(seqs, split.test, 10, "popularity", seed=3, cache_dir=tmp_path, tag="t")
    assert "does not match its manifest" in caplog.text
    assert np.array_equal(a, again)


def test_popularity_follows_counts():
    # one user who has seen nothing relevant; items 1..4 with counts 1:2:3:4 elsewhere
    seqs = make([[5, 6, 7]] + [[1]] * 1 + [[2]] * 2 + [[3]] * 3 + [[4]] * 4)
    split = leave_last_out(seqs)
    probs = item_distribution(seqs, "popularity", counts=np.array([0, 1, 2, 3, 4, 0, 0, 0]))
    draws = np.concatenate([per_user(seqs, split.test, 1, probs, seed=s)[0] for s in range(4000)])
    freq = np.bincount(draws, minlength=5)[1:5] / len(draws)
    assert np.allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=0.03)


@pytest.mark.parametrize("order", ["per_user", "batched"])
def test_too_few_items_is_a_clear_error(order):
    seqs = make([[1, 2, 3], [4]])
    split = leave_last_out(seqs)
    with pytest.raises(ValueError, match="user row 0 has only 1 samplable items.*lower the number of negatives"):
        sample_unseen(seqs, split.test.user, 5, np.random.default_rng(0), item_distribution(seqs, "uniform"), order)
    with pytest.raises(ValueError, match="num_items \\+ 1 = 5 entries, got 3"):
        sample_unseen(seqs, split.test.user, 1, np.random.default_rng(0), np.ones(3) / 3, order)
