"""Durable per-user state: a small backend interface, SQLite (embedded, the default), Redis (shared), memory.

What a store keeps per user (``Record``): the event count, the adapter's state blob (``seqrec.serve.state``) with
a CRC32, the items seen in event order (exclude_seen, and the window a recompute adapter reads), and the
timestamp of the newest event. ``commit`` writes one acknowledged update (or one batch) as one transaction,
conditional on the event count the update started from (compare-and-set), so several workers can share a
store: a worker whose CAS fails reloads the user and recomputes.

- ``SQLiteStore``: WAL journal, ``synchronous=FULL`` by default (a committed update survives a power cut;
  ``normal`` survives a killed process, not a power cut, and saves the fsync), one transaction per update,
  appends one row per event (O(1) whatever the history length). Opening checks the file (SQLite's
  ``quick_check``, the format marker, the model fingerprint): a corrupt or foreign file is a one-line
  ``StoreError`` naming it.
- ``RedisStore``: one hash per user (events, state, crc, time) and one string of packed int32 items (APPEND:
  O(1)), keyed ``<prefix>:{<user>}:u`` / ``:s`` (a hash tag: both in one Redis Cluster slot); WATCH/MULTI/EXEC
  for the compare-and-set. Durability is Redis's own (``appendonly yes`` with ``appendfsync always`` matches
  SQLite's FULL).
- ``MemoryStore``: a dict, for tests and as a baseline (nothing survives the process).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import zlib
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("seqrec.serve.store")
FORMAT = "seqrec-serve-state/1"
SYNC_MODES = ("full", "normal")


class StoreError(ValueError):
    """A store that cannot be used as it is (corrupt, foreign, written by another model); one line, naming it."""


@dataclass
class Record:
    """One user's stored state."""

    events: int
    blob: bytes
    seen: list[int] = field(default_factory=list)  # item ids (1..N), oldest first
    last_time: float | None = None


@dataclass
class Commit:
    """One user's update: from ``expected_events`` to ``record.events`` with ``new_items`` appended."""

    user: str
    expected_events: int
    record: Record
    new_items: list[int]


def blob_crc(events: int, blob: bytes) -> int:
    """CRC32 of the event count and the state blob (a flipped bit in a stored state is caught on load)."""
    return zlib.crc32(blob, zlib.crc32(int(events).to_bytes(8, "little")))


class StateStore(ABC):
    """The backend interface: load, commit (compare-and-set, one transaction), forget, stats, flush, close."""

    backend = "base"
    location = ""

    @abstractmethod
    def check_fingerprint(self, fingerprint: dict[str, Any]) -> None:
        """Record the model this store serves (a fresh store) or refuse one written for another model."""

    @abstractmethod
    def load(self, user: str) -> Record | None:
        """The user's record, or None for a user without one."""

    @abstractmethod
    def commit(self, commits: list[Commit]) -> bool:
        """Write every commit in one transaction if each user still has ``expected_events``; False (nothing
        written) when another writer got there first."""

    @abstractmethod
    def forget(self, user: str) -> bool:
        """Delete the user's record; False when there was none."""

    @abstractmethod
    def stats(self) -> dict[str, Any]:
        """Users, events and bytes held."""

    def flush(self) -> None:  # noqa: B027 (optional hook: most backends have nothing to flush)
        """Make everything committed durable in the main file (nothing to do by default)."""

    def close(self) -> None:
        """Flush and release the backend."""
        self.flush()

    def error(self, detail: str) -> StoreError:
        """A one-line error naming this store."""
        return StoreError(" ".join(f"{self.location}: {detail}".split()))

    def check(self, user: str, events: int, blob: bytes, crc: int, seen_count: int) -> None:
        """Raise ``StoreError`` when a loaded record is inconsistent (bad CRC, seen items missing)."""
        if blob_crc(events, blob) != crc:
            raise self.error(f"corrupt state of user {user!r} (CRC mismatch); forget the user or restore the store")
        if seen_count != events:
            raise self.error(f"user {user!r} has {events} events but {seen_count} stored items; the store is inconsistent")


