"""Helpers for the source tests: a network-enabled environment, unreachable URLs, sha256 of bytes."""

from __future__ import annotations

import hashlib
import socket

import pytest


@pytest.fixture
def online(monkeypatch: pytest.MonkeyPatch) -> None:
    """Downloads allowed (no SEQREC_OFFLINE) and no SEQREC_CACHE: the tests pass cache_dir= themselves."""
    monkeypatch.delenv("SEQREC_OFFLINE", raising=False)
    monkeypatch.delenv("SEQREC_CACHE", raising=False)


def closed_port_url(path: str) -> str:
    """An http URL on a local port nothing listens on (a fast, offline connection failure)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}{path}"


def sha256_hex(data: bytes) -> str:
    """sha256 hex digest of ``data``."""
    return hashlib.sha256(data).hexdigest()
