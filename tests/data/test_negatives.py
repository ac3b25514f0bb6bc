import numpy as np
import pytest

from seqrec.data.negatives import frozen_negatives, item_distribution, sample_negatives
from seqrec.data.splits import leave_last_out
from tests.data.test_splits import make


def data(num_users=30, num_items=60, seed=0):
    rng = np.random.default_rng(seed)
    return make([list(rng.permutation(num_items)[: rng.integers(3, 20)] + 1) for _ in range(num_users)])


def test_never_target_never_history_and_distinct():
    seqs = data()
    split = leave_last_out(seqs)
    negatives = sample_negatives(seqs, split.test, 20, item_distribution(seqs, "uniform"), seed=1)
    for j, user in enumerate(split.test.user):
        row = set(negatives[j].tolist())
        assert len(row) == 20
        assert not row & set(seqs.sequence(user).tolist())
        assert 0 not in row


def test_frozen_identical_across_runs_and_cached(tmp_path):
    seqs = data()
    split = leave_last_out(seqs)
    a = frozen_negatives(seqs, split.test, 10, "popularity", seed=3, cache_dir=tmp_path, tag="t")
    files = list(tmp_path.glob("negatives-*.npy"))
    assert len(files) == 1
    b = frozen_negatives(seqs, split.test, 10, "popularity", seed=3, cache_dir=tmp_path, tag="t")
    c = frozen_negatives(seqs, split.test, 10, "popularity", seed=3, cache_dir=None, tag="t")
    assert np.array_equal(a, b) and np.array_equal(a, c)
    d = frozen_negatives(seqs, split.test, 10, "popularity", seed=4, cache_dir=tmp_path, tag="t")
    assert not np.array_equal(a, d)


def test_popularity_follows_counts():
    # one user who has seen nothing relevant; items 1..4 with counts 1:2:3:4 elsewhere
    seqs = make([[5, 6, 7]] + [[1]] * 1 + [[2]] * 2 + [[3]] * 3 + [[4]] * 4)
    split = leave_last_out(seqs)
    probs = item_distribution(seqs, "popularity", counts=np.array([0, 1, 2, 3, 4, 0, 0, 0]))
    draws = np.concatenate([sample_negatives(seqs, split.test, 1, probs, seed=s)[0] for s in range(4000)])
    freq = np.bincount(draws, minlength=5)[1:5] / len(draws)
    assert np.allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=0.03)


def test_too_few_items_is_a_clear_error():
    seqs = make([[1, 2, 3], [4]])
    split = leave_last_out(seqs)
    with pytest.raises(ValueError, match="lower eval_negatives"):
        sample_negatives(seqs, split.test, 5, item_distribution(seqs, "uniform"), seed=0)
