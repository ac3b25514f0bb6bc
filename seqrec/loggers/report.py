"""The run report: learning-curve PNG, per-k metric table and summary.md, built from a run directory's files.

Reads what every run directory holds (``metrics.csv``, ``config.yaml``, ``test_metrics.json``) and writes
``learning_curve.png`` (training loss per epoch and every validation ranking metric), ``metrics_at_k.csv``
(test metrics, one row per cut-off k) and ``summary.md`` (model, data, test metrics, cost, throughput, best
validation epoch, the plot and where the wandb offline run is). ``RunLogger.close`` calls ``write_report``;
``python -m seqrec summarize RUN_DIR`` rebuilds it by hand.
"""


from __future__ import annotations

import csv
import json
import math
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from seqrec.atomic import atomic_write, write_text
from seqrec.run_files import CONFIG, METRICS, TEST_METRICS, newest_version

_METRIC = re.compile(r"^(?P<split>[a-z]+)/(?P<kind>[a-z]+)@(?P<k>\d+)$")
SITTING = "sitting"  # metrics.csv column: 0 for the first sitting of a run, n for its n-th resume


# ---------------------------------------------------------------------------------------------------
# reading a run
# ---------------------------------------------------------------------------------------------------


def find_run_dir(path: str | Path) -> Path:
    """``path`` if it holds metrics.csv, else its newest ``version_N`` that does; FileNotFoundError otherwise."""
    path = Path(path)
    if (path / METRICS).is_file():
        return path
    newest = newest_version(path, keep=lambda p: (p / METRICS).is_file())
    if newest is None:
        raise FileNotFoundError(
            f"{path} is not a run directory: expected metrics.csv in it or in a version_N folder inside it "
            "(runs/<name>/version_N, written by the CSV logger of `python -m seqrec.fit`)"
        )
    return newest


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    """The run's history from metrics.csv: rows as {column: float}, empty cells left out (``current_rows``)."""
    return current_rows(read_csv_rows(run_dir / METRICS))


def current_rows(rows: list[dict[str, float]]) -> list[dict[str, float]]:
    """``rows`` without what a later sitting replaced: the rows an earlier sitting logged after the step a
    later one resumed from (work lost with a crash and done again). A resumed sitting's first row is its
    marker, ``{sitting, step}`` alone. Rows of the same step and key keep their file order, so readers that
    let later rows win take the later sitting's value.
    """
    starts: dict[int, float] = {}
    for row in rows:
        if set(row) == {SITTING, "step"}:
            starts.setdefault(int(row[SITTING]), row["step"])
    kept = []
    for row in rows:
        sitting = int(row.get(SITTING, 0))
        later = [start for s, start in starts.items() if s > sitting]
        if later and row.get("step", -1) > min(later):
            continue
        kept.append(row)
    return kept


def read_csv_rows(path: Path) -> list[dict[str, float]]:
    """Every well-formed row of a metrics.csv as {column: float} (a row cut short by a kill is skipped)."""
    rows = []
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            if None in row or None in row.values():
                continue
            values = {}
            for key, text in row.items():
                if key is None or text in ("", None):
                    continue
                try:
                    values[key] = float(text)
                except ValueError:
                    continue
            rows.append(values)
    return rows


def final_values(run_dir: Path, rows: list[dict[str, float]]) -> dict[str, float]:
    """The last value of every metric (test_metrics.json, when present, wins for test and cost keys)."""
    values: dict[str, float] = {}
    for row in rows:
        values.update(row)
    path = run_dir / TEST_METRICS
    if path.is_file():
        values.update({k: float(v) for k, v in json.loads(path.read_text()).items()})
    return values


def metrics_at_k(values: dict[str, float], split: str = "test") -> tuple[list[str], list[list[Any]]]:
    """``split/<kind>@<k>`` values as (columns ["k", kinds...], rows [[k, value or None, ...]]) sorted by k."""
    table: dict[int, dict[str, float]] = defaultdict(dict)
    kinds: list[str] = []
    for name, value in values.items():
        match = _METRIC.match(name)
        if match and match["split"] == split:
            table[int(match["k"])][match["kind"]] = value
            if match["kind"] not in kinds:
                kinds.append(match["kind"])
    order = ["hr", "recall", "ndcg", "mrr", "map"]
    kinds.sort(key=lambda kind: (order.index(kind) if kind in order else len(order), kind))
    return ["k", *kinds], [[k, *(table[k].get(kind) for kind in kinds)] for k in sorted(table)]


