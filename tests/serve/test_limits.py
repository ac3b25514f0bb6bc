"""Hostile requests (``seqrec.serve.limits``): a long id, a large or deeply nested body, or a slow request cannot
stall the server, exhaust its memory, block ``/health`` or echo unbounded input; every refusal is the documented
one-line ``{"error": ...}``."""

from __future__ import annotations

import threading
import time
import tracemalloc

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install 'seqrec[serve]')")
httpx = pytest.importorskip("httpx", reason="the serve extra is not installed (pip install 'seqrec[serve]')")

from fastapi.testclient import TestClient  # noqa: E402

import seqrec  # noqa: E402
from seqrec.data.item_map import ItemMap  # noqa: E402
from seqrec.serve.app import create_app  # noqa: E402
from seqrec.serve.service import Serving  # noqa: E402
from seqrec.serve.store import MemoryStore  # noqa: E402
from tests.serve.server import free_port  # noqa: E402

LONG = 1 << 20  # the fault probe's item id: 1 Mi characters


@pytest.fixture(scope="module")
def lru_run(serve_runs):
    return seqrec.load_run(serve_runs["lru"], threads=1)


def client_for(run, store=None, **kwargs) -> TestClient:
    return TestClient(create_app(Serving.from_run(run, store or MemoryStore()), **kwargs))


