"""A grid of named fits, each one ``python -m seqrec.fit`` command, run resumably and read back for a results table.

The results files built from several fits (``benchmarks.baselines``, ``benchmarks.evornn``, ``benchmarks.mlp4rec``)
share this: each fit's run directory is ``<runs_dir>/<name>/version_N``; a run that holds its test ranks is read, not
trained again (``grid.json`` records the fit's config and flags, and a run made with other flags is refused rather
than reused); one with a ``last.ckpt`` and no test continues from it (``--ckpt_path last``). Their tables go into one
``## <title>`` section of the results file (``publish``: ``seqrec.bench.report.write_section``), so the other
sections, the prose, are kept.

Paired differences (``paired``, ``seqrec.tools.compare``): for runs A_s and B_s over seeds s, each ranked on the same
test queries, d_q = mean_s (m(A_s, q) − m(B_s, q)) and the figure is mean(d) with s.e. std(d, ddof=1)/√Q. The s.e.
covers the test queries' sampling only (taken as independent), not training's randomness.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from seqrec import child_process
from seqrec.atomic import write_json
from seqrec.bench.report import load_average, write_section
from seqrec.loggers.report import read_csv_rows
from seqrec.run_files import (
    CHECKPOINTS,
    CONFIG,
    LAST,
    METRICS,
    SUMMARY,
    TEST_METRICS,
    TEST_RANKS,
    newest_version,
)
from seqrec.tools.compare import paired as compare_paired
from seqrec.tools.compare import run_ranks

RECORD = "grid.json"  # the grid's own record in a run directory: the fit's config and flags, its wall time
SITTINGS = "grid_sittings.json"  # each untested sitting's wall time, summed into RECORD once the fit is tested


@dataclass(frozen=True)
class Fit:
    """One fit of the grid: its unique name (the experiment folder) and the ``seqrec.fit`` flags after ``--config``."""

    name: str
    config: str
    flags: tuple[str, ...] = ()


def fit_command(fit: Fit, runs_dir: Path, resume: bool) -> list[str]:
    return [sys.executable, "-m", "seqrec.fit", "--config", fit.config, *fit.flags,
            "--trainer.enable_progress_bar", "false", "--trainer.logger.init_args.save_dir", str(runs_dir),
            "--trainer.logger.init_args.name", fit.name, *(["--ckpt_path", "last"] if resume else [])]


def tested(run_dir: Path | None) -> bool:
    """Whether the run was tested and kept its per-query ranks."""
    return run_dir is not None and (run_dir / TEST_METRICS).is_file() and (run_dir / TEST_RANKS).is_file()


def newest_run(experiment: Path) -> Path | None:
    """The experiment's newest run directory (one with its config.yaml: a counting model keeps no checkpoint)."""
    return newest_version(experiment, keep=lambda path: (path / CONFIG).is_file()) if experiment.is_dir() else None


