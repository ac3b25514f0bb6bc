"""The run directory in one place: finding a run, its newest version, its checkpoints and the data it was trained on.

    runs/<experiment>/version_N/      one run (``RunLogger``: save_dir/name/version_N)
        config.yaml                   the resolved config it ran with (``seqrec.build.SaveRunConfig``)
        origin.json                   where it was made: its directory, the working directory, its data paths
        fit_summary.json              why fitting stopped; ``best_checkpoint`` as Lightning recorded it
        checkpoints/                  best-*.ckpt (the best validation), last.ckpt (every validation)

A run directory is self-contained and relocatable: copied or moved (alone, or with the folder it was trained in),
it predicts and serves with its own files, and where it cannot, the error names both places.

- **Checkpoints** are looked up inside the run directory. ``best`` is the file ``fit_summary.json`` names, found
  by its name in the run's own ``checkpoints/`` (or where it lay inside the run when it was trained); the recorded
  path itself only if it lies inside this run. A recorded path is relative to the folder the run was trained from,
  so from another folder it can name another run's file: that file is never used. Without a fit_summary.json (a
  run stopped early) ``best`` is the newest ``best*.ckpt``, else ``last.ckpt``.
- **Data paths** of the config (the keys named in ``PATH_KEYS`` under ``data``: ``--data.source.path``, ``root``,
  ``cache_dir``) are written relative to the folder the run was trained from. ``origin.json`` records each as an
  absolute path with the file's size when the run starts (``write_origin``); a moved run reads its data where it
  was (absolute), else at the same place relative to the run (a moved project), a file only with the recorded
  size. Missing from both is an error naming both and the flag that points elsewhere. Runs older than
  ``origin.json`` whose logger ``save_dir`` was relative resolve their data against the folder that held it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from seqrec.atomic import write_json
from seqrec.callbacks.checkpoint_io import CheckpointError, checkpoint_problem
from seqrec.checks import config_leaves, flag_name
from seqrec.loggers.report import read_csv_rows
from seqrec.metrics.query_ranks import write_ranks_csv
from seqrec.run_files import (  # noqa: F401 (re-exported: the run directory's names)
    CHECKPOINTS,
    CONFIG,
    LAST,
    METRICS,
    ORIGIN,
    SUMMARY,
    TEST_METRICS,
    TEST_RANKS,
    VERSION_PREFIX,
    is_trained_run,
    last_checkpoint,
    newest_version,
    version_dir,
    version_number,
)

# the last component of a data config key naming a file or folder relative to the working directory (a source's
# ``files`` and a Hugging Face ``data_files`` / ``data_dir`` are relative to its root or path instead)
PATH_KEYS = frozenset({"path", "root", "cache_dir", "hf_cache_dir"})


# --- writing a test's files ---------------------------------------------------------------------------------
def write_test_results(out_dir: Path, results: dict[str, float], task: object) -> None:
    """A test's files in its run directory, each atomic: ``test_metrics.json``, and ``test_ranks.csv`` (each query's
    target rank by query index) where the task kept them (``NextItemTask.last_test_ranks``)."""
    write_json(out_dir / TEST_METRICS, results)
    ranks = getattr(task, "last_test_ranks", None)
    if ranks is not None:
        write_ranks_csv(out_dir / TEST_RANKS, ranks.numpy())


# --- finding a run ------------------------------------------------------------------------------------------
def find_run_dir(path: str | Path) -> Path:
    """The run directory (holding config.yaml) of a run directory, a checkpoint, or an experiment folder.

    An experiment folder (``runs/<experiment>``) stands for its newest ``version_N`` that has checkpoints.
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such run directory or checkpoint; pass runs/<experiment>/version_N "
                                "(or a .ckpt file inside it)")
    if path.is_file():
        for parent in (path.parent, path.parent.parent):
            if (parent / CONFIG).is_file():
                return parent
        raise FileNotFoundError(f"{path}: no config.yaml beside the checkpoint or one folder up; pass the run directory")
    if (path / CONFIG).is_file():
        return path
    newest = newest_version(path)
    if newest is not None:
        return newest
    raise FileNotFoundError(f"{path}: neither a run directory (config.yaml) nor an experiment folder with "
                            "version_N/checkpoints; pass runs/<experiment>/version_N")


def last_checkpoints(experiment: Path) -> list[Path]:
    """An experiment folder's runs' ``last.ckpt`` files, newest first (by file time): ``--ckpt_path last`` resumes the first."""
    return sorted(Path(experiment).glob(f"*/{CHECKPOINTS}/{LAST}"), key=lambda p: p.stat().st_mtime, reverse=True)


def remove_if_unused(run_dir: Path) -> None:
    """Remove a run directory this process created, when the run failed before it trained anything.

    Unused: no checkpoint and no training, validation or test row in metrics.csv (the cost rows written at
    start do not count), so a failure at start leaves no empty ``version_N`` behind.
    """
    if not run_dir.is_dir():
        return
    if any((run_dir / CHECKPOINTS).glob("*.ckpt")):
        return
    metrics = run_dir / METRICS
    if metrics.is_file():
        if any(key.startswith(("train/", "val/", "test/")) for row in read_csv_rows(metrics) for key in row):
            return
    shutil.rmtree(run_dir, ignore_errors=True)


