"""Long-sequence CTR under state compression: accuracy vs MACs vs stored bytes (``python -m benchmarks.compress``).

For every history length L (``--lengths``, default 50 200 1000, where the data has them) the benchmark

1. builds the DIN-style CTR data of the ``--config`` (a shipped CTR fit config such as
   ``ctr_transformer_ml1m.yaml``) through ``seqrec.build``, at ``--data.max_len L`` in windows mode
   (``--data_path`` points its source at a local file; arguments after ``--`` are dotted overrides
   given to every build, e.g. ``-- --data.init_args.max_users 500 --trainer.accelerator cpu``);
2. trains the uncompressed transformer backbone of that config and the LRU of ``--lru_config`` once, each
   with the Lightning Trainer its build returns (the config's optimiser and lr, BCE, gradient clipping at 5;
   windows batched by length under a token budget of ``--batch_size`` × min(L, 200), the datamodule's
   ``train_batch_tokens``; ``--epochs`` passes, fractions allowed, over each user's newest
   ``--recent_events`` training events; no validation, no model selection: the weights after training are
   evaluated);
3. evaluates on the test users, with **inference-time** compression of that one trained backbone (no
   retraining, no fine-tuning): every method of ``--methods`` at every budget of ``--budgets``, the
   uncompressed reference and the LRU's fixed state. Methods whose inputs are still those of the
   uncompressed pass share its layers (exact: ``CompressedCTR.prefill_from``). Target-aware pruning
   re-encodes the history for every target, so it runs on ``--target_aware_users`` users only, beside
   the uncompressed reference on the same users;
4. reports AUC, GAUC (per user, impression-weighted), Logloss, MACs per request (scoring one target
   from the stored state; hand formulas, cross-checked against ``torch.utils.flop_counter`` in the
   tests), MACs to build a user's state, stored bytes per user, and latency (wall time per request and
   per user prefill, batched, on this machine), as a markdown table and Pareto plots (GAUC vs MACs,
   GAUC vs bytes): the report is ``--out`` (default ``results/COMPRESSION.md``), the plots and
   ``compression_<name>.json`` (results of earlier lengths kept) beside it; the trained backbones are saved in
   ``--runs_dir`` (default ``runs/compress``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from lightning import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback
from torch import nn

from benchmarks.flags import Parser
from seqrec.atomic import atomic_write, write_text
from seqrec.build import Run, build_datamodule
from seqrec.build import build as build_run
from seqrec.compress import build
from seqrec.compress.base import CompressedCTR
from seqrec.datamodules.batching import token_budget_batches
from seqrec.datamodules.ctr import CTRDataModule
from seqrec.metrics.ctr import CTRMetrics
from seqrec.models.ctr.lru import CTRLRU
from seqrec.models.ctr.transformer import CTRTransformer
from seqrec.tasks.ctr import trim_padding

log = logging.getLogger("benchmarks.compress")
DEFAULT_METHODS = ["prune", "tome", "streaming", "h2o", "snapkv", "prune-target"]
NOTES_MARKER = "<!-- notes below this line are kept when the benchmark rewrites the tables -->"
MAX_TOKEN_LENGTH = 200  # the token budget of a training batch: batch_size × min(L, this)


# ---------------------------------------------------------------------------------------------------
# building (seqrec.build: the configs, the datamodule, the task and its Trainer)
# ---------------------------------------------------------------------------------------------------


def data_overrides(args: argparse.Namespace, L: int) -> list[str]:
    """Dotted overrides of the data at history length L: windows, the training subset, the token budget."""
    out = [
        "--seed_everything", str(args.seed),
        "--data.max_len", str(L),
        "--data.init_args.train_mode", "windows",
        "--data.init_args.recent_train_events", str(args.recent_events or L),
        "--data.init_args.batch_size", str(args.batch_size),
        "--data.init_args.train_batch_tokens", str(args.batch_size * min(L, MAX_TOKEN_LENGTH)),
    ]
    if args.max_users is not None:
        out += ["--data.init_args.max_users", str(args.max_users)]
    if args.eval_negatives is not None:
        out += ["--data.init_args.eval_negatives", str(args.eval_negatives)]
    if args.data_path:
        out += ["--data.init_args.source.init_args.path", args.data_path]
    if args.threads:
        out += ["--threads", str(args.threads)]
    return out


def training_steps(epochs: float, batches_per_epoch: int) -> int:
    """Optimiser steps of ``epochs`` passes: whole epochs, then round(fraction × batches) (at least one)."""
    if epochs <= 0:
        raise ValueError(f"--epochs must be > 0, got {epochs}")
    whole, part = int(epochs), epochs - int(epochs)
    return whole * batches_per_epoch + (max(1, round(part * batches_per_epoch)) if part > 0 else 0)


def trainer_overrides(epochs: float, steps: int) -> list[str]:
    """The benchmark's Trainer: ``steps`` steps (``training_steps``), clipping at 5, no validation,
    no checkpoints, no logger (the weights after training are what is evaluated)."""
    return [
        "--trainer.max_epochs", str(math.ceil(epochs)),
        "--trainer.max_steps", str(steps),
        "--trainer.gradient_clip_val", "5",
        "--trainer.limit_val_batches", "0",
        "--trainer.num_sanity_val_steps", "0",
        "--trainer.callbacks", "[]",  # the config's checkpointing and early stopping watch validation
        "--trainer.enable_checkpointing", "false",
        "--trainer.logger", "false",
        "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false",
    ]


def build_data(args: argparse.Namespace, L: int) -> CTRDataModule:
    """The ``--config``'s datamodule at history length L, set up (the data every model is trained and tested on)."""
    data = build_datamodule(["--config", args.config, *data_overrides(args, L), *args.overrides])
    if not isinstance(data, CTRDataModule):
        raise ValueError(f"{args.config} builds a {type(data).__name__}; the benchmark needs a "
                         "seqrec.datamodules.ctr.CTRDataModule (a next-item source in windows mode)")
    data.prepare_data()
    data.setup("fit")
    return data


