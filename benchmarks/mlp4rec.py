"""MLP4Rec (with and without item features), SASRec and GRU4Rec on ML-100k under MLP4Rec's protocol: results/MLP4REC.md.

    python -m benchmarks.mlp4rec [--runs_dir runs/mlp4rec_bench] [--epochs 3] [--short_epochs 1]
                                 [--seeds 2022 2023 2024] [--jobs 1] [--out results/MLP4REC.md]
    python -m benchmarks.mlp4rec --epochs 0 --seeds 2022 [--models sasrec gru4rec] [--threads 2] [--one_seed mlp4rec]

The fits (``benchmarks.fit_grid``, resumable), each ``--threads 1`` with validation every quarter epoch:
- the main table: every model for ``--epochs`` epochs with the first seed, and the popularity floor;
- the features table: both MLP4Rec variants (with and without item features) for ``--epochs`` epochs with every
  seed, paired per seed and over the seeds;
- the short table: every model for ``--short_epochs`` epochs with the first seed, and both MLP4Rec variants with
  each further seed (MLP4Rec's early plateau has a seed-dependent length).

MLP4Rec runs at the CPU size ``CPU_SIZE`` (d 32, 2 layers, lr 1e-3, batch 64 × 4 accumulated = 256 per step);
the config ships the official size (d 128, 4 layers, lr 1e-4), see results/MLP4REC.md for why.
Paired differences on the 943 test users (``fit_grid.paired``): features − no features, and MLP4Rec − SASRec.
The ``## Results`` section of ``--out`` is rewritten; the other sections (the prose) are kept.

``--epochs 0`` is the protocol's own budget instead (``## Results: early stopping``, its JSON
``results/mlp4rec_ml100k_early_stopping.json``): each of ``--models`` per seed at its config as shipped, MLP4Rec
at the official size, validated once an epoch, stopped after 10 validations without a gain in MRR@10 (at most 100
epochs), the best-validating checkpoint tested; ``--threads`` per fit (default 1); the models of ``--one_seed``
with the first seed only (the pairs then use the seeds both models have). A fit cut off (a signal, a
crash) continues from its ``last.ckpt`` when the same command runs again.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from benchmarks.fit_grid import Fit, Outcome, outcome, paired, publish, run_all, validation_curve
from benchmarks.flags import Parser
from seqrec.bench.report import machine_description

TITLE = "Results"
METRICS = ("hr@10", "ndcg@10", "mrr@10")
COMMON = ("--threads", "1", "--trainer.val_check_interval", "0.25")
CPU_SIZE = ("--model.init_args.lr", "0.001", "--model.net.d_model", "32", "--model.net.num_layers", "2",
            "--data.init_args.batch_size", "64", "--trainer.accumulate_grad_batches", "4")
# name: (label, config, flags); the fixed-epoch tables run the models named in CPU_SIZED at CPU_SIZE
MODELS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "mlp4rec": ("**MLP4Rec + features** (genres, title, year)", "mlp4rec_ml100k.yaml", ()),
    "mlp4rec_nofeatures": ("MLP4Rec, no features", "mlp4rec_ml100k.yaml", ("--data.init_args.features", "null")),
    "sasrec": ("SASRec", "sasrec_ml100k_pop100.yaml", ()),
    "gru4rec": ("GRU4Rec", "gru4rec_ml100k_pop100.yaml", ()),
}
CPU_SIZED = ("mlp4rec", "mlp4rec_nofeatures")
EARLY_STOPPING = "Results: early stopping"
POPULARITY = Fit("popularity", "sasrec_ml100k_pop100.yaml",
                 ("--threads", "1", "--model.net", "seqrec.models.next_item.popularity.Popularity", "--trainer.max_epochs", "1"))


def model_fit(model: str, epochs: int, seed: int) -> Fit:
    """``model`` for ``epochs`` epochs, validated every quarter epoch, one thread, MLP4Rec at ``CPU_SIZE``."""
    _, config, flags = MODELS[model]
    size = CPU_SIZE if model in CPU_SIZED else ()
    return Fit(f"{model}_{epochs}ep_s{seed}", config, (*COMMON, *size, *flags, "--trainer.max_epochs", str(epochs),
                                                      "--seed_everything", str(seed)))


def early_stopping_fit(model: str, seed: int, threads: int = 1) -> Fit:
    """``model`` at its config as shipped (MLP4Rec: d 128, 4 layers, lr 1e-4, the official size) under the protocol's
    own budget (``configs/protocol/mlp4rec.yaml``: validation once an epoch, early stopping on MRR@10 after 10,
    at most 100 epochs)."""
    _, config, flags = MODELS[model]
    return Fit(f"{model}_early_stopping_s{seed}", config, ("--threads", str(threads), *flags,
                                                           "--seed_everything", str(seed)))


VARIANTS = ("mlp4rec", "mlp4rec_nofeatures")  # with and without item features


def grid(epochs: int, short_epochs: int, seeds: list[int]) -> list[Fit]:
    main_seed, *others = seeds
    fits = [model_fit(m, epochs, main_seed) for m in MODELS]
    fits += [model_fit(m, epochs, s) for s in others for m in VARIANTS]
    if short_epochs != epochs:
        fits += [model_fit(m, short_epochs, main_seed) for m in MODELS]
        fits += [model_fit(m, short_epochs, s) for s in others for m in VARIANTS]
    return [*fits, POPULARITY]


def figures(o: Outcome) -> str:
    """A row's closing cells: the test metrics, the best validation MRR@10, fit and wall seconds."""
    return (" | ".join(f"{o.test[f'test/{m}']:.4f}" for m in METRICS)
            + f" | {o.best_val:.4f} | {o.fit_s:.0f} | {o.wall_s:.0f} |")