# --- where a run was made --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Origin:
    """Where a run was made: its directory and working directory then (None: unknown), and its data paths.

    ``data_paths``: config key -> {"absolute": path then, "bytes": size of a file then (None for a folder)}.
    """

    run_dir: Path | None
    cwd: Path | None
    data_paths: dict[str, dict[str, Any]] = field(default_factory=dict)
    recorded: bool = False  # read from origin.json (False: derived from config.yaml)


def data_path_leaves(config: Any) -> list[tuple[str, str]]:
    """(dotted key, value) of the config's data paths: text values under ``data`` whose key ends in a ``PATH_KEYS`` name."""
    return [(k, v) for k, v in config_leaves(config)
            if isinstance(v, str) and v and k.startswith("data.") and k.rsplit(".", 1)[-1] in PATH_KEYS]


def write_origin(run_dir: Path, config: Any, cwd: Path | None = None) -> Path:
    """``origin.json``: the run directory and working directory (absolute) and each data path that exists, absolute,
    with a file's size (a run started again after a move records where it is now)."""
    cwd = Path(cwd or os.getcwd()).resolve()
    paths: dict[str, dict[str, Any]] = {}
    for key, value in data_path_leaves(config):
        absolute = (cwd / Path(value).expanduser()).resolve()
        if absolute.exists():
            paths[key] = {"given": value, "absolute": str(absolute),
                          "bytes": absolute.stat().st_size if absolute.is_file() else None}
    return write_json(Path(run_dir) / ORIGIN, {"run_dir": str(Path(run_dir).resolve()), "cwd": str(cwd),
                                               "data_paths": paths})


