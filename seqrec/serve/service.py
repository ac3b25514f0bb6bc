"""The serving core, free of HTTP: per-user state through a store and a cache, and the operations on it.

``Serving`` takes a model's ``StateAdapter`` (``seqrec.serve.state``), a ``StateStore`` and the catalogue's raw
ids (``ItemMap``), and implements the operations the HTTP app (``seqrec.serve.app``) exposes:

- ``update(events)``: append events (user, raw item[, timestamp][, seq]) and advance each user's state; the
  users of one request are advanced in one batch and written in one transaction, acknowledged only after it
  commits. ``seq`` (the event's 0-based number in the user's history) makes a retry safe: an event already
  applied is acknowledged without being applied twice, a gap is refused;
- ``topk(users, k, exclude_seen)``: the best k items from each user's state, ranked as the evaluation ranks
  (``seqrec.tasks.catalogue_topk``: ties share a rank; item ids ascending break them);
- ``score(user, items)``: the model's score of given items (CTR models: logit and click probability);
- ``forget(user)``, ``user_info(user)``, ``stats()``, ``close()`` (flushes the store).

An unknown user starts from the empty state; an unknown item is ``UnknownItem`` (HTTP 404), a user without
events asked for recommendations is ``NoEvents`` (HTTP 404). Concurrency: a user's operations are serialised
by a striped lock; different users run in parallel; a compare-and-set the store refuses (another worker on a
shared store updated the user) reloads the user and recomputes.

Built on the Python API (``Serving.from_run``): a ``TrainedRun`` gives the raw-id map (``run.items``), the inference
precision (``run.autocast``) and, for a recurrent model, the session its adapter steps (``run.session``).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch import Tensor

from seqrec.data.item_map import ItemMap
from seqrec.serve.errors import Contended, NoEvents, SequenceGap, ServingError
from seqrec.serve.limits import DEFAULT_MAX_ID_LENGTH, check_length, item_rows, shown
from seqrec.serve.state import (
    RecurrentAdapter,
    StateAdapter,
    UserTensors,
    adapter_for,
    adapter_kind,
    pack_tensors,
    tensors_bytes,
    unpack_tensors,
)
from seqrec.serve.store import Commit, LRUCache, Record, StateStore, StoreError
from seqrec.tasks.catalogue_topk import catalogue_topk

if TYPE_CHECKING:
    from seqrec.api import TrainedRun

log = logging.getLogger("seqrec.serve")
Exclude = Literal["all", "window", "none"]
LOCK_STRIPES = 1024
CAS_RETRIES = 5


@dataclass
class Event:
    """One event: user, raw item id, optional timestamp and optional 0-based event number ``seq``."""

    user: str
    item: Any
    time: float | None = None
    seq: int | None = None


@dataclass
class Ack:
    """The answer to one event: the user's event count after the request, and whether this event was applied
    now (False: a retry of an event already applied)."""

    user: str
    events: int
    applied: bool


class ItemLog:
    """A user's items in event order: a growing int64 buffer (amortised O(1) append, views without copies)."""

    __slots__ = ("buffer", "size")

    def __init__(self, items: Sequence[int] = ()) -> None:
        self.buffer = np.zeros(max(16, 2 * len(items)), dtype=np.int64)
        self.size = len(items)
        self.buffer[: self.size] = items

    def extend(self, items: Sequence[int]) -> None:
        """Append items (the buffer doubles when full)."""
        needed = self.size + len(items)
        if needed > len(self.buffer):
            grown = np.zeros(max(needed, 2 * len(self.buffer)), dtype=np.int64)
            grown[: self.size] = self.buffer[: self.size]
            self.buffer = grown
        self.buffer[self.size:needed] = items
        self.size = needed

    def view(self) -> np.ndarray:
        """The items so far, without a copy (a later ``extend`` writes past it or into a new buffer: a stable snapshot)."""
        return self.buffer[: self.size]


@dataclass
class Entry:
    """A user's decoded state in the cache."""

    events: int
    tensors: UserTensors
    seen: ItemLog
    last_time: float | None
    blob_bytes: int


