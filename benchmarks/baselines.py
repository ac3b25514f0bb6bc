"""The embedded default (``make fit``: SASRec on ML-100k) over several seeds, beside the most-popular floor.

    python -m benchmarks.baselines [--runs_dir runs/baselines_bench] [--seeds 42 1 2] [--out results/BASELINES.md]

Each SASRec fit is ``sasrec_ml100k.yaml`` exactly as ``make fit`` runs it (its threads, its early stopping), only
the seed changes (42 is the config's own, so that row is ``make fit``'s run). The popularity row is the same
protocol with the ``Popularity`` network (training counts, one counting pass). Fits run one at a time through
``benchmarks.fit_grid`` (resumable). The report replaces the ``## Results`` section of ``--out``.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from benchmarks.fit_grid import Fit, Outcome, outcome, paired, publish, run_all
from benchmarks.flags import Parser
from seqrec.bench.report import machine_description

CONFIG = "sasrec_ml100k.yaml"
METRICS = ("hr@10", "ndcg@10", "mrr@10", "hr@20", "ndcg@20", "map@20")
TITLE = "Results"
POPULARITY = Fit("popularity_ml100k", CONFIG, ("--model.net", "seqrec.models.next_item.popularity.Popularity",
                                               "--trainer.max_epochs", "1", "--trainer.check_val_every_n_epoch", "1"))


def sasrec_fit(seed: int) -> Fit:
    return Fit(f"sasrec_ml100k_s{seed}", CONFIG, ("--seed_everything", str(seed)))


def row(label: str, o: Outcome) -> str:
    """One table row: the test metrics, epochs run (the tested checkpoint's), why it stopped, pace and time."""
    why = {"early_stopping": "early stop", "max_epochs": "epoch cap"}.get(o.status, o.status)
    best = f" ({o.best_epoch})" if o.best_epoch is not None else ""
    return (f"| {label} | " + " | ".join(f"{o.test[f'test/{m}']:.4f}" for m in METRICS)
            + f" | {o.epochs}{best}, {why} | {o.fit_s / max(o.epochs, 1):.2f} | {o.fit_s:.0f} s fit, {o.wall_s:.0f} s in all |")


def report(done: dict[str, Outcome], seeds: list[int]) -> list[str]:
    head = "| model | " + " | ".join(m.upper() for m in METRICS) + " | epochs (best), stop | s / epoch | time |"
    lines = [head, "|---|" + "---|" * (len(METRICS) + 3)]
    runs = [done[sasrec_fit(s).name] for s in seeds]
    for seed, o in zip(seeds, runs, strict=True):
        lines.append(row(f"SASRec (d=64, 2 blocks, 1 head, CE, max_len 100), seed {seed}", o))
    if len(runs) > 1:
        cells = []
        for m in METRICS:
            values = [o.test[f"test/{m}"] for o in runs]
            cells.append(f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}")
        lines.append(f"| **SASRec, mean ± std over {len(runs)} seeds** | " + " | ".join(cells) + " | | | |")
    lines.append(row("most popular (training counts, id tie-break)", done[POPULARITY.name]))
    lines += ["", "SASRec − most popular, paired on the 943 test users (mean difference (s.e.), first seed):", "",
              "| metric | " + " | ".join(METRICS) + " |", "|---|" + "---|" * len(METRICS)]
    cells = []
    for m in METRICS:
        mean, se = paired([runs[0].run_dir], [done[POPULARITY.name].run_dir], m)
        cells.append(f"{mean:+.4f} ({se:.4f})")
    lines.append("| difference | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> dict[str, Outcome]:
    p = Parser("benchmarks.baselines", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs_dir", type=Path, default=Path("runs/baselines_bench"))
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2], help="42 is the config's (make fit's) seed")
    p.add_argument("--out", type=Path, default=Path("results/BASELINES.md"))
    p.add_argument("--json", type=Path, default=Path("results/baselines_ml100k.json"))
    args = p.parse_args(argv)
    command = p.command()
    machine = machine_description()
    dirs = run_all([*(sasrec_fit(s) for s in args.seeds), POPULARITY], args.runs_dir, jobs=1)
    done = {name: outcome(run) for name, run in dirs.items()}
    print(publish(args.out, TITLE, args.json, command, machine, 1, done, report(done, args.seeds)))
    return done


if __name__ == "__main__":
    from seqrec.errors import run_command  # imports Lightning: not at import, so --help stays fast

    run_command(main)
