"""seqrec.data.download: checksums, atomic writes, offline errors, pip fallback, zip extraction.

No test touches the network: downloads come from a loopback HTTP server thread or file:// URLs.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import socket
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from seqrec.data import download
from seqrec.data.download import (
    DownloadError,
    extract_member,
    fetch,
    md5_of,
    pip_download,
    read_sidecar,
    sha256_of,
    sidecar_path,
)


class _Server:
    """A loopback HTTP server serving ``files`` (path → bytes) and counting requests."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.requests: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                server.requests.append(self.path)
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server()
    yield srv
    srv.close()


@pytest.fixture(autouse=True)
def _online(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEQREC_OFFLINE", raising=False)


def _closed_port_url(path: str = "/file.bin") -> str:
    """A loopback URL nobody listens on: connection refused, instantly."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}{path}"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".part") or p.name.startswith("."))


def test_digest_helpers_match_hashlib(tmp_path: Path) -> None:
    data = bytes(range(256)) * 9000  # > 1 chunk
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert sha256_of(path) == _sha(data)
    assert md5_of(path) == _md5(data)


def test_fetch_lands_atomically_and_second_call_uses_cache(server: _Server, tmp_path: Path) -> None:
    payload = b"user item\n" * 1000
    server.files["/data.txt"] = payload
    dest = tmp_path / "cache" / "data.txt"
    got = fetch(server.url("/data.txt"), dest, sha256=_sha(payload))
    assert got == dest and dest.read_bytes() == payload
    assert server.requests == ["/data.txt"]
    assert _leftovers(dest.parent) == []
    # A second call verifies the cached file and does no network I/O.
    server.files.clear()
    assert fetch(server.url("/data.txt"), dest, sha256=_sha(payload)) == dest
    assert server.requests == ["/data.txt"]


def test_fetch_file_url(tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(b"hello")
    dest = tmp_path / "out" / "dest.bin"
    fetch(src.as_uri(), dest, sha256=_sha(b"hello"), md5=_md5(b"hello"))
    assert dest.read_bytes() == b"hello"
    src.unlink()  # the source is gone: only the cache can answer now
    assert fetch(src.as_uri(), dest, sha256=_sha(b"hello")) == dest


def test_checksum_mismatch_keeps_existing_file(server: _Server, tmp_path: Path) -> None:
    server.files["/f"] = b"new content from the server"
    dest = tmp_path / "f"
    dest.write_bytes(b"old content")
    wanted = _sha(b"what the registry says")
    with pytest.raises(ValueError) as info:
        fetch(server.url("/f"), dest, sha256=wanted)
    message = str(info.value)
    assert server.url("/f") in message
    assert wanted in message and _sha(b"new content from the server") in message
    assert dest.read_bytes() == b"old content"  # not replaced
    assert _leftovers(tmp_path) == []  # temp file deleted
    assert len(server.requests) == 1  # it did try: the existing file did not verify


def test_md5_mismatch_names_md5(server: _Server, tmp_path: Path) -> None:
    server.files["/f"] = b"abc"
    with pytest.raises(ValueError, match="md5"):
        fetch(server.url("/f"), tmp_path / "f", md5="0" * 32)
    assert not (tmp_path / "f").exists()


def test_network_failure_is_a_clear_oserror(tmp_path: Path) -> None:
    url = _closed_port_url("/ml-100k.zip")
    dest = tmp_path / "raw" / "ml-100k.zip"
    with pytest.raises(DownloadError) as info:
        fetch(url, dest, sha256="0" * 64, timeout=5)
    assert isinstance(info.value, OSError)
    message = str(info.value)
    assert url in message and str(dest) in message
    assert "place it at" in message and "SEQREC_CACHE" in message
    assert not dest.exists() and _leftovers(dest.parent) == []


def test_http_error_is_a_download_error(server: _Server, tmp_path: Path) -> None:
    with pytest.raises(DownloadError, match="404"):
        fetch(server.url("/missing"), tmp_path / "x")


def test_offline_env_never_touches_network(server: _Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server.files["/f"] = b"x"
    monkeypatch.setenv("SEQREC_OFFLINE", "1")
    with pytest.raises(DownloadError, match="SEQREC_OFFLINE"):
        fetch(server.url("/f"), tmp_path / "f")
    assert server.requests == []


def test_md5_only_records_sha256_sidecar_and_checks_it(server: _Server, tmp_path: Path) -> None:
    payload = b"only an md5 is published for this file"
    server.files["/f"] = payload
    dest = tmp_path / "f"
    fetch(server.url("/f"), dest, md5=_md5(payload))
    assert read_sidecar(dest) == _sha(payload)
    assert sidecar_path(dest).read_text().split() == [_sha(payload), "f"]
    fetch(server.url("/f"), dest, md5=_md5(payload))
    assert len(server.requests) == 1
    # Corrupt the cached copy: it no longer matches the recorded sha256, so it is fetched again.
    dest.write_bytes(b"corrupted")
    fetch(server.url("/f"), dest, md5=_md5(payload))
    assert dest.read_bytes() == payload and len(server.requests) == 2


def test_wrong_recorded_sha256_forces_refetch(server: _Server, tmp_path: Path) -> None:
    payload = b"payload"
    server.files["/f"] = payload
    dest = tmp_path / "f"
    dest.write_bytes(payload)
    download.write_sidecar(dest, "f" * 64)  # a wrong recorded digest makes the cache untrusted
    fetch(server.url("/f"), dest, md5=_md5(payload))
    assert len(server.requests) == 1


def test_no_checksum_trusts_first_download(server: _Server, tmp_path: Path) -> None:
    server.files["/f"] = b"v1"
    dest = tmp_path / "f"
    fetch(server.url("/f"), dest)
    assert read_sidecar(dest) == _sha(b"v1")
    fetch(server.url("/f"), dest)
    assert len(server.requests) == 1


# --- extract_member ---------------------------------------------------------------------------------


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def test_extract_member_verifies_and_is_atomic(tmp_path: Path) -> None:
    archive = _zip(tmp_path / "a.zip", {"dir/x.txt": b"inside"})
    dest = tmp_path / "out" / "x.txt"
    assert extract_member(archive, "dir/x.txt", dest, sha256=_sha(b"inside")).read_bytes() == b"inside"
    dest.write_bytes(b"previous")
    with pytest.raises(ValueError, match="Checksum mismatch"):
        extract_member(archive, "dir/x.txt", dest, sha256="0" * 64)
    assert dest.read_bytes() == b"previous"
    assert _leftovers(dest.parent) == []


def test_extract_member_missing_member(tmp_path: Path) -> None:
    archive = _zip(tmp_path / "a.zip", {"other/x.txt": b"1"})
    with pytest.raises(FileNotFoundError, match=r"no member 'dir/x.txt'.*other/x.txt"):
        extract_member(archive, "dir/x.txt", tmp_path / "x.txt")


# --- pip_download -----------------------------------------------------------------------------------


class _FakePip:
    """Stands in for ``subprocess.run(pip download ...)``: writes a wheel into the ``-d`` directory."""

    def __init__(self, wheel_name: str, content: bytes, returncode: int = 0) -> None:
        self.wheel_name, self.content, self.returncode = wheel_name, content, returncode
        self.calls: list[list[str]] = []

    def __call__(self, cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        self.calls.append(cmd)
        if self.returncode == 0:
            target = Path(cmd[cmd.index("-d") + 1]) / self.wheel_name
            target.write_bytes(self.content)
            return subprocess.CompletedProcess(cmd, 0, "", "")
        return subprocess.CompletedProcess(cmd, self.returncode, "", "ERROR: Could not find a version\n")


def test_pip_download_moves_verified_wheel_and_reuses_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakePip("demo_pkg-1.0-py3-none-any.whl", b"wheel bytes")
    monkeypatch.setattr(download.subprocess, "run", fake)
    dest_dir = tmp_path / "wheels"
    wheel = pip_download("demo-pkg==1.0", dest_dir, sha256=_sha(b"wheel bytes"))
    assert wheel == dest_dir / "demo_pkg-1.0-py3-none-any.whl" and wheel.read_bytes() == b"wheel bytes"
    cmd = fake.calls[0]
    assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd and ":all:" in cmd
    assert cmd[-1] == "demo-pkg==1.0"
    assert sorted(p.name for p in dest_dir.iterdir()) == [wheel.name]  # temp dir cleaned up
    assert pip_download("demo-pkg==1.0", dest_dir, sha256=_sha(b"wheel bytes")) == wheel
    assert len(fake.calls) == 1  # cached: pip not run again


def test_pip_download_checksum_mismatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(download.subprocess, "run", _FakePip("demo-1.0-py3-none-any.whl", b"tampered"))
    with pytest.raises(ValueError) as info:
        pip_download("demo==1.0", tmp_path, sha256="a" * 64)
    assert "a" * 64 in str(info.value) and _sha(b"tampered") in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_pip_download_failure_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(download.subprocess, "run", _FakePip("x.whl", b"", returncode=1))
    with pytest.raises(DownloadError) as info:
        pip_download("demo==1.0", tmp_path)
    message = str(info.value)
    assert "Could not find a version" in message and "pip download --no-deps" in message and str(tmp_path) in message


def test_downloads_and_extractions_are_readable_by_other_users(tmp_path: Path) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(b"payload")
    mask = os.umask(0o022)
    os.umask(mask)
    dest = fetch(source.as_uri(), tmp_path / "cache" / "file.bin")
    archive = _zip(tmp_path / "a.zip", {"dir/x.txt": b"inside"})
    member = extract_member(archive, "dir/x.txt", tmp_path / "cache" / "x.txt")
    for path in (dest, member, sidecar_path(dest)):
        assert path.stat().st_mode & 0o777 == 0o666 & ~mask, path  # not mkstemp's 0600


def test_a_corrupt_zip_member_names_the_archive(tmp_path: Path) -> None:
    archive = _zip(tmp_path / "a.zip", {"dir/x.txt": b"inside" * 1000})
    data = bytearray(archive.read_bytes())
    start = data.index(b"dir/x.txt") + len("dir/x.txt")  # the local header's name, then the stored data
    data[start + 10] ^= 0xFF
    archive.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"a.zip is corrupt .*dir/x.txt.*fetch it again"):
        extract_member(archive, "dir/x.txt", tmp_path / "x.txt")
    assert not (tmp_path / "x.txt").exists() and _leftovers(tmp_path) == []
