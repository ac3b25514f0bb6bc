"""Downloads with checksums: atomic writes into the cache, offline fallbacks, errors that say what to do.

Every file lands through a temporary file in the destination's own directory, fsynced, given the
umask's mode (``mkstemp`` would leave 0600, unreadable to the other users of a shared cache) and moved
into place with ``os.replace``, so a reader never sees half a file and an interrupted download leaves
nothing behind. A checksum mismatch
never replaces a good file. Where only an md5 is published, the sha256 computed on first download is
kept in a sidecar ``<dest>.sha256`` and checked on every later use (trust on first use).

Set ``SEQREC_OFFLINE=1`` to fail at once instead of trying the network (the offline fallbacks of the
sources still run).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from pathlib import Path

from seqrec.atomic import atomic_write
from seqrec.data.array_cache import CACHE_HINT, CacheNotWritable, unwritable

log = logging.getLogger(__name__)

_CHUNK = 1 << 20
_USER_AGENT = "seqrec-download/0.1 (+https://pypi.org/project/seqrec)"


class DownloadError(OSError):
    """A file could not be fetched (network unreachable, HTTP error, registry failure)."""


def _digests(path: str | os.PathLike, algorithms: tuple[str, ...]) -> dict[str, str]:
    """Hex digests of one file for several algorithms, in one streaming pass."""
    hashers = {name: hashlib.new(name) for name in algorithms}
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            for h in hashers.values():
                h.update(chunk)
    return {name: h.hexdigest() for name, h in hashers.items()}


def sha256_of(path: str | os.PathLike) -> str:
    """SHA-256 hex digest of a file, read in 1 MiB chunks."""
    return _digests(path, ("sha256",))["sha256"]


def md5_of(path: str | os.PathLike) -> str:
    """MD5 hex digest of a file, read in 1 MiB chunks."""
    return _digests(path, ("md5",))["md5"]


def sidecar_path(dest: str | os.PathLike) -> Path:
    """Where the recorded sha256 of ``dest`` lives: ``<dest>.sha256``."""
    dest = Path(dest)
    return dest.with_name(dest.name + ".sha256")


def read_sidecar(dest: str | os.PathLike) -> str | None:
    """The sha256 recorded next to ``dest``, or None when there is none."""
    path = sidecar_path(dest)
    if not path.is_file():
        return None
    text = path.read_text().strip().split()
    return text[0].lower() if text else None


def write_sidecar(dest: str | os.PathLike, sha256: str) -> Path:
    """Record ``sha256`` for ``dest`` in ``<dest>.sha256`` (atomically, ``sha256sum`` format)."""
    dest = Path(dest)
    path = sidecar_path(dest)
    _atomic_write_bytes(path, f"{sha256}  {dest.name}\n".encode())
    return path


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _finish(tmp: str | os.PathLike) -> None:
    """fsync a finished temporary file and give it the umask's mode (mkstemp creates 0600)."""
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.chmod(tmp, 0o666 & ~_umask())


