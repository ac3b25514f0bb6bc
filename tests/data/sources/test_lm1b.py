"""LM1B: finding the shards (a directory or one file), splitting a single file, saying where to get the data."""

import gzip

import pytest

from seqrec.data.download import DownloadError
from seqrec.data.sources.lm1b import LM1B, LM1B_URL


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


def test_a_corrupt_archive_names_the_file(tmp_path):
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        payload = ("word " * 20000).encode()
        info = tarfile.TarInfo("1-billion-word-language-modeling-benchmark-r13output/x")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    data = bytearray(buffer.getvalue())
    for i in range(30, len(data) - 30, 11):
        data[i] ^= 0xFF
    source = LM1B(cache_dir=str(tmp_path / "cache"))
    source.raw_dir().mkdir(parents=True)
    archive = source.raw_dir() / "archive.tar.gz"
    archive.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"archive.tar.gz is corrupt or truncated .*fetch it again"):
        source._extract(archive)
    assert [p.name for p in source.raw_dir().iterdir()] == ["archive.tar.gz"]  # nothing half-extracted