def describe_mismatch(stored: dict[str, Any], wanted: dict[str, Any]) -> str:
    """The first fingerprint field that differs, as ``key: stored != wanted``."""
    for key in sorted(set(stored) | set(wanted)):
        if stored.get(key) != wanted.get(key):
            return f"{key}: {stored.get(key)!r} != {wanted.get(key)!r}"
    return ""


# --- SQLite ----------------------------------------------------------------------------------------------
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS users (uid INTEGER PRIMARY KEY, user TEXT UNIQUE NOT NULL, events INTEGER NOT NULL,
                                  state BLOB NOT NULL, crc INTEGER NOT NULL, last_time REAL);
CREATE TABLE IF NOT EXISTS seen (uid INTEGER NOT NULL, n INTEGER NOT NULL, item INTEGER NOT NULL,
                                 PRIMARY KEY (uid, n)) WITHOUT ROWID;
"""


class SQLiteStore(StateStore):
    """The embedded default: one SQLite file in WAL mode, one transaction per acknowledged update (module doc)."""

    backend = "sqlite"

    def __init__(self, path: str | Path, sync: str = "full", check: bool = True) -> None:
        if sync not in SYNC_MODES:
            raise ValueError(f"sync must be one of {SYNC_MODES}, got {sync!r}")
        self.path = Path(path).expanduser()
        self.location = str(self.path)
        self.sync = sync
        self.lock = threading.Lock()
        existed = self.path.exists() and self.path.stat().st_size > 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        except sqlite3.Error as error:
            raise self.error(f"cannot open the state store ({error})") from None
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute(f"PRAGMA synchronous={sync.upper()}")
            if existed and check:
                problems = [row[0] for row in self.db.execute("PRAGMA quick_check").fetchall()]
                if problems != ["ok"]:
                    first = str(problems[0]).strip().splitlines()[-1].strip()
                    raise self.error(f"corrupt state store (SQLite quick_check: {first}, {len(problems)} problem(s)); "
                                     "move it aside to start empty, or restore a copy")
            tables = {row[0] for row in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if existed and "meta" not in tables and tables:
                raise self.error(f"not a seqrec state store (tables {sorted(tables)}); pass another --store path")
            self.db.executescript(SCHEMA)
            stored = dict(self.db.execute("SELECT key, value FROM meta").fetchall())
            if stored.get("format", FORMAT) != FORMAT:
                raise self.error(f"state store format {stored['format']!r}, this version reads {FORMAT!r}")
            if not stored:
                self.db.execute("INSERT INTO meta VALUES ('format', ?)", (FORMAT,))
        except StoreError:
            self.db.close()
            raise
        except sqlite3.DatabaseError as error:
            self.db.close()
            raise self.error(f"corrupt or not a SQLite state store ({error}); move it aside to start empty, "
                             "or restore a copy") from None

    def _guard(self, what: str, error: sqlite3.DatabaseError) -> StoreError:
        return self.error(f"{what} failed ({error}); the store file may be corrupt or its disk full")

    def check_fingerprint(self, fingerprint: dict[str, Any]) -> None:
        """Write the serving model's fingerprint into a fresh store; refuse a store written for another model."""
        with self.lock:
            row = self.db.execute("SELECT value FROM meta WHERE key='model'").fetchone()
            if row is None:
                self.db.execute("INSERT INTO meta VALUES ('model', ?)", (json.dumps(fingerprint, sort_keys=True),))
                return
        stored = json.loads(row[0])
        if stored != fingerprint:
            raise self.error(f"written for another model ({describe_mismatch(stored, fingerprint)}); pass a new "
                             "--store path for this model, or --reset_store to discard the stored states")

    def load(self, user: str) -> Record | None:
        """The user's record (state, seen items in order), or None."""
        with self.lock:
            try:
                row = self.db.execute("SELECT uid, events, state, crc, last_time FROM users WHERE user=?", (user,)).fetchone()
                if row is None:
                    return None
                uid, events, blob, crc, last_time = row
                seen = [r[0] for r in self.db.execute("SELECT item FROM seen WHERE uid=? ORDER BY n", (uid,))]
            except sqlite3.DatabaseError as error:
                raise self._guard(f"reading user {user!r}", error) from None
        self.check(user, events, bytes(blob), crc, len(seen))
        return Record(events=events, blob=bytes(blob), seen=seen, last_time=last_time)

    def commit(self, commits: list[Commit]) -> bool:
        """One transaction (BEGIN IMMEDIATE ... COMMIT) for all commits; a failed compare-and-set rolls back."""
        with self.lock:
            try:
                self.db.execute("BEGIN IMMEDIATE")
                try:
                    for c in commits:
                        r = c.record
                        crc = blob_crc(r.events, r.blob)
                        if c.expected_events == 0:
                            row = self.db.execute("SELECT uid, events FROM users WHERE user=?", (c.user,)).fetchone()
                            if row is not None and row[1] != 0:
                                self.db.execute("ROLLBACK")
                                return False
                            if row is None:
                                uid = self.db.execute("INSERT INTO users (user, events, state, crc, last_time) VALUES (?, ?, ?, ?, ?)",
                                                      (c.user, r.events, r.blob, crc, r.last_time)).lastrowid
                            else:
                                uid = row[0]
                                self.db.execute("UPDATE users SET events=?, state=?, crc=?, last_time=? WHERE uid=?",
                                                (r.events, r.blob, crc, r.last_time, uid))
                        else:
                            row = self.db.execute("SELECT uid FROM users WHERE user=? AND events=?",
                                                  (c.user, c.expected_events)).fetchone()
                            if row is None:
                                self.db.execute("ROLLBACK")
                                return False
                            uid = row[0]
                            self.db.execute("UPDATE users SET events=?, state=?, crc=?, last_time=? WHERE uid=?",
                                            (r.events, r.blob, crc, r.last_time, uid))
                        self.db.executemany("INSERT INTO seen VALUES (?, ?, ?)",
                                            [(uid, c.expected_events + i, int(item)) for i, item in enumerate(c.new_items)])
                    self.db.execute("COMMIT")
                    return True
                except BaseException:
                    if self.db.in_transaction:
                        self.db.execute("ROLLBACK")
                    raise
            except sqlite3.DatabaseError as error:
                raise self._guard("writing an update", error) from None

    def forget(self, user: str) -> bool:
        """Delete the user's row and items in one transaction."""
        with self.lock:
            try:
                self.db.execute("BEGIN IMMEDIATE")
                row = self.db.execute("SELECT uid FROM users WHERE user=?", (user,)).fetchone()
                if row is not None:
                    self.db.execute("DELETE FROM seen WHERE uid=?", (row[0],))
                    self.db.execute("DELETE FROM users WHERE uid=?", (row[0],))
                self.db.execute("COMMIT")
                return row is not None
            except sqlite3.DatabaseError as error:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise self._guard(f"forgetting user {user!r}", error) from None

    def stats(self) -> dict[str, Any]:
        """Users, events, state-blob bytes and the files' bytes (database + WAL)."""
        with self.lock:
            users, events, blob = self.db.execute(
                "SELECT COUNT(*), COALESCE(SUM(events), 0), COALESCE(SUM(LENGTH(state)), 0) FROM users").fetchone()
        files = sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())
        return {"backend": self.backend, "location": self.location, "sync": self.sync, "users": users,
                "events": events, "state_blob_bytes": blob, "file_bytes": files}

    def flush(self) -> None:
        """Checkpoint the WAL into the database file (TRUNCATE) so the file alone holds every committed update."""
        with self.lock:
            try:
                self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as error:
                log.warning("%s: WAL checkpoint failed (%s); the WAL file still holds the updates", self.location, error)

    def close(self) -> None:
        """Checkpoint and close the connection."""
        self.flush()
        with self.lock:
            self.db.close()


