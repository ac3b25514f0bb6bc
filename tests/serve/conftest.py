"""Serving fixtures: the tiny trained runs (``tests/serve/runs.py``), trained once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.serve.runs import train


@pytest.fixture(scope="session")
def serve_runs(tmp_path_factory) -> dict[str, Path]:
    """Run directories of the tiny lru, sasrec, bert4rec and ctr runs (their caches in a private folder)."""
    root = tmp_path_factory.mktemp("serve-runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SEQREC_CACHE", str(root / "cache"))
        return {name: train(root, name) for name in ("lru", "sasrec", "bert4rec", "ctr")}