def train(fit: Fit, runs_dir: Path) -> Path:
    """Fit and test ``fit`` unless its newest run is tested; its run directory. ``child_process.Stopped`` when a signal
    stopped it at its resume point (the grid's command exits with the fit's status, 130 or 143), RuntimeError naming
    the log on any other failure."""
    experiment = runs_dir / fit.name
    run_dir = newest_run(experiment)
    if tested(run_dir):
        check_record(fit, run_dir)
        return run_dir
    resume = run_dir is not None and (run_dir / CHECKPOINTS / LAST).is_file()
    log = runs_dir / "logs" / f"{fit.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log, "a", encoding="utf-8") as handle:  # a signal to this process stops the fit at its resume point
        code = child_process.run(fit_command(fit, runs_dir, resume), stdout=handle, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    run_dir = newest_run(experiment)
    walls = sitting_walls(run_dir, wall)
    if code != 0 or not tested(run_dir):
        if walls:  # the next sitting continues this run: its wall time counts toward the run's
            write_json(run_dir / SITTINGS, {"wall_s": walls})
        if code in child_process.SIGNAL_EXITS:
            raise child_process.Stopped(f"{fit.name} stopped by {signal.Signals(code - 128).name} at a resume point: "
                                        "run the same command again to continue", code)
        raise RuntimeError(f"{fit.name} failed (exit {code}): see {log}")
    write_json(run_dir / RECORD, {"config": fit.config, "flags": list(fit.flags), "wall_s": round(sum(walls), 1),
                                  "sittings": len(walls), "resumed": resume})
    return run_dir


def sitting_walls(run_dir: Path | None, wall: float) -> list[float]:
    """The wall times of every sitting of the run in ``run_dir``, this one's (``wall``) last; [] when this sitting left
    nothing a later one continues (no run directory, or one with neither a ``last.ckpt`` nor its test): a fit that
    takes several sittings (a signal, a crash after a checkpoint) is costed as all of them, not as its last."""
    if run_dir is None or not ((run_dir / CHECKPOINTS / LAST).is_file() or tested(run_dir)):
        return []
    path = run_dir / SITTINGS
    earlier = json.loads(path.read_text())["wall_s"] if path.is_file() else []
    return [*earlier, round(wall, 1)]


def check_record(fit: Fit, run_dir: Path) -> None:
    """A tested run is reused only for the same fit: ValueError when its record names another config or flags."""
    path = run_dir / RECORD
    if not path.is_file():
        return  # tested outside the grid (or before it kept records): taken as it is
    record = json.loads(path.read_text())
    if (record.get("config"), record.get("flags")) != (fit.config, list(fit.flags)):
        raise ValueError(f"{run_dir} was fitted with other flags than {fit.name} asks for now ({record.get('flags')} vs "
                         f"{list(fit.flags)}): give the grid another --runs_dir")


def run_all(fits: Sequence[Fit], runs_dir: Path, jobs: int = 1) -> dict[str, Path]:
    """Every fit, ``jobs`` at a time; {name: run directory}."""
    names = [fit.name for fit in fits]
    if len(set(names)) != len(names):
        raise ValueError(f"fit names repeat: {sorted(n for n in names if names.count(n) > 1)}")
    # the main thread forwards a SIGINT/SIGTERM to the fits the pool's threads run (seqrec.child_process)
    with child_process.forwarding_signals(), ThreadPoolExecutor(max_workers=jobs) as pool:
        dirs = list(pool.map(lambda fit: train(fit, runs_dir), fits))
    return dict(zip(names, dirs, strict=True))


@dataclass(frozen=True)
class Outcome:
    """What a results table reads of one run."""

    run_dir: str
    test: dict[str, float]
    best_val: float  # the monitored validation figure of the tested checkpoint
    steps: int
    epochs: int
    best_epoch: int | None  # the tested checkpoint's epoch, counted from 1 (None where its name does not say)
    status: str  # why fitting stopped (fit_summary.json): early_stopping, max_epochs, ...
    fit_s: float  # fit_summary.json's seconds_this_sitting
    wall_s: float  # its commands' wall time (data, fit, test), every sitting's; nan when the run predates the record


def outcome(run_dir: Path) -> Outcome:
    summary = json.loads((run_dir / SUMMARY).read_text())
    test = {k: float(v) for k, v in json.loads((run_dir / TEST_METRICS).read_text()).items()}
    wall = json.loads((run_dir / RECORD).read_text())["wall_s"] if (run_dir / RECORD).is_file() else float("nan")
    best = Path(summary.get("best_checkpoint") or "").name  # best-epoch=65-step=660.ckpt
    best_epoch = int(best.split("epoch=")[1].split("-")[0]) + 1 if "epoch=" in best else None
    return Outcome(str(run_dir), test, float(summary["best_score"]), int(summary["global_step"]),
                   int(summary["epochs"]), best_epoch, str(summary.get("status")),
                   float(summary["seconds_this_sitting"]), float(wall))


def fit_minutes(outcomes: Sequence[Outcome]) -> str:
    """'42 min of fit commands' (their recorded wall times summed: the grid's cost, however many sittings it took)."""
    return f"{sum(o.wall_s for o in outcomes if not math.isnan(o.wall_s)) / 60:.0f} min of fit commands"


def validation_curve(run_dir: Path, metric: str) -> list[tuple[int, float]]:
    """(step, value) of every validation of ``val/<metric>`` in the run's metrics.csv, in logged order."""
    rows = read_csv_rows(run_dir / METRICS)
    key = f"val/{metric}"
    return [(int(row["step"]), row[key]) for row in rows if key in row]


def paired(runs: Sequence[str | Path], bases: Sequence[str | Path], metric: str) -> tuple[float, float]:
    """mean(d) and its s.e. for d_q = mean over pairs (m(run, q) − m(base, q)); ``runs[i]`` pairs with ``bases[i]``
    (``seqrec.tools.compare.paired`` on the runs' test ranks)."""
    if len(runs) != len(bases) or not runs:
        raise ValueError(f"paired needs as many runs as bases, at least one: {len(runs)} vs {len(bases)}")
    pairs = [(run_ranks(base)[1], run_ranks(run)[1]) for run, base in zip(runs, bases, strict=True)]
    row = compare_paired(str(runs[0]), pairs, metric)
    return row.difference, row.se


def publish(out: Path, title: str, json_path: Path, command: str, machine: str, jobs: int,
            outcomes: dict[str, Outcome], body: list[str], extra: dict | None = None) -> str:
    """Write a grid's ``## <title>`` section of ``out`` (command, machine, cost, then ``body``) and its raw figures to
    ``json_path``; returns the section's text. ``extra``: more JSON (e.g. a table's derived rows)."""
    text = "\n".join([
        f"Command: `{command}`  ",
        f"Machine: {machine}; {jobs} fit(s) at a time; load average {load_average()} at the end; "
        f"{fit_minutes(list(outcomes.values()))} in all.",
        "",
        *body,
    ])
    write_section(out, title, text)
    write_json(json_path, {"command": command, "runs": {name: vars(o) for name, o in outcomes.items()}, **(extra or {})})
    return text
