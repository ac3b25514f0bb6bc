"""Serving under faults: kill -9 in the middle of a replay loses no acknowledged event and, once the client
resends what it had not seen acknowledged, the states equal a clean replay; a corrupt store is a one-line error
naming the file. On fixture runs (``tests/serve/runs.py``), with ``python -m seqrec serve`` in a subprocess."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install 'seqrec[serve]')")
httpx = pytest.importorskip("httpx", reason="the serve extra is not installed (pip install 'seqrec[serve]')")

import seqrec  # noqa: E402
from seqrec.serve.service import Event, Serving  # noqa: E402
from seqrec.serve.store import MemoryStore, SQLiteStore  # noqa: E402
from tests.serve.runs import train  # noqa: E402
from tests.serve.server import ServerProcess  # noqa: E402

pytestmark = pytest.mark.slow  # fault injection: server processes killed mid-replay

USERS = 8


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The tiny LRU and CTR transformer runs, and their cache folder."""
    root = tmp_path_factory.mktemp("serve-fault-runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SEQREC_CACHE", str(root / "cache"))
        return {"lru": train(root, "lru"), "ctr": train(root, "ctr")}, root / "cache"


def histories(run_dir, cache, monkeypatch) -> dict[str, list]:
    monkeypatch.setenv("SEQREC_CACHE", str(cache))
    run = seqrec.load_run(run_dir, threads=1)
    seqs = run.sequences
    return {f"user{r}": seqs.raw_item_ids(seqs.sequence(r)).tolist() for r in range(USERS)}


def client_replay(url: str, events: dict[str, list], log: dict[str, int], stop: threading.Event) -> None:
    """Post every user's events in turns, one request each with its number; ``log[user]``: events acknowledged."""
    with httpx.Client(base_url=url, timeout=10.0) as client:
        for n in range(max(map(len, events.values()))):
            for user, items in events.items():
                if n >= len(items) or stop.is_set():
                    continue
                try:
                    response = client.post(f"/v1/users/{user}/events", json={"item": items[n], "seq": n})
                except httpx.HTTPError:
                    stop.set()  # the server is gone
                    return
                if response.status_code == 200:
                    log[user] = response.json()[0]["events"]


@pytest.mark.parametrize("name", ["lru", "ctr"])
def test_kill_9_mid_replay_loses_no_acknowledged_event_and_the_state_equals_a_clean_replay(runs, name, tmp_path, monkeypatch):
    run_dirs, cache = runs
    events = histories(run_dirs[name], cache, monkeypatch)
    store = tmp_path / "state.sqlite"
    server = ServerProcess(run_dirs[name], "--store", str(store), cache=cache).start()
    log: dict[str, int] = {}
    stop = threading.Event()
    client = threading.Thread(target=client_replay, args=(server.url, events, log, stop))
    client.start()
    total = sum(map(len, events.values()))
    while sum(log.values()) < total // 3 and client.is_alive():
        time.sleep(0.01)
    server.kill()  # kill -9 with requests in flight
    client.join(30)
    acknowledged = dict(log)
    assert 0 < sum(acknowledged.values()) < total

    server = ServerProcess(run_dirs[name], "--store", str(store), cache=cache).start()
    with httpx.Client(base_url=server.url, timeout=10.0) as http:
        for user in events:
            stored = http.get(f"/v1/users/{user}").json()["events"]
            # every acknowledged event is there; at most the one in flight went through unacknowledged
            assert acknowledged.get(user, 0) <= stored <= acknowledged.get(user, 0) + 1, (user, stored, acknowledged)
        # the client resends from what it saw acknowledged; the numbered events make the resend exact
        for user, items in events.items():
            start = acknowledged.get(user, 0)
            if start < len(items):
                answer = http.post(f"/v1/users/{user}/events", json={"items": items[start:], "seq": start})
                assert answer.status_code == 200 and answer.json()[-1]["events"] == len(items)
        served = {u: http.get(f"/v1/users/{u}/topk", params={"k": 10, "exclude_seen": "none"}).json()["items"]
                  for u in events}
    code, _ = server.stop()  # graceful: uvicorn finishes, the store is flushed, then re-raises SIGTERM
    assert code in (0, -15)
    wal = tmp_path / "state.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0  # flushed into the database file

    monkeypatch.setenv("SEQREC_CACHE", str(cache))
    clean = Serving.from_run(seqrec.load_run(run_dirs[name], threads=1), MemoryStore())
    for user, items in events.items():
        clean.update([Event(user, item) for item in items])
    expected = dict(zip(events, clean.topk(list(events), k=10, exclude="none")))
    reopened = SQLiteStore(store)
    for user, items in events.items():
        record = reopened.load(user)
        assert record.events == len(items) and record.seen == clean.catalogue.rows(items).tolist()
        assert [(r["item"], r["rank"]) for r in served[user]] == [(r["item"], r["rank"]) for r in expected[user]]
        assert np.allclose([r["score"] for r in served[user]], [r["score"] for r in expected[user]], atol=1e-5)
    reopened.close()


def test_a_corrupt_store_file_stops_the_server_with_one_line_naming_it(runs, tmp_path):
    run_dirs, cache = runs
    store = tmp_path / "state.sqlite"
    good = SQLiteStore(store)
    from seqrec.serve.store import Commit, Record

    for n in range(300):
        good.commit([Commit(f"u{n}", 0, Record(1, bytes(200), [], None), [1])])
    good.close()
    data = bytearray(store.read_bytes())
    data[len(data) // 2: len(data) // 2 + 4096] = b"\x00\x13" * 2048
    store.write_bytes(bytes(data))
    code, err = ServerProcess(run_dirs["lru"], "--store", str(store), cache=cache).run_to_exit()
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1 and str(store) in lines[0] and "corrupt" in lines[0], err[-2000:]
    store.write_bytes(b"garbage" * 1000)
    code, err = ServerProcess(run_dirs["lru"], "--store", str(store), cache=cache).run_to_exit()
    assert code == 2 and f"error: {store}: corrupt or not a SQLite state store" in err
