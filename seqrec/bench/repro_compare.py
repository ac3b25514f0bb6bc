"""How a reproduced cell compares with its paper: a one-line verdict per cell and the validation-curve figure.

The verdict reads the four test metrics m of a cell against the paper's, as relative differences
``d_m = (ours_m - paper_m) / paper_m``:

- **within 3%**: ``|d_m| <= 3%`` for every m;
- **below**: some ``d_m < -3%``; the line names those metrics and the cause the ledger entry records
  (``cause``, written after it was measured), else says no cause is measured yet;
- **above**: no ``d_m < -3%`` and some ``d_m > +3%``.

The seed spread groups a cell with its reruns on other seeds (cells ``<cell>@seed_N``, or
``<cell>@<variant>+seed_N`` for a variant: the same flags plus ``--seed_everything N``) and gives, per metric,
each seed's figure, their mean ``μ = Σ_s m_s / S``, the spread ``max_s m_s − min_s m_s`` (also as a share of μ) and
``(μ − paper) / paper``: a gap to the paper smaller than the spread is not a measured difference.

The selection section does for a config's settings what the protocol does for one run's checkpoints: the shipped
config and its variants (a hyperparameter grid run as cells ``<config>@<variant>``, each setting's seed reruns
averaged) are listed with their best validation Recall@10 and test figures, and the setting with the highest
validation figure is the one selected; test figures never choose.

The figure (``reproduction_curves.png`` beside the report) draws each converged cell's validation Recall@10
against the training step, the best step marked, beside the paper's final *test* figure as a dashed line (the
paper publishes no curve); a config's variants and seeds share its panel, so a grid reads as one picture. A
ledger entry keeps its curve (``val_curve``, read from the run's metrics.csv when the cell is recorded), so the
figure can be redrawn where the run directory no longer exists.
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path
from typing import Any

from seqrec.atomic import atomic_write
from seqrec.loggers.report import read_config, read_metrics
from seqrec.run_files import METRICS

TOLERANCE = 0.03  # the campaign's bar: a cell within 3% of the paper on every metric reproduces it
CURVE_METRIC = "recall@10"  # the protocol's early-stopping and checkpoint-selection metric (PROTOCOLS.md §1)
FIGURE = "reproduction_curves.png"
SEED_RERUN = re.compile(r"[@+]seed_\d+$")  # "<cell>@seed_43", "<cell>@<variant>+seed_43": that cell on another seed


def relative_differences(metrics: dict[str, float], paper: dict[str, float]) -> dict[str, float]:
    """``{metric: (ours - paper) / paper}`` for every paper metric the cell measured."""
    return {name: (metrics[name] - value) / value for name, value in paper.items() if name in metrics and value}


def signed_percent(fraction: float) -> str:
    """``fraction`` as a signed percentage, one decimal: 0.0123 -> "+1.2%". Rounded first, and + 0.0 turns a
    rounded -0.0 into 0.0, so a difference too small to show reads "+0.0%", not "-0.0%" (format's "z" option
    needs Python 3.11)."""
    return f"{round(100 * fraction, 1) + 0.0:+.1f}%"


def verdict(entry: dict[str, Any], paper: dict[str, float]) -> str:
    """One line: within 3%, above, or below (with the recorded cause), from the entry's test metrics."""
    diffs = relative_differences(entry.get("metrics", {}), paper)
    if not diffs:
        return "no test metrics to compare"

    def listed(names: list[str]) -> str:
        return ", ".join(f"{name} {signed_percent(diffs[name])}" for name in names)

    below = [name for name, d in diffs.items() if d < -TOLERANCE]
    above = [name for name, d in diffs.items() if d > TOLERANCE]
    if below:
        cause = entry.get("cause") or "not measured yet"
        return f"below the paper by more than 3% on {listed(below)}; cause: {cause}"
    if above:
        rest = [name for name in diffs if name not in above]
        return f"above the paper: {listed(above)}" + (f"; {listed(rest)}" if rest else "")
    low, high = min(diffs.values()), max(diffs.values())
    return f"within 3% on all {len(diffs)} metrics ({signed_percent(low)} to {signed_percent(high)})"


