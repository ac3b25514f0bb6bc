"""CTR datamodules: DIN-style samples from a next-item source (negatives never touched by the user, histories
before the target, windows, caches) and rows of a CTR row source (clean vs bars_compatible validation)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from seqrec.data.preprocess import Preprocessing
from seqrec.data.sequences import user_of_offsets
from seqrec.data.sources.bars import BARS
from seqrec.data.sources.movielens import MovieLens100K
from seqrec.data.sources.sasrec_text import SASRecText
from seqrec.datamodules.ctr import CTRDataModule, CTRRowsDataModule
from tests.data.sources.test_bars import MICRO_TEST, MICRO_TRAIN, write


def make(ml100k_root, **kwargs) -> CTRDataModule:
    data = CTRDataModule(MovieLens100K(root=str(ml100k_root)), Preprocessing(min_user_interactions=5), **kwargs)
    data.prepare_data()
    data.setup("fit")
    return data


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


# --- CTR rows (BARS) --------------------------------------------------------------------------------


def test_microvideo_clean_and_bars_compatible_modes(tmp_path):
    files = write(tmp_path / "mv", train=MICRO_TRAIN, test=MICRO_TEST)
    clean = CTRRowsDataModule(BARS("MicroVideo1.7M_x1", files=files), max_len=3, valid_fraction=0.3)
    clean.setup("fit")
    valid = clean.datasets["valid"].rows
    # user u1's newest train row by timestamp (1500) and u2's (1800) are held out
    assert sorted(valid.time.tolist()) == [1500.0, 1800.0]
    assert len(clean.datasets["train"]) == 3
    sample = clean.datasets["test"][0]
    assert sample["history"].shape == (3,) and int(sample["labels"][0]) == 1
    compat = CTRRowsDataModule(BARS("MicroVideo1.7M_x1", files=files), max_len=3, bars_mode="bars_compatible")
    compat.setup("fit")
    assert len(compat.datasets["train"]) == 5
    assert compat.datasets["valid"].rows is compat.datasets["test"].rows
    assert compat.num_items == clean.num_items


def test_each_datamodule_takes_only_its_kind_of_source(tmp_path, ml100k_root):
    files = write(tmp_path / "mv", train=MICRO_TRAIN, test=MICRO_TEST)
    with pytest.raises(TypeError, match="use seqrec.datamodules.ctr.CTRRowsDataModule"):
        CTRDataModule(BARS("MicroVideo1.7M_x1", files=files))
    with pytest.raises(TypeError, match="use seqrec.datamodules.ctr.CTRDataModule"):
        CTRRowsDataModule(MovieLens100K(root=str(ml100k_root)))  # type: ignore[arg-type]


def test_real_fuxictr_taobao_rows_keep_their_validation_file(shared_data):
    folder = shared_data / "ctr_samples"
    files = {s: str(folder / f"fuxictr_taobao_{s}_sample.csv") for s in ("train", "valid", "test")}
    data = CTRRowsDataModule(BARS("TaobaoAd_x1", files=files), max_len=5)
    data.setup("fit")
    assert len(data.datasets["valid"]) == 100  # the format's own valid file is used
    batch = next(iter(data.val_dataloader()))
    assert batch["history"].shape[1] == 5 and batch["targets"].shape[1] == 1


# --- length-bucketed training batches under a token budget -------------------------------------------


def test_train_batch_tokens_buckets_by_length_under_the_budget(ml100k_root):
    from lightning.fabric.utilities.data import _set_sampler_epoch

    data = make(ml100k_root, max_len=12, batch_size=6, train_mode="windows", recent_train_events=20, train_batch_tokens=40)
    loader = data.train_dataloader()
    sampler = loader.batch_sampler
    lengths = data.train_lengths()
    ds = data.datasets["train"]
    assert (lengths == ds.span_stop - ds.span_start).all() and len(np.unique(lengths)) > 1
    torch.manual_seed(0)
    np.random.seed(0)
    first = list(sampler)
    # every window exactly once; at most batch_size windows and (longest × size) <= the budget per batch
    assert sorted(i for b in first for i in b) == list(range(len(ds)))
    assert len(first) == len(sampler) == len(loader)
    for b in first:
        assert 1 <= len(b) <= 6 and (len(b) == 1 or lengths[b].max() * len(b) <= 40)
    # batches are cut from the length-sorted order: their length ranges do not overlap
    ranges = sorted((lengths[b].min(), lengths[b].max()) for b in first)
    assert all(hi <= lo for (_, hi), (lo, _) in zip(ranges, ranges[1:]))
    # seeded by (seed, epoch), not by the global RNG; a new order every epoch, the same number of batches
    torch.manual_seed(1)
    np.random.seed(1)
    assert list(make(ml100k_root, max_len=12, batch_size=6, train_mode="windows", recent_train_events=20,
                     train_batch_tokens=40).train_dataloader().batch_sampler) == first
    _set_sampler_epoch(loader, 1)  # what Lightning calls at the start of every epoch
    assert sampler.epoch == 1
    second = list(sampler)
    assert second != first and len(second) == len(first)
    sampler.set_epoch(0)
    assert list(sampler) == first
    batch = next(iter(loader))
    assert batch["items"].shape == (len(first[0]), 12) and batch["targets"].shape == (len(first[0]), 12, 2)


def test_train_batch_tokens_in_samples_mode_and_off_by_default(ml100k_root):
    data = make(ml100k_root, max_len=5, batch_size=8, train_batch_tokens=12)
    ds = data.datasets["train"]
    lengths = data.train_lengths()
    assert (lengths == np.minimum(ds.offsets - ds.user_start, 5) + 1).all()
    batches = list(data.train_dataloader().batch_sampler)
    assert all(lengths[b].max() * len(b) <= 12 for b in batches)  # full histories (6 events): 2 per batch
    assert max(len(b) for b in batches) > 2  # short histories share larger batches
    plain = make(ml100k_root, max_len=5, batch_size=8).train_dataloader()
    assert plain.batch_size == 8 and type(plain.batch_sampler).__name__ == "BatchSampler"
    with pytest.raises(ValueError, match="train_batch_tokens must be >= 1"):
        CTRDataModule(MovieLens100K(root=str(ml100k_root)), train_batch_tokens=0)
    data.trainer = SimpleNamespace(world_size=2)  # the token budget batches in one process: said at once
    with pytest.raises(ValueError, match="one process"):
        data.train_dataloader()