def read_table(path: Path) -> tuple[list[str], list[list[Any]]]:
    """A CSV table written by ``write_report`` (numbers parsed, empty cells None)."""
    with open(path, newline="") as handle:
        reader = csv.reader(handle)
        columns = next(reader)
        rows = [[_number(cell) for cell in row] for row in reader]
    return columns, rows


def _number(text: str) -> Any:
    if text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() and "." not in text else value


def read_config(run_dir: Path) -> dict[str, Any]:
    """config.yaml of the run (empty when absent)."""
    path = run_dir / CONFIG
    if not path.is_file():
        return {}
    import yaml

    return yaml.safe_load(path.read_text()) or {}


# ---------------------------------------------------------------------------------------------------
# learning curve
# ---------------------------------------------------------------------------------------------------


def learning_curve(rows: list[dict[str, float]]) -> tuple[dict[int, float], dict[str, dict[int, float]]]:
    """({step: training loss} as logged, {val metric: {epoch: value}}) from metrics.csv rows."""
    losses: dict[int, float] = {}
    validation: dict[str, dict[int, float]] = defaultdict(dict)
    for row in rows:
        for key in ("train/loss_step", "train/loss"):
            if key in row and "step" in row:
                losses[int(row["step"])] = row[key]
                break
        if "epoch" not in row:
            continue
        for key, value in row.items():
            match = _METRIC.match(key)
            if match and match["split"] == "val":
                validation[key][int(row["epoch"])] = value
    return dict(sorted(losses.items())), dict(validation)


