"""Reproduction harness: run paper-protocol configs and compare test metrics with the papers' figures.

``python -m seqrec repro --configs lru_ml1m sasrec_ml1m [--shared-data DIR] [--resume]
[--max-time 00:02:00:00] [--out results/REPRODUCTION.md] [-- extra overrides]``

Each config runs in its own process (``python -m seqrec fit``) so wall times are clean; a run can be
bounded with ``--max-time`` and continued in a later sitting with ``--resume`` (``--ckpt_path last``:
same metrics as an uninterrupted run, tested in tests/test_fit.py). Partial runs are labelled as such
in the table. ``--shared-data`` swaps the raw-data sources for the exact files LRURec trained on
(``lrurec/ml-1m.txt.gz``, ``lrurec/beauty.txt.gz``), for machines without access to GroupLens.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from seqrec.data.preprocess import Preprocessing

# Table 3 of Yue et al. (WSDM 2024), full ranking, leave-last-out (PROTOCOLS.md §1).
PAPER: dict[str, dict[str, float]] = {
    "lru_ml1m": {"recall@10": 0.32636, "ndcg@10": 0.19298, "recall@20": 0.43313, "ndcg@20": 0.21990},
    "sasrec_ml1m": {"recall@10": 0.31810, "ndcg@10": 0.19021, "recall@20": 0.43050, "ndcg@20": 0.21860},
    "lru_beauty": {"recall@10": 0.05284, "ndcg@10": 0.03088, "recall@20": 0.07161, "ndcg@20": 0.03560},
    "sasrec_beauty": {"recall@10": 0.05043, "ndcg@10": 0.02917, "recall@20": 0.06965, "ndcg@20": 0.03403},
}
SOURCE = "Yue et al. 2023, Table 3"

# The exact files LRURec trained on, as SASRec-format text (already filtered and time-ordered).
SHARED_FILES = {"ml1m": ("ml-1m", "lrurec/ml-1m.txt.gz"), "beauty": ("beauty", "lrurec/beauty.txt.gz")}


def shared_data_overrides(config: str, shared: Path) -> list[str]:
    """CLI overrides that read the LRURec copy of the config's dataset from ``shared``."""
    dataset = config.rsplit("_", 1)[-1]
    if dataset not in SHARED_FILES:
        raise ValueError(f"no shared copy known for {config!r}; known datasets: {sorted(SHARED_FILES)}")
    name, relative = SHARED_FILES[dataset]
    path = shared / relative
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: point --shared-data at the folder holding {relative}")
    source = {"class_path": "seqrec.data.sources.sasrec_text.SASRecText", "init_args": {"name": name, "path": str(path)}}
    # every field spelled out: a partial dict would merge into the config's LRURec filters, not replace them
    no_filters = asdict(Preprocessing(sort_by="time"))
    return ["--data.init_args.source", json.dumps(source), "--data.init_args.preprocessing", json.dumps(no_filters)]


def run_config(config: str, runs_dir: Path, extra: list[str], resume: bool) -> tuple[list[str], float]:
    """Run one config to completion (or its time limit) in a subprocess; returns (command, seconds)."""
    command = [sys.executable, "-m", "seqrec", "fit", "--config", f"{config}.yaml",
               "--trainer.logger.init_args.save_dir", str(runs_dir), *extra]
    if resume:
        command += ["--ckpt_path", "last"]
    started = time.perf_counter()
    subprocess.run(command, check=True)
    return command, time.perf_counter() - started


def latest_run(runs_dir: Path, config: str) -> Path | None:
    """The newest ``version_N`` directory of ``config`` holding test metrics."""
    found = sorted((runs_dir / config).glob("version_*/test_metrics.json"), key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None


def machine() -> str:
    """CPU/GPU, cores and torch version in one line."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {gpu}, torch {torch.__version__}"


def report(configs: list[str], runs_dir: Path, commands: dict[str, str]) -> str:
    """Markdown table: ours vs the paper per metric, relative difference, epochs, status, wall time."""
    lines = [
        "# Reproduction", "",
        f"Paper figures: {SOURCE}. Ours: test split, best-validation checkpoint. Machine: {machine()}.", "",
        "| config | metric | ours | paper | rel. diff | epochs (steps) | status | wall time (this sitting) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for config in configs:
        run = latest_run(runs_dir, config)
        if run is None:
            lines.append(f"| {config} | — | not run | | | | | |")
            continue
        metrics = json.loads((run / "test_metrics.json").read_text())
        summary = json.loads((run / "fit_summary.json").read_text()) if (run / "fit_summary.json").exists() else {}
        for metric, paper in PAPER.get(config, {}).items():
            ours = metrics.get(f"test/{metric}")
            if ours is None:
                continue
            lines.append(
                f"| {config} | {metric} | {ours:.5f} | {paper:.5f} | {100 * (ours - paper) / paper:+.1f}% "
                f"| {summary.get('epochs', '?')} ({summary.get('global_step', '?')}) | {summary.get('status', '?')} "
                f"| {summary.get('seconds_this_sitting', '?')} s |"
            )
    lines += ["", "Commands:", ""] + [f"- `{config}`: `{cmd}`" for config, cmd in commands.items()]
    lines += ["", "A status other than `early_stopping` marks a partial run: continue it with `--resume`."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, run each config, write the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(PAPER))
    parser.add_argument("--shared-data", type=Path, default=os.environ.get("SEQREC_SHARED_DATA"),
                        help="folder with lrurec/*.txt.gz (default: $SEQREC_SHARED_DATA); omit to use the raw sources")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/repro"))
    parser.add_argument("--resume", action="store_true", help="continue each config's last run (--ckpt_path last)")
    parser.add_argument("--max-time", default=None, help="per-config limit DD:HH:MM:SS; resume later with --resume")
    parser.add_argument("--report-only", action="store_true", help="rewrite the table from existing runs")
    parser.add_argument("--out", type=Path, default=Path("results/REPRODUCTION.md"))
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="after --: extra flags for python -m seqrec fit")
    args = parser.parse_args(argv)
    extra_common = [a for a in args.overrides if a != "--"]
    if args.max_time:
        extra_common += ["--trainer.max_time", args.max_time]
    commands: dict[str, str] = {}
    for config in args.configs:
        extra = list(extra_common)
        if args.shared_data:
            extra = shared_data_overrides(config, Path(args.shared_data)) + extra
        if args.report_only:
            continue
        command, _ = run_config(config, args.runs_dir, extra, args.resume)
        commands[config] = shlex.join(["python", *command[1:]])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(report(args.configs, args.runs_dir, commands))
    os.replace(tmp, args.out)
    print(args.out.read_text())


if __name__ == "__main__":
    main()
