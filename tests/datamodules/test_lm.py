"""LMDataModule on the real held-out shard: vocabulary from training text only, windows, cached token streams."""

import numpy as np

from seqrec.data.sources.lm1b import LM1B
from seqrec.datamodules.lm import LMDataModule


def test_real_heldout_shard(shared_data):
    path = shared_data / "lm1b" / "news.en.heldout-00000-of-00050.gz"
    data = LMDataModule(LM1B(path=str(path)), max_len=127, num_targets=4)
    data.setup()
    source = data.source
    sizes = [len(source.sentences(s)) for s in ("train", "valid", "test")]
    assert sizes == [4860, 607, 608] and sum(sizes) == 6075  # the shard's 6,075 sentences, 80/10/10 in order
    train_text = source.sentences("train")
    words = sum(len(s.split()) for s in train_text)
    assert len(data.tokens("train")) == words + len(train_text)  # one </s> per sentence
    assert len(data.datasets["train"]) == len(data.tokens("train")) // 128
    # the vocabulary comes from the training part only: a word seen 3+ times only in the test part is unknown
    from collections import Counter

    train_counts = Counter(w for s in train_text for w in s.split())
    test_counts = Counter(w for s in source.sentences("test") for w in s.split())
    test_only = [w for w, c in test_counts.items() if c >= 3 and train_counts[w] == 0]
    vocabulary = set(data.vocabulary)
    assert test_only and not vocabulary & set(test_only)
    assert all(c >= 3 for w, c in train_counts.items() if w in vocabulary)
    example = data.datasets["test"][0]
    assert (example["labels"][:-4] == 0).all() and (example["labels"][-4:] > 0).all()
    assert data.num_items == len(data.vocabulary) - 1


def test_token_streams_are_cached_and_a_corrupt_entry_rebuilt(tmp_path, isolated_cache):
    path = tmp_path / "news.en.heldout-00000-of-00050"
    path.write_text("".join(f"w{i % 7} w{i % 5} w{i % 3} .\n" for i in range(200)))
    first = LMDataModule(LM1B(path=str(path)), max_len=7, num_targets=2, min_count=1)
    first.setup()
    [entry] = list((isolated_cache / "lm").iterdir())
    tokens = entry / "train.npy"
    tokens.write_bytes(tokens.read_bytes()[:-4])
    again = LMDataModule(LM1B(path=str(path)), max_len=7, num_targets=2, min_count=1)
    again.setup()
    assert again.vocabulary == first.vocabulary
    for split in ("train", "valid", "test"):
        assert np.array_equal(again.tokens(split), first.tokens(split))
    batch = next(iter(again.test_dataloader()))
    assert batch["items"].shape[1] == 7 and batch["labels"].shape[1] == 7
