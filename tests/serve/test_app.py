"""The HTTP API: replaying a history event by event gives the offline evaluation's ranks and lists
(``NextItemTask.ranks``, ``seqrec.load_run(...).recommend``, ``python -m seqrec predict``; the CTR task's logits),
for LRURec, SASRec, BERT4Rec (max_len - 1 events and its [mask] everywhere) and the CTR transformer behind a
compression wrapper at 100%; and the API's contract:
unknown items and users, one-line validation errors, retries, batches, health, OpenAPI, shutdown flushing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install 'seqrec[serve]')")
pytest.importorskip("httpx", reason="the serve extra is not installed (pip install 'seqrec[serve]')")

import pyarrow.csv as pa_csv  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

import seqrec  # noqa: E402
from seqrec.__main__ import main  # noqa: E402
from seqrec.api import left_padded_windows  # noqa: E402
from seqrec.data.examples import EvalQueries  # noqa: E402
from seqrec.serve.app import create_app  # noqa: E402
from seqrec.serve.service import Serving  # noqa: E402
from seqrec.serve.store import MemoryStore, SQLiteStore  # noqa: E402

QUERIES = 12  # test queries replayed per model


def client_for(run, store=None, **kwargs) -> TestClient:
    return TestClient(create_app(Serving.from_run(run, store or MemoryStore(), **kwargs)))


def replay(client, user, items) -> None:
    for n, item in enumerate(items):
        response = client.post(f"/v1/users/{user}/events", json={"item": item, "seq": n})
        assert response.status_code == 200, response.text
        assert response.json() == [{"user": user, "events": n + 1, "applied": True}]


@pytest.mark.parametrize("name", ["lru", "sasrec", "bert4rec"])
def test_replayed_histories_rank_as_the_offline_evaluation_recommend_and_predict(serve_runs, name, tmp_path):
    run = seqrec.load_run(serve_runs[name], threads=1)
    sequences, test = run.sequences, run.datamodule.split.test
    users = test.user[:QUERIES]
    windows = left_padded_windows(sequences.items, test.start[:QUERIES], test.stop[:QUERIES], run.max_len)
    queries = EvalQueries(sequences.items, test, run.datamodule.history_len)  # the evaluation's own windows
    assert all(np.array_equal(windows[q], queries[q]["items"].numpy()) for q in range(QUERIES))
    with run.inference():  # the offline evaluation's ranks of the test targets (NextItemTask.ranks)
        offline = run.task.ranks({"items": torch.from_numpy(windows), "target": torch.from_numpy(test.target[:QUERIES])})
    out = tmp_path / "test.csv"
    main(["predict", str(serve_runs[name]), "--users", "test", "--k", "10", "--out", str(out), "--threads", "1"])
    predicted = pa_csv.read_csv(out).to_pydict()
    num_items = sequences.num_items
    with client_for(run) as client:
        for q, row in enumerate(users):
            user = str(sequences.raw_user_ids(np.array([row]))[0])
            history = sequences.raw_item_ids(sequences.items[test.start[q]:test.stop[q]]).tolist()
            replay(client, user, history)
            full = client.get(f"/v1/users/{user}/topk", params={"k": num_items, "exclude_seen": "window"}).json()["items"]
            target = sequences.raw_item_ids(np.array([test.target[q]]))[0].item()
            served_rank = next(r["rank"] for r in full if r["item"] == target)
            assert served_rank == int(offline[q]), (user, served_rank, int(offline[q]))
            top = client.get(f"/v1/users/{user}/topk", params={"k": 10, "exclude_seen": "window"}).json()["items"]
            expected = run.recommend({user: history}, k=10, exclude_seen="window")[user]
            assert [r["item"] for r in top] == [item for item, _ in expected]
            assert np.allclose([r["score"] for r in top], [s for _, s in expected], atol=1e-5)
            mine = [i for u, i in zip(predicted["user"], predicted["item"]) if str(u) == user]
            assert [r["item"] for r in top] == mine
            assert [r["rank"] for r in top] == [r for u, r in zip(predicted["user"], predicted["rank"]) if str(u) == user]


@pytest.mark.parametrize("compress", [None, "snapkv"])
def test_ctr_transformer_replayed_scores_and_ranks_as_offline(serve_runs, compress):
    run = seqrec.load_run(serve_runs["ctr"], threads=1)
    sequences, model = run.sequences, run.net
    if compress is not None:
        from seqrec.compress import build

        model = build(compress, model, 1.0).eval()  # 100% budget: keeps every entry
    num_items, max_len = sequences.num_items, run.max_len
    catalogue = torch.arange(1, num_items + 1)
    with client_for(run, compress=compress, budget=1.0) as client:
        info = client.get("/v1/info").json()
        assert info["adapter"] == "kv-cache" and info["family"] == "ctr"
        for row in range(6):
            user = f"user{row}"
            items = sequences.sequence(row)  # 20 events: the window (8) slides
            raw = sequences.raw_item_ids(items).tolist()
            for n, item in enumerate(raw):
                assert client.post(f"/v1/users/{user}/events", json={"item": item}).status_code == 200
                if n % 5 != 4 and n != len(raw) - 1:
                    continue
                window = torch.from_numpy(left_padded_windows(items, np.array([0]), np.array([n + 1]), max_len))
                with run.inference():
                    offline = model(window, catalogue.unsqueeze(0))[0].double()  # the CTR task's computation
                order = sorted(range(num_items), key=lambda j: (-offline[j].item(), j))
                served = client.get(f"/v1/users/{user}/topk", params={"k": num_items, "exclude_seen": "none"}).json()["items"]
                assert [r["item"] for r in served] == sequences.raw_item_ids(np.array(order) + 1).tolist()
                ranks = [1 + int((offline > offline[j]).sum()) for j in order]
                assert [r["rank"] for r in served] == ranks
                assert np.allclose([r["score"] for r in served], offline[order].numpy(), atol=1e-5)
                scored = client.post(f"/v1/users/{user}/score", json={"items": raw[:3]}).json()["items"]
                probability = torch.sigmoid(offline[items[:3] - 1]).numpy()
                assert np.allclose([s["probability"] for s in scored], probability, atol=1e-6)


def test_the_api_contract(serve_runs, tmp_path):
    run = seqrec.load_run(serve_runs["lru"], threads=1)
    store = SQLiteStore(tmp_path / "state.sqlite")
    items = run.sequences.raw_item_ids(run.sequences.sequence(0)).tolist()
    with client_for(run, store) as client:
        health = client.get("/health").json()
        assert health["status"] == "ok" and health["adapter"] == "recurrent" and health["store"] == "sqlite"
        assert {"/v1/users/{user}/events", "/v1/users/{user}/topk", "/v1/events", "/v1/topk",
                "/v1/users/{user}/score"} <= set(client.get("/openapi.json").json()["paths"])
        assert client.get("/docs").status_code == 200
        # an unknown user starts empty; it has no recommendations until its first event
        assert client.get("/v1/users/nobody").json()["events"] == 0
        missing = client.get("/v1/users/nobody/topk")
        assert missing.status_code == 404 and "has no events yet" in missing.json()["error"]
        # an unknown item is a 404 naming it, and nothing is applied
        bad = client.post("/v1/users/alice/events", json={"items": [items[0], "no-such-item"]})
        assert bad.status_code == 404 and bad.json() == {"error": "unknown item 'no-such-item': not in this model's "
                                                                  f"catalogue of {run.sequences.num_items} items"}
        assert client.get("/v1/users/alice").json()["events"] == 0
        # validation: one line, where and what
        for body, where in (({}, "body: Value error, give exactly one of item and items"),
                            ({"item": items[0], "items": [items[0]]}, "body: Value error, give exactly one of item and items"),
                            ({"item": items[0], "seq": -1}, "seq: Input should be greater than or equal to 0")):
            response = client.post("/v1/users/alice/events", json=body)
            assert response.status_code == 422 and response.json() == {"error": where}
        response = client.get("/v1/users/alice/topk", params={"k": 0})
        assert response.status_code == 422 and response.json()["error"].startswith("query.k: Input should be greater")
        response = client.post("/v1/topk", json={"users": ["alice"], "exclude_seen": "sometimes"})
        assert response.status_code == 422 and "\n" not in response.json()["error"]
        # events with their numbers: a retry is acknowledged without being applied twice; a gap is refused
        replay(client, "alice", items[:5])
        retry = client.post("/v1/users/alice/events", json={"items": items[3:6], "seq": 3})
        assert [a["applied"] for a in retry.json()] == [False, False, True] and retry.json()[-1]["events"] == 6
        gap = client.post("/v1/users/alice/events", json={"item": items[7], "seq": 9})
        assert gap.status_code == 409 and "would leave a gap" in gap.json()["error"]
        alone = client.get("/v1/users/alice/topk", params={"k": 5}).json()["items"]
        assert not {r["item"] for r in alone} & set(items[:6])  # exclude_seen=all by default
        # batches: several users in one request equal the same events one by one
        batch = [{"user": u, "item": item} for item in items[:6] for u in ("b1", "b2")]
        assert len(client.post("/v1/events", json={"events": batch}).json()) == 12
        lists = client.post("/v1/topk", json={"users": ["alice", "b1", "b2"], "k": 5}).json()
        for row in lists:  # the same lists; scores to float precision (batched products)
            assert [(r["item"], r["rank"]) for r in row["items"]] == [(r["item"], r["rank"]) for r in alone]
            assert np.allclose([r["score"] for r in row["items"]], [r["score"] for r in alone], atol=1e-5)
            assert "probability" not in row["items"][0]  # a next-item model has no click probability
        scores = client.post("/v1/users/alice/score", json={"items": [alone[0]["item"], alone[1]["item"]]}).json()["items"]
        assert np.allclose([s["score"] for s in scores], [alone[0]["score"], alone[1]["score"]], atol=1e-5)
        assert client.delete("/v1/users/b2").json() == {"user": "b2", "forgotten": True}
        assert client.get("/v1/users/b2").json()["events"] == 0
        stats = client.get("/v1/info").json()
        assert stats["store"]["users"] == 2 and stats["counters"]["events"] == 6 + 12 and stats["counters"]["duplicates"] == 2
    # leaving the client shuts the app down: the store is flushed (WAL checkpointed) and closed
    wal = tmp_path / "state.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    again = SQLiteStore(tmp_path / "state.sqlite")
    assert again.load("alice").seen == run.item_rows(items[:6]).tolist()
    again.close()


def test_serving_takes_the_item_map_precision_and_session_of_the_run(serve_runs):
    """One owner: what serving looks items up in, the precision it runs under and the recurrent session it steps
    are the loaded run's own (``TrainedRun``), not copies."""
    run = seqrec.load_run(serve_runs["lru"], threads=1)
    serving = Serving.from_run(run, MemoryStore())
    assert serving.catalogue is run.items and serving.adapter.session is run.session
    assert serving._inference_context == run.autocast
    sasrec = Serving.from_run(seqrec.load_run(serve_runs["sasrec"], threads=1), MemoryStore())
    assert sasrec.adapter.name == "recompute" and not hasattr(sasrec.adapter, "session")


