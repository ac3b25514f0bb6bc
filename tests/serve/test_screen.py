"""Large bodies screened in a process of their own (``seqrec.serve.screen``): the screening's refusal is exactly the
one the request thread would give, the server never parses a body it refuses, and a dead screening process loses
no request."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install 'seqrec[serve]')")

from fastapi.testclient import TestClient  # noqa: E402

import seqrec  # noqa: E402
from seqrec.data.item_map import ItemMap  # noqa: E402
from seqrec.serve import app as app_module  # noqa: E402
from seqrec.serve import screen  # noqa: E402
from seqrec.serve.app import create_app  # noqa: E402
from seqrec.serve.service import Serving  # noqa: E402
from seqrec.serve.store import MemoryStore  # noqa: E402


@pytest.fixture(scope="module")
def lru_run(serve_runs):
    return seqrec.load_run(serve_runs["lru"], threads=1)


def known_items(run, n: int) -> list[str]:
    return list(Serving.from_run(run, MemoryStore()).catalogue.index)[:n]


def requests(run) -> list[tuple[str, dict]]:
    """(path, body) of every kind of refusal the screening decides, and of bodies it lets through."""
    known = known_items(run, 3)
    return [
        ("/v1/users/u/events", {"items": [*known, "nope", "nope2"]}),  # unknown item: 404 naming the first
        ("/v1/users/u/events", {"items": [*known, "x" * 600]}),  # an item id over max_id_length: 422
        ("/v1/users/" + "u" * 600 + "/events", {"items": ["nope"]}),  # the user's id checked first: 422
        ("/v1/users/u/events", {"items": known, "item": known[0]}),  # both item and items: 422
        ("/v1/users/u/events", {"items": []}),  # min_length: 422
        ("/v1/events", {"events": [{"user": "a", "item": known[0]}, {"user": "b", "item": "nope"}]}),  # 404
        ("/v1/events", {"events": [{"user": "a", "item": "x" * 600}]}),  # 422
        ("/v1/users/u/score", {"items": [known[1], "nope"]}),  # 404
        ("/v1/topk", {"users": [], "k": 5}),  # 422
        ("/v1/users/u/events", {"items": known}),  # served: 200
        ("/v1/events", {"events": [{"user": "a", "item": known[0]}]}),  # served: 200
        ("/v1/users/a/score", {"items": known}),  # served: 200
        ("/v1/topk", {"users": ["a"], "k": 5}),  # served: 200
    ]


def answers(run, screen_bytes: int, extra: list[tuple[str, bytes]] = ()) -> tuple[list, dict]:
    with TestClient(create_app(Serving.from_run(run, MemoryStore()), screen_bytes=screen_bytes)) as client:
        out = [(r.status_code, r.json()) for r in
               (client.post(path, json=body) for path, body in requests(run))]
        out += [(r.status_code, r.json()) for r in
                (client.post(path, content=body, headers={"content-type": "application/json"}) for path, body in extra)]
        return out, dict(client.app.state.screen.counters)


def test_a_screened_body_gets_exactly_the_answer_an_unscreened_one_gets(lru_run):
    broken = [("/v1/users/u/events", b'{"items": ["a", '), ("/v1/users/u/events", b"[" * 100_000 + b"]" * 100_000)]
    unscreened, counted = answers(lru_run, 0, broken)
    screened, counters = answers(lru_run, 1, broken)
    assert screened == unscreened
    statuses = [status for status, _ in unscreened]
    assert statuses == [404, 422, 422, 422, 422, 404, 422, 404, 422, 200, 200, 200, 200, 422, 422], unscreened
    assert counted == {"screened": 0, "refused": 0, "restarts": 0}
    assert counters["screened"] == len(statuses) and counters["refused"] == statuses.count(404) + statuses.count(422)


def test_a_refused_body_is_never_parsed_by_the_server_and_a_small_one_is_not_screened(lru_run, monkeypatch):
    parsed = []
    real = app_module.parse
    monkeypatch.setattr(app_module, "parse", lambda model, body: parsed.append(len(body)) or real(model, body))
    known = known_items(lru_run, 2)
    with TestClient(create_app(Serving.from_run(lru_run, MemoryStore()), screen_bytes=1000)) as client:
        big = {"items": [*known, *(f"zz{i:06d}" for i in range(200))]}  # > 1,000 bytes, unknown ids
        response = client.post("/v1/users/u/events", json=big)
        assert response.status_code == 404 and "unknown item 'zz000000'" in response.json()["error"]
        assert parsed == []  # refused by the screening process; the server's request thread never saw it
        assert client.post("/v1/users/u/events", json={"items": ["nope"]}).status_code == 404  # small: unscreened
        assert len(parsed) == 1 and client.app.state.screen.counters["screened"] == 1


def test_a_killed_screening_process_loses_no_request_and_is_replaced(lru_run, caplog):
    known = known_items(lru_run, 2)
    with TestClient(create_app(Serving.from_run(lru_run, MemoryStore()), screen_bytes=1)) as client:
        assert client.post("/v1/users/u/events", json={"items": ["nope"]}).status_code == 404
        pool = client.app.state.screen.pool()
        for pid in list(pool._processes):  # the executor's own record of its worker
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        served = client.post("/v1/users/u/events", json={"items": known})  # unscreened, with a warning
        assert served.status_code == 200 and [a["applied"] for a in served.json()] == [True, True]
        assert "the screening process died" in caplog.text
        refused = client.post("/v1/users/u/events", json={"items": ["nope"]})  # a new screening process
        assert refused.status_code == 404 and client.app.state.screen.counters["restarts"] == 1
        assert client.app.state.screen.counters["refused"] == 2


def test_the_verdict_follows_the_services_order_user_then_item_lengths_then_lookup():
    screen._start(["a", "b"], 4)
    assert screen.verdict("EventsIn", json.dumps({"items": ["a", "toolong", "nope"]}).encode(), "userlong")[0] == 422
    assert "user: 8 characters" in screen.verdict("EventsIn", b'{"items": ["toolong"]}', "userlong")[1]
    assert "item: 7 characters" in screen.verdict("EventsIn", b'{"items": ["nope", "toolong"]}', "u")[1]
    assert screen.verdict("EventsIn", b'{"items": ["a", "nope"]}', "u") == (
        404, "unknown item 'nope': not in this model's catalogue of 2 items")
    assert screen.verdict("ScoreIn", b'{"items": ["b", 1]}', None)[0] == 404
    assert screen.verdict("EventsIn", b'{"items": ["b", "a"]}', "u") is None
    assert screen.verdict("TopKIn", b'{"users": ["' + b"u" * 10 + b'"]}', None) is None  # users: Serving's to check


def test_the_screening_process_starts_without_torch():
    """The process imports the screening module and what it needs (spawn): pydantic and numpy, never torch."""
    code = "import sys, seqrec.serve.screen; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_item_map_order_is_what_the_screening_process_rebuilds():
    ids = np.array(["", "x", "y", "z"])
    catalogue = ItemMap(ids, lambda rows: ids[rows])
    screen._start(list(catalogue.index), 10)
    assert screen._catalogue.rows(["z", "x", "q"]).tolist() == catalogue.rows(["z", "x", "q"]).tolist() == [3, 1, 0]