def build_model(config: str, args: argparse.Namespace, L: int, steps: int) -> Run:
    """The run of ``config`` (its task, model and Trainer) at history length L, trained for ``steps`` steps."""
    return build_run(["--config", config, *data_overrides(args, L), *trainer_overrides(args.epochs, steps),
                      *args.overrides], save_config=False)


class TrainingLoss(Callback):
    """Records each training step's loss and batch size; logs the mean of the last ``every`` losses."""

    def __init__(self, every: int = 50) -> None:
        self.every, self.losses, self.examples, self.started = every, [], 0, time.perf_counter()

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.started = time.perf_counter()

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int) -> None:  # noqa: ANN001
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self.losses.append(float(loss.detach()))
        self.examples += len(batch["targets"])
        if len(self.losses) % self.every == 0:
            log.info("  step %d, loss %.4f (%.0fs)", len(self.losses), np.mean(self.losses[-self.every:]),
                     time.perf_counter() - self.started)


def fit(run: Run, data: CTRDataModule) -> dict:
    """Train ``run.task`` on ``data`` with ``run.trainer``; return timing, steps, windows and the last loss."""
    losses = TrainingLoss()
    run.trainer.callbacks.append(losses)
    started = time.perf_counter()
    run.trainer.fit(run.task, datamodule=data)
    run.task.cpu().eval()  # evaluation below runs on the CPU
    return {"train_seconds": time.perf_counter() - started, "train_steps": int(run.trainer.global_step),
            "train_windows": losses.examples, "final_loss": float(np.mean(losses.losses[-50:]))}


def collate(dataset, indices: np.ndarray) -> dict[str, torch.Tensor]:  # noqa: ANN001 (a CTR dataset)
    """Stack the samples ``indices`` of a map-style dataset into one batch."""
    samples = [dataset[int(i)] for i in indices]
    return {k: torch.stack([s[k] for s in samples]) for k in samples[0]}


