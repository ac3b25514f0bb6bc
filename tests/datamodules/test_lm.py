"""LM1B data: windows whose last 4 words are targets and never inputs, the vocabulary, finding the shards."""

import gzip

import numpy as np
import pytest

from seqrec.data.download import DownloadError
from seqrec.datamodules.lm import (
    BLANK,
    EOS,
    LM1B,
    LM1B_URL,
    UNK,
    LMDataModule,
    LMWindows,
    build_vocabulary,
    encode,
)


@pytest.mark.parametrize("label_context", [False, True])
def test_last_four_words_are_targets_never_inputs(label_context):
    tokens = np.arange(10, 10 + 3 * 8 + 5)  # distinct ids: 3 windows of W = 8 and a partial one (dropped)
    windows = LMWindows(tokens, max_len=7, num_targets=4, label_context=label_context)
    assert len(windows) == 3
    for j in range(3):
        window = tokens[j * 8 : (j + 1) * 8]
        example = windows[j]
        items, labels = example["items"].numpy(), example["labels"].numpy()
        assert items.tolist() == [*window[:4], BLANK, BLANK, BLANK]
        assert labels[-4:].tolist() == window[-4:].tolist()  # position 3 predicts the next word, blanks the rest
        assert not set(window[-4:]) & set(items)  # a target never reaches the input
        context = labels[:-4].tolist()
        assert context == (window[1:4].tolist() if label_context else [0, 0, 0])


def test_vocabulary_from_training_text_with_unknown_token():
    train = ["a b a c", "a b d", "b e"]
    vocabulary = build_vocabulary(train, min_count=2)
    assert vocabulary == ["<pad>", "<unk>", "</s>", "<blank>", "a", "b"]  # b (3) and a (3) tie: alphabetical
    assert build_vocabulary(train, min_count=1, max_vocab=3)[4:] == ["a", "b", "c"]
    ids = encode(["a z b", "c"], vocabulary)
    assert ids.tolist() == [4, UNK, 5, EOS, UNK, EOS]
    assert encode(["a"], vocabulary, add_eos=False).tolist() == [4]


def write_shard(path, sentences):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(sentences) + "\n")


def test_single_file_is_split_by_sentence_order(tmp_path):
    path = tmp_path / "news.en.heldout-00000-of-00050.gz"
    write_shard(path, [f"s{i} x" for i in range(20)])
    source = LM1B(path=str(path), single_file_split=(0.5, 0.25))
    assert [s.split()[0] for s in source.sentences("train")] == [f"s{i}" for i in range(10)]
    assert [s.split()[0] for s in source.sentences("valid")] == [f"s{i}" for i in range(10, 15)]
    assert [s.split()[0] for s in source.sentences("test")] == [f"s{i}" for i in range(15, 20)]


def test_directory_of_shards_uses_training_and_heldout_shards(tmp_path):
    root = tmp_path / "1-billion-word-language-modeling-benchmark-r13output"
    for n in (1, 2, 3):
        write_shard(root / "training-monolingual.tokenized.shuffled" / f"news.en-0000{n}-of-00100", [f"train{n} a"])
    for n in (0, 1, 2):
        write_shard(root / "heldout-monolingual.tokenized.shuffled" / f"news.en.heldout-0000{n}-of-00050", [f"held{n} a"])
    source = LM1B(path=str(tmp_path), train_shards=2)
    assert source.sentences("train") == ["train1 a", "train2 a"]
    assert source.sentences("test") == ["held0 a"] and source.sentences("valid") == ["held1 a"]
    with pytest.raises(FileNotFoundError, match="held-out shard"):
        LM1B(path=str(tmp_path), valid_shard=7).prepare()
    only_heldout = tmp_path / "only"
    write_shard(only_heldout / "news.en.heldout-00000-of-00050.gz", ["x"])
    with pytest.raises(FileNotFoundError, match="no training shard.*path=<one held-out shard file>"):
        LM1B(path=str(only_heldout)).prepare()


def test_missing_data_says_where_to_get_it_and_where_to_put_it(monkeypatch, isolated_cache):
    monkeypatch.setenv("SEQREC_OFFLINE", "1")
    with pytest.raises(DownloadError) as error:
        LM1B().prepare()
    message = str(error.value)
    assert LM1B_URL in message and str(isolated_cache / "raw" / "lm1b") in message and "path=" in message
    with pytest.raises(FileNotFoundError, match="statmt.org"):
        LM1B(download=False).prepare()


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
