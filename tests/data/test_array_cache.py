import errno
import json
import logging
import os

import numpy as np
import pytest

import seqrec.data.array_cache as array_cache
from seqrec.data.array_cache import load_arrays, save_arrays, verify_arrays


def test_roundtrip_with_meta_and_strings(tmp_path):
    save_arrays(tmp_path / "c", {"a": np.arange(5), "s": np.array(["", "x"], dtype=object)}, {"seed": 3})
    arrays, meta = load_arrays(tmp_path / "c")
    assert arrays["a"].tolist() == [0, 1, 2, 3, 4] and arrays["s"].tolist() == ["", "x"] and meta == {"seed": 3}
    assert [p.name for p in tmp_path.iterdir()] == ["c"]  # no temporary directory left behind


def test_other_format_version_is_rejected(tmp_path):
    save_arrays(tmp_path / "c", {"a": np.arange(3)})
    manifest = tmp_path / "c" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "version": 99}))
    with pytest.raises(ValueError, match="format 99"):
        load_arrays(tmp_path / "c")


def test_an_altered_manifest_or_file_is_named(tmp_path):
    save_arrays(tmp_path / "c", {"a": np.arange(100)}, {"num_items": 9})
    manifest = tmp_path / "c" / "manifest.json"
    original = manifest.read_text()
    manifest.write_text(original.replace('"num_items": 9', '"num_items": 8'))  # arrays fine, meta altered
    with pytest.raises(ValueError, match=r"cache entry .*c: manifest.json was altered"):
        load_arrays(tmp_path / "c")
    manifest.write_text(original)
    path = tmp_path / "c" / "a.npy"
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(ValueError, match=r"cache file .*a.npy does not match its manifest \(\d+ bytes, the manifest says \d+: truncated\?\)"):
        load_arrays(tmp_path / "c")
    assert "truncated" in verify_arrays(tmp_path / "c")


def test_entries_are_readable_by_other_users(tmp_path):
    save_arrays(tmp_path / "c", {"a": np.arange(3)})
    mask = os.umask(0o022)
    os.umask(mask)
    assert (tmp_path / "c").stat().st_mode & 0o777 == 0o777 & ~mask  # not mkdtemp's 0700
    assert all(p.stat().st_mode & 0o777 == 0o666 & ~mask for p in (tmp_path / "c").iterdir())


def test_an_entry_that_cannot_be_written_is_a_warning(tmp_path, monkeypatch, caplog):
    def full(path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(array_cache, "_fsync", full)
    with caplog.at_level(logging.WARNING):
        assert save_arrays(tmp_path / "c", {"a": np.arange(3)}) is False
    assert "could not write cache entry" in caplog.text and "No space left on device" in caplog.text
    assert list(tmp_path.iterdir()) == []  # no entry, no temporary directory


def test_a_second_writer_keeps_a_verified_entry_and_replaces_a_corrupt_one(tmp_path):
    save_arrays(tmp_path / "c", {"a": np.arange(3)})
    inode = (tmp_path / "c").stat().st_ino
    save_arrays(tmp_path / "c", {"a": np.arange(3)})  # written meanwhile by another process: kept
    assert (tmp_path / "c").stat().st_ino == inode
    (tmp_path / "c" / "a.npy").write_bytes(b"garbage")
    save_arrays(tmp_path / "c", {"a": np.arange(3)})
    assert load_arrays(tmp_path / "c")[0]["a"].tolist() == [0, 1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["c"]