def _temporary(dest: Path, suffix: str = ".part") -> tuple[int, str]:
    """``mkstemp`` beside ``dest`` (its folder created); a read-only or full cache says what to set."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        return tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=suffix)
    except OSError as error:
        if unwritable(error):
            raise CacheNotWritable(f"cannot write {dest} ({error.strerror or error}): {CACHE_HINT}") from None
        raise


def _check(actual: dict[str, str], expected: dict[str, str | None]) -> tuple[str, str, str] | None:
    """First (algorithm, expected, actual) that disagrees, or None when all given digests match."""
    for name, want in expected.items():
        if want is not None and actual[name] != want.lower():
            return name, want.lower(), actual[name]
    return None


def verify(path: str | os.PathLike, *, sha256: str | None = None, md5: str | None = None) -> str:
    """Check ``path`` against the given digests; return its sha256; ValueError on mismatch."""
    actual = _digests(path, ("sha256", "md5") if md5 else ("sha256",))
    bad = _check(actual, {"sha256": sha256, "md5": md5})
    if bad is not None:
        name, want, got = bad
        raise ValueError(
            f"Checksum mismatch for {path}: expected {name} {want}, found {got}. "
            f"The file is corrupt or a different version; delete it and fetch it again."
        )
    return actual["sha256"]


def _existing_is_valid(dest: Path, sha256: str | None, md5: str | None) -> bool:
    """True when ``dest`` exists and matches the known digests (or its recorded sidecar sha256)."""
    if not dest.is_file():
        return False
    recorded = read_sidecar(dest)
    want_sha = sha256 or recorded
    actual = _digests(dest, ("sha256", "md5") if md5 else ("sha256",))
    bad = _check(actual, {"sha256": want_sha, "md5": md5})
    if bad is not None:
        name, want, got = bad
        log.warning("%s exists but its %s is %s, expected %s; fetching it again", dest, name, got, want)
        return False
    if sha256 is None and recorded is None:
        # No sha256 known yet (md5 only, or nothing published): record it now (trust on first use).
        try:
            write_sidecar(dest, actual["sha256"])
            log.info("Recorded sha256 %s for %s in %s", actual["sha256"], dest, sidecar_path(dest))
        except OSError as error:  # a read-only shared cache: use the file, record nothing
            log.warning("could not record the sha256 of %s (%s)", dest, error.strerror or error)
    return True


def offline() -> bool:
    """True when ``SEQREC_OFFLINE`` is set to a true value: never touch the network."""
    return os.environ.get("SEQREC_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def manual_fix(url: str, dest: Path) -> str:
    """The instruction every download error ends with."""
    return (
        f"Download {url} on a machine with access and place it at {dest} (it is verified and used "
        f"as is), or set SEQREC_CACHE to a cache directory that already holds it."
    )


def fetch(
    url: str,
    dest: str | os.PathLike,
    *,
    sha256: str | None = None,
    md5: str | None = None,
    timeout: float = 60,
) -> Path:
    """Download ``url`` to ``dest`` atomically and verify it; reuse ``dest`` if it already verifies.

    Raises ``ValueError`` on a checksum mismatch (``dest`` is left as it was) and ``DownloadError``
    (an ``OSError``) when the network fails, naming the URL, the destination and the manual fix.
    """
    dest = Path(dest)
    if _existing_is_valid(dest, sha256, md5):
        log.debug("Using cached %s", dest)
        return dest
    if offline():
        raise DownloadError(f"SEQREC_OFFLINE is set, not downloading {url} to {dest}. {manual_fix(url, dest)}")

    fd, tmp_name = _temporary(dest)
    tmp = Path(tmp_name)
    hashers = {"sha256": hashlib.sha256(), "md5": hashlib.md5()}
    log.info("Downloading %s to %s", url, dest)
    try:
        try:
            request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
            with urllib.request.urlopen(request, timeout=timeout) as response, os.fdopen(fd, "wb") as out:
                fd = -1
                while chunk := response.read(_CHUNK):
                    out.write(chunk)
                    for h in hashers.values():
                        h.update(chunk)
        except (urllib.error.URLError, OSError, ValueError) as e:
            if isinstance(e, urllib.error.HTTPError):
                reason: object = f"HTTP {e.code} {e.reason}"
            else:
                reason = getattr(e, "reason", None) or e
            raise DownloadError(f"Could not download {url} to {dest}: {reason}. {manual_fix(url, dest)}") from e
        actual = {name: h.hexdigest() for name, h in hashers.items()}
        bad = _check(actual, {"sha256": sha256, "md5": md5})
        if bad is not None:
            name, want, got = bad
            raise ValueError(
                f"Checksum mismatch for {url}: expected {name} {want}, got {got}. "
                f"Nothing was written to {dest}. The server may serve a different version of the file: "
                f"check the URL and the expected checksum. {manual_fix(url, dest)}"
            )
        _finish(tmp)
        os.replace(tmp, dest)
    finally:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    if sha256 is None:
        write_sidecar(dest, actual["sha256"])
        log.info("Recorded sha256 %s for %s (no sha256 published)", actual["sha256"], dest)
    return dest


_PINNED = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9._+!-]+)\s*$")


def _cached_wheel(requirement: str, dest_dir: Path, sha256: str | None) -> Path | None:
    """A wheel for a pinned ``name==version`` already in ``dest_dir`` that verifies, else None."""
    match = _PINNED.match(requirement)
    if match is None:
        return None
    name = re.sub(r"[-_.]+", "_", match.group(1)).lower()
    version = match.group(2)
    for path in sorted(dest_dir.glob("*.whl")):
        parts = path.name.split("-")
        if len(parts) >= 3 and re.sub(r"[-_.]+", "_", parts[0]).lower() == name and parts[1] == version:
            want = sha256 or read_sidecar(path)
            if want is not None and sha256_of(path) == want.lower():
                return path
    return None


def pip_download(
    requirement: str,
    dest_dir: str | os.PathLike,
    *,
    sha256: str | None = None,
    timeout: float = 600,
) -> Path:
    """Fetch one wheel from the package registry with ``pip download`` into ``dest_dir``; verify it.

    Runs ``sys.executable -m pip download --no-deps --only-binary :all:`` into a temporary directory
    inside ``dest_dir`` and moves the wheel into place atomically. A pinned wheel already in
    ``dest_dir`` that verifies is reused without touching the network.
    """
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    cached = _cached_wheel(requirement, dest_dir, sha256)
    if cached is not None:
        log.debug("Using cached wheel %s", cached)
        return cached
    fix = (
        f"Run `pip download --no-deps --only-binary :all: '{requirement}'` on a machine with access "
        f"to the package index and put the wheel into {dest_dir}."
    )
    if offline():
        raise DownloadError(f"SEQREC_OFFLINE is set, not downloading {requirement!r}. {fix}")
    tmp_dir = Path(tempfile.mkdtemp(dir=dest_dir, prefix=".pip-download-"))
    try:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               "--disable-pip-version-check", "--quiet", "-d", str(tmp_dir), requirement]
        log.info("Fetching %s from the package index: %s", requirement, " ".join(cmd))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise DownloadError(f"pip download of {requirement!r} failed to run: {e}. {fix}") from e
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise DownloadError(
                f"pip download of {requirement!r} failed (exit {proc.returncode}): {' | '.join(tail)}. {fix}"
            )
        wheels = sorted(tmp_dir.glob("*.whl"))
        if len(wheels) != 1:
            found = sorted(p.name for p in tmp_dir.iterdir())
            raise DownloadError(f"pip download of {requirement!r} produced {found}, expected one wheel. {fix}")
        wheel = wheels[0]
        actual = sha256_of(wheel)
        if sha256 is not None and actual != sha256.lower():
            raise ValueError(
                f"Checksum mismatch for {wheel.name} ({requirement!r} from the package index): "
                f"expected sha256 {sha256.lower()}, got {actual}. Nothing was written to {dest_dir}."
            )
        target = dest_dir / wheel.name
        os.replace(wheel, target)
        if sha256 is None:
            write_sidecar(target, actual)
        return target
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def extract_member(
    zip_path: str | os.PathLike,
    member: str,
    dest: str | os.PathLike,
    *,
    sha256: str | None = None,
) -> Path:
    """Extract one member of a zip archive to ``dest`` atomically, verifying ``sha256`` if given.

    With ``sha256`` given and ``dest`` already matching, nothing is extracted.
    """
    dest = Path(dest)
    if sha256 is not None and dest.is_file() and sha256_of(dest) == sha256.lower():
        return dest
    try:
        archive = zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise ValueError(f"{zip_path} is not a valid zip archive ({e}); delete it and fetch it again.") from e
    with archive:
        try:
            info = archive.getinfo(member)
        except KeyError:
            names = archive.namelist()
            similar = [n for n in names if Path(n).name == Path(member).name]
            raise FileNotFoundError(
                f"{zip_path} has no member {member!r}"
                + (f" (found {similar})" if similar else f" ({len(names)} members, e.g. {names[:5]})")
                + "; the archive is not the expected version."
            ) from None
        fd, tmp_name = _temporary(dest)
        h = hashlib.sha256()
        try:
            try:
                with archive.open(info) as src, os.fdopen(fd, "wb") as out:
                    while chunk := src.read(_CHUNK):
                        out.write(chunk)
                        h.update(chunk)
            except (zipfile.BadZipFile, zlib.error, EOFError) as e:
                raise ValueError(f"{zip_path} is corrupt ({member}: {e}); delete it and fetch it again.") from None
            if sha256 is not None and h.hexdigest() != sha256.lower():
                raise ValueError(
                    f"Checksum mismatch for {member} in {zip_path}: expected sha256 {sha256.lower()}, "
                    f"got {h.hexdigest()}. Nothing was written to {dest}."
                )
            _finish(tmp_name)
            os.replace(tmp_name, dest)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name)
    return dest