def main_table(done: dict[str, Outcome], epochs: int, seed: int) -> list[str]:
    lines = [f"### Main table: {epochs} epochs, seed {seed}", "",
             "| model | epochs | steps | test HR@10 | test NDCG@10 | test MRR@10 | best val MRR@10 | fit s | wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for model, (label, _, _) in MODELS.items():
        o = done[model_fit(model, epochs, seed).name]
        lines.append(f"| {label} | {epochs} | {o.steps} | {figures(o)}")
    lines.append(f"| Popularity (reference) | – | – | {figures(done[POPULARITY.name])}")
    return lines


def paired_lines(dirs: dict[str, Path], epochs: int, seed: int) -> list[str]:
    """Paired differences on the same test users, mean (s.e.), for the two questions the table asks."""
    pairs = [("features − no features", *VARIANTS), ("MLP4Rec + features − SASRec", "mlp4rec", "sasrec")]
    lines = ["", f"Paired on the same 943 test users ({epochs} epochs, seed {seed}; mean difference (s.e.), "
             "`benchmarks/fit_grid.py`). The s.e. covers the test users' sampling, not training's randomness "
             "(one seed per model here; the features table below repeats the first pair over seeds):", "", "| difference | HR@10 | NDCG@10 | MRR@10 |", "|---|---|---|---|"]
    for label, a, b in pairs:
        cells = []
        for metric in METRICS:
            mean, se = paired([dirs[model_fit(a, epochs, seed).name]], [dirs[model_fit(b, epochs, seed).name]], metric)
            cells.append(f"{mean:+.4f} ({se:.4f})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def features_table(done: dict[str, Outcome], dirs: dict[str, Path], epochs: int, seeds: list[int]) -> list[str]:
    """Features − no features per seed (paired on the test users), and over the seeds two ways: the paired s.e. of
    the seed-averaged per-user differences (test sampling only) and std/√S of the per-seed differences (training's
    randomness and test sampling together, from S seeds)."""
    lines = ["", f"### Do features help? {epochs} epochs, {len(seeds)} seed(s)", "",
             "| seed | " + " | ".join(f"{m.upper()} with / without | difference (paired s.e.)" for m in METRICS) + " |",
             "|---|" + "---|---|" * len(METRICS)]
    runs = {v: [dirs[model_fit(v, epochs, s).name] for s in seeds] for v in VARIANTS}
    per_seed: dict[str, list[float]] = {m: [] for m in METRICS}
    for i, seed in enumerate(seeds):
        cells = []
        for m in METRICS:
            with_, without = (done[model_fit(v, epochs, seed).name].test[f"test/{m}"] for v in VARIANTS)
            diff, se = paired([runs[VARIANTS[0]][i]], [runs[VARIANTS[1]][i]], m)
            per_seed[m].append(diff)
            cells.append(f"{with_:.4f} / {without:.4f} | {diff:+.4f} ({se:.4f})")
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    if len(seeds) > 1:
        cells = []
        for m in METRICS:
            with_, without = (statistics.mean(done[model_fit(v, epochs, s).name].test[f"test/{m}"] for s in seeds)
                              for v in VARIANTS)
            diff, se = paired(runs[VARIANTS[0]], runs[VARIANTS[1]], m)
            spread = statistics.stdev(per_seed[m]) / math.sqrt(len(seeds))
            cells.append(f"{with_:.4f} / {without:.4f} | {diff:+.4f} ({se:.4f}; over seeds {spread:.4f})")
        lines.append(f"| **mean of {len(seeds)}** | " + " | ".join(cells) + " |")
        lines += ["", "The last row's first s.e. pairs the users (test sampling only); the second is the standard "
                  "deviation of the per-seed differences over √seeds, which also holds training's randomness."]
    return lines


def curve_table(dirs: dict[str, Path], epochs: int, seed: int) -> list[str]:
    curves = {m: validation_curve(dirs[model_fit(m, epochs, seed).name], "mrr@10") for m in MODELS}
    width = max(len(c) for c in curves.values())
    ticks = [f"{(i + 1) / 4:g}" for i in range(width)]
    lines = ["", "Validation MRR@10 after each quarter epoch:", "",
             "| model | " + " | ".join(ticks) + " |", "|---|" + "---|" * width]
    for model, curve in curves.items():
        values = [f"{v:.3f}".lstrip("0") for _, v in curve] + [""] * (width - len(curve))
        lines.append(f"| {MODELS[model][0]} | " + " | ".join(values) + " |")
    return lines


def short_table(done: dict[str, Outcome], short_epochs: int, seeds: list[int]) -> list[str]:
    lines = ["", f"### {short_epochs} epoch(s), {len(seeds)} seed(s)", "",
             "| model | seed | test HR@10 | test NDCG@10 | test MRR@10 | best val MRR@10 | fit s | wall s |",
             "|---|---|---|---|---|---|---|---|"]
    for seed in seeds:
        for model, (label, _, _) in MODELS.items():
            name = model_fit(model, short_epochs, seed).name
            if name in done:
                o = done[name]
                lines.append(f"| {label} | {seed} | {figures(o)}")
    return lines


def model_seeds(model: str, seeds: list[int], one_seed: Sequence[str] = ()) -> list[int]:
    """The seeds ``model`` is fitted with: the first alone for the models of ``--one_seed``, else all."""
    return seeds[:1] if model in one_seed else list(seeds)


def early_stopping_fits(models: list[str], seeds: list[int], threads: int, one_seed: Sequence[str] = ()) -> list[Fit]:
    """Every model of ``models`` with each of its seeds (``model_seeds``), seed by seed."""
    return [early_stopping_fit(m, s, threads) for s in seeds for m in models if s in model_seeds(m, seeds, one_seed)]


def early_stopping_table(done: dict[str, Outcome], dirs: dict[str, Path], models: list[str],
                         seeds: list[int], one_seed: Sequence[str] = ()) -> list[str]:
    """One row per model and seed fitted (epochs trained, the tested checkpoint's epoch, why it stopped), the
    popularity floor, then the paired differences on the test users that the fitted models allow, each over the
    seeds both models were fitted with."""
    lines = ["### Each model to early stopping, its config as shipped", "",
             "| model | seed | epochs (best) | steps | stopped by | test HR@10 | test NDCG@10 | test MRR@10 | "
             "best val MRR@10 | fit s | wall s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for seed in seeds:
        for model in models:
            if seed not in model_seeds(model, seeds, one_seed):
                continue
            o = done[early_stopping_fit(model, seed).name]
            lines.append(f"| {MODELS[model][0]} | {seed} | {o.epochs} ({o.best_epoch}) | {o.steps} | {o.status} | "
                         f"{figures(o)}")
    lines.append(f"| Popularity (reference) | – | – | – | – | {figures(done[POPULARITY.name])}")
    pairs = [(f"{MODELS[a][0]} − {MODELS[b][0]}", a, b) for a, b in
             [("mlp4rec", "mlp4rec_nofeatures"), ("mlp4rec", "sasrec"), ("sasrec", "gru4rec")]
             if a in models and b in models]
    if pairs:
        lines += ["", "Paired on the same 943 test users (mean difference (s.e.) over the seeds both models were fitted "
                  "with; the s.e. covers the test users' sampling, not training's randomness):", "",
                  "| difference | seeds | HR@10 | NDCG@10 | MRR@10 |", "|---|---|---|---|---|"]
        for label, a, b in pairs:
            both = [s for s in model_seeds(a, seeds, one_seed) if s in model_seeds(b, seeds, one_seed)]
            runs, bases = ([dirs[early_stopping_fit(m, s).name] for s in both] for m in (a, b))
            lines.append(f"| {label} | {', '.join(map(str, both))} | "
                         + " | ".join("{:+.4f} ({:.4f})".format(*paired(runs, bases, m)) for m in METRICS) + " |")
    return lines


def main(argv: list[str] | None = None) -> dict[str, Outcome]:
    p = Parser("benchmarks.mlp4rec", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs_dir", type=Path, default=Path("runs/mlp4rec_bench"))
    p.add_argument("--epochs", type=int, default=3,
                   help="epochs of the main table (default 3: the CPU budget; 0: the protocol's early stopping)")
    p.add_argument("--short_epochs", type=int, default=1, help="epochs of the seed table (default 1)")
    p.add_argument("--seeds", type=int, nargs="+", default=[2022, 2023, 2024], help="the first is the main table's")
    p.add_argument("--jobs", type=int, default=1, help="fits side by side (default 1; wall times then share the cores)")
    p.add_argument("--out", type=Path, default=Path("results/MLP4REC.md"))
    p.add_argument("--json", type=Path, default=None,
                   help="raw figures (default results/mlp4rec_ml100k.json; with --epochs 0 ..._early_stopping.json)")
    p.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS),
                   help="with --epochs 0: the models to fit (default all four)")
    p.add_argument("--threads", type=int, default=1, help="with --epochs 0: torch threads per fit (default 1)")
    p.add_argument("--one_seed", nargs="+", choices=list(MODELS), default=[],
                   help="with --epochs 0: models fitted with the first seed only (MLP4Rec at the official size: "
                        "about 32 minutes an epoch on 2 AVX2 cores)")
    args = p.parse_args(argv)
    command = p.command()
    if args.epochs == 0:
        return early_stopping(args, command)
    machine = machine_description(threads=1)
    dirs = run_all(grid(args.epochs, args.short_epochs, args.seeds), args.runs_dir, args.jobs)
    done = {name: outcome(run) for name, run in dirs.items()}
    seed = args.seeds[0]
    body = ["\"fit s\" is `fit_summary.json`'s `seconds_this_sitting`; \"wall s\" the fit's commands (data, fit, "
            "test), every sitting's; 1 thread per fit.", "", *main_table(done, args.epochs, seed), *paired_lines(dirs, args.epochs, seed),
            *curve_table(dirs, args.epochs, seed), *features_table(done, dirs, args.epochs, args.seeds),
            *short_table(done, args.short_epochs, args.seeds)]
    print(publish(args.out, TITLE, args.json or Path("results/mlp4rec_ml100k.json"), command, machine, args.jobs,
                  done, body))
    return done


def early_stopping(args: argparse.Namespace, command: str) -> dict[str, Outcome]:
    """``--epochs 0``: every model of ``--models`` per seed to early stopping; its own section and JSON."""
    fits = early_stopping_fits(args.models, args.seeds, args.threads, args.one_seed)
    machine = machine_description(threads=args.threads)
    dirs = run_all([*fits, POPULARITY], args.runs_dir, args.jobs)
    done = {name: outcome(run) for name, run in dirs.items()}
    body = ["\"fit s\" is `fit_summary.json`'s `seconds_this_sitting` (its last sitting); \"wall s\" the fit's "
            f"commands (data, fit, test), every sitting's; {args.threads} thread(s) per fit; \"epochs (best)\": epochs "
            "trained and the tested checkpoint's epoch.", "", *early_stopping_table(done, dirs, args.models, args.seeds, args.one_seed)]
    json_path = args.json or Path("results/mlp4rec_ml100k_early_stopping.json")
    print(publish(args.out, EARLY_STOPPING, json_path, command, machine, args.jobs, done, body))
    return done


if __name__ == "__main__":
    from seqrec.errors import run_command  # imports Lightning: not at import, so --help stays fast

    run_command(main)
