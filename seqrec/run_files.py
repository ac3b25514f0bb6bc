"""The names of the files and folders inside a run directory, for every module that reads or writes one.

    runs/<experiment>/version_N/      one run (``RunLogger``: save_dir/name/version_N)
        config.yaml                   the resolved config it ran with
        origin.json                   where it was made (``seqrec.runs.write_origin``)
        metrics.csv                   every logged row, every sitting (``RunLogger``)
        fit_summary.json              why fitting stopped; ``best_checkpoint`` as Lightning recorded it
        test_metrics.json             the test of the best checkpoint
        test_ranks.csv                its target rank per test query (index,rank), ranking tasks (``seqrec compare``)
        checkpoints/                  best-*.ckpt (the best validation), last.ckpt (every validation)

Names and version folders only, no seqrec imports: the loggers and callbacks that write these files sit below ``seqrec.runs`` (which finds
runs and resolves their checkpoints and data) and import the names from here; ``seqrec.runs`` re-exports them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

CONFIG = "config.yaml"
ORIGIN = "origin.json"
METRICS = "metrics.csv"
SUMMARY = "fit_summary.json"
TEST_METRICS = "test_metrics.json"
TEST_RANKS = "test_ranks.csv"
CHECKPOINTS = "checkpoints"
LAST = "last.ckpt"
VERSION_PREFIX = "version_"


def version_dir(experiment: Path, version: int) -> Path:
    """``<experiment>/version_<version>``."""
    return Path(experiment) / f"{VERSION_PREFIX}{version}"


def last_checkpoint(run_dir: Path) -> Path:
    """``<run>/checkpoints/last.ckpt`` (which may not exist)."""
    return Path(run_dir) / CHECKPOINTS / LAST


def version_number(path: Path) -> int:
    """N of a ``version_N`` folder (-1 for any other name)."""
    suffix = path.name.rpartition("_")[2]
    return int(suffix) if path.name.startswith(VERSION_PREFIX) and suffix.isdigit() else -1


def is_trained_run(path: Path) -> bool:
    """A run directory with its config.yaml and at least one checkpoint."""
    return (path / CONFIG).is_file() and any((path / CHECKPOINTS).glob("*.ckpt"))


def newest_version(experiment: Path, keep: Callable[[Path], bool] = is_trained_run) -> Path | None:
    """The ``version_N`` of an experiment folder with the highest N among those ``keep`` accepts, or None."""
    versions = [p for p in Path(experiment).glob(f"{VERSION_PREFIX}*") if p.is_dir() and keep(p)]
    return max(versions, key=version_number) if versions else None
