"""The cache root and the one checksummed store of cached arrays: a directory of ``<name>.npy`` files and a manifest.

Every cache entry goes through here: preprocessed sequences, frozen evaluation negatives, item-feature
tables, CTR samples, BARS rows and LM token streams. An entry is written into a temporary directory beside
its destination (files fsynced, mode from the umask, so a cache shared between users stays readable) and
renamed into place, so a reader sees a whole entry or none. The manifest records each file's size and
CRC32 and its own CRC32; ``load_arrays`` verifies all of them, so a truncated or altered entry is reported
(``ValueError`` naming the entry) and its owner rebuilds it.

Two processes building the same entry at once (two runs on one empty cache) both write; the first rename
wins and the second keeps the entry already there when it verifies (entries are deterministic). An entry
that cannot be written (full disk, read-only cache) is skipped with a warning: the run goes on with the
arrays in memory and a later run writes it.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import tempfile
import zlib
from pathlib import Path

import numpy as np

from seqrec.atomic import fsync_directory

log = logging.getLogger(__name__)
_CACHE_VERSION = 1
_MANIFEST = "manifest.json"
_SELF_CRC = "manifest_crc32"
_UNWRITABLE = {errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EPERM, getattr(errno, "EDQUOT", errno.ENOSPC)}
CACHE_HINT = "set SEQREC_CACHE (or data.init_args.cache_dir) to a writable folder with free space"


class CacheNotWritable(PermissionError):
    """The cache folder cannot be created or written; the message names it and says what to set."""


def resolve_cache_dir(cache_dir: str | Path | None) -> Path:
    """``cache_dir``, else ``$SEQREC_CACHE``, else the user cache dir (``~/.cache/seqrec``); created if absent."""
    import platformdirs

    if cache_dir is not None:
        path = Path(cache_dir).expanduser()
    elif os.environ.get("SEQREC_CACHE"):
        path = Path(os.environ["SEQREC_CACHE"]).expanduser()
    else:
        path = Path(platformdirs.user_cache_dir("seqrec"))
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CacheNotWritable(f"cache folder {path} cannot be created ({error.strerror or error}): {CACHE_HINT}") from None
    return path


def unwritable(error: BaseException) -> bool:
    """True for the OSErrors of a cache that cannot take a write (full disk, quota, read-only, permissions)."""
    return isinstance(error, OSError) and error.errno in _UNWRITABLE


def _crc32(path: Path) -> int:
    """CRC32 of a file, streamed (a 500 MB cache checks in about a second)."""
    value = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 24):
            value = zlib.crc32(chunk, value)
    return value


def _manifest_crc(manifest: dict) -> int:
    """CRC32 of the manifest's own content (without the field that holds it)."""
    body = {k: v for k, v in manifest.items() if k != _SELF_CRC}
    return zlib.crc32(json.dumps(body, sort_keys=True).encode())