# --- Redis -------------------------------------------------------------------------------------------------
class RedisStore(StateStore):
    """A shared store for several stateless workers (module doc); ``url`` as redis-py takes it."""

    backend = "redis"

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", prefix: str = "seqrec") -> None:
        try:
            import redis
        except ImportError as error:
            raise ImportError("the Redis store needs the redis client: pip install 'seqrec[serve]'") from error
        self.redis_module = redis
        self.location = f"{url} (prefix {prefix!r})"
        self.prefix = prefix
        self.client = redis.Redis.from_url(url)
        try:
            self.client.ping()
        except redis.RedisError as error:
            raise StoreError(f"{self.location}: cannot reach Redis ({error}); start redis-server or pass another --redis URL") from None

    def _user(self, user: str) -> str:
        """The user's hash; ``{user}`` is a Redis Cluster hash tag, so a user's two keys share a slot."""
        return f"{self.prefix}:{{{user}}}:u"

    def _seen(self, user: str) -> str:
        """The user's packed items (int32, little-endian)."""
        return f"{self.prefix}:{{{user}}}:s"

    def check_fingerprint(self, fingerprint: dict[str, Any]) -> None:
        """As ``SQLiteStore.check_fingerprint``, in the key ``<prefix>:meta``."""
        key = f"{self.prefix}:meta"
        value = json.dumps(fingerprint, sort_keys=True)
        if self.client.hsetnx(key, "model", value):
            self.client.hset(key, "format", FORMAT)
            return
        stored = json.loads(self.client.hget(key, "model"))
        if stored != fingerprint:
            raise self.error(f"written for another model ({describe_mismatch(stored, fingerprint)}); use another "
                             "--redis_prefix for this model, or --reset_store")

    def load(self, user: str) -> Record | None:
        """HGETALL of the user's hash and GET of the packed items, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(self._user(user))
        pipe.get(self._seen(user))
        fields, packed = pipe.execute()
        if not fields:
            return None
        events, blob, crc = int(fields[b"events"]), bytes(fields[b"state"]), int(fields[b"crc"])
        seen = np.frombuffer(packed or b"", dtype="<i4").tolist()
        self.check(user, events, blob, crc, len(seen))
        time = fields.get(b"time")
        return Record(events=events, blob=blob, seen=seen, last_time=float(time) if time else None)

    def commit(self, commits: list[Commit]) -> bool:
        """WATCH the users' hashes, check their counts, then MULTI/EXEC every write; False on a lost race."""
        redis = self.redis_module
        keys = [self._user(c.user) for c in commits]
        with self.client.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(*keys)
                for c, key in zip(commits, keys):
                    current = pipe.hget(key, "events")
                    if int(current or 0) != c.expected_events:
                        pipe.unwatch()
                        return False
                pipe.multi()
                new_users = 0
                for c, key in zip(commits, keys):
                    r = c.record
                    mapping = {"events": r.events, "state": r.blob, "crc": blob_crc(r.events, r.blob)}
                    if r.last_time is not None:
                        mapping["time"] = repr(float(r.last_time))
                    pipe.hset(key, mapping=mapping)
                    pipe.append(self._seen(c.user), np.asarray(c.new_items, dtype="<i4").tobytes())
                    new_users += c.expected_events == 0
                if new_users:
                    pipe.incrby(f"{self.prefix}:users", new_users)
                pipe.execute()
                return True
            except redis.WatchError:
                return False

    def forget(self, user: str) -> bool:
        """DEL the user's keys (and count one user fewer)."""
        removed = self.client.delete(self._user(user))
        self.client.delete(self._seen(user))
        if removed:
            self.client.decr(f"{self.prefix}:users")
        return bool(removed)

    def stats(self) -> dict[str, Any]:
        """Users (a counter), and the server's dataset bytes (``INFO memory``; shared with any other keys)."""
        memory = self.client.info("memory")
        return {"backend": self.backend, "location": self.location, "users": int(self.client.get(f"{self.prefix}:users") or 0),
                "dataset_bytes": int(memory.get("used_memory_dataset", 0))}

    def close(self) -> None:
        """Close the connection pool (Redis persists by its own configuration)."""
        self.client.close()