def test_the_readme_serving_commands(serve_runs, tmp_path):
    """The README's "Serving" block: each curl line, sent to the app serving the fixture LRURec run."""
    import re
    import shlex
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text[text.index("## Serving"):]
    block = re.search(r"```bash\n(.*?)```", section[: section.index("\n## ", 1)], re.S).group(1)
    lines = [shlex.split(line.split("  #")[0]) for line in block.splitlines() if line.startswith("curl")]
    assert block.startswith(".venv/bin/seqrec serve runs/lru_interactions") and len(lines) == 5
    run = seqrec.load_run(serve_runs["lru"], threads=1)
    with client_for(run, SQLiteStore(tmp_path / "state.sqlite")) as client:
        answers = []
        for words in lines:
            method = words[words.index("-X") + 1] if "-X" in words else "GET"
            url = next(w for w in words if w.startswith("localhost:8000")).removeprefix("localhost:8000")
            body = words[words.index("-d") + 1] if "-d" in words else None
            response = client.request(method, url, content=body, headers={"content-type": "application/json"})
            assert response.status_code == 200, (words, response.text)
            answers.append(response.json())
    assert answers[1][-1] == {"user": "alice", "events": 3, "applied": True}
    assert len(answers[2]["items"]) == 10 and not {"m35", "m36", "m37"} & {r["item"] for r in answers[2]["items"]}
    assert answers[4] == {"user": "alice", "forgotten": True}
