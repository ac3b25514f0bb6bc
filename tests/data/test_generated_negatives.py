"""XLong's evaluation candidates: generated per query from (seed, query), never stored, equal everywhere."""

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from seqrec.data.examples import EvalQueries
from seqrec.data.negatives import GeneratedNegatives
from seqrec.data.splits import EvalExamples
from seqrec.datamodules.loaders import FlaggedPadding


def test_a_row_depends_only_on_seed_and_query():
    a = GeneratedNegatives(1000, 50, 300, seed=42)
    b = GeneratedNegatives(1000, 50, 300, seed=42)
    assert a.shape == (1000, 50) and len(a) == 1000
    rows = [a[q] for q in (999, 3, 500, 3)]  # any order, repeated reads
    assert np.array_equal(rows[1], rows[3]) and np.array_equal(rows[0], b[999]) and np.array_equal(rows[2], b[500])
    assert rows[0].dtype == np.int64 and rows[0].shape == (50,)
    assert not np.array_equal(a[0], a[1])
    assert not np.array_equal(a[0], GeneratedNegatives(1000, 50, 300, seed=43)[0])
    np.testing.assert_array_equal(a.rows(np.array([5, 7])), np.stack([a[5], a[7]]))
    # frozen values: a change of generator or seeding scheme would silently change every XLong figure
    np.testing.assert_array_equal(GeneratedNegatives(10, 5, 1000, seed=42)[7], np.random.default_rng([42, 7]).integers(1, 1001, 5))


def test_uniform_over_the_catalogue_with_replacement():
    rows = GeneratedNegatives(200, 500, 40, seed=0).rows(np.arange(200))
    assert rows.min() == 1 and rows.max() == 40  # never the padding id, every item reachable
    counts = np.bincount(rows.ravel(), minlength=41)[1:]
    assert counts.std() / counts.mean() < 0.05  # 100,000 draws over 40 items
    assert any(len(np.unique(r)) < len(r) for r in rows)  # with replacement


def test_errors():
    with pytest.raises(ValueError, match="num >= 1"):
        GeneratedNegatives(3, 0, 10, seed=0)
    with pytest.raises(ValueError, match="seed"):
        GeneratedNegatives(3, 2, 10, seed=-1)
    with pytest.raises(IndexError):
        GeneratedNegatives(3, 2, 10, seed=0)[3]


def test_every_rank_of_a_sharded_evaluation_sees_the_single_process_candidates():
    Q, L = 11, 4
    items = np.arange(1, 61, dtype=np.int64)
    examples = EvalExamples(user=np.arange(Q), start=np.arange(Q) * 5, stop=np.arange(Q) * 5 + 4,
                            target=np.arange(Q) * 5 + 4)
    negatives = GeneratedNegatives(Q, 7, 60, seed=5)
    dataset = EvalQueries(items, examples, L, negatives, longest_first=True)
    single = {int(b["index"][i]): b["candidates"][i] for b in DataLoader(dataset, batch_size=3)
              for i in range(len(b["index"]))}
    assert len(single) == Q
    for world in (2, 3):
        padded = FlaggedPadding(dataset, world)
        seen = {}
        for rank in range(world):
            loader = DataLoader(padded, batch_size=2, sampler=DistributedSampler(padded, world, rank, shuffle=False))
            for batch in loader:
                for i in range(len(batch["index"])):
                    seen.setdefault(int(batch["index"][i]), []).append(batch["candidates"][i])
        assert set(seen) == set(single)
        for index, rows in seen.items():
            for row in rows:
                assert torch.equal(row, single[index])
                assert torch.equal(row, torch.from_numpy(GeneratedNegatives(Q, 7, 60, seed=5)[index]))