# ---------------------------------------------------------------------------------------------------
# evaluation
# ---------------------------------------------------------------------------------------------------


@dataclass
class Entry:
    """One row of the table: a method at a budget, its metric state and its cost accumulators."""

    method: str
    budget: float
    metrics: CTRMetrics = field(default_factory=CTRMetrics)
    wrapper: CompressedCTR | None = None
    subset: bool = False

    def result(self) -> dict:
        values = {k: float(v) for k, v in self.metrics.compute().items()}
        costs = self.wrapper.costs() if self.wrapper is not None else {}
        return {"method": self.method, "budget": self.budget, "subset": self.subset, **values, **costs}


def eval_batches(dataset, batch_size: int, users: np.ndarray | None = None, max_tokens: int | None = None) -> list[np.ndarray]:  # noqa: ANN001
    """Test queries in batches of similar history length (sorted), optionally a subset of them; a batch is
    cut short where its longest history times its size would exceed ``max_tokens`` (default batch_size · 200)."""
    starts = np.maximum(dataset.user_start, dataset.offsets - dataset.max_len)
    lengths = dataset.offsets - starts
    index = np.arange(len(dataset)) if users is None else users
    order = index[np.argsort(lengths[index], kind="stable")]
    max_tokens = max_tokens or batch_size * 200
    return token_budget_batches(order, lengths, batch_size, max_tokens)


