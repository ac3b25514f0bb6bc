"""State stores: one transaction per commit with compare-and-set, CRC-checked records, one-line errors naming a
corrupt or foreign store; the Redis backend against a real ``redis-server`` when one is installed."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

from seqrec.serve.store import Commit, MemoryStore, Record, SQLiteStore, StoreError, open_store


def commit(store, user, before, after, items, blob=b"state"):
    return store.commit([Commit(user, before, Record(after, blob + bytes([after]), [], float(after)), items)])


def exercise(store):
    """The behaviour every backend shares."""
    store.check_fingerprint({"model": "M", "checkpoint": "abc"})
    assert store.load("alice") is None
    assert commit(store, "alice", 0, 2, [5, 7])
    assert commit(store, "alice", 2, 3, [9])
    assert not commit(store, "alice", 2, 3, [11])  # a stale writer loses the compare-and-set
    assert not commit(store, "alice", 0, 1, [11])  # ... also when it thinks the user is new
    record = store.load("alice")
    assert (record.events, record.seen, record.blob, record.last_time) == (3, [5, 7, 9], b"state\x03", 3.0)
    # a batch is one transaction: one lost compare-and-set writes nothing
    assert not store.commit([Commit("bob", 0, Record(1, b"b", [], None), [1]), Commit("alice", 0, Record(1, b"a", [], None), [1])])
    assert store.load("bob") is None
    assert store.commit([Commit("bob", 0, Record(1, b"b", [], None), [1]), Commit("carol", 0, Record(2, b"c", [], None), [2, 3])])
    assert store.stats()["users"] == 3
    assert store.forget("bob") and not store.forget("bob") and store.load("bob") is None
    assert commit(store, "bob", 0, 1, [4])  # a forgotten user starts again from nothing
    assert store.load("bob").seen == [4]


def test_memory_store():
    exercise(MemoryStore())


def test_sqlite_store_survives_reopening_and_refuses_another_model(tmp_path):
    path = tmp_path / "state.sqlite"
    store = SQLiteStore(path)
    exercise(store)
    store.close()
    assert not (tmp_path / "state.sqlite-wal").exists() or (tmp_path / "state.sqlite-wal").stat().st_size == 0
    again = open_store(path)
    assert again.load("alice").seen == [5, 7, 9] and again.stats()["events"] == 3 + 2 + 1
    again.check_fingerprint({"model": "M", "checkpoint": "abc"})
    with pytest.raises(StoreError, match=r"state.sqlite: written for another model \(checkpoint: 'abc' != 'xyz'\)"):
        again.check_fingerprint({"model": "M", "checkpoint": "xyz"})
    again.close()


def one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text
    return text


def test_a_corrupt_sqlite_file_is_one_line_naming_it(tmp_path):
    path = tmp_path / "state.sqlite"
    store = SQLiteStore(path)
    for n in range(200):
        commit(store, f"user{n}", 0, 1, [n], blob=bytes(300))
    store.close()
    data = bytearray(path.read_bytes())
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError) as caught:
        SQLiteStore(garbage)
    assert str(garbage) in one_line(caught.value) and "not a SQLite state store" in str(caught.value)
    broken = tmp_path / "broken.sqlite"
    data[len(data) // 2: len(data) // 2 + 4096] = b"\xff" * 4096  # a page in the middle overwritten
    broken.write_bytes(bytes(data))
    with pytest.raises(StoreError) as caught:
        SQLiteStore(broken)
    assert str(broken) in one_line(caught.value) and "corrupt" in str(caught.value)
    other = tmp_path / "other.sqlite"
    import sqlite3

    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="not a seqrec state store"):
        SQLiteStore(other)


def test_a_flipped_bit_in_a_stored_state_is_caught_by_its_crc(tmp_path):
    path = tmp_path / "state.sqlite"
    store = SQLiteStore(path)
    commit(store, "alice", 0, 1, [3], blob=b"0123456789")
    store.db.execute("UPDATE users SET state=? WHERE user='alice'", (b"0123456788\x01",))
    with pytest.raises(StoreError) as caught:
        store.load("alice")
    assert str(path) in one_line(caught.value) and "CRC" in str(caught.value)
    store.db.execute("DELETE FROM seen")
    store.db.execute("UPDATE users SET state=?, crc=? WHERE user='alice'", (b"x", 0))
    with pytest.raises(StoreError):
        store.load("alice")


# --- Redis: tested when redis-server is installed ---------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    """A private redis-server on a free port (skipped with a message when none is installed)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server): the Redis store is not tested")
    pytest.importorskip("redis", reason="the redis client is not installed (pip install 'seqrec[serve]')")
    import redis

    port = free_port()
    folder = tmp_path_factory.mktemp("redis")
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
                                "--appendfsync", "always", "--dir", str(folder)], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(100):
        try:
            redis.Redis.from_url(url).ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    yield url
    process.terminate()
    process.wait(10)


def test_redis_store(redis_url):
    store = open_store(redis_url=redis_url, redis_prefix="t1")
    exercise(store)
    assert open_store(redis_url=redis_url, redis_prefix="t1").load("alice").seen == [5, 7, 9]  # another worker sees it
    with pytest.raises(StoreError, match="written for another model"):
        open_store(redis_url=redis_url, redis_prefix="t1").check_fingerprint({"model": "other"})
    store.client.hset("t1:{alice}:u", "crc", 1)
    with pytest.raises(StoreError, match="CRC mismatch"):
        store.load("alice")
    store.close()


def test_an_unreachable_redis_is_one_line():
    pytest.importorskip("redis")
    with pytest.raises(StoreError, match=r"cannot reach Redis .*start redis-server"):
        open_store(redis_url=f"redis://127.0.0.1:{free_port()}/0")


def test_two_workers_on_one_redis_store_stay_exact(redis_url):
    """Two stateless workers alternate on the same users: each sees the other's events (a stale cache loses the
    compare-and-set and reloads), and the final states equal one worker replaying everything."""
    import torch

    from seqrec.models.next_item.lru import LRURec
    from seqrec.serve.service import Event, serve_model

    torch.manual_seed(0)
    model = LRURec(30, d_model=8)
    workers = [serve_model(model, open_store(redis_url=redis_url, redis_prefix="t2"), None, cache_size=100) for _ in range(2)]
    alone = serve_model(model, MemoryStore(), None)
    for n in range(12):
        for user in ("u1", "u2"):
            item = (n * 7 + len(user) + int(user[-1])) % 30 + 1
            workers[n % 2].update([Event(user, item, seq=n if n % 4 == 0 else None)])  # unnumbered: only the CAS sees it
            alone.update([Event(user, item)])
    assert workers[0].counters["cas_retries"] + workers[1].counters["cas_retries"] > 0
    fresh = serve_model(model, open_store(redis_url=redis_url, redis_prefix="t2"), None, cache_size=0)
    for user in ("u1", "u2"):
        assert [(r["item"], r["rank"]) for r in fresh.topk([user], 5)[0]] == [(r["item"], r["rank"]) for r in alone.topk([user], 5)[0]]