def test_a_catalogue_lookup_costs_no_memory_in_the_catalogue_times_the_key_length():
    """The probe: a key of 10k characters widened a 2,989-item catalogue to 120 MB (1 Mi characters: 12.5 GB)."""
    ids = np.array([""] + [f"item{i}" for i in range(1, 3001)])
    catalogue = ItemMap(ids, lambda items: ids[items])
    assert catalogue.rows(["item7", 7, "item3000", "nope"]).tolist() == [7, 0, 3000, 0]
    tracemalloc.start()
    try:
        catalogue.rows(["x" * 10_000, "item5"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"a 10k-character key allocated {peak:,} bytes"


def test_an_id_longer_than_the_limit_is_refused_before_any_lookup_without_echoing_it(lru_run):
    with client_for(lru_run) as client:  # the probe's request: its body is over the default 256 KiB
        started = time.perf_counter()
        response = client.post("/v1/users/big/events", json={"item": "x" * LONG})
        assert time.perf_counter() - started < 5.0
        assert response.status_code == 413 and len(response.content) < 300, response.content[:300]
    with client_for(lru_run, max_body_bytes=2 * LONG, max_id_length=64) as client:
        serving = client.app.state.serving
        looked_up = []
        lookup = serving.catalogue.rows
        serving.catalogue.rows = lambda raw: looked_up.append(len(raw)) or lookup(raw)
        started = time.perf_counter()
        response = client.post("/v1/users/big/events", json={"item": "x" * LONG})
        assert time.perf_counter() - started < 5.0
        assert response.status_code == 422 and len(response.content) < 300, response.content[:300]
        assert response.json() == {"error": "item: 1,048,576 characters, more than the 64 an id may have "
                                            "(serve --max_id_length)"}
        assert not looked_up
        response = client.post("/v1/events", json={"events": [{"user": "u" * 65, "item": "m1"}]})
        assert response.status_code == 422 and response.json()["error"].startswith("user: 65 characters, more than")
        response = client.get(f"/v1/users/{'u' * 65}/topk")
        assert response.status_code == 422 and response.json()["error"].startswith("user: 65 characters, more than")
        assert client.get("/v1/users/big").json()["events"] == 0
        assert not looked_up


def test_error_bodies_never_echo_unbounded_input(lru_run):
    with client_for(lru_run) as client:  # the default limits: an id of 512 characters is allowed
        unknown = "y" * 512
        response = client.post("/v1/users/big/events", json={"items": ["m1", unknown]})
        assert response.status_code == 404 and len(response.content) < 300
        assert response.json()["error"].startswith("unknown item 'yyyy") and "(512 characters)" in response.json()["error"]
        missing = client.get(f"/v1/users/{'z' * 512}/topk")
        assert missing.status_code == 404 and len(missing.content) < 300 and "(512 characters)" in missing.text
        gap = client.post(f"/v1/users/{'w' * 512}/events", json={"item": "m1", "seq": 5})
        assert gap.status_code == 409 and len(gap.content) < 300


def test_a_body_over_the_limit_is_413_before_it_is_read(lru_run):
    with client_for(lru_run, max_body_bytes=10_000) as client:
        body = b'{"items": [' + b'"m1", ' * 4_999 + b'"m1"]}'
        response = client.post("/v1/users/big/events", content=body, headers={"content-type": "application/json"})
        assert response.status_code == 413
        assert response.json() == {"error": f"the request body has {len(body):,} bytes, more than the 10,000 allowed "
                                            "(serve --max_body_bytes); send fewer events per request"}
        chunked = client.post("/v1/users/big/events", content=iter([b'{"items": [' + b'"m1", ' * 3_000, b'"m1"]}']),
                              headers={"content-type": "application/json"})  # no content-length: counted as read
        assert chunked.status_code == 413 and "more than the 10,000 allowed" in chunked.json()["error"]
        assert client.get("/v1/users/big").json()["events"] == 0
        assert client.post("/v1/users/big/events", json={"items": ["m1", "m2"]}).status_code == 200


def test_deeply_nested_json_is_the_documented_422(lru_run):
    with client_for(lru_run) as client:
        for body in (b"[" * 100_000 + b"]" * 100_000, b'{"item": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"):
            response = client.post("/v1/users/deep/events", content=body, headers={"content-type": "application/json"})
            assert response.status_code == 422, response.text[:300]
            assert list(response.json()) == ["error"] and "nested" in response.json()["error"]
        bad = client.post("/v1/users/deep/events", content=b'{"item": ', headers={"content-type": "application/json"})
        assert bad.status_code == 422 and bad.json()["error"].startswith("body: invalid JSON")
        assert client.get("/no/such/path").json() == {"error": "Not Found"}


class SlowStore(MemoryStore):
    """A memory store whose reads of users named ``slow*`` take ``delay`` seconds (a slow disk or network store)."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def load(self, user):  # noqa: ANN001, ANN201
        if user.startswith("slow"):
            time.sleep(self.delay)
        return super().load(user)


@pytest.mark.slow
def test_health_answers_while_every_request_thread_is_busy(lru_run):
    """Four slow requests on two request threads: /health answers at once, not after them."""
    import uvicorn

    serving = Serving.from_run(lru_run, SlowStore(delay=2.0))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(serving, request_threads=2), port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200
        slow = [threading.Thread(target=httpx.get, args=(f"{url}/v1/users/slow{i}",), kwargs={"timeout": 30})
                for i in range(4)]
        for t in slow:
            t.start()
        time.sleep(0.3)  # the slow requests hold both request threads now
        started = time.perf_counter()
        assert httpx.get(f"{url}/health", timeout=30).json()["status"] == "ok"
        waited = time.perf_counter() - started
        for t in slow:
            t.join()
        assert waited < 1.0, f"/health waited {waited:.2f} s behind the slow requests"
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.mark.parametrize("model, key, make", [
    ("EventsIn", "items", lambda i: f"a{i}" if i % 3 else i),
    ("BatchEventsIn", "events", lambda i: {"user": f"u{i % 7}", "item": i, "seq": i // 7}),
])
def test_a_long_list_is_validated_in_slices_to_the_same_model_and_the_same_first_problem(model, key, make):
    """Lists over ``CHUNK`` entries are validated slice by slice (short GIL holds for /health): the same model as one
    call gives, and a bad entry anywhere is named by its index in the whole list, not in its slice."""
    import json

    from seqrec.serve import bodies
    from seqrec.serve.errors import InvalidBody
    from seqrec.serve.limits import CHUNK

    cls = getattr(bodies, model)
    values = [make(i) for i in range(2 * CHUNK + 123)]
    assert bodies.parse(cls, json.dumps({key: values}).encode()) == cls.model_validate({key: values})
    bad = CHUNK + 77  # in the second slice
    broken = [*values[:bad], [1] if key == "items" else {"user": "", "item": 1}, *values[bad + 1:]]
    with pytest.raises(InvalidBody, match=rf"^{key}\.{bad}\."):
        bodies.parse(cls, json.dumps({key: broken}).encode())
    with pytest.raises(InvalidBody, match=rf"^{key}: List should have at most 100,000 items, not 100,001$"):
        bodies.validate(cls, {key: [values[0]] * 100_001})