def file_digest(path: Path, limit: int = 1 << 30) -> str:
    """sha256 (first 16 hex) of a file's first ``limit`` bytes and its size: the model a store was written for."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        remaining = limit
        while remaining > 0 and (chunk := f.read(min(1 << 20, remaining))):
            digest.update(chunk)
            remaining -= len(chunk)
    return f"{digest.hexdigest()[:16]}:{path.stat().st_size}"


class _TargetScores:
    """A CTR user's logits over the catalogue in the shape ``catalogue_topk`` scans (``score_chunk``)."""

    def __init__(self, adapter: StateAdapter, state: UserTensors, history: list[int], num_items: int) -> None:
        self.adapter, self.state, self.history, self.num_items = adapter, state, history, num_items

    def score_chunk(self, hidden: Tensor, start: int, stop: int) -> Tensor:
        """(1, stop - start) logits of items start..stop-1."""
        targets = torch.arange(start, stop, device=hidden.device)
        return self.adapter.score(self.state, self.history, targets).unsqueeze(0).float()


class Serving:
    """Per-user state for a trained model behind a store and an LRU cache (module docstring)."""

    def __init__(
        self,
        adapter: StateAdapter,
        store: StateStore,
        catalogue: ItemMap,
        cache_size: int = 100_000,
        inference: Callable[[], contextlib.AbstractContextManager] | None = None,
        fingerprint: dict[str, Any] | None = None,
        score_chunk: int = 65536,
        ctr_chunk: int = 2048,
        description: dict[str, Any] | None = None,
        threads: int | None = 1,
        max_id_length: int = DEFAULT_MAX_ID_LENGTH,
    ) -> None:
        self.adapter, self.store, self.catalogue = adapter, store, catalogue
        self.max_id_length = max_id_length
        self.net = adapter.net
        self.cache = LRUCache(cache_size)
        self.stripes = [threading.Lock() for _ in range(LOCK_STRIPES)]
        self.score_chunk, self.ctr_chunk = score_chunk, ctr_chunk
        self.description = dict(description or {})
        self.started = time.time()
        self.counters = {"events": 0, "duplicates": 0, "topk": 0, "score": 0, "cas_retries": 0}
        self._inference_context = inference or self._default_inference
        self.threads = threads
        self._local = threading.local()
        self.net.eval()
        if fingerprint is not None:
            store.check_fingerprint(fingerprint)

    @contextlib.contextmanager
    def _default_inference(self) -> Iterator[None]:
        with torch.inference_mode():
            yield

    def _inference(self) -> contextlib.AbstractContextManager:
        """The model's inference context, after fixing this thread's torch threads once.

        torch's intra-op thread count is per calling thread: a request thread that never set it runs its own
        OpenMP team of every core, whose spinning workers fight the other request threads (16 ms instead of
        1 ms for a 1 ms top-k on 2 cores). Each thread serving requests sets ``threads`` (default 1) first.
        """
        if self.threads is not None and not getattr(self._local, "threads_set", False):
            torch.set_num_threads(self.threads)
            self._local.threads_set = True
        return self._inference_context()

    @classmethod
    def from_run(cls, run: TrainedRun, store: StateStore, cache_size: int = 100_000, compress: str | None = None,
                 budget: float = 1.0, **kwargs: Any) -> Serving:
        """Serve a ``seqrec.load_run`` result (its item map, precision and recurrent session); ``compress``: wrap a
        CTR transformer with that ``seqrec.compress`` method at ``budget`` (a fraction of the history's entries per layer)."""
        model = run.net
        if compress is not None:
            from seqrec.compress import build as build_compressor
            from seqrec.models.ctr.transformer import CTRTransformer

            backbone = getattr(model, "backbone", model)
            if not isinstance(backbone, CTRTransformer):
                raise ValueError(f"--compress needs a CTR transformer run; this run's model is {type(model).__name__}")
            model = build_compressor(compress, backbone, budget)
            model.eval()
        adapter = adapter_for(model, run.max_len, run.session if adapter_kind(model) is RecurrentAdapter else None)
        fingerprint = {"checkpoint": file_digest(Path(run.checkpoint)), "model": type(model).__name__,
                       "adapter": adapter.name, "num_items": int(run.sequences.num_items), "max_len": run.max_len,
                       "compression": model.describe() if hasattr(model, "describe") else None}
        description = {"run": str(run.run_dir), "checkpoint": str(run.checkpoint), **adapter.describe(),
                       "compression": fingerprint["compression"]}
        run.task.eval()
        model.eval()
        return cls(adapter, store, run.items, cache_size, run.autocast, fingerprint, score_chunk=run.chunk_size, description=description, **kwargs)

    # --- users and their locks -----------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self, users: Sequence[str]) -> Iterator[None]:
        """Hold the lock stripes of ``users`` (acquired in stripe order: no deadlock between requests); an id over
        ``max_id_length`` is refused first (``IdTooLong``), before the cache or the store is asked for it."""
        self.check_length(users, "user")
        stripes = sorted({hash(u) % LOCK_STRIPES for u in users})
        for s in stripes:
            self.stripes[s].acquire()
        try:
            yield
        finally:
            for s in reversed(stripes):
                self.stripes[s].release()

    def _entry(self, user: str) -> Entry:
        """The user's state: the cache, else the store, else the empty state (an unknown user starts empty)."""
        entry = self.cache.get(user)
        if entry is not None:
            return entry
        record = self.store.load(user)
        if record is None:
            return Entry(0, self.adapter.empty(), ItemLog(), None, 0)
        try:
            tensors = unpack_tensors(record.blob, self.adapter.device)
        except ValueError as error:
            raise StoreError(f"{self.store.location}: state of user {shown(user)} does not decode ({error})") from None
        entry = Entry(record.events, tensors, ItemLog(record.seen), record.last_time, len(record.blob))
        self.cache.put(user, entry)
        return entry

    def check_length(self, ids: Sequence[Any], what: str) -> None:
        """``IdTooLong`` for the first id longer than ``max_id_length`` (before anything looks it up)."""
        check_length(ids, what, self.max_id_length)

    def item_ids(self, raw: Sequence[Any]) -> np.ndarray:
        """Item ids of raw items; ``IdTooLong`` before any lookup, ``UnknownItem`` naming the first one the catalogue lacks."""
        return item_rows(self.catalogue, raw, self.max_id_length)

    # --- update ----------------------------------------------------------------------------------------
    def update(self, events: Sequence[Event]) -> list[Ack]:
        """Append events and advance the users' states; one transaction for the request (module docstring)."""
        if not events:
            return []
        users = list(dict.fromkeys(e.user for e in events))
        self.check_length(users, "user")
        ids = self.item_ids([e.item for e in events])
        with self.locked(users):
            for attempt in range(CAS_RETRIES):
                entries = {u: self._entry(u) for u in users}
                plan: dict[str, list[int]] = {u: [] for u in users}  # event indices to apply, per user
                count = {u: entries[u].events for u in users}
                applied = [False] * len(events)
                gap = None
                for i, e in enumerate(events):
                    if e.seq is not None:
                        if e.seq < count[e.user]:
                            continue  # already applied (a retry): acknowledged, not applied again
                        if e.seq > count[e.user]:
                            gap = (f"user {shown(e.user)} has {count[e.user]} events; event number {e.seq} would leave a "
                                   f"gap (send event {count[e.user]} first)")
                            break
                    plan[e.user].append(i)
                    count[e.user] += 1
                    applied[i] = True
                if gap is not None:
                    if attempt > 0:
                        raise SequenceGap(gap)
                    for u in users:  # another worker on a shared store may have moved on: reread before refusing
                        self.cache.drop(u)
                    continue
                changed = [u for u in users if plan[u]]
                new_tensors = self._advance(changed, entries, plan, ids)
                commits, blobs = [], {}
                for u in changed:
                    entry, idx = entries[u], plan[u]
                    blob = pack_tensors(new_tensors[u])
                    blobs[u] = blob
                    last = next((events[i].time for i in reversed(idx) if events[i].time is not None), entry.last_time)
                    commits.append(Commit(u, entry.events, Record(count[u], blob, [], last), [int(ids[i]) for i in idx]))
                if commits and not self.store.commit(commits):
                    self.counters["cas_retries"] += 1
                    for u in users:
                        self.cache.drop(u)
                    continue
                for c in commits:
                    entry = entries[c.user]
                    entry.seen.extend(c.new_items)  # the cache's list, after the commit only
                    self.cache.put(c.user, Entry(c.record.events, new_tensors[c.user], entry.seen, c.record.last_time,
                                                 len(blobs[c.user])))
                self.counters["events"] += sum(applied)
                self.counters["duplicates"] += len(events) - sum(applied)
                return [Ack(e.user, count[e.user], applied[i]) for i, e in enumerate(events)]
        raise Contended(f"users {', '.join(shown(u) for u in users[:3])} changed under this worker {CAS_RETRIES} times in a row; retry the request")

    def _advance(self, users: list[str], entries: dict[str, Entry], plan: dict[str, list[int]], ids: np.ndarray
                 ) -> dict[str, UserTensors]:
        """New states: users with one new event in one batched ``advance``, others through ``extend``."""
        out: dict[str, UserTensors] = {}
        single = [u for u in users if len(plan[u]) == 1]
        with self._inference():
            if single:
                items = torch.from_numpy(ids[[plan[u][0] for u in single]]).to(self.adapter.device)
                states = self.adapter.advance([entries[u].tensors for u in single], [entries[u].seen.view() for u in single], items)
                out.update(zip(single, states))
            for u in users:
                if len(plan[u]) > 1:
                    out[u] = self.adapter.extend(entries[u].tensors, entries[u].seen.view(), [int(ids[i]) for i in plan[u]])
        return out

    # --- queries -----------------------------------------------------------------------------------------
    def _exclusions(self, seen: np.ndarray, exclude: Exclude) -> np.ndarray:
        """The items a user's list leaves out: all seen, the newest max_len (what the evaluation masks), none."""
        if exclude == "none":
            return seen[:0]
        if exclude == "window" and self.adapter.max_len:
            return seen[-self.adapter.max_len:]
        return seen

    def topk(self, users: Sequence[str], k: int = 10, exclude: Exclude = "all", ties: str = "all"
             ) -> list[list[dict[str, Any]]]:
        """Per user, [{item, score, rank[, probability]}, ...] best first (module docstring)."""
        if k < 1:
            raise ServingError(f"k must be >= 1, got {k}")
        users = list(users)
        with self.locked(users):
            entries = [self._entry(u) for u in users]
            empty = [u for u, e in zip(users, entries) if e.events == 0]
            if empty:
                raise NoEvents(f"user {shown(empty[0])} has no events yet: post one first (POST /v1/users/{{user}}/events)")
            excluded = [self._exclusions(e.seen.view(), exclude) for e in entries]
            rows = torch.from_numpy(np.repeat(np.arange(len(users)), [len(x) for x in excluded]))
            items = torch.from_numpy(np.concatenate(excluded))  # a copy: safe after the locks are released
            pairs = (rows.to(self.adapter.device), items.to(self.adapter.device)) if len(items) else None
            with self._inference():
                if self.adapter.family == "next_item":
                    hidden = self.adapter.query_hidden([e.tensors for e in entries], [e.seen.view() for e in entries])
                    states = None
                else:
                    hidden, states = None, [(e.tensors, e.seen.view()) for e in entries]
        self.counters["topk"] += len(users)
        with self._inference():
            if hidden is not None:
                top = catalogue_topk(self.net, hidden, k, pairs, None, None, self.score_chunk, ties)
                return self._decode(top, ctr=False)
            out = []
            for row, (tensors, seen) in enumerate(states):
                own = None if pairs is None else (pairs[0][pairs[0] == row] * 0, pairs[1][pairs[0] == row])
                scorer = _TargetScores(self.adapter, tensors, seen, self.catalogue.size)
                dummy = torch.zeros(1, 1, device=self.adapter.device)
                out += self._decode(catalogue_topk(scorer, dummy, k, own, None, None, self.ctr_chunk, ties), ctr=True)
            return out

    def _decode(self, top: Any, ctr: bool) -> list[list[dict[str, Any]]]:
        items, scores = top.items.cpu().numpy(), top.scores.double().cpu().numpy()
        ranks, valid = top.ranks.cpu().numpy(), top.valid.cpu().numpy()
        out = []
        for r in range(len(items)):
            keep = np.flatnonzero(valid[r])
            raw = self.catalogue.raw(items[r, keep])
            row = []
            for j, item in zip(keep, raw):
                result = {"item": item, "score": float(scores[r, j]), "rank": int(ranks[r, j])}
                if ctr:
                    result["probability"] = 1.0 / (1.0 + math.exp(-float(scores[r, j])))
                row.append(result)
            out.append(row)
        return out

    def score(self, user: str, raw_items: Sequence[Any]) -> list[dict[str, Any]]:
        """[{item, score[, probability]}] for given items: the model's score of each (CTR: logit, sigmoid)."""
        ids = self.item_ids(list(raw_items))
        with self.locked([user]):
            entry = self._entry(user)
            if entry.events == 0:
                raise NoEvents(f"user {shown(user)} has no events yet: post one first (POST /v1/users/{{user}}/events)")
            targets = torch.from_numpy(ids).to(self.adapter.device)
            with self._inference():
                if self.adapter.family == "next_item":
                    hidden = self.adapter.query_hidden([entry.tensors], [entry.seen.view()])
                    scores = self.net.score(hidden, targets.unsqueeze(0))[0].double().cpu().numpy()
                else:
                    scores = self.adapter.score(entry.tensors, entry.seen.view(), targets).double().cpu().numpy()
        self.counters["score"] += 1
        out = []
        for item, s in zip(raw_items, scores):
            result = {"item": item, "score": float(s)}
            if self.adapter.family == "ctr":
                result["probability"] = 1.0 / (1.0 + math.exp(-float(s)))
            out.append(result)
        return out

    # --- users -----------------------------------------------------------------------------------------
    def forget(self, user: str) -> bool:
        """Delete the user's state (store and cache); False when the user had none."""
        with self.locked([user]):
            self.cache.drop(user)
            return self.store.forget(user)

    def user_info(self, user: str, last: int = 10) -> dict[str, Any]:
        """Events, stored bytes, newest timestamp and newest items of a user (an unknown user: 0 events)."""
        with self.locked([user]):
            entry = self._entry(user)
            newest = entry.seen.view()[-last:] if last > 0 else []
            return {"user": user, "events": entry.events, "state_bytes": entry.blob_bytes,
                    "state_value_bytes": tensors_bytes(entry.tensors), "last_time": entry.last_time,
                    "newest_items": self.catalogue.raw(np.asarray(newest, dtype=np.int64))}

    def stats(self) -> dict[str, Any]:
        """Counters, cache and store figures, and what is served."""
        return {**self.description, "uptime_s": round(time.time() - self.started, 3), "counters": dict(self.counters),
                "cache": self.cache.stats(), "store": self.store.stats(), "catalogue_items": self.catalogue.size}

    def close(self) -> None:
        """Flush and close the store (graceful shutdown)."""
        self.store.close()


def serve_model(model: torch.nn.Module, store: StateStore, max_len: int | None, cache_size: int = 100_000,
                **kwargs: Any) -> Serving:
    """A ``Serving`` for a bare model (items named 1..N), e.g. the benchmark's cost sweep."""
    adapter = adapter_for(model.eval(), max_len)
    num_items = int(model.num_items)
    return Serving(adapter, store, ItemMap.numbered(num_items), cache_size, description=adapter.describe(), **kwargs)