def _config_document(run_dir: Path) -> dict[str, Any]:
    """config.yaml as a plain dict ({} when missing or unreadable)."""
    try:
        document = yaml.safe_load((run_dir / CONFIG).read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return document if isinstance(document, dict) else {}


def read_origin(run_dir: Path) -> Origin:
    """Where the run was made: ``origin.json``, else derived from a relative logger ``save_dir`` in config.yaml
    (``<cwd>/<save_dir>/<name>/version_N``: the run's folder minus those parts), else unknown."""
    run_dir = Path(run_dir)
    try:
        recorded = json.loads((run_dir / ORIGIN).read_text())
        return Origin(Path(recorded["run_dir"]), Path(recorded["cwd"]), dict(recorded.get("data_paths") or {}), True)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    logger = ((_config_document(run_dir).get("trainer") or {}).get("logger") or {})
    save_dir = (logger.get("init_args") or {}).get("save_dir") if isinstance(logger, dict) else None
    if not isinstance(save_dir, str) or Path(save_dir).is_absolute() or ".." in Path(save_dir).parts:
        return Origin(None, None)
    depth = len([p for p in Path(save_dir).parts if p != "."]) + 2  # save_dir / name / version_N
    here = run_dir.resolve()
    if len(here.parents) < depth:
        return Origin(None, None)
    return Origin(here, here.parents[depth - 1])


# --- checkpoints -----------------------------------------------------------------------------------------------
def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` (resolved) lies inside ``folder`` (resolved)."""
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def recorded_best(run_dir: Path) -> str | None:
    """The best checkpoint ``fit_summary.json`` names, as recorded (None without one)."""
    try:
        best = json.loads((run_dir / SUMMARY).read_text()).get("best_checkpoint")
    except (OSError, ValueError, AttributeError):
        return None
    return best if isinstance(best, str) and best else None


def best_checkpoint(run_dir: Path) -> Path | None:
    """The run's best checkpoint inside the run (module docstring), None when it records none; FileNotFoundError
    naming both places when the recorded one is not inside this run."""
    recorded = recorded_best(run_dir)
    folder = run_dir / CHECKPOINTS
    if recorded is None:
        found = sorted(folder.glob("best*.ckpt"), key=lambda p: p.stat().st_mtime)
        return found[-1] if found else None
    candidates = [folder / Path(recorded).name]
    origin = read_origin(run_dir)
    if origin.run_dir is not None and origin.cwd is not None:
        then = origin.cwd / recorded  # an absolute recorded path stays itself
        if _inside(then, origin.run_dir):
            candidates.append(run_dir / then.resolve().relative_to(origin.run_dir.resolve()))
    if _inside(Path(recorded), run_dir):
        candidates.append(Path(recorded))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    moved = (f"; the run was trained at {origin.run_dir}" if origin.run_dir is not None
             and origin.run_dir.resolve() != run_dir.resolve() else "")
    raise FileNotFoundError(
        f"run {run_dir}: its best checkpoint {recorded} (fit_summary.json) is not inside this run ({candidates[0]} "
        f"is missing{moved}); copy the checkpoint into {folder}, or pass --ckpt_path last"
    )


def resolve_checkpoint(run_dir: Path, choice: str | Path = "best") -> Path:
    """The checkpoint to load: ``best`` (``best_checkpoint``, else last.ckpt), ``last``, or a path given explicitly."""
    run_dir = Path(run_dir)
    folder = run_dir / CHECKPOINTS
    if str(choice) not in ("best", "last"):
        chosen = Path(choice).expanduser()
        if not chosen.is_file():
            raise FileNotFoundError(f"--ckpt_path {chosen}: no such file; pass best, last or a .ckpt file")
        return chosen
    if choice == "best":
        best = best_checkpoint(run_dir)
        if best is not None:
            return best
    if (folder / LAST).is_file():
        return folder / LAST
    raise FileNotFoundError(f"{run_dir}: no checkpoint in {folder}; train the run first (python -m seqrec fit ...)")


def checkpoint_fix(run_dir: Path, broken: Path) -> str:
    """What to pass instead of an unusable checkpoint: ``--ckpt_path last`` or another usable one of the run."""
    folder = run_dir / CHECKPOINTS
    others = sorted((p for p in folder.glob("*.ckpt") if p.resolve() != broken.resolve()),
                    key=lambda p: (p.name != LAST, -p.stat().st_mtime))
    for other in others:
        if checkpoint_problem(other) is None:
            return "pass --ckpt_path last" if other.name == LAST else f"pass --ckpt_path {other}"
    return f"no other usable checkpoint is in {folder}: train the run again (python -m seqrec fit ...)"


def check_run_checkpoint(path: Path, run_dir: Path) -> None:
    """CheckpointError naming ``path``, what is wrong with it and the run's usable checkpoint, unless it is whole."""
    problem = checkpoint_problem(path)
    if problem is not None:
        raise CheckpointError(f"checkpoint {path} cannot be used ({problem}); {checkpoint_fix(run_dir, path)}")


# --- data paths ------------------------------------------------------------------------------------------------
def _overridden(key: str, overrides: Sequence[str]) -> bool:
    """Whether a ``--section.key value`` flag among ``overrides`` sets ``key`` or a section holding it."""
    short = flag_name(key)
    for flag in overrides:
        if not flag.startswith("--"):
            continue
        name = flag_name(flag[2:].split("=", 1)[0]).removesuffix(".init_args")
        if short == name or short.startswith(name + "."):
            return True
    return False


def _fits(candidate: Path, size: int | None) -> bool:
    """An existing file or folder; a file only with the recorded size (None: any)."""
    if candidate.is_file():
        return size is None or candidate.stat().st_size == size
    return candidate.is_dir() and size is None


def _candidates(run_dir: Path, origin: Origin, recorded: dict[str, Any] | None, value: str) -> list[Path]:
    """Where a data path may be now: where it was (absolute), then at the same place relative to the run."""
    given = Path(value).expanduser()
    then = Path(recorded["absolute"]) if recorded else (given if given.is_absolute() or origin.cwd is None
                                                         else origin.cwd / given)
    places = [then]
    if origin.run_dir is not None:
        relative = Path(os.path.relpath(then, origin.run_dir))
        places.append(Path(os.path.normpath(run_dir.resolve() / relative)))
    return list(dict.fromkeys(places))


def data_overrides(run_dir: Path, overrides: Sequence[str] = ()) -> list[str]:
    """``--key value`` flags pointing the run's config at its data where it is now (module docstring).

    Keys the caller's ``overrides`` set are left to them; FileNotFoundError naming both places for a recorded
    data path found nowhere (a cache folder aside: it is rebuilt).
    """
    run_dir = Path(run_dir)
    origin = read_origin(run_dir)
    out: list[str] = []
    for key, value in data_path_leaves(_config_document(run_dir)):
        if _overridden(key, overrides):
            continue
        recorded = origin.data_paths.get(key)
        if recorded is not None and recorded.get("given") != value:
            continue  # config.yaml was edited since: its value stands
        if origin.recorded and recorded is None:
            continue  # it did not exist when the run was made (a Hub dataset name, a cache not yet created)
        places = _candidates(run_dir, origin, recorded, value)
        size = recorded.get("bytes") if recorded else None
        found = next((p for p in places if _fits(p, size)), None)
        if found is not None:
            if found != Path(value):
                out += [f"--{key}", str(found)]
            continue
        if recorded is None or key.rsplit(".", 1)[-1].endswith("cache_dir"):
            continue  # nothing recorded to insist on (an older run): the source reports what it misses
        wrong = [f"{p} has {p.stat().st_size:,} bytes, not {size:,}" for p in places if p.is_file() and size is not None]
        raise FileNotFoundError(
            f"run {run_dir}: its data --{flag_name(key)} {value!r} is not at {places[0]} (where it was when the run "
            f"was trained)" + (f" nor at {places[1]} (the same place relative to the run)" if len(places) > 1 else "")
            + (f" ({'; '.join(wrong)})" if wrong else "")
            + f"; pass --{flag_name(key)} PATH (the same data) to predict or serve it"
        )
    return out
