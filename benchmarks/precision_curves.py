"""Two runs of one config that differ in one thing (the precision, or the code), side by side: validation
curve, test metrics, pace.

    python -m benchmarks.precision_curves RUN_FP32 RUN_OTHER [--metrics recall@10 ndcg@10] [--name lru_ml1m]
        [--out results/BENCHMARKS.md] [--figure results/precision_curves.png]

Each RUN is a run directory (``runs/<config>/version_N``) trained with the same config, seed and batches (the
training order is seeded apart from the model's random stream, ``seqrec.datamodules.loaders``), for example:

    seqrec fit --config lru_ml1m --trainer.max_steps 2000 --threads 2 --trainer.logger.init_args.name fp32
    seqrec fit --config lru_ml1m --trainer.max_steps 2000 --threads 2 --trainer.precision bf16-mixed \\
        --trainer.logger.init_args.name bf16

The section "Precision: <config>" lists each validation step's metrics for both runs and their relative
difference, the best-checkpoint test metrics, and each run's seconds per step (validations included,
``fit_summary.json``); the figure draws both validation curves. The precision and the seed are read from each
run's config.yaml, the CPU's native bf16 support from its flags (bf16 is worth timing only where it is native).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.flags import Parser
from seqrec.atomic import atomic_write
from seqrec.bench.report import machine_description, write_section
from seqrec.bench.repro_compare import seed_of, validation_curve
from seqrec.loggers.report import read_config

DEFAULT_METRICS = ("recall@10", "ndcg@10")
FIT_SUMMARY = "fit_summary.json"
TEST_METRICS = "test_metrics.json"


def run_facts(run: Path, metrics: list[str]) -> dict[str, Any]:
    """What the section reads of one run: config, precision, seed, curves, test metrics, pace."""
    if not (run / "config.yaml").is_file():
        raise SystemExit(f"error: {run} holds no config.yaml: pass run directories (runs/<config>/version_N)")
    config = read_config(run)
    trainer = config.get("trainer") or {}
    summary = json.loads((run / FIT_SUMMARY).read_text()) if (run / FIT_SUMMARY).is_file() else {}
    test = json.loads((run / TEST_METRICS).read_text()) if (run / TEST_METRICS).is_file() else {}
    return {
        "run": run, "precision": str(trainer.get("precision") or "32-true"), "seed": seed_of(run),
        "curves": {metric: dict((int(s), v) for s, v in validation_curve(run, metric)) for metric in metrics},
        "test": {metric: test.get(f"test/{metric}") for metric in metrics},
        "pace": summary.get("seconds_per_step"), "steps": summary.get("global_step"),
    }


def relative(ours: float | None, reference: float | None) -> str:
    """(ours − reference) / reference as a signed percentage, or "–"."""
    if ours is None or reference is None or reference == 0:
        return "–"
    return f"{100 * (ours - reference) / reference:+.1f}%"


def described(facts: dict[str, Any]) -> str:
    """A run's label and precision (the precision alone where there is no label)."""
    return f"{facts['label']}: {facts['precision']}" if "label" in facts else facts["precision"]


def render(base: dict[str, Any], other: dict[str, Any], metrics: list[str], figure: Path | None,
           command: str, bf16_sentence: str) -> str:
    """The section body (markdown)."""
    a, b = base.get("label", base["precision"]), other.get("label", other["precision"])
    lines = [
        f"Command: `{command}`", "",
        f"Machine: {machine_description()}. {bf16_sentence}", "",
        f"Runs: `{base['run']}` ({described(base)}, seed {base['seed']}) and `{other['run']}` ({described(other)}, "
        f"seed {other['seed']}), the same config, seed and training batches; they differ only in "
        f"{'what the labels name' if 'label' in base else 'the precision'}.", "",
        "| step | " + " | ".join(f"{m} {a} | {m} {b} | Δ" for m in metrics) + " |",
        "|---|" + "---|---|---|" * len(metrics),
    ]
    steps = sorted(set().union(*(base["curves"][m].keys() for m in metrics)))
    for step in steps:
        cells = []
        for metric in metrics:
            x, y = base["curves"][metric].get(step), other["curves"][metric].get(step)
            cells += [f"{x:.4f}" if x is not None else "–", f"{y:.4f}" if y is not None else "–", relative(y, x)]
        lines.append(f"| {step:,} | " + " | ".join(cells) + " |")
    test = []
    for metric in metrics:
        x, y = base["test"][metric], other["test"][metric]
        if x is not None and y is not None:
            test.append(f"{metric} {x:.4f} ({a}) vs {y:.4f} ({b}), {relative(y, x)}")
    if test:
        lines += ["", "Test split, best-validation checkpoint of each run: " + "; ".join(test) + "."]
    if base["pace"] and other["pace"]:
        lines += ["", f"Seconds per step, validations included (`{FIT_SUMMARY}`): {base['pace']:.4f} ({a}) and "
                      f"{other['pace']:.4f} ({b}), {other['pace'] / base['pace']:.2f}× over {base['steps']:,} and "
                      f"{other['steps']:,} steps."]
    if figure is not None:
        lines += ["", f"Figure: `{figure}` (validation {metrics[0]} per step, both runs)."]
    return "\n".join(lines)


def plot(base: dict[str, Any], other: dict[str, Any], metric: str, out: Path) -> Path | None:
    """Both runs' validation ``metric`` per step into ``out`` (PNG, atomic); None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axis = plt.subplots(figsize=(5.5, 3.6), constrained_layout=True)
    for facts, colour in ((base, "tab:blue"), (other, "tab:orange")):
        points = sorted((s, v) for s, v in facts["curves"][metric].items() if s > 0)
        if points:
            axis.plot(*zip(*points), marker="o", markersize=4, color=colour, label=facts.get("label", facts["precision"]))
    axis.set(xlabel="training step", ylabel=f"validation {metric}", title=f"validation {metric}, side by side")
    axis.grid(alpha=0.3)
    axis.legend()
    atomic_write(out, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> str:
    """Parse, read both runs, write the section (and the figure)."""
    from benchmarks.speed import bf16_native_text

    parser = Parser("benchmarks.precision_curves", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs=2, type=Path, help="the reference run (fp32), then the other precision's run")
    parser.add_argument("--metrics", nargs="+", default=list(DEFAULT_METRICS), help="validation metrics to compare")
    parser.add_argument("--out", type=Path, default=None, help="markdown file to write the section into")
    parser.add_argument("--figure", type=Path, default=None, help="PNG of both validation curves")
    parser.add_argument("--labels", nargs=2, default=None, metavar=("BASE", "OTHER"),
                        help="what tells the runs apart (default: their precisions), e.g. two code versions")
    parser.add_argument("--name", default=None, help="the config's name in the section title (default: the first "
                                                     "run's experiment folder)")
    args = parser.parse_args(argv)
    base, other = (run_facts(run, args.metrics) for run in args.runs)
    if args.labels is not None:
        base["label"], other["label"] = args.labels
    if not any(base["curves"][m] for m in args.metrics):
        raise SystemExit(f"error: {args.runs[0]} logged no val/{args.metrics[0]}: is it a next-item run that validated?")
    figure = plot(base, other, args.metrics[0], args.figure) if args.figure is not None else None
    name = args.name or args.runs[0].parent.name
    title = f"Precision: {name}" if args.labels is None else f"Side by side: {name}, {args.labels[0]} and {args.labels[1]}"
    body = render(base, other, args.metrics, figure, parser.command(),
                  bf16_native_text())
    print(f"## {title}\n\n{body}")
    if args.out is not None:
        write_section(args.out, title, body)
    return body


if __name__ == "__main__":
    main()