# --- memory ------------------------------------------------------------------------------------------------
class MemoryStore(StateStore):
    """A dict of records: nothing survives the process (tests, a baseline)."""

    backend = "memory"
    location = "memory"

    def __init__(self) -> None:
        self.records: dict[str, Record] = {}
        self.lock = threading.Lock()
        self.fingerprint: dict[str, Any] | None = None

    def check_fingerprint(self, fingerprint: dict[str, Any]) -> None:
        """Remember it (a memory store is always fresh)."""
        self.fingerprint = fingerprint

    def load(self, user: str) -> Record | None:
        """A copy of the stored record."""
        with self.lock:
            r = self.records.get(user)
            return None if r is None else Record(r.events, r.blob, list(r.seen), r.last_time)

    def commit(self, commits: list[Commit]) -> bool:
        """Compare-and-set every user, then write all."""
        with self.lock:
            if any((self.records[c.user].events if c.user in self.records else 0) != c.expected_events for c in commits):
                return False
            for c in commits:
                old = self.records.get(c.user)
                seen = (old.seen if old else []) + list(c.new_items)
                self.records[c.user] = Record(c.record.events, c.record.blob, seen, c.record.last_time)
            return True

    def forget(self, user: str) -> bool:
        """Drop the record."""
        with self.lock:
            return self.records.pop(user, None) is not None

    def stats(self) -> dict[str, Any]:
        """Users, events and blob bytes."""
        with self.lock:
            return {"backend": self.backend, "location": self.location, "users": len(self.records),
                    "events": sum(r.events for r in self.records.values()),
                    "state_blob_bytes": sum(len(r.blob) for r in self.records.values())}


