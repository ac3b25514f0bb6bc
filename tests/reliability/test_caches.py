"""Fault injection on the cache: flipped bytes, truncated files and altered manifests in every kind of entry,
a full disk under the cache writer, a cache that cannot be created.

Every kind of entry (preprocessed sequences, frozen negatives, item features, CTR samples, BARS rows, LM
tokens) is built by the datamodule or source that owns it, damaged, and built again: the damage is named in a
warning, the entry is rebuilt to the same arrays, and the data handed to training is the same.
"""

from __future__ import annotations

import errno
import gzip
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import seqrec.data.array_cache as array_cache
from seqrec.data.array_cache import CacheNotWritable, load_arrays, resolve_cache_dir, verify_arrays
from seqrec.data.features import SourceItemFeatures
from seqrec.data.sources.bars import BARS
from seqrec.data.sources.lm1b import LM1B
from seqrec.data.sources.movielens import MovieLens100K
from seqrec.datamodules.ctr import CTRDataModule
from seqrec.datamodules.lm import LMDataModule
from seqrec.datamodules.next_item import NextItemDataModule
from tests.conftest import write_ml100k
from tests.data.sources.test_bars import AMAZON_TEST, AMAZON_TRAIN, write

pytestmark = pytest.mark.slow  # fault injection: corrupt, unwritable and full caches


def next_item(base: Path) -> dict[str, np.ndarray]:
    """Sequences, frozen validation/test negatives and item-feature tables of a sampled-evaluation datamodule."""
    data = NextItemDataModule(MovieLens100K(root=str(base / "ml-100k")), max_len=10, eval_negatives=10,
                              features=SourceItemFeatures())
    data.setup("fit")
    tables = data.item_feature_tables()
    return {"items": data.sequences.items, "valid": data.datasets["valid"].negatives,
            "test": data.datasets["test"].negatives, **{f"feature {k}": v.numpy() for k, v in tables.items()}}


def ctr(base: Path) -> dict[str, np.ndarray]:
    """The DIN-style CTR examples (with their frozen negatives) of every split."""
    data = CTRDataModule(MovieLens100K(root=str(base / "ml-100k")), max_len=10)
    data.setup("fit")
    arrays = {"items": data.sequences.items}
    for split, dataset in data.datasets.items():
        examples = [dataset[i] for i in range(len(dataset))]
        for key in examples[0]:
            arrays[f"{split} {key}"] = np.stack([np.asarray(example[key]) for example in examples])
    return arrays


def bars(base: Path) -> dict[str, np.ndarray]:
    """Parsed BARS csv rows."""
    rows = BARS("AmazonElectronics_x1", root=str(base / "bars")).load_rows()
    return {f"{split} {name}": value for split, part in rows.items() for name, value in part.arrays("").items()}


def lm(base: Path) -> dict[str, np.ndarray]:
    """LM token streams."""
    data = LMDataModule(LM1B(path=str(base / "news.en.heldout-00000-of-00050.gz")), max_len=7, num_targets=2, min_count=1)
    return {split: data.tokens(split) for split in ("train", "valid", "test")}


KINDS: dict[str, Callable[[Path], dict[str, np.ndarray]]] = {"next_item": next_item, "ctr": ctr, "bars": bars, "lm": lm}


@pytest.fixture
def raw(tmp_path) -> Path:
    """Raw files of every kind of source, in their real formats."""
    write_ml100k(tmp_path / "ml-100k", num_users=30, num_items=25, length=15)
    write(tmp_path / "bars", train=AMAZON_TRAIN, test=AMAZON_TEST)
    with gzip.open(tmp_path / "news.en.heldout-00000-of-00050.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n".join(f"the {w} is a word number {i} ." for i, w in enumerate(["cat", "dog", "sun"] * 20)) + "\n")
    return tmp_path


def entries(cache: Path) -> dict[Path, dict[str, np.ndarray]]:
    """Every cache entry under ``cache`` with its arrays."""
    return {m.parent: load_arrays(m.parent)[0] for m in sorted(cache.rglob("manifest.json"))}


def same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def damage(entry: Path, how: str) -> None:
    """Flip one byte of the largest array file, cut it in half, or alter the manifest."""
    if how == "manifest":
        manifest = json.loads((entry / "manifest.json").read_text())
        manifest["meta"]["altered"] = 1
        (entry / "manifest.json").write_text(json.dumps(manifest))
        return
    path = max(entry.glob("*.npy"), key=lambda p: p.stat().st_size)
    data = bytearray(path.read_bytes())
    if how == "flip":
        data[-1] ^= 0x01
    else:
        data = data[: len(data) // 2]
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_damaged_entry_is_named_and_rebuilt_to_the_same_arrays(kind, raw, isolated_cache, caplog):
    build = KINDS[kind]
    expected = build(raw)
    built = entries(isolated_cache)
    assert built, "nothing was cached"
    for entry in built:
        for how in ("flip", "truncate", "manifest"):
            damage(entry, how)
            assert verify_arrays(entry) is not None
            caplog.clear()
            with caplog.at_level(logging.WARNING):
                assert same(build(raw), expected), (entry, how)
            assert any(str(entry) in r.getMessage() for r in caplog.records), (entry, how, caplog.text)
            assert verify_arrays(entry) is None and same(entries(isolated_cache)[entry], built[entry])


def test_a_full_disk_under_the_cache_writer_is_a_warning_and_changes_nothing(raw, isolated_cache, caplog, monkeypatch):
    def full(path):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    expected = next_item(raw)
    for entry in list(entries(isolated_cache)):
        shutil.rmtree(entry)
    with monkeypatch.context() as patch, caplog.at_level(logging.WARNING):
        patch.setattr(array_cache, "_fsync", full)
        assert same(next_item(raw), expected)  # the run goes on with the same data
    assert "could not write cache entry" in caplog.text and "SEQREC_CACHE" in caplog.text
    assert not entries(isolated_cache)
    assert not [p for p in isolated_cache.rglob(".*")]  # no temporary entry left behind
    assert same(next_item(raw), expected) and entries(isolated_cache)  # a later run with space writes them


def test_two_builders_of_one_entry_keep_one_verified_copy(raw, isolated_cache):
    expected = next_item(raw)
    first = entries(isolated_cache)
    for entry in first:  # a second writer finds the entry there (the first rename won): it keeps it
        array_cache.save_arrays(entry, first[entry], load_arrays(entry)[1])
    assert same(next_item(raw), expected)
    assert all(verify_arrays(e) is None for e in first) and entries(isolated_cache).keys() == first.keys()
    assert not [p for p in isolated_cache.rglob(".*")]


def test_cache_entries_are_readable_by_other_users(raw, isolated_cache):
    next_item(raw)
    for entry in entries(isolated_cache):
        assert entry.stat().st_mode & 0o055 == 0o055  # mkdtemp alone would leave 0700
        for path in entry.iterdir():
            assert path.stat().st_mode & 0o044 == 0o044


def test_a_cache_folder_that_cannot_be_created_names_it_and_the_fix(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(CacheNotWritable, match=r"cache folder .*file/cache cannot be created .*set SEQREC_CACHE"):
        resolve_cache_dir(blocker / "cache")