def plot_learning_curve(rows: list[dict[str, float]], out: Path, title: str = "") -> Path | None:
    """learning_curve.png (training loss per step | validation metrics per epoch); None without matplotlib or data."""
    loss, validation = learning_curve(rows)
    if not loss and not validation:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True)
    if loss:
        left.plot(list(loss), list(loss.values()), marker=".", color="tab:red")
    else:
        left.text(0.5, 0.5, "no training loss logged\n(fewer steps than log_every_n_steps)", ha="center",
                  va="center", transform=left.transAxes, color="gray")
    left.set(xlabel="step", ylabel="training loss", title="training")
    right.xaxis.set_major_locator(MaxNLocator(integer=True))
    for name, series in sorted(validation.items()):
        right.plot(list(series), list(series.values()), marker="o", markersize=3, label=name.removeprefix("val/"))
    right.set(xlabel="epoch", ylabel="metric", title="validation")
    if validation:
        right.legend(fontsize=8, loc="best", ncol=2)
    for axis in (left, right):
        axis.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    atomic_write(out, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
    return out


# ---------------------------------------------------------------------------------------------------
# summary
# ---------------------------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3) and math.isfinite(value):
            return _human(value) if abs(value) >= 1e5 else f"{value:.3g}"
        return f"{value:.5f}" if abs(value) < 10 else f"{value:,.1f}"
    return str(value)


def _cost(value: float) -> str:
    """Whole numbers exactly with a short form (300,480 (300.5K)); others with 5 significant digits."""
    if float(value).is_integer():
        return f"{value:,.0f}" + (f" ({_human(value)})" if abs(value) >= 1e4 else "")
    return f"{value:.5g}"


def _human(value: float) -> str:
    units = ["", "K", "M", "G", "T", "P"]
    power = min(int(math.log10(abs(value)) // 3), len(units) - 1)
    return f"{value / 10 ** (3 * power):.4g}{units[power]}"


def _class_line(section: Any) -> str:
    if not isinstance(section, dict) or "class_path" not in section:
        return ""
    args = section.get("init_args") or {}
    simple = {k: v for k, v in args.items() if not isinstance(v, (dict, list)) and v is not None}
    shown = ", ".join(f"{k}={v}" for k, v in list(simple.items())[:10])
    return f"`{section['class_path'].rsplit('.', 1)[-1]}`" + (f" ({shown})" if shown else "")


def summary_markdown(run_dir: Path, rows: list[dict[str, float]], plot: Path | None, wandb_dir: Path | None) -> str:
    """The markdown summary of one run (see the module docstring)."""
    values = final_values(run_dir, rows)
    config = read_config(run_dir)
    lines = [f"# Run summary: `{run_dir}`", ""]
    model = config.get("model", {}) if isinstance(config.get("model"), dict) else {}
    init_args = model.get("init_args") or {}
    inner = init_args.get("net") or init_args.get("model")  # "model": a run written before the network was net
    data = config.get("data", {})
    trainer = config.get("trainer", {}) or {}
    described = [
        ("task", _class_line(model)), ("net", _class_line(inner)), ("data", _class_line(data)),
        ("source", _class_line((data.get("init_args") or {}).get("source") if isinstance(data, dict) else None)),
    ]
    hardware = {k: trainer.get(k) for k in ("accelerator", "devices", "strategy", "precision", "max_epochs") if k in trainer}
    if hardware:
        strategy = hardware.get("strategy")
        if isinstance(strategy, dict):
            hardware["strategy"] = _class_line(strategy)
        described.append(("trainer", ", ".join(f"{k}={v}" for k, v in hardware.items())))
    for label, text in described:
        if text:
            lines.append(f"- **{label}**: {text}")
    lines.append("")
    columns, table = metrics_at_k(values, "test")
    if table:
        lines += ["## Test metrics", "", "| " + " | ".join(c.upper() if c != "k" else "k" for c in columns) + " |",
                  "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(str(r[0]) if i == 0 else _fmt(c) for i, c in enumerate(r)) + " |"
                  for r in table for _ in [0]]
        lines.append("")
    cost = {k: v for k, v in values.items() if k.startswith("cost/")}
    if cost:
        lines += ["## Cost", "", "| quantity | value |", "|---|---|"]
        lines += [f"| `{k}` | {_cost(v)} |" for k, v in sorted(cost.items())]
        lines.append("")
    speed = {k: v for k, v in values.items() if k.endswith("_per_s") or k.endswith("_per_s_epoch")}
    if speed:
        lines += ["## Throughput (last value)", "", "| quantity | value |", "|---|---|"]
        lines += [f"| `{k}` | {v:,.1f} |" for k, v in sorted(speed.items())]
        lines.append("")
    _, validation = learning_curve(rows)
    if validation:
        epochs = sorted({e for series in validation.values() for e in series})
        lines.append("## Training")
        lines.append("")
        lines.append(f"- validations: {len(epochs)} (epochs {epochs[0]}..{epochs[-1]})")
        for name, series in sorted(validation.items()):
            best_epoch = max(series, key=lambda e: series[e])
            lines.append(f"- best `{name}` = {series[best_epoch]:.5f} at epoch {best_epoch}")
        lines.append("")
    if plot is not None:
        lines += ["## Learning curve", "", f"![learning curve]({os.path.relpath(plot, run_dir)})", ""]
    if wandb_dir is None:
        found = sorted((run_dir / "wandb").glob("offline-run-*")) + sorted((run_dir / "wandb").glob("run-*"))
        wandb_dir = found[-1] if found else None
    if wandb_dir is not None:
        lines += ["## wandb", "", f"Run folder: `{wandb_dir}`."]
        if wandb_dir.name.startswith("offline-run-"):
            lines.append(f"It was logged offline; upload it with `wandb sync {wandb_dir}`.")
        lines.append("")
    return "\n".join(lines)


def write_report(run_dir: str | Path, out_dir: str | Path | None = None, wandb_dir: Path | None = None) -> dict[str, Path]:
    """Write learning_curve.png, metrics_at_k.csv and summary.md for ``run_dir``; returns their paths."""
    run_dir = find_run_dir(run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir
    rows = read_metrics(run_dir)
    written: dict[str, Path] = {}
    plot = plot_learning_curve(rows, out / "learning_curve.png", title=str(run_dir))
    if plot is not None:
        written["plot"] = plot
    columns, table = metrics_at_k(final_values(run_dir, rows), "test")
    if table:
        def write_csv(tmp: str) -> None:
            with open(tmp, "w", newline="") as handle:
                writer = csv.writer(handle)
                writer.writerow(columns)
                writer.writerows([["" if c is None else c for c in row] for row in table])

        atomic_write(out / "metrics_at_k.csv", write_csv)
        written["table"] = out / "metrics_at_k.csv"
    text = summary_markdown(run_dir, rows, plot, wandb_dir)
    write_text(out / "summary.md", text + "\n")
    written["summary"] = out / "summary.md"
    return written
