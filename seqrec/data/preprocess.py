"""From raw interactions to ``Sequences``: rating filter, time ordering, de-duplication, k-core, id remapping."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from seqrec.data.array_cache import resolve_cache_dir
from seqrec.data.interactions import Interactions, Source
from seqrec.data.sequences import Sequences

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Preprocessing:
    """Options applied in this order: rating filter → sort → consecutive de-dup → k-core → remap.

    min_rating: keep events with rating >= this (None keeps all; sources without ratings ignore it).
    dedupe_consecutive: drop an event whose item equals the same user's previous event (after sorting).
    min_item_interactions / min_user_interactions: the k-core thresholds (0 disables).
    kcore: "one_pass" filters items once, then users once (LRURec's ML-1M preprocessing);
        "iterative" repeats both until every remaining user and item meets its threshold (5-core).
    sort_by: "time_item" orders each user's events by (time, item id); "time" keeps the source's
        order among equal timestamps (a stable sort), which SASRec text files rely on.
    """

    min_rating: float | None = None
    dedupe_consecutive: bool = False
    min_item_interactions: int = 0
    min_user_interactions: int = 0
    kcore: Literal["one_pass", "iterative"] = "one_pass"
    sort_by: Literal["time_item", "time"] = "time_item"

    def key(self) -> str:
        """Stable hash of the options, part of the cache key."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


def _encode(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense codes for raw ids: returns (uniques sorted, codes) with ``uniques[codes] == values``."""
    uniques, codes = np.unique(values, return_inverse=True)
    return uniques, codes.reshape(-1)


def id_kind(values: np.ndarray) -> str:
    """"int" for integer raw ids (given back as int64 by ``Sequences.raw_*_ids``), else "str"."""
    return "int" if np.asarray(values).dtype.kind in "iu" else "str"


def sort_events(users: np.ndarray, items: np.ndarray, times: np.ndarray, by_item: bool) -> np.ndarray:
    """Permutation ordering events by user, then time, then (optionally) item; stable otherwise."""
    keys = (items, times, users) if by_item else (times, users)
    return np.lexsort(keys)


def drop_consecutive_duplicates(users: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Boolean keep-mask over sorted events: False where (user, item) repeats the previous event."""
    keep = np.ones(len(users), dtype=bool)
    keep[1:] = (users[1:] != users[:-1]) | (items[1:] != items[:-1])
    return keep


def kcore_mask(
    users: np.ndarray, items: np.ndarray, min_user: int, min_item: int, mode: str = "one_pass"
) -> np.ndarray:
    """Keep-mask for the k-core filter on dense user/item codes.

    one_pass: items with >= min_item events, then (on what is left) users with >= min_user events.
    iterative: repeat both until nothing changes.
    """
    keep = np.ones(len(users), dtype=bool)
    while True:
        before = int(keep.sum())
        if min_item > 0:
            counts = np.bincount(items[keep], minlength=items.max() + 1 if len(items) else 0)
            keep &= counts[items] >= min_item
        if min_user > 0:
            counts = np.bincount(users[keep], minlength=users.max() + 1 if len(users) else 0)
            keep &= counts[users] >= min_user
        if mode == "one_pass" or int(keep.sum()) == before:
            return keep
        if mode != "iterative":
            raise ValueError(f"kcore must be 'one_pass' or 'iterative', got {mode!r}")


def preprocess(interactions: Interactions, options: Preprocessing) -> Sequences:
    """Apply ``options`` to raw interactions and build CSR ``Sequences`` with items remapped to 1..N.

    Users are numbered in sorted order of their raw ids; items in sorted order of raw ids, from 1.
    """
    if len(interactions) == 0:
        raise ValueError("the source returned no interactions: check the raw files")
    users_raw, items_raw, times = interactions.users, interactions.items, np.asarray(interactions.times)
    keep = np.ones(len(users_raw), dtype=bool)
    if options.min_rating is not None and interactions.ratings is not None:
        keep &= interactions.ratings >= options.min_rating
    user_uniques, users = _encode(users_raw[keep])
    item_uniques, items = _encode(items_raw[keep])
    times = times[keep].astype(np.float64)

    order = sort_events(users, items, times, by_item=options.sort_by == "time_item")
    users, items, times = users[order], items[order], times[order]
    if options.dedupe_consecutive:
        keep = drop_consecutive_duplicates(users, items)
        users, items, times = users[keep], items[keep], times[keep]
    keep = kcore_mask(users, items, options.min_user_interactions, options.min_item_interactions, options.kcore)
    users, items, times = users[keep], items[keep], times[keep]
    if len(users) == 0:
        raise ValueError(
            f"no interactions survive preprocessing {options}: lower min_user_interactions / "
            "min_item_interactions or min_rating"
        )

    # Re-encode the survivors densely: users 0..U-1, items 1..N (0 = padding); order is preserved.
    used_users, users = _encode(users)
    used_items, items = _encode(items)
    items = items + 1
    counts = np.bincount(users, minlength=len(used_users))
    indptr = np.zeros(len(used_users) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    sequences = Sequences(
        indptr=indptr,
        items=items.astype(np.int64),
        times=times,
        user_ids=user_uniques[used_users].astype(str),
        item_ids=np.concatenate([[""], item_uniques[used_items].astype(str)]),
        id_kinds=(id_kind(users_raw), id_kind(items_raw)),
    )
    sequences.validate()
    log.info("preprocessed: %s", sequences.summary())
    return sequences


NO_FILTERS = Preprocessing()  # frozen: safe as a shared default


def load_sequences(source: Source, preprocessing: Preprocessing, cache_dir: str | Path | None,
                   mmap: bool = False) -> Sequences:
    """Preprocessed sequences from the cache, or built from the source and cached atomically.

    The cache key hashes the source's fingerprint (name, variant, raw-file checksums) and the options;
    a corrupt or altered cache entry is reported and rebuilt. ``mmap=True`` maps the cached arrays read-only
    (a freshly built cache is written first, then mapped).
    """
    key = hashlib.sha256(f"{source.fingerprint()}|{preprocessing.key()}".encode()).hexdigest()[:20]
    directory = resolve_cache_dir(cache_dir) / "sequences" / f"{source.name}-{key}"
    if directory.exists():
        try:
            started = time.perf_counter()
            sequences = Sequences.load(directory, mmap=mmap)
            log.info("loaded %s from cache %s in %.3fs", source.name, directory, time.perf_counter() - started)
            return sequences
        except ValueError as error:
            log.warning("%s; rebuilding it from the raw files", error)
    source.prepare()
    sequences = preprocess(source.load(), preprocessing)
    sequences.save(directory)
    if mmap and directory.exists():  # map the written entry so the built arrays can be released
        try:
            return Sequences.load(directory, mmap=True)
        except ValueError as error:
            log.warning("%s; keeping the sequences in memory", error)
    return sequences