def seed_groups(converged: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{cell: {cell or its seed rerun: converged entry}}`` for every cell converged on two or more seeds."""
    groups: dict[str, dict[str, dict[str, Any]]] = {}
    for name, entry in converged.items():
        groups.setdefault(SEED_RERUN.sub("", name), {})[name] = entry
    return {cell: runs for cell, runs in groups.items() if len(runs) >= 2}


def setting_of(cell: str) -> tuple[str, str]:
    """``(config, setting)`` of a cell: ``"lru_beauty@dropout_04+seed_7"`` → ``("lru_beauty", "dropout_04")``,
    ``"sasrec_ml1m@seed_43"`` → ``("sasrec_ml1m", "shipped")``."""
    config, _, variant = SEED_RERUN.sub("", cell).partition("@")
    return config, variant or "shipped"


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def seed_label(entry: dict[str, Any]) -> str:
    """``42``, or ``44 (GPU)`` for a run whose hardware label is not a CPU's: one setting's seeds may have run on
    different machines (numerically another run, as another seed is), and the tables say which."""
    seed = str(entry.get("seed", "?"))
    hardware = str(entry.get("hardware", ""))
    return seed if not hardware or hardware.startswith("CPU") else f"{seed} (GPU)"


def selection(converged: dict[str, dict[str, Any]], paper_of: dict[str, dict[str, float]],
              metric: str = CURVE_METRIC, partial: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """The report's selection section (empty while no config has two settings): per config, each setting's seeds,
    mean best validation ``metric`` (the ledger's ``best_score``), mean test figures and the mean test ``metric``
    against the paper; ``selected`` marks the highest validation figure among the converged settings. A setting
    whose validation figure was not recorded is listed but cannot be selected. ``partial``: cells stopped before
    early stopping (their newest entry); a setting with no converged seed is listed from them, marked with its
    step, and not selected: its best validation figure so far is a lower bound of the converged one, so every
    point of a grid shows while it runs and the choice waits for it."""
    settings: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for cell, entry in converged.items():
        config, setting = setting_of(cell)
        settings.setdefault(config, {}).setdefault(setting, []).append(entry)
    stopped: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for cell, entry in (partial or {}).items():
        config, setting = setting_of(cell)
        if setting not in settings.get(config, {}):
            stopped.setdefault(config, {}).setdefault(setting, []).append(entry)
    configs = [c for c in dict.fromkeys([*settings, *stopped]) if len({*settings.get(c, {}), *stopped.get(c, {})}) >= 2]
    if not configs:
        return []
    names = ["recall@10", "ndcg@10", "recall@20", "ndcg@20"]
    lines = ["", f"## Selection on validation (a config's settings; the protocol selects the best validation {metric})", "",
             f"| config | setting | seeds | best val {metric} | " + " | ".join(f"test {n}" for n in names)
             + f" | test {metric} vs paper | |", "|---|---|---|---|" + "---|" * len(names) + "---|---|"]
    for config in configs:
        found, unfinished = settings.get(config, {}), stopped.get(config, {})
        rows = {**found, **unfinished}  # converged settings first, then those only partial runs show
        val = {setting: mean([e["best_score"] for e in entries if e.get("best_score") is not None])
               for setting, entries in rows.items()}
        chosen = max((s for s in found if val[s] is not None), key=lambda s: val[s], default=None)
        paper = paper_of.get(config, {})
        for setting, entries in rows.items():
            test = {n: mean([e["metrics"][n] for e in entries if n in e.get("metrics", {})]) for n in [*names, metric]}
            seeds = ", ".join(seed_label(e) for e in entries)
            against = (signed_percent((test[metric] - paper[metric]) / paper[metric])
                       if test[metric] is not None and paper.get(metric) else "—")
            mark = "selected" if setting == chosen else ""
            if setting in unfinished:
                steps = ", ".join(f"{e['global_step']:,}" for e in entries if e.get("global_step") is not None)
                mark = f"partial (stopped at step {steps}): not in the choice"
            lines.append(f"| {config} | {setting} | {seeds} | " + (f"{val[setting]:.5f}" if val[setting] is not None
                         else "not recorded") + " | " + " | ".join(f"{test[n]:.5f}" if test[n] is not None else "—"
                                                                    for n in names)
                         + f" | {against} | {mark} |")
    lines += ["", "Figures are means over a setting's converged seeds; a setting's flags are in its command (below). "
              "\"not recorded\": converged before the ledger kept validation figures, so not in the choice. "
              "\"partial\": no seed of the setting has converged yet; its figures are its best-validation "
              "checkpoint's so far (the validation figure a lower bound), listed so that every point of a grid shows, "
              "and left out of the choice until it converges."]
    return lines


def seed_spread(converged: dict[str, dict[str, Any]], paper_of: dict[str, dict[str, float]]) -> list[str]:
    """The report's seed-spread section (empty while no cell has two converged seeds): a row per cell and metric
    with each seed's test figure, their mean, the spread (max − min) and the mean against ``paper_of[cell]``."""
    groups = seed_groups(converged)
    if not groups:
        return []
    lines = ["", "## Seed spread (cells converged on more than one seed; test split)", "",
             "| cell | metric | per seed | mean | spread (max − min) | mean vs paper |", "|---|---|---|---|---|---|"]
    for cell, runs in groups.items():
        paper = paper_of.get(setting_of(cell)[0], {})
        for metric in paper or next(iter(runs.values())).get("metrics", {}):
            figures = [(seed_label(e), e["metrics"][metric]) for e in runs.values() if metric in e.get("metrics", {})]
            if len(figures) < 2:
                continue
            values = [value for _, value in figures]
            mean, spread = sum(values) / len(values), max(values) - min(values)
            per_seed = ", ".join(f"{seed}: {value:.5f}" for seed, value in figures)
            against = "—"
            if paper.get(metric):
                against = signed_percent((mean - paper[metric]) / paper[metric])
            lines.append(f"| {cell} | {metric} | {per_seed} | {mean:.5f} | {spread:.5f} ({100 * spread / mean:.1f}%) "
                         f"| {against} |")
    lines += ["", "A gap to the paper smaller than its cell's spread is not a measured difference."]
    return lines


def validation_curve(run: Path, metric: str = CURVE_METRIC) -> list[list[float]]:
    """``[[step, value], ...]`` of ``val/<metric>`` from the run's metrics.csv, every sitting's rows as a resume
    kept them ([] without the file). Step 0 is the check before training (logged, never a checkpoint)."""
    if not (run / METRICS).is_file():
        return []
    curve = {int(row["step"]): row[f"val/{metric}"] for row in read_metrics(run) if f"val/{metric}" in row and "step" in row}
    return [[step, curve[step]] for step in sorted(curve)]


def best_step(curve: list[list[float]], best_checkpoint: str | None, best_score: float | None) -> int | None:
    """The global step of the best checkpoint: from its file name (``best-epoch=E-step=S.ckpt``, the step the
    checkpoint and the resume use), else the first step after step 0 whose validation value is ``best_score``,
    else the first step of the curve's maximum; None without any. (metrics.csv logs a validation inside training
    one step before the checkpoint's global step.)"""
    found = re.search(r"step=(\d+)", Path(best_checkpoint).name) if best_checkpoint else None
    if found:
        return int(found[1])
    trained = [(int(step), value) for step, value in curve if step > 0]
    if not trained:
        return None
    if best_score is not None:
        for step, value in trained:
            if math.isclose(value, best_score, rel_tol=1e-6, abs_tol=1e-9):
                return step
    return max(trained, key=lambda point: point[1])[0]


def seed_of(run: Path) -> int | None:
    """The run's ``seed_everything`` from its config.yaml (None without it)."""
    seed = read_config(run).get("seed_everything")
    return int(seed) if isinstance(seed, (int, float)) and not isinstance(seed, bool) else None


# the shipped setting's line, then one colour per variant or seed (red is the paper's line)
LINE_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:gray", "tab:olive",
                "tab:cyan")


def plot_curves(curves: dict[str, dict[str, Any]], paper: dict[str, dict[str, float]], out: Path,
                metric: str = CURVE_METRIC) -> Path | None:
    """Write ``out``: one panel per shipped config of ``curves`` (``{cell: entry}`` with ``val_curve``; ``paper``
    by shipped config), one line per cell of that config (the shipped setting first and thicker, then its variants
    and seeds, each labelled with its test figure): validation ``metric`` per step, each line's best step starred,
    and the paper's final test figure dashed. None without matplotlib or any curve."""
    panels: dict[str, dict[str, dict[str, Any]]] = {}  # {config: {cell: entry}}, in the order of curves
    for cell, entry in curves.items():
        if entry.get("val_curve"):
            panels.setdefault(setting_of(cell)[0], {})[cell] = entry
    if not panels:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, MaxNLocator
    except ImportError:
        return None
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.6 * columns, 3.6 * rows), squeeze=False,
                             constrained_layout=True)
    for axis, (config, cells) in zip(axes.flat, panels.items()):
        ordered = sorted(cells, key=lambda cell: cell != config)  # the shipped cell first (stable otherwise)
        others = itertools.cycle(LINE_COLOURS[1:])
        for cell in ordered:
            entry, shipped = cells[cell], cell == config
            colour = LINE_COLOURS[0] if shipped else next(others)
            steps, values = zip(*entry["val_curve"])
            ours = entry.get("metrics", {}).get(metric)
            label = (cell[len(config) + 1:] or "shipped") + (f": test {ours:.4f}" if ours is not None else "")
            axis.plot(steps, values, color=colour, linewidth=1.6 if shipped else 0.9, alpha=1.0 if shipped else 0.85,
                      label=label)
            if entry.get("best_step") is not None and entry.get("best_score") is not None:
                axis.plot([entry["best_step"]], [entry["best_score"]], marker="*", markersize=10, color=colour,
                          markeredgecolor="black", markeredgewidth=0.5, linestyle="none")
        figures = paper.get(config, {})
        if metric in figures:
            axis.axhline(figures[metric], color="tab:red", linestyle="--", label=f"paper: test {figures[metric]:.4f}")
        axis.set_title(config, fontsize=11)
        axis.set(xlabel="training step", ylabel=f"validation {metric}")
        axis.xaxis.set_major_locator(MaxNLocator(5))
        axis.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1000:g}k" if x else "0"))
        axis.grid(alpha=0.3)
        axis.legend(fontsize=6.5, loc="lower right")
    for axis in list(axes.flat)[len(panels):]:
        axis.set_visible(False)
    fig.set_dpi(100)
    fig.canvas.draw()  # the Agg raster savefig would encode, taken as it is (no PNG written only to be read back)
    # The committed figure grows with every config run (1.06 MB at 38 one-cell panels in RGBA). A 256-colour palette
    # (Pillow, which matplotlib requires) leaves these line plots visibly the same at 0.37x the bytes.
    from PIL import Image

    image = Image.frombuffer("RGBA", fig.canvas.get_width_height(), fig.canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    image = image.convert("RGB").quantize(256)
    plt.close(fig)
    atomic_write(out, lambda tmp: image.save(tmp, format="PNG", optimize=True))
    return out
