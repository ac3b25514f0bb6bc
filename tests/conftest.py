"""Shared fixtures: an isolated cache, the shared real-data folder, MovieLens-format fixtures and a tiny fit."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

SHARED_ENV = "SEQREC_SHARED_DATA"


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch) -> Path:
    """Every test writes its caches under a temporary SEQREC_CACHE, never the user's."""
    cache = tmp_path_factory.mktemp("seqrec-cache")
    monkeypatch.setenv("SEQREC_CACHE", str(cache))
    return cache


@pytest.fixture
def shared_data() -> Path:
    """The real-data folder named by $SEQREC_SHARED_DATA; the test is skipped when it is absent."""
    value = os.environ.get(SHARED_ENV)
    if not value or not Path(value).is_dir():
        pytest.skip(f"set {SHARED_ENV} to a folder of real dataset copies to run this test")
    return Path(value)


def write_ml100k(root: Path, num_users: int = 60, num_items: int = 40, length: int = 30, seed: int = 0) -> Path:
    """MovieLens-100k raw files (``u.data``, ``u.item``) with a learnable pattern.

    Each user walks a ring of items: the next item is usually the current id + 1 (mod num_items),
    sometimes a random jump, so a sequence model can beat popularity. Real formats: ``u.data`` is
    ``user\\titem\\trating\\ttimestamp``; ``u.item`` is pipe-separated with 19 genre flags (latin-1).
    """
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for user in range(1, num_users + 1):
        item = int(rng.integers(num_items))
        seen = set()
        t = 880000000 + int(rng.integers(10**6))
        for _ in range(length):
            while item in seen:
                item = (item + 1) % num_items
            seen.add(item)
            t += int(rng.integers(1, 1000))
            lines.append(f"{user}\t{item + 1}\t{int(rng.integers(1, 6))}\t{t}")
            item = (item + 1) % num_items if rng.random() < 0.85 else int(rng.integers(num_items))
            if len(seen) >= num_items:
                break
    (root / "u.data").write_text("\n".join(lines) + "\n")
    genres = ["0"] * 19
    items = [
        f"{i}|Movie {i} (199{i % 10})|01-Jan-199{i % 10}||http://example.invalid/{i}|" + "|".join(
            "1" if g == i % 19 else "0" for g, _ in enumerate(genres)
        )
        for i in range(1, num_items + 1)
    ]
    (root / "u.item").write_bytes(("\n".join(items) + "\n").encode("latin-1"))
    return root


@pytest.fixture
def ml100k_root(tmp_path) -> Path:
    """A small MovieLens-100k-format folder (60 users, 40 items)."""
    return write_ml100k(tmp_path / "ml-100k")


def tiny_fit_args(
    root: Path,
    run_dir: Path,
    *extra: str,
    config: str = "sasrec_ml100k.yaml",
    max_len: int | None = 10,
    batch_size: int | None = 16,
    d_model: int | None = 16,
    max_epochs: int | None = None,
    val_every: int | None = 1,
) -> list[str]:
    """``seqrec fit`` flags of a tiny run of ``config`` on the MovieLens-format folder ``root``, logged under
    ``run_dir``: one thread, no progress bar, the sizes given (``None``: as the config ships), then ``extra``.

    The one spelling of a test's fit: every test that trains through the command line builds its flags here
    (``extra`` comes last, so it overrides a size).
    """
    args = ["--config", config, "--data.init_args.source.init_args.root", str(root)]
    sizes = {"--data.max_len": max_len, "--data.batch_size": batch_size,
             "--model.net.d_model": d_model, "--trainer.max_epochs": max_epochs,
             "--trainer.check_val_every_n_epoch": val_every}
    args += [piece for key, value in sizes.items() if value is not None for piece in (key, str(value))]
    return [*args, "--trainer.enable_progress_bar", "false", "--trainer.logger.init_args.save_dir", str(run_dir),
            "--threads", "1", *extra]


@pytest.fixture
def tiny_fit(ml100k_root) -> Callable[..., list[str]]:
    """``tiny_fit(run_dir, *extra, **sizes)``: ``tiny_fit_args`` on this test's ``ml100k_root``."""
    return functools.partial(tiny_fit_args, ml100k_root)