def update(metrics: CTRMetrics, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> None:
    """Accumulate (B, C) logits of a test batch."""
    C = batch["targets"].shape[1]
    metrics.update(logits.float(), batch["labels"], batch["user"].unsqueeze(1).expand(-1, C))


@torch.no_grad()
def evaluate_transformer(backbone: CTRTransformer, data: CTRDataModule, methods: list[str], budgets: list[float],
                         batch_size: int, target_aware_users: int, seed: int) -> list[dict]:
    """Every method at every budget on the test users (see the module doc); results as dicts."""
    dataset = data.datasets["test"]
    reference = Entry("uncompressed", 1.0, wrapper=build("uncompressed", backbone))
    entries = [reference]
    shared_methods = [m for m in methods if m != "prune-target"]
    for method in shared_methods:
        for budget in budgets:
            if budget < 1.0:
                entries.append(Entry(method, budget, wrapper=build(method, backbone, ratio=budget)))
    for batch_index, indices in enumerate(eval_batches(dataset, batch_size)):
        batch = trim_padding(collate(dataset, indices))
        history, targets = batch["history"], batch["targets"]
        shared = backbone.prefill_layers(history)
        for entry in entries:
            state = entry.wrapper.prefill_from(history, shared)
            update(entry.metrics, backbone.score_state(state, targets), batch)
        if batch_index % 5 == 0:
            log.info("  eval batch %d (history width %d)", batch_index, history.shape[1])
    results = [e.result() for e in entries]
    results.append(evaluate_no_history(backbone, dataset, batch_size))
    if "prune-target" in methods and target_aware_users > 0:
        results += evaluate_target_aware(backbone, dataset, budgets, batch_size, target_aware_users, seed)
    return results


@torch.no_grad()
def evaluate_no_history(backbone: CTRTransformer, dataset, batch_size: int) -> dict:  # noqa: ANN001
    """The floor: every history dropped (the target attends only to itself), to show what the history is worth."""
    metrics = CTRMetrics()
    for indices in eval_batches(dataset, batch_size):
        batch = collate(dataset, indices)
        empty = torch.zeros_like(batch["history"][:, :1])
        update(metrics, backbone(empty, batch["targets"]), batch)
    return {"method": "no history (target only)", "budget": 0.0, "subset": False,
            **{k: float(v) for k, v in metrics.compute().items()},
            "macs_per_request": backbone.score_macs(0.0), "macs_prefill_per_user": 0.0,
            "state_bytes_per_user": 0.0, "history_length": 0.0, "kept_layer0": 0.0, "kept_layer1": 0.0}


@torch.no_grad()
def evaluate_target_aware(backbone: CTRTransformer, dataset, budgets: list[float], batch_size: int,  # noqa: ANN001
                          users: int, seed: int) -> list[dict]:
    """Target-aware pruning (one history pass per target) and the uncompressed reference, on a user subset."""
    rng = np.random.default_rng(seed)
    subset = np.sort(rng.choice(len(dataset), size=min(users, len(dataset)), replace=False))
    entries = [Entry("uncompressed", 1.0, wrapper=build("uncompressed", backbone), subset=True)]
    entries += [Entry("prune-target", b, wrapper=build("prune-target", backbone, ratio=b), subset=True) for b in budgets if b < 1.0]
    for indices in eval_batches(dataset, max(1, batch_size // 4), subset):
        batch = trim_padding(collate(dataset, indices))
        for entry in entries:
            update(entry.metrics, entry.wrapper(batch["history"], batch["targets"]), batch)
    return [e.result() for e in entries]


@torch.no_grad()
def evaluate_lru(model: CTRLRU, data: CTRDataModule, batch_size: int) -> dict:
    """The fixed-state reference."""
    dataset = data.datasets["test"]
    metrics = CTRMetrics()
    history_sum = 0.0
    for indices in eval_batches(dataset, batch_size):
        batch = trim_padding(collate(dataset, indices))
        update(metrics, model.score_state(model.prefill(batch["history"]), batch["targets"]), batch)
        history_sum += float((batch["history"] > 0).sum())
    mean_n = history_sum / len(dataset)
    return {"method": "lru (fixed state)", "budget": 1.0, "subset": False,
            **{k: float(v) for k, v in metrics.compute().items()},
            "macs_per_request": model.macs_per_request(), "macs_prefill_per_user": mean_n * model.event_macs(),
            "state_bytes_per_user": model.state_bytes_per_user(), "history_length": mean_n}


@torch.no_grad()
def latency(model: nn.Module, data: CTRDataModule, batch_size: int = 64, repeats: int = 3) -> tuple[float, float]:
    """(ms per request scored from a stored state, ms per user prefill): median over ``repeats`` on the
    ``batch_size`` test users with the longest histories (worst case), batched, per request / per user."""
    dataset = data.datasets["test"]
    indices = eval_batches(dataset, batch_size)[-1]
    batch = trim_padding(collate(dataset, indices))
    history, targets = batch["history"], batch["targets"]
    prefill_times, score_times = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        state = model.prefill(history)
        prefill_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        model.score_state(state, targets)
        score_times.append(time.perf_counter() - started)
    return 1000 * float(np.median(score_times)) / targets.numel(), 1000 * float(np.median(prefill_times)) / len(indices)


@torch.no_grad()
def target_aware_latency(wrapper: CompressedCTR, data: CTRDataModule, batch_size: int = 16) -> float:
    """ms per request of target-aware pruning (history re-encoded per target), longest batch."""
    dataset = data.datasets["test"]
    batch = trim_padding(collate(dataset, eval_batches(dataset, batch_size)[-1]))
    started = time.perf_counter()
    wrapper(batch["history"], batch["targets"])
    return 1000 * (time.perf_counter() - started) / batch["targets"].numel()


# ---------------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------------


def human(value: float) -> str:
    """1234567 -> '1.23M'."""
    if value is None or not math.isfinite(value) or value == 0:
        return str(value)
    units = ["", "K", "M", "G", "T"]
    power = min(int(math.log10(abs(value)) // 3), len(units) - 1)
    return f"{value / 10 ** (3 * power):.3g}{units[power]}"


def table(run: dict) -> str:
    """Markdown table of one length's results, with ratios to the uncompressed reference."""
    rows = run["results"]
    ref = next(r for r in rows if r["method"] == "uncompressed" and not r["subset"])
    sub_ref = next((r for r in rows if r["method"] == "uncompressed" and r["subset"]), None)
    lines = [
        "| method | budget | AUC | GAUC | ΔGAUC | Logloss | MACs/request | (× ref) | MACs/user prefill | bytes/user | (× ref) | kept/layer | ms/request | ms/user prefill |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        base = sub_ref if r["subset"] and sub_ref is not None else ref
        kept = "/".join(f"{r[k]:.0f}" for k in sorted(k for k in r if k.startswith("kept_layer")))
        name = r["method"] + (f" (subset of {run['target_aware_users']} users)" if r["subset"] else "")
        lines.append(
            f"| {name} | {r['budget']:.0%} | {r['auc']:.4f} | {r['gauc']:.4f} | {r['gauc'] - base['gauc']:+.4f} | "
            f"{r['logloss']:.4f} | {human(r['macs_per_request'])} | {r['macs_per_request'] / base['macs_per_request']:.2f} | "
            f"{human(r['macs_prefill_per_user'])} | {human(r['state_bytes_per_user'])} | "
            f"{r['state_bytes_per_user'] / base['state_bytes_per_user']:.3f} | {kept or '-'} | "
            f"{r.get('ms_per_request', float('nan')):.3f} | {r.get('ms_per_user_prefill', float('nan')):.3f} |"
        )
    return "\n".join(lines)


def verdict(run: dict, budget: float = 0.25, tolerance: float = 0.005, cost_ratio: float = 0.35) -> str:
    """The issue's criterion at ``budget``: best GAUC within ``tolerance`` using <= ``cost_ratio`` MACs or bytes."""
    rows = [r for r in run["results"] if not r["subset"]]
    ref = next(r for r in rows if r["method"] == "uncompressed")
    at = [r for r in rows if abs(r["budget"] - budget) < 1e-9]
    if not at:
        return f"no method ran at a {budget:.0%} budget"
    best = max(at, key=lambda r: r["gauc"])
    macs = best["macs_per_request"] / ref["macs_per_request"]
    bytes_ = best["state_bytes_per_user"] / ref["state_bytes_per_user"]
    ok = ref["gauc"] - best["gauc"] <= tolerance and min(macs, bytes_) <= cost_ratio
    return (f"{'MET' if ok else 'MISSED'}: at a {budget:.0%} budget the best method is {best['method']} with GAUC "
            f"{best['gauc']:.4f} vs {ref['gauc']:.4f} uncompressed (Δ {best['gauc'] - ref['gauc']:+.4f}; "
            f"tolerance {tolerance}), using {macs:.2f}× the MACs per request and {bytes_:.3f}× the stored bytes "
            f"(limit {cost_ratio:.2f}× of either)")


def plot(run: dict, path: Path) -> bool:
    """GAUC vs MACs/request, vs bytes/user and vs prefill MACs/user (log x), one series per method;
    False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed (pip install 'seqrec[plot]'): skipping the Pareto plot %s", path)
        return False
    rows = [r for r in run["results"] if not r["subset"]]
    floor = [r for r in rows if r["method"].startswith("no history")]
    rows = [r for r in rows if not r["method"].startswith("no history")]
    ref = next(r for r in rows if r["method"] == "uncompressed")
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.5))
    for ax, key, label in ((axes[0], "macs_per_request", "MACs per request (from the stored state)"),
                           (axes[1], "state_bytes_per_user", "stored bytes per user"),
                           (axes[2], "macs_prefill_per_user", "MACs to build a user's state (prefill)")):
        for method in dict.fromkeys(r["method"] for r in rows if r["method"] != "uncompressed"):
            mine = [r for r in rows if r["method"] == method]
            if method != "lru (fixed state)":
                mine = [ref, *mine]  # every compression curve starts at the 100% budget
            points = sorted((r[key], r["gauc"]) for r in mine)
            ax.plot(*zip(*points), marker="s" if method.startswith("lru") else "o", label=method)
        ax.scatter([ref[key]], [ref["gauc"]], marker="*", s=200, color="black", zorder=5, label="uncompressed")
        for r in floor:
            ax.axhline(r["gauc"], color="gray", linestyle="--", linewidth=1, label="no history (target only)")
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("test GAUC")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_title(f"{run['dataset']}, L = {run['max_len']}: GAUC vs MACs")
    axes[1].set_title(f"{run['dataset']}, L = {run['max_len']}: GAUC vs memory")
    axes[2].set_title(f"{run['dataset']}, L = {run['max_len']}: GAUC vs prefill MACs")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_report(runs: dict, path: Path, name: str, command: str) -> Path:
    """The report (``COMPRESSION.md``) at ``path``: setup, one table and plot per length, the criterion's verdict."""
    lines = [
        "# Long-sequence CTR: state compression (MALLOC-style benchmark)",
        "",
        "Produced by `python -m benchmarks.compress` (`benchmarks/compress.py`; its module docstring describes "
        "the protocol); each section names its command. `--report_only` redraws this file and the plots from "
        "`compression_<name>.json`.",
        "",
        "- Data: DIN-style CTR samples from the ML-1M sequences (each test user's last event plus "
        "negatives the user never touched; see `seqrec/datamodules/ctr.py`).",
        "- One uncompressed transformer backbone is trained per L; every compression method is applied to it at "
        "**inference time** (no retraining or fine-tuning). The LRU is trained separately (fixed-size state).",
        "- MACs/request: scoring one target from the user's stored state (one fused multiply-add = 1 MAC; matrix "
        "products only, as `torch.utils.flop_counter` counts them). Target-aware pruning cannot store a state: its "
        "MACs/request include re-encoding the history, and its bytes are the stored item ids (8 bytes each).",
        "- bytes/user: keys and values of every kept entry, every layer (float32; ToMe adds its size per entry); "
        "LRU: the complex64 recurrent state of each layer plus the newest output.",
        "- Budgets are ratios of each user's own history length (⌈r·n⌉ entries per layer and head).",
        "- Latency: wall time on this shared 2-core CPU (other jobs running), batches of the 64 users with the longest "
        "histories (16 for target-aware pruning), per request / per user; indicative only.",
        "",
    ]
    for key in sorted(runs, key=lambda k: int(k)):
        run = runs[key]
        lines += [
            f"## L = {run['max_len']}",
            "",
            f"Command: `{run.get('command', command)}`",
            "",
            f"{run['users']} test users ({run['eval_negatives']} negatives each), mean history {run['mean_history']:.1f} "
            f"items. Training: transformer {run['transformer_train']['train_seconds']:.0f}s "
            f"({run['transformer_train']['train_steps']} steps), LRU {run['lru_train']['train_seconds']:.0f}s "
            f"({run['lru_train']['train_steps']} steps); evaluation {run['eval_seconds']:.0f}s; total {run['total_seconds']:.0f}s.",
            "",
            table(run),
            "",
            f"**Criterion** (25% budget, ΔGAUC ≤ 0.005, ≤ 35% of MACs or bytes): {verdict(run)}",
            "",
        ]
        if run.get("plot"):
            lines += [f"![Pareto L={run['max_len']}]({Path(run['plot']).name})", ""]
    notes = ""
    if path.exists() and NOTES_MARKER in path.read_text():  # hand-written findings survive a rerun
        notes = path.read_text().split(NOTES_MARKER, 1)[1]
    write_text(path, "\n".join(lines) + "\n" + NOTES_MARKER + notes)
    return path


# ---------------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------------


def trained(name: str, run: Run, data: CTRDataModule, L: int, args: argparse.Namespace) -> dict:
    """Train ``run``'s model (or, with ``--reuse_models``, load the weights an identical earlier run saved)."""
    model = run.task.net
    config = run.config
    settings = {"data": config.data.as_dict(), "model": config.model.as_dict(), "trainer": config.trainer.as_dict(),
                "seed": config.seed_everything, "num_items": data.num_items}
    architecture = [[k, list(v.shape)] for k, v in model.state_dict().items()]  # code changes invalidate saved weights
    key = hashlib.sha256(json.dumps({**settings, "name": name, "L": L, "architecture": architecture},
                                    sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = args.runs_dir / f"{name}_L{L}_{key}.pt"
    if args.reuse_models and path.exists():
        saved = torch.load(path, weights_only=False)
        model.load_state_dict(saved["state_dict"])
        model.eval()
        log.info("L=%d: loaded the trained %s from %s", L, name, path)
        return saved["train"]
    log.info("L=%d: training the %s (%d windows, %d steps)", L, name, len(data.datasets["train"]),
             config.trainer.max_steps)
    info = fit(run, data)
    payload = {"state_dict": model.state_dict(), "train": info, "settings": json.loads(json.dumps(settings, default=str))}
    atomic_write(path, lambda tmp: torch.save(payload, tmp))
    return info


def backbone_args(run: Run) -> dict:
    """The backbone's init_args of a built run (for the report), without the data-linked ``num_items``."""
    args = run.config.model.init_args.net.init_args.as_dict()
    args.pop("num_items", None)
    return args


def run_length(L: int, args: argparse.Namespace) -> dict:
    """Train both backbones at history length L and evaluate every method."""
    started = time.perf_counter()
    data = build_data(args, L)
    dataset = data.datasets["test"]
    steps = training_steps(args.epochs, len(data.train_dataloader()))
    tf_run = build_model(args.config, args, L, steps)
    lru_run = build_model(args.lru_config, args, L, steps)
    if lru_run.config.data != tf_run.config.data:
        raise ValueError(f"{args.lru_config} resolves to other data than {args.config}: both models must be trained and "
                         "tested on the same data; give both configs the same protocol (or the same data overrides)")
    transformer, lru = tf_run.task.net, lru_run.task.net
    if not isinstance(transformer, CTRTransformer) or not isinstance(lru, CTRLRU):
        raise ValueError(f"--config must build a CTRTransformer and --lru_config a CTRLRU, got "
                         f"{type(transformer).__name__} and {type(lru).__name__}")
    tf_train = trained("transformer", tf_run, data, L, args)
    lru_train = trained("lru", lru_run, data, L, args)
    log.info("L=%d: evaluating", L)
    eval_started = time.perf_counter()
    results = evaluate_transformer(transformer, data, args.methods, args.budgets, args.eval_batch_size,
                                   args.target_aware_users, args.seed)
    lru_result = evaluate_lru(lru, data, args.eval_batch_size)
    lru_result["ms_per_request"], lru_result["ms_per_user_prefill"] = latency(lru, data)
    results.append(lru_result)
    for r in results:
        if r["method"] == "prune-target":
            r["ms_per_request"] = target_aware_latency(build("prune-target", transformer, ratio=r["budget"]), data)
        elif r["method"] in ("uncompressed", "prune", "tome", "streaming", "h2o", "snapkv"):
            wrapper = build(r["method"], transformer, ratio=r["budget"])
            r["ms_per_request"], r["ms_per_user_prefill"] = latency(wrapper, data)
    eval_seconds = time.perf_counter() - eval_started
    histories = np.minimum(dataset.offsets - dataset.user_start, L)
    return {
        "dataset": args.name, "max_len": L, "users": len(dataset), "eval_negatives": data.eval_negatives,
        "mean_history": float(histories.mean()), "target_aware_users": args.target_aware_users,
        "transformer": backbone_args(tf_run), "lru": backbone_args(lru_run), "transformer_train": tf_train,
        "lru_train": lru_train, "eval_seconds": eval_seconds, "total_seconds": time.perf_counter() - started,
        "results": results,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's flags; what follows ``--`` is kept as ``overrides`` (dotted arguments for every build);
    ``command``: the command line as the results quote it."""
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, overrides = argv[:split], argv[split + 1:]
    parser = Parser("benchmarks.compress", renamed={"--models_dir": "--runs_dir"},  # the benchmarks' one spelling
        retired={"--out_dir": "give the report's path, --out DIR/COMPRESSION.md (its JSON and plots go beside it)"},
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="python -m benchmarks.compress [options] [-- dotted overrides for every build]",
        epilog="Arguments after -- go to seqrec.build for the data and both models (later ones win), e.g.\n"
               "  -- --data.init_args.source.init_args.path ml-1m.txt --model.net.d_model 32",
    )
    parser.add_argument("--config", default="ctr_transformer_ml1m.yaml", help="CTR fit config of the transformer and the data")
    parser.add_argument("--lru_config", default="ctr_lru_ml1m.yaml", help="CTR fit config of the LRU reference (same data)")
    parser.add_argument("--data_path", default=None, help="local data file for the config's source (e.g. $SEQREC_SHARED_DATA/lrurec/ml-1m.txt.gz)")
    parser.add_argument("--name", default="ml1m", help="dataset name for the report and the results file")
    parser.add_argument("--lengths", type=int, nargs="+", default=[50, 200, 1000])
    parser.add_argument("--budgets", type=float, nargs="+", default=[1.0, 0.5, 0.25, 0.1])
    parser.add_argument("--methods", nargs="+", default=DEFAULT_METHODS)
    parser.add_argument("--epochs", type=float, default=1.0, help="passes over the training windows (fractions allowed)")
    parser.add_argument("--recent_events", type=int, default=None, help="train on each user's newest this-many training events (default: L)")
    parser.add_argument("--max_users", type=int, default=None, help="a seeded subset of users (speed; default all)")
    parser.add_argument("--eval_negatives", type=int, default=None, help="override the config's negatives per test positive")
    parser.add_argument("--batch_size", type=int, default=32, help=f"training windows per batch (token budget: this × min(L, {MAX_TOKEN_LENGTH}))")
    parser.add_argument("--eval_batch_size", type=int, default=256)
    parser.add_argument("--target_aware_users", type=int, default=500, help="users for target-aware pruning (0: skip)")
    parser.add_argument("--seed", type=int, default=42, help="seed of the model initialisation, training and the target-aware subset")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: the cores available)")
    parser.add_argument("--out", type=Path, default=Path("results/COMPRESSION.md"),
                        help="the report; compression_<name>.json and the plots are written beside it")
    parser.add_argument("--runs_dir", type=Path, default=Path("runs/compress"), help="where the trained backbones are saved")
    parser.add_argument("--reuse_models", action="store_true", help="load backbones an identical earlier run saved")
    parser.add_argument("--report_only", action="store_true", help="rewrite the report and plots from the saved results")
    args = parser.parse_args(argv)
    args.overrides = overrides
    args.command = parser.command(*(["--", *overrides] if overrides else []))
    return args


def main(argv: list[str] | None = None) -> dict:
    """Run every requested length, merge with earlier results, write the table and the plots."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    command = args.command
    out_dir = args.out.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    store = out_dir / f"compression_{args.name}.json"
    runs = json.loads(store.read_text()) if store.exists() else {}
    if args.report_only:
        for key, run in runs.items():
            png = out_dir / f"compression_pareto_{args.name}_L{key}.png"
            run["plot"] = str(png) if plot(run, png) else None
        write_report(runs, args.out, args.name, runs[next(iter(runs))].get("command", command) if runs else command)
        return runs
    for L in args.lengths:
        run = run_length(L, args)
        run["command"] = command
        png = out_dir / f"compression_pareto_{args.name}_L{L}.png"
        run["plot"] = str(png) if plot(run, png) else None
        runs[str(L)] = run
        write_text(store, json.dumps(runs, indent=1))
        report = write_report(runs, args.out, args.name, command)
        log.info("L=%d done in %.0fs: %s; %s", L, run["total_seconds"], report, verdict(run))
        print(table(run))
        print(verdict(run))
    return runs


if __name__ == "__main__":
    main()
