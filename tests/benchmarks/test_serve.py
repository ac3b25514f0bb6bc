"""``python -m benchmarks.serve`` end to end at a tiny size, on tiny fixture runs (``tests/serve/runs.py``) placed
where the benchmark looks for its runs: it replays over HTTP at two concurrency levels, sweeps history lengths,
and writes the report and the PNG."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.serve import main
from tests.serve.runs import train

pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install 'seqrec[serve]')")
pytest.importorskip("httpx", reason="the serve extra is not installed (pip install 'seqrec[serve]')")


pytestmark = pytest.mark.slow  # trains two runs, then servers over HTTP for seconds


@pytest.fixture(scope="module")
def serve_runs(tmp_path_factory) -> dict[str, Path]:
    """Run directories of the tiny lru and ctr runs of ``tests/serve/runs.py`` (their caches in a private folder)."""
    root = tmp_path_factory.mktemp("bench-serve-runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SEQREC_CACHE", str(root / "cache"))
        return {name: train(root, name) for name in ("lru", "ctr")}


def test_bench_serve_smoke(tmp_path, serve_runs):
    runs = tmp_path / "runs"
    for name, experiment in (("lru", "lru_ml1m"), ("ctr", "ctr_transformer_ml1m")):
        shutil.copytree(serve_runs[name], runs / experiment / "version_0")
    data = serve_runs["ctr"].parents[2] / "pairs.txt"  # --data must exist; the runs are there already
    out = tmp_path / "SERVING.md"
    figures = main(["--data", str(data), "--runs_dir", str(runs), "--models", "lru,ctr",
                    "--clients", "1,2", "--events", "4", "--seconds", "30", "--lengths", "5,20", "--sweep_events", "3",
                    "--budgets", "0.5", "--sync", "normal", "--hostile_seconds", "0.5", "--out", str(out),
                    "--json", str(tmp_path / "serving.json")])
    text = out.read_text()
    assert "Smoke-size run" in text and "| LRURec (stored state) | recurrent | 20 |" in text and "Goal (LRURec" in text
    assert (tmp_path / "serving_latency.png").stat().st_size > 10_000
    served = {s["model"]: s for s in figures["served"]}
    assert [(name, s["adapter"]) for name, s in served.items()] == [
        ("lru", "recurrent"), ("ctr", "kv-cache"), ("ctr+snapkv@50%", "kv-compressed")]
    for s in served.values():
        assert [level["clients"] for level in s["levels"]] == [1, 2] and all(lv["events"] == 4 for lv in s["levels"])
        assert s["users"] == 8 and s["file_bytes_per_user"] > s["blob_bytes_per_user"] > 0
        assert 0.0 <= s["levels"][0]["hr10"] <= 1.0 and s["peak_rss_mb"] > 0
    assert served["lru"]["blob_bytes_per_user"] < served["ctr"]["blob_bytes_per_user"]
    sweep = json.loads((tmp_path / "serving.json").read_text())["sweep"]
    assert {r["adapter"] for r in sweep} == {"recurrent", "kv-cache", "kv-compressed"}
    kv = {r["length"]: r["state_bytes"] for r in sweep if r["adapter"] == "kv-cache"}
    assert kv[20] > kv[5]  # the KV cache grows with the history; LRURec's state does not
    assert len({r["state_bytes"] for r in sweep if r["adapter"] == "recurrent"}) == 1
    hostile = figures["hostile"]  # part 3: the largest bodies the server accepts, and the probe's 1 Mi-character id
    assert [h["status"] for h in hostile] == [404, 404, 413, None]  # None: the control, which sends no request
    assert hostile[3]["body_bytes"] == 0 and hostile[3]["peak_rss_added_mb"] is None
    assert all(h["body_bytes"] <= 256 * 1024 for h in hostile[:2]) and hostile[1]["ids"] > 20_000
    assert all(h["health_idle_p99_ms"] > 0 and h["health_p99_ms"] > 0 for h in hostile)
    assert all(h["peak_rss_added_mb"] is None or h["peak_rss_added_mb"] >= 0 for h in hostile)
    assert "## Hostile requests" in text and "Goal (/health p99 within 2x" in text and "The control row" in text
