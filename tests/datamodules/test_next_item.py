import logging

import numpy as np
import pytest

from seqrec.data.preprocess import Preprocessing, load_sequences
from seqrec.data.sources.movielens import MovieLens100K
from seqrec.datamodules.next_item import NextItemDataModule


def test_cache_is_reused_and_a_corrupt_entry_rebuilt(ml100k_root, isolated_cache, caplog):
    source = MovieLens100K(root=str(ml100k_root))
    options = Preprocessing(min_user_interactions=5, min_item_interactions=5)
    first = load_sequences(source, options, None)
    [entry] = (isolated_cache / "sequences").iterdir()
    # second call: served from the cache, the source is never parsed again
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MovieLens100K, "load", lambda self: pytest.fail("cache not used"))
        again = load_sequences(source, options, None)
    assert np.array_equal(first.items, again.items)
    # corrupt one array: detected, reported, rebuilt identically
    path = entry / "items.npy"
    path.write_bytes(path.read_bytes()[:-8])
    with caplog.at_level(logging.WARNING):
        rebuilt = load_sequences(MovieLens100K(root=str(ml100k_root)), options, None)
    assert "does not match its manifest" in caplog.text
    assert np.array_equal(first.items, rebuilt.items)
    # a different option set is a different cache entry
    load_sequences(source, Preprocessing(), None)
    assert len(list((isolated_cache / "sequences").iterdir())) == 2


def test_missing_raw_files_name_what_to_do(tmp_path):
    data = NextItemDataModule(source=MovieLens100K(root=str(tmp_path / "nowhere"), allow_fallback=False))
    with pytest.raises((FileNotFoundError, OSError)) as error:
        data.prepare_data()
    assert "u.data" in str(error.value) or "ml-100k" in str(error.value)


def test_sampled_candidates_are_frozen_and_exclude_history(ml100k_root):
    def build():
        data = NextItemDataModule(source=MovieLens100K(root=str(ml100k_root)), max_len=10, eval_negatives=5,
                                  negative_sampler="popularity")
        data.setup("fit")
        return data

    a, b = build(), build()
    test_a, test_b = a.datasets["test"], b.datasets["test"]
    assert np.array_equal(test_a.negatives, test_b.negatives)
    seqs = a.sequences
    for j, user in enumerate(test_a.examples.user):
        assert not set(test_a.negatives[j]) & set(seqs.sequence(user).tolist())
    assert not np.array_equal(a.datasets["valid"].negatives, test_a.negatives)