def _fsync(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def save_arrays(directory: str | Path, arrays: dict[str, np.ndarray], meta: dict | None = None) -> bool:
    """Write ``arrays`` as ``<name>.npy`` plus ``manifest.json`` into ``directory`` atomically; True when written.

    False, with a warning naming the entry, when the cache cannot take the write (the caller goes on
    with its arrays in memory).
    """
    directory = Path(directory)
    try:
        _write_entry(directory, arrays, meta)
    except OSError as error:
        if not unwritable(error):
            raise
        log.warning("could not write cache entry %s (%s): continuing without caching it; %s",
                    directory, error.strerror or error, CACHE_HINT)
        return False
    return True


def _write_entry(directory: Path, arrays: dict[str, np.ndarray], meta: dict | None) -> None:
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".tmp", dir=directory.parent))
    try:
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700: other users of a shared cache could not read it
        manifest: dict = {"version": _CACHE_VERSION, "meta": meta or {}, "arrays": {}}
        for name, array in arrays.items():
            path = tmp / f"{name}.npy"
            np.save(path, np.asarray(array.astype(str) if array.dtype.kind in "OU" else array), allow_pickle=False)
            _fsync(path)
            manifest["arrays"][name] = {"crc32": _crc32(path), "bytes": path.stat().st_size}
        manifest[_SELF_CRC] = _manifest_crc(manifest)
        with open(tmp / _MANIFEST, "w") as handle:
            handle.write(json.dumps(manifest, indent=1))
            handle.flush()
            os.fsync(handle.fileno())
        fsync_directory(tmp)
        _install(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _install(tmp: Path, directory: Path) -> None:
    """Rename ``tmp`` to ``directory``; keep an entry another process put there first when it verifies."""
    for attempt in range(10):
        try:
            os.rename(tmp, directory)  # atomic; refuses a non-empty existing directory
            fsync_directory(directory.parent)
            return
        except OSError as error:
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        if verify_arrays(directory) is None:  # written meanwhile by another process: identical, keep it
            shutil.rmtree(tmp, ignore_errors=True)
            return
        aside = directory.with_name(f".{directory.name}.corrupt-{os.getpid()}-{attempt}")
        try:
            os.rename(directory, aside)
        except FileNotFoundError:
            continue
        shutil.rmtree(aside, ignore_errors=True)
    raise OSError(f"could not install cache entry {directory}: it keeps changing under another process")


def _read_manifest(directory: Path) -> dict:
    try:
        manifest = json.loads((directory / _MANIFEST).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"cache entry {directory} has no readable {_MANIFEST} ({error})") from None
    if not isinstance(manifest, dict) or manifest.get("version") != _CACHE_VERSION:
        version = manifest.get("version") if isinstance(manifest, dict) else None
        raise ValueError(f"cache entry {directory} has format {version}, need {_CACHE_VERSION}")
    if _SELF_CRC in manifest and manifest[_SELF_CRC] != _manifest_crc(manifest):
        raise ValueError(f"cache entry {directory}: {_MANIFEST} was altered (its checksum does not match)")
    if not isinstance(manifest.get("arrays"), dict):
        raise ValueError(f"cache entry {directory}: {_MANIFEST} lists no arrays")
    return manifest


def verify_arrays(directory: str | Path) -> str | None:
    """What is wrong with the entry at ``directory`` (missing, truncated, altered), or None when it verifies."""
    directory = Path(directory)
    try:
        manifest = _read_manifest(directory)
        for name, expected in manifest["arrays"].items():
            _check_file(directory / f"{name}.npy", expected)
    except (ValueError, KeyError, TypeError) as error:
        return str(error)
    return None


def _check_file(path: Path, expected: dict) -> None:
    if not path.is_file():
        raise ValueError(f"cache file {path} is missing")
    if path.stat().st_size != expected["bytes"]:
        raise ValueError(f"cache file {path} does not match its manifest ({path.stat().st_size} bytes, the manifest "
                         f"says {expected['bytes']}: truncated?)")
    if _crc32(path) != expected["crc32"]:
        raise ValueError(f"cache file {path} does not match its manifest (its CRC32 differs: altered or corrupt)")


def load_arrays(directory: str | Path, mmap: bool = False) -> tuple[dict[str, np.ndarray], dict]:
    """Read a directory written by ``save_arrays``; ValueError naming the entry when anything is missing or altered.

    ``mmap=True`` maps the files read-only (``np.load(mmap_mode="r")``) after their checksums pass: the arrays then
    live in the OS page cache, shared between processes and never copied into this one's memory.
    """
    directory = Path(directory)
    manifest = _read_manifest(directory)
    arrays = {}
    for name, expected in manifest["arrays"].items():
        path = directory / f"{name}.npy"
        try:
            _check_file(path, expected)
            arrays[name] = np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)
        except (KeyError, TypeError, OSError) as error:
            raise ValueError(f"cache file {path} is unreadable ({error})") from None
    return arrays, manifest.get("meta", {})
