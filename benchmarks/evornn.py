"""EvoRNN against fixed GRUs on ML-100k's temporal split: test MAP@20 against MACs per sequence, paired per query.

    python -m benchmarks.evornn [--epochs 3|0] [--seeds 42 7] [--jobs 1] [--rows NAME ...]
                                [--runs_dir runs/evornn_bench/<3ep|early_stopping>] [--out results/EVORNN.md]

Every row of ``ROWS`` is ``evornn_ml100k.yaml`` (the protocol: global temporal split, MAP@20 over the full
catalogue, best validation MAP@20 tested) with the row's schedule flags, trained ``--epochs`` epochs per seed (0: the
protocol's own budget, at most 30 epochs with early stopping after 5 validations without gain) on one thread each (``--jobs`` runs side by side; their wall times then share the cores: compare MACs, not seconds).

Columns:
- MACs / sequence: ``EvoRNN.serving_macs(L)``, encoding a full window and reading out its newest position, from the
  run's own resolved config; "× GRU-64" divides by the reference row's.
- test MAP@20 per seed, and their mean.
- mean − GRU-64 (paired s.e.): with each run's per-query ranks (``test_ranks.csv``), d_q = mean over seeds of
  (AP@20 of the row − AP@20 of GRU-64, same seed) on each test query q; the column is mean(d) and
  std(d, ddof=1)/√Q. The temporal split has several queries per user, so this s.e. is a lower bound.
- val MAP@20: the best validation figure per seed (the tested checkpoint's); wall s: the fit's commands per seed,
  every sitting's.

Resumable (``benchmarks.fit_grid``): a run whose directory holds its test ranks is read, not trained again; one with
a ``last.ckpt`` and no test continues from it. The table replaces the ``## <TITLE>`` section of ``--out``; the other
sections (the prose) are kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from benchmarks.fit_grid import Fit, Outcome, outcome, paired, publish, run_all
from benchmarks.flags import Parser
from seqrec.bench.report import machine_description
from seqrec.models.next_item.evornn import EvoRNN
from seqrec.run_files import CONFIG

CONFIG_NAME = "evornn_ml100k.yaml"
METRIC = "map@20"
NET = "--model.net.init_args"
TITLE = "Results: MAP@20 against MACs per sequence (ML-100k, temporal split, {budget})"


def budget(epochs: int) -> str:
    """How long each fit trained, as the section title and the default runs folder say it."""
    return f"{epochs} epochs" if epochs else "early stopping"


@dataclass(frozen=True)
class Row:
    """One model of the table: its name, kind and the fit flags that make it from ``evornn_ml100k.yaml``."""

    name: str
    kind: str  # "fixed GRU" or "EvoRNN (...)"
    flags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def evo(self) -> bool:
        return self.kind.startswith("EvoRNN")

    def fit(self, seed: int, epochs: int) -> Fit:
        """This row's fit for one seed: one thread, ``epochs`` epochs (0: the protocol's budget, early stopping)."""
        budget = ("--trainer.max_epochs", str(epochs)) if epochs else ()
        return Fit(f"{self.name}_s{seed}", CONFIG_NAME, ("--threads", "1", *budget, "--seed_everything", str(seed),
                                                        *self.flags))

    def net_kwargs(self) -> dict[str, object]:
        """The network arguments the flags set (``--model.net.init_args.X V`` → {X: V}; ``max_len`` from the data's)."""
        pairs = dict(zip(self.flags[::2], self.flags[1::2], strict=True))
        kwargs = {key.removeprefix(NET + "."): yaml.safe_load(value) for key, value in pairs.items() if key.startswith(NET)}
        if "--data.init_args.max_len" in pairs:
            kwargs["max_len"] = int(pairs["--data.init_args.max_len"])
        return kwargs


def fixed(name: str, hidden: int, *extra: str) -> Row:
    """A fixed GRU: EvoRNN with one segment (exactly ``torch.nn.GRU``, tested in tests/models/test_evornn.py)."""
    return Row(name, "fixed GRU", (f"{NET}.schedule", "segments", f"{NET}.hidden_sizes", f"[{hidden}]",
                                   f"{NET}.segment_lengths", "[]", *extra))


def segments(name: str, hidden: list[int], lengths: list[int]) -> Row:
    return Row(name, "EvoRNN (segments)", (f"{NET}.schedule", "segments", f"{NET}.hidden_sizes", json.dumps(hidden),
                                           f"{NET}.segment_lengths", json.dumps(lengths)))


def power_law(name: str, d: float, *extra: str) -> Row:
    return Row(name, f"EvoRNN (power law, d = {d})", (f"{NET}.schedule", "power_law", f"{NET}.hidden_sizes", "[64]",
                                                      f"{NET}.lrd_d", str(d), *extra))


REFERENCE = "gru64"
ROWS = [
    fixed("gru16", 16),
    fixed("gru64_L10", 64, "--data.init_args.max_len", "10"),
    power_law("evo_pl05", 0.05, f"{NET}.min_hidden", "16"),
    fixed("gru24", 24),
    segments("evo_segA", [16, 32, 64], [15, 5]),
    fixed("gru32", 32),
    segments("evo_segB", [32, 64], [10]),
    power_law("evo_pl358", 0.358),  # d measured on ML-100k's training part (results/EVORNN.md, `seqrec lrd`)
    fixed("gru48", 48),
    fixed(REFERENCE, 64),
]


@dataclass
class Result:
    """One (row, seed) run as read back from its run directory."""

    row: str
    seed: int
    run_dir: str
    test: float
    val: float
    wall_s: float
    max_len: int
    macs: int
    schedule: str
    epochs: int = 0  # epochs trained
    best_epoch: int | None = None  # the tested checkpoint's epoch (from 1)


def describe_schedule(net: EvoRNN, length: int) -> str:
    """'h=16 for τ 21..50; h=32 for τ 6..20; ...' oldest first (τ = distance from the newest event)."""
    parts = [f"h={net.hidden_sizes[k]} for τ {length - stop + 1}..{length - start}"
             for k, start, stop in net.segment_spans(length)]
    return "; ".join(parts)


def read_result(row: Row, seed: int, run_dir: Path, done: Outcome) -> Result:
    config = yaml.safe_load((run_dir / CONFIG).read_text())
    net_args = dict(config["model"]["init_args"]["net"]["init_args"])
    # linked from the data and so not repeated under the net in config.yaml (seqrec/build.py): the window length,
    # and the catalogue size, on which the MACs of encoding do not depend
    net_args.setdefault("max_len", config["data"]["init_args"]["max_len"])
    net_args.setdefault("num_items", 1)
    net = EvoRNN(**net_args)
    return Result(row.name, seed, str(run_dir), done.test[f"test/{METRIC}"], done.best_val, done.wall_s,
                  net.max_len, net.serving_macs(net.max_len), describe_schedule(net, net.max_len), done.epochs,
                  done.best_epoch)


def paired_to_reference(results: dict[tuple[str, int], Result], row: str, seeds: list[int]) -> tuple[float, float]:
    """Mean and paired s.e. of the seed-averaged per-query AP@20 difference to the reference (``fit_grid.paired``)."""
    return paired([results[row, s].run_dir for s in seeds], [results[REFERENCE, s].run_dir for s in seeds], METRIC)


def table(rows: list[Row], results: dict[tuple[str, int], Result], seeds: list[int]) -> list[str]:
    reference_macs = results[REFERENCE, seeds[0]].macs
    head = " | ".join(f"seed {s}" if i else f"test MAP@20 seed {s}" for i, s in enumerate(seeds))
    lines = [f"| model | schedule (τ = distance from the newest event; oldest first) | L | MACs / sequence | × GRU-64 | "
             f"{head} | mean | mean − GRU-64 (paired s.e.) | val MAP@20 ({' / '.join(map(str, seeds))}) | "
             f"epochs, best ({' / '.join(map(str, seeds))}) | wall s ({' / '.join(map(str, seeds))}) |",
             "|---|---|---:|---:|---:|" + "---:|" * len(seeds) + "---:|---:|---:|---:|---:|"]
    for row in sorted(rows, key=lambda r: (results[r.name, seeds[0]].macs, r.name)):
        runs = [results[row.name, s] for s in seeds]
        first = runs[0]
        name = f"**{row.kind} `{row.name}`**" if row.evo else f"{row.kind} `{row.name}`"
        mean = float(np.mean([r.test for r in runs]))
        if row.name == REFERENCE:
            diff = "+0.0000"
        else:
            d, se = paired_to_reference(results, row.name, seeds)
            diff = f"{d:+.4f} ({se:.4f})"
        lines.append(f"| {name} | {first.schedule} | {first.max_len} | {first.macs:,} | {first.macs / reference_macs:.2f} | "
                     + " | ".join(f"{r.test:.4f}" for r in runs)
                     + f" | {mean:.4f} | {diff} | {' / '.join(f'{r.val:.4f}' for r in runs)} | "
                     + f"{' / '.join(f'{r.epochs} ({r.best_epoch})' for r in runs)} | "
                     + f"{' / '.join(f'{r.wall_s:.0f}' for r in runs)} |")
    return lines


def notes(seeds: list[int], epochs: int, jobs: int) -> list[str]:
    """What the table's columns mean, under it."""
    return [f"{budget(epochs)} per run, seeds {', '.join(map(str, seeds))}, 1 thread each; the checkpoint with the best "
            "validation MAP@20 is tested.", "",
            "\"paired s.e.\": d_q = mean over the seeds of (AP@20 of the row − AP@20 of GRU-64 with the same seed) on each "
            "test query; the column is mean(d) (s.e. std(d)/√Q). It covers the sampling of the test queries only: "
            "queries come from few users (several each), and the training's randomness (compare the two seed columns) "
            "is not in it, so the true uncertainty is larger. Wall times cover each fit's commands, every sitting "
            f"(data, fit, validation, test, MACs probes) with {jobs} fit(s) sharing the cores: compare MACs, not "
            "seconds."]


def main(argv: list[str] | None = None) -> dict[tuple[str, int], Result]:
    p = Parser("benchmarks.evornn", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs_dir", type=Path, default=None, help="default runs/evornn_bench/<3ep|early_stopping>")
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 7])
    p.add_argument("--epochs", type=int, default=3, help="epochs per run (default 3; 0: the protocol's early stopping)")
    p.add_argument("--jobs", type=int, default=1, help="runs side by side (default 1)")
    p.add_argument("--rows", nargs="+", default=None, help=f"a subset of rows (always with {REFERENCE})")
    p.add_argument("--out", type=Path, default=Path("results/EVORNN.md"))
    p.add_argument("--json", type=Path, default=None, help="default results/evornn_ml100k_<3ep|early_stopping>.json")
    args = p.parse_args(argv)
    tag = f"{args.epochs}ep" if args.epochs else "early_stopping"
    runs_dir = args.runs_dir or Path("runs/evornn_bench") / tag
    rows = ROWS
    if args.rows:
        unknown = set(args.rows) - {r.name for r in ROWS}
        if unknown:
            p.error(f"unknown rows {sorted(unknown)}; rows: {', '.join(r.name for r in ROWS)}")
        rows = [r for r in ROWS if r.name in {*args.rows, REFERENCE}]
    command = p.command()
    machine = machine_description(threads=1)
    jobs = [(row, seed) for seed in args.seeds for row in rows]
    dirs = run_all([row.fit(seed, args.epochs) for row, seed in jobs], runs_dir, args.jobs)
    outcomes = {name: outcome(run_dir) for name, run_dir in dirs.items()}
    results = {(row.name, seed): read_result(row, seed, dirs[name], outcomes[name])
               for row, seed in jobs for name in [row.fit(seed, args.epochs).name]}
    body = [*notes(args.seeds, args.epochs, args.jobs), "", *table(rows, results, args.seeds)]
    print(publish(args.out, TITLE.format(budget=budget(args.epochs)), args.json or Path(f"results/evornn_ml100k_{tag}.json"),
                  command, machine, args.jobs, outcomes, body, {"results": [vars(r) for r in results.values()]}))
    return results


if __name__ == "__main__":
    from seqrec.errors import run_command  # imports Lightning: not at import, so --help stays fast

    run_command(main)