# --- the in-memory cache in front of a store ------------------------------------------------------------------
class LRUCache:
    """The ``capacity`` most recently used users' decoded states (0: no cache; every request reads the store)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, int(capacity))
        self.entries: OrderedDict[str, Any] = OrderedDict()
        self.lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, user: str) -> Any | None:
        """The cached entry (marked recently used), or None."""
        with self.lock:
            entry = self.entries.get(user)
            if entry is None:
                self.misses += 1
                return None
            self.hits += 1
            self.entries.move_to_end(user)
            return entry

    def put(self, user: str, entry: Any) -> None:
        """Insert or replace, evicting the least recently used beyond capacity."""
        if self.capacity == 0:
            return
        with self.lock:
            self.entries[user] = entry
            self.entries.move_to_end(user)
            while len(self.entries) > self.capacity:
                self.entries.popitem(last=False)

    def drop(self, user: str) -> None:
        """Forget a user (after ``forget`` or a lost compare-and-set)."""
        with self.lock:
            self.entries.pop(user, None)

    def stats(self) -> dict[str, int]:
        """Size, capacity, hits and misses."""
        return {"size": len(self.entries), "capacity": self.capacity, "hits": self.hits, "misses": self.misses}


def open_store(path: str | Path | None = None, redis_url: str | None = None, redis_prefix: str = "seqrec",
               sync: str = "full", check: bool = True) -> StateStore:
    """The store named by the CLI's options: Redis when a URL is given, else SQLite at ``path`` (``:memory:`` -> MemoryStore)."""
    if redis_url:
        return RedisStore(redis_url, redis_prefix)
    if path is None or str(path) == ":memory:":
        return MemoryStore()
    return SQLiteStore(path, sync=sync, check=check)
