"""The cache root and atomic on-disk caches of numpy arrays: a directory of ``<name>.npy`` files and a manifest with CRC32s.

Used by the sequence cache, the CTR sample cache, the frozen evaluation negatives, the item-feature tables
and the LM token cache. Writes go to a temporary
directory that is renamed into place; reads verify every file's size and CRC32, so a truncated or altered
cache is reported (ValueError) and its owner rebuilds it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zlib
from pathlib import Path

import numpy as np

_CACHE_VERSION = 1


def resolve_cache_dir(cache_dir: str | Path | None) -> Path:
    """``cache_dir``, else ``$SEQREC_CACHE``, else the user cache dir (``~/.cache/seqrec``); created if absent."""
    import platformdirs

    if cache_dir is not None:
        path = Path(cache_dir).expanduser()
    elif os.environ.get("SEQREC_CACHE"):
        path = Path(os.environ["SEQREC_CACHE"]).expanduser()
    else:
        path = Path(platformdirs.user_cache_dir("seqrec"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _crc32(path: Path) -> int:
    """CRC32 of a file, streamed (a 500 MB cache checks in about a second)."""
    value = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 24):
            value = zlib.crc32(chunk, value)
    return value


def save_arrays(directory: str | Path, arrays: dict[str, np.ndarray], meta: dict | None = None) -> None:
    """Write ``arrays`` as ``<name>.npy`` plus ``manifest.json`` (CRC32s) into ``directory`` atomically."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        manifest: dict = {"version": _CACHE_VERSION, "meta": meta or {}, "arrays": {}}
        for name, array in arrays.items():
            path = tmp / f"{name}.npy"
            np.save(path, np.asarray(array.astype(str) if array.dtype.kind in "OU" else array), allow_pickle=False)
            manifest["arrays"][name] = {"crc32": _crc32(path), "bytes": path.stat().st_size}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def load_arrays(directory: str | Path) -> tuple[dict[str, np.ndarray], dict]:
    """Read a directory written by ``save_arrays``; ValueError when anything is missing or altered."""
    directory = Path(directory)
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"array cache {directory} has no readable manifest.json ({error})") from error
    if manifest.get("version") != _CACHE_VERSION:
        raise ValueError(f"array cache {directory} has format {manifest.get('version')}, need {_CACHE_VERSION}")
    arrays = {}
    for name, expected in manifest["arrays"].items():
        path = directory / f"{name}.npy"
        if not path.exists() or path.stat().st_size != expected["bytes"] or _crc32(path) != expected["crc32"]:
            raise ValueError(f"array cache file {path} is missing or does not match its manifest")
        arrays[name] = np.load(path, allow_pickle=False)
    return arrays, manifest.get("meta", {})
