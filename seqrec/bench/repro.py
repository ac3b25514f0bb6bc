"""Reproduction harness: run LRURec's paper-protocol cells and compare their test metrics with the paper.

``seqrec repro [--configs lru_ml1m sasrec_ml1m ... | all] [--shared_data DIR] [--resume]
[--sitting_time 00:02:00:00] [--hardware LABEL] [--out results/REPRODUCTION.md] [--report_only] [-- extra flags]``

The cells are LRURec's benchmark: LRURec and SASRec on ML-1M, Beauty, Video, Sports, Steam (Table 3, full
ranking) and XLong (Table 4, 10,000 sampled negatives), Table 3's and Table 4's BERT4Rec, and Table 3's GRU4Rec,
NARM and FMLP-Rec columns, one shipped config each (``lru_video``, ``sasrec_xlong``, ``bert4rec_ml1m``,
``narm_ml1m``, ...). Each config runs in its own process (``python -m seqrec fit``) so wall times are
clean; ``--sitting_time`` bounds each sitting (as fit's ``--sitting_time``: it stops at an exact resume point and tests
the best checkpoint so far; exit 75) and ``--resume`` (``--ckpt_path last``) continues it later with the same
metrics as an uninterrupted run (tests/test_fit.py, tests/callbacks/test_signals.py); a SIGINT/SIGTERM to this command
stops the running fit at its resume point and starts no further cell (``seqrec.child_process``). After every config its result joins the ledger
``reproduction.json`` beside ``--out`` (one entry per cell and hardware, labelled with the hardware it ran
on) and the report is rewritten, so results are written as they finish and results from another machine
(a GPU) merge with this one's. The report lists every cell with its status: converged (early stopping),
partial (stopped by a time limit or a signal: resume it), or not yet run with the estimated time to
converge on this CPU and on one H200 (``estimate_seconds``: the assumptions are in the report). Each converged
cell gets a one-line verdict against the paper and a panel of ``reproduction_curves.png`` (its validation curve,
kept in the ledger; ``seqrec.bench.repro_compare``).
``--shared_data`` swaps the raw-data sources for the exact files LRURec trained on where the folder has them
(``lrurec/ml-1m.txt.gz``, ``lrurec/beauty.txt.gz``, ``lrurec/{video,sports,steam}.txt.gz``, ``xlong/``).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import os
import re
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from seqrec import child_process
from seqrec.atomic import write_json, write_text
from seqrec.bench.report import cpu_isa, cpu_model, usable_cores
from seqrec.bench.repro_compare import (
    CURVE_METRIC,
    FIGURE,
    best_step,
    plot_curves,
    seed_of,
    seed_spread,
    selection,
    signed_percent,
    validation_curve,
    verdict,
)
from seqrec.cli import main as cli_main
from seqrec.config_files import expand_config
from seqrec.data.preprocess import Preprocessing
from seqrec.runs import SUMMARY, TEST_METRICS, VERSION_PREFIX

# Yue et al., "Linear Recurrent Units for Sequential Recommendation" (WSDM 2024): Table 3 (full ranking) and
# Table 4 (XLong, the target among 10,000 sampled negatives); PROTOCOLS.md §1.8 holds the same figures.
PAPER: dict[str, dict[str, float]] = {
    "lru_ml1m": {"recall@10": 0.32636, "ndcg@10": 0.19298, "recall@20": 0.43313, "ndcg@20": 0.21990},
    "sasrec_ml1m": {"recall@10": 0.31810, "ndcg@10": 0.19021, "recall@20": 0.43050, "ndcg@20": 0.21860},
    "lru_beauty": {"recall@10": 0.05284, "ndcg@10": 0.03088, "recall@20": 0.07161, "ndcg@20": 0.03560},
    "sasrec_beauty": {"recall@10": 0.05043, "ndcg@10": 0.02917, "recall@20": 0.06965, "ndcg@20": 0.03403},
    "lru_video": {"recall@10": 0.11337, "ndcg@10": 0.06198, "recall@20": 0.16705, "ndcg@20": 0.07547},
    "sasrec_video": {"recall@10": 0.10910, "ndcg@10": 0.05829, "recall@20": 0.15989, "ndcg@20": 0.07111},
    "lru_sports": {"recall@10": 0.03148, "ndcg@10": 0.01815, "recall@20": 0.04477, "ndcg@20": 0.02149},
    "sasrec_sports": {"recall@10": 0.02294, "ndcg@10": 0.01236, "recall@20": 0.03428, "ndcg@20": 0.01520},
    "lru_steam": {"recall@10": 0.12831, "ndcg@10": 0.06934, "recall@20": 0.19082, "ndcg@20": 0.08508},
    "sasrec_steam": {"recall@10": 0.12597, "ndcg@10": 0.06759, "recall@20": 0.18716, "ndcg@20": 0.08298},
    "lru_xlong": {"recall@10": 0.52688, "ndcg@10": 0.34867, "recall@20": 0.61800, "ndcg@20": 0.37174},
    "sasrec_xlong": {"recall@10": 0.49348, "ndcg@10": 0.30949, "recall@20": 0.59527, "ndcg@20": 0.33531},
    "bert4rec_ml1m": {"recall@10": 0.30894, "ndcg@10": 0.16377, "recall@20": 0.41738, "ndcg@20": 0.19118},
    "bert4rec_beauty": {"recall@10": 0.04679, "ndcg@10": 0.02422, "recall@20": 0.06727, "ndcg@20": 0.02937},
    "bert4rec_video": {"recall@10": 0.11252, "ndcg@10": 0.05600, "recall@20": 0.16640, "ndcg@20": 0.06958},
    "bert4rec_sports": {"recall@10": 0.02879, "ndcg@10": 0.01457, "recall@20": 0.04295, "ndcg@20": 0.01813},
    "bert4rec_steam": {"recall@10": 0.12188, "ndcg@10": 0.06433, "recall@20": 0.18245, "ndcg@20": 0.08117},
    "bert4rec_xlong": {"recall@10": 0.41536, "ndcg@10": 0.23426, "recall@20": 0.56860, "ndcg@20": 0.27293},
    "gru4rec_ml1m": {"recall@10": 0.29624, "ndcg@10": 0.16929, "recall@20": 0.39470, "ndcg@20": 0.19411},
    "narm_ml1m": {"recall@10": 0.28644, "ndcg@10": 0.16649, "recall@20": 0.39293, "ndcg@20": 0.19337},
    "fmlprec_ml1m": {"recall@10": 0.29073, "ndcg@10": 0.15295, "recall@20": 0.39454, "ndcg@20": 0.17912},
    "gru4rec_beauty": {"recall@10": 0.03379, "ndcg@10": 0.01997, "recall@20": 0.04751, "ndcg@20": 0.02343},
    "narm_beauty": {"recall@10": 0.03312, "ndcg@10": 0.01887, "recall@20": 0.04708, "ndcg@20": 0.02239},
    "fmlprec_beauty": {"recall@10": 0.04623, "ndcg@10": 0.02515, "recall@20": 0.06336, "ndcg@20": 0.02945},
    "gru4rec_video": {"recall@10": 0.09512, "ndcg@10": 0.05081, "recall@20": 0.13959, "ndcg@20": 0.06200},
    "narm_video": {"recall@10": 0.09777, "ndcg@10": 0.05329, "recall@20": 0.14488, "ndcg@20": 0.06512},
    "fmlprec_video": {"recall@10": 0.10885, "ndcg@10": 0.05294, "recall@20": 0.15991, "ndcg@20": 0.06576},
    "gru4rec_sports": {"recall@10": 0.01882, "ndcg@10": 0.01002, "recall@20": 0.02841, "ndcg@20": 0.01243},
    "narm_sports": {"recall@10": 0.02087, "ndcg@10": 0.01117, "recall@20": 0.03265, "ndcg@20": 0.01414},
    "fmlprec_sports": {"recall@10": 0.02987, "ndcg@10": 0.01546, "recall@20": 0.04276, "ndcg@20": 0.01871},
    "gru4rec_steam": {"recall@10": 0.12204, "ndcg@10": 0.06512, "recall@20": 0.18319, "ndcg@20": 0.08050},
    "narm_steam": {"recall@10": 0.12166, "ndcg@10": 0.06480, "recall@20": 0.18199, "ndcg@20": 0.07996},
    "fmlprec_steam": {"recall@10": 0.11987, "ndcg@10": 0.06081, "recall@20": 0.17719, "ndcg@20": 0.07521},
}
CELLS = list(PAPER)  # the priority order: LRURec and SASRec (ML-1M and Beauty first), then the other baselines
DEFAULT_RUN = CELLS[:4]  # what a plain `python -m seqrec repro` runs (the CPU-sized cells)
SOURCE = "Yue et al. 2023 (WSDM 2024), Table 3 (full ranking) and Table 4 (XLong: 10,000 sampled negatives)"
LEDGER = "reproduction.json"

# The exact files LRURec trained on, in a --shared_data folder. ML-1M and Beauty replace the config's source and
# filters (SASRec-format text, already filtered); the others only point the config's own source at the copy.
SHARED_FILES = {"ml1m": ("ml-1m", "lrurec/ml-1m.txt.gz"), "beauty": ("beauty", "lrurec/beauty.txt.gz")}
SHARED_SAME_SOURCE = {"video": "lrurec/video.txt.gz", "sports": "lrurec/sports.txt.gz", "steam": "lrurec/steam.txt.gz"}


# ---------------------------------------------------------------------------------------------------
# The cost model behind "estimated time to converge"
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dataset:
    """What the estimate needs of a dataset: LRURec's Table 2 counts and the protocol's sizes (§1.4, §1.6)."""

    users: int
    items: int
    interactions: int
    max_len: int
    batch: int
    val_every: int
    eval_candidates: int | None = None  # None: the full catalogue; else sampled negatives + the target
    train_candidates: int | None = None  # None: full softmax; else the target + sampled negatives
    train_examples: int | None = None  # training windows per epoch (§1.3), where counted; else about one per user


DATASETS = {
    "ml1m": Dataset(6_040, 3_416, 999_611, 200, 128, 500, train_examples=7_077),
    "beauty": Dataset(52_204, 57_289, 394_908, 50, 128, 1000),
    "video": Dataset(31_013, 23_715, 287_107, 50, 128, 1000),
    "sports": Dataset(83_970, 83_728, 596_187, 50, 128, 1000),
    "steam": Dataset(334_730, 13_047, 3_682_030, 50, 128, 2000),
    "xlong": Dataset(69_691, 2_122_932, 66_819_731, 1000, 32, 2000, eval_candidates=10_001, train_candidates=101),
}
D_MODEL, LAYERS = 64, 2
RNN_WIDTH = 2 * D_MODEL  # GRU4Rec's and NARM's GRU (model/gru4rec.yaml, model/narm.yaml)
PREFIX_MODELS = {"narm", "fmlprec"}  # trained on prefixes, one label per example (their model parts' train_mode)
# lru_ml1m converged here (results/REPRODUCTION.md): best validation at the 30th (step 15,000), stopped at the 40th;
# every other cell is assumed to take as many validation intervals, except BERT4Rec's: the cloze task labels about
# a fifth of the positions a shifted window labels (model/bert4rec.yaml's mask probability 0.2), so reaching
# SASRec's count of labelled positions (best at step 9,500 on ML-1M here) takes about 5× as many steps: best near
# the 100th validation, stopped at the 110th (55,000 steps on ML-1M); BERT4Rec's replicability study (Petrov &
# Macdonald, RecSys 2022) found it needs far longer training than common defaults (up to 30× its original
# 400,000-step default to match the paper).
ASSUMED_VALIDATIONS = 40
ASSUMED_VALIDATIONS_OF = {"bert4rec": 110}
CLOZE_KEYS = ("mask_prob", "mask_last_prob")  # the data settings that fix a cloze cell's labels per window
# CPU time per MAC of a model's training step relative to LRURec's and SASRec's: BERT4Rec's step (its cloze loss
# scores a fifth of the positions, so fewer MACs) took 1.06× SASRec's time for 0.81× its MACs, side by side
# (`python -m benchmarks.speed --threads 1 --parts matmul,train --models SASRec,BERT4Rec`, load 3.6: not quiet)
CPU_SLOWDOWN = {"bert4rec": 1.31}
MAX_EPOCHS = 500  # the protocol's cap (protocol/lrurec.yaml): on ML-1M 500 × 56 batches = 28,000 steps, which a
# BERT4Rec run reaches before the 110 assumed intervals (55,000 steps)
# a quiet sitting on the current code, validations every 500 steps included: lru_ml1m's first 2,000 steps in 981.4 s
# at --threads 2 on a 2-core AMD EPYC (AVX-512, native bf16), after the dropout kernel and the allocator setting (the same
# sitting on the code before them: 1,405.3 s); before, 13,500 steps in 7,173.1 s on a 2-core Xeon
CALIBRATION = ("lru_ml1m", 2_000, 981.4)
H200_MACS_PER_S = 10e12  # assumed effective rate of these d=64 products on one H200 (a few % of its peak)
H200_STEP_FLOOR_S = 0.02  # assumed kernel-launch floor of one training step (2 blocks, forward + backward)
H200_EVAL_BATCH, H200_EVAL_BATCH_FLOOR_S = 4096, 0.01
# a sitting this long measures a cell's own CPU pace (seconds per step with its validations): the MACs model above
# misjudges cells whose step is not bound by multiply-adds (FMLP-Rec on ML-1M: estimated 40 min, took hours)
MIN_PACE_STEPS = 1000
# a variant of a cell (the same config with other flags: `--variant official_padding -- --model.net.padding
# official`) is its own cell "<config>@<variant>", with its own runs folder and ledger entries, compared with the
# config's paper figures; without it, a run with other flags would replace the cell's entry
VARIANT_MARK = "@"
# a grid point's second seed is the variant "<variant>+seed_N" (repro_compare.SEED_RERUN)
VARIANT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*(\+seed_\d+)?$")


def base_config(cell: str) -> str:
    """The shipped config a cell runs: ``lru_beauty@official_padding`` (a ``--variant`` of it) -> ``lru_beauty``."""
    return cell.split(VARIANT_MARK, 1)[0]


def dataset_of(config: str) -> str:
    """``lru_video`` (or a variant of it) -> ``video``."""
    return base_config(config).rsplit("_", 1)[-1]


def model_of(config: str) -> str:
    """``sasrec_video`` -> ``sasrec``."""
    return config.split("_", 1)[0]


def token_macs(model: str, length: int) -> float:
    """Multiply-adds per token of the encoder (PROTOCOLS.md §7.1's formulas, d = 64, 2 blocks).

    LRURec: layers · (4dH + 8d² + 2·log₂P·H), H = 2d, P = 2^⌈log₂L⌉; SASRec: blocks · (4d² + 2Ld + 2d·4d);
    GRU4Rec: 3(dH + H²) + Hd; NARM (its newest position, as prefix training computes it): 3(dH + H²) + H² + 2H;
    FMLP-Rec: blocks · (8d² + (2d·fft(L) + 4(L//2 + 1)d) / L), fft(L) = 1.25·L·log₂L; H = 2d for the RNNs;
    BERT4Rec: SASRec's + d² (its output transform).
    """
    d, h = D_MODEL, RNN_WIDTH
    if model == "lru":
        return LAYERS * (4 * d * 2 * d + 8 * d * d + 2 * math.ceil(math.log2(max(length, 2))) * 2 * d)
    if model == "gru4rec":
        return 3 * (d * h + h * h) + h * d
    if model == "narm":
        return 3 * (d * h + h * h) + h * h + 2 * h
    if model == "fmlprec":
        return LAYERS * (8 * d * d + (2 * d * 1.25 * length * math.log2(length) + 4 * (length // 2 + 1) * d) / length)
    head = d * d if model == "bert4rec" else 0
    return LAYERS * (4 * d * d + 2 * length * d + 8 * d * d) + head


def cloze_masking(config: str) -> dict[str, float]:
    """``mask_prob`` and ``mask_last_prob`` of a cell's shipped config (0 where unset): ``data.init_args`` of the
    files it composes, the last file that sets a key winning, as LightningCLI stacks them. Read from the YAML rather
    than through the CLI's parser, which would cost a second per cell each time the report is written."""
    return dict(_shipped_cloze_masking(base_config(config)))


@functools.cache
def _shipped_cloze_masking(config: str) -> tuple[tuple[str, float], ...]:
    """``cloze_masking`` of one shipped config, read once per process: the report asks for it about twice per
    BERT4Rec row (both estimates), and its YAML reads were most of the report's time (34 of them, 0.45 s)."""
    values = dict.fromkeys(CLOZE_KEYS, 0.0)
    for path in expand_config(config):
        data = (yaml.safe_load(Path(path).read_text()) or {}).get("data") or {}
        init = data.get("init_args") or {}
        values.update({key: float(init[key]) for key in CLOZE_KEYS if key in init})
    return tuple(values.items())


def step_macs(config: str) -> float:
    """One training step: 3 × (B·L tokens through the encoder + P labelled positions scored), forward + backward;
    P = B on prefixes (one label per example); for a cloze model (BERT4Rec) B × ((1 − q)·p·n + q), the expected
    masked positions of a window of n positions masked with probability p, a fraction q of the windows masking
    their newest event alone (its config's ``mask_prob`` and ``mask_last_prob``); else B × n, the labelled
    positions of a shifted window."""
    data = DATASETS[dataset_of(config)]
    positions = min(data.max_len, max(data.interactions / data.users - 2, 1))  # n: a window's labelled positions
    labelled = data.batch * positions  # P per batch
    if model_of(config) in PREFIX_MODELS:
        labelled = data.batch
    if model_of(config) == "bert4rec":
        cloze = cloze_masking(config)
        p, q = cloze["mask_prob"], cloze["mask_last_prob"]
        labelled = data.batch * ((1 - q) * p * positions + q)
    scored = data.train_candidates or data.items
    return 3 * (data.batch * data.max_len * token_macs(model_of(config), data.max_len) + labelled * scored * D_MODEL)


def eval_macs(config: str) -> float:
    """One evaluation pass: every user's window through the encoder plus its candidates scored."""
    data = DATASETS[dataset_of(config)]
    per_user = data.max_len * token_macs(model_of(config), data.max_len) + (data.eval_candidates or data.items) * D_MODEL
    return data.users * per_user


def cpu_macs_per_s() -> float:
    """This project's CPU rate, all-in (loader, optimiser, validations): the calibration sitting's MACs / seconds."""
    config, steps, seconds = CALIBRATION
    return step_macs(config) * steps / seconds


def max_steps(data: Dataset) -> int:
    """The protocol's step cap: ``MAX_EPOCHS`` epochs of ⌈training windows / batch⌉ steps (prefix-trained cells
    have far more examples than windows, so the cap never binds for them)."""
    return MAX_EPOCHS * math.ceil((data.train_examples or data.users) / data.batch)


def assumed_steps(config: str) -> int:
    """Training steps of one converged run: ``ASSUMED_VALIDATIONS`` (BERT4Rec: its own count) × the validation
    interval, capped by the protocol's epochs."""
    data = DATASETS[dataset_of(config)]
    validations = ASSUMED_VALIDATIONS_OF.get(model_of(config), ASSUMED_VALIDATIONS)
    return min(validations * data.val_every, max_steps(data))


def estimate_seconds(config: str, device: str) -> float:
    """Estimated seconds of one converged run: ``assumed_steps``, as many validations + 1 and one test; ``device``
    "cpu" (the calibrated rate) or "h200" (the assumed one)."""
    data = DATASETS[dataset_of(config)]
    steps = assumed_steps(config)
    passes = steps // data.val_every + 2
    if device == "cpu":
        slowdown = CPU_SLOWDOWN.get(model_of(config), 1.0)
        return (steps * step_macs(config) * slowdown + passes * eval_macs(config)) / cpu_macs_per_s()
    step = max(H200_STEP_FLOOR_S, step_macs(config) / H200_MACS_PER_S)
    batches = math.ceil(data.users / H200_EVAL_BATCH)
    evaluation = max(batches * H200_EVAL_BATCH_FLOOR_S, eval_macs(config) / H200_MACS_PER_S)
    return steps * step + passes * evaluation


def measured_pace(entry: dict[str, Any] | None) -> float | None:
    """Seconds per training step (validations included) of a cell's CPU run: over all its sittings where the ledger
    kept their total (``sittings``), else of its last sitting, where that was long enough to tell."""
    if entry is None or not str(entry.get("hardware", "")).startswith("CPU"):
        return None
    seconds, _, steps = run_totals(entry)
    if (entry.get("seconds_total") or entry.get("interrupted_seconds")) and steps >= MIN_PACE_STEPS:
        return seconds / steps
    pace = entry.get("seconds_per_step")
    return float(pace) if pace and (entry.get("steps_this_sitting") or 0) >= MIN_PACE_STEPS else None


def run_totals(entry: dict[str, Any]) -> tuple[float, int, int]:
    """(seconds, sittings, steps) of the run so far: the ledger's totals (``continued``) plus the sittings stopped by
    a signal since the entry's test (``count_interrupted``), which ran on to ``interrupted_at_step``."""
    seconds = float(entry.get("seconds_total") or entry.get("seconds") or 0.0) + float(entry.get("interrupted_seconds", 0.0))
    sittings = (entry.get("sittings") or 1) + int(entry.get("interrupted_sittings", 0))
    steps = int(entry.get("interrupted_at_step") or entry.get("global_step") or 0)
    return seconds, sittings, steps


def wall_time(entry: dict[str, Any]) -> str:
    """The report's wall-time cell: the whole run, with its number of sittings where it took several and the ledger
    kept them (``continued``, ``count_interrupted``); else the last sitting's, marked so unless that sitting ran
    every step."""
    seconds, sittings, _ = run_totals(entry)
    if (entry.get("seconds_total") or entry.get("interrupted_seconds")) and sittings > 1:
        return f"{seconds:,.0f} s ({sittings} sittings)"
    seconds = entry.get("seconds")
    if seconds is None:
        return "?"
    steps = entry.get("steps_this_sitting")
    whole = steps is not None and steps == entry.get("global_step")
    return f"{seconds:,.0f} s" if whole else f"{seconds:,.0f} s (last sitting)"


def hours(seconds: float) -> str:
    """``1.2 h`` / ``12 h`` / ``4 min``."""
    if seconds < 3600:
        return f"{max(seconds / 60, 1):.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 36_000 else f"{seconds / 3600:,.0f} h"


def assumptions() -> list[str]:
    """The estimate's assumptions, for the report."""
    config, steps, seconds = CALIBRATION
    return [
        f"Estimated time to converge = {ASSUMED_VALIDATIONS} validation intervals of training (as `lru_ml1m` took "
        f"here: its best validation the 30th, then early stopping's 10; the other cells are assumed alike) plus "
        f"{ASSUMED_VALIDATIONS + 1} validations and a test, each pass over every user; BERT4Rec "
        f"{ASSUMED_VALIDATIONS_OF['bert4rec']} intervals (its cloze task labels about a fifth of the positions at "
        "model/bert4rec.yaml's mask probability 0.2, so about 5× as many steps as SASRec's best at step 9,500 on "
        "ML-1M; BERT4Rec is known to need long training), "
        f"capped by the protocol's {MAX_EPOCHS} epochs (ML-1M: 28,000 steps); on the CPU its steps' MACs count "
        f"{CPU_SLOWDOWN['bert4rec']}× (measured beside SASRec's).",
        f"Where a cell has run a CPU sitting of at least {MIN_PACE_STEPS:,} steps, its own pace (seconds per step, "
        "validations included, `fit_summary.json`) × the assumed steps is shown beside the MACs estimate.",
        "Work per step: 3 × (batch × max_len tokens × the encoder's MACs per token (PROTOCOLS.md §7.1, d 64, 2 blocks) "
        "+ labelled positions × scored items × d), labelled positions = batch × min(max_len, mean length − 2) from "
        "Table 2, or batch for the cells trained on prefixes (NARM, FMLP-Rec: one label per example), or, for "
        "BERT4Rec, its expected masked positions, (1 − q) × mask probability × those positions + q, where q is the "
        "fraction of windows that mask their newest event alone (each cell's `mask_prob` and `mask_last_prob`); "
        "scored items = "
        "the catalogue (full softmax), or 101 for XLong (the paper's sampled loss, `loss: sampled_ce`); evaluation "
        "scores the catalogue (XLong: 10,001 candidates).",
        "The GRU cells (GRU4Rec, NARM) run their recurrence step by step, well below the calibrated rate on a CPU, and "
        "the prefix-trained cells see one label per example, so they may need more validation intervals than LRURec: "
        "their estimates are the least certain (PROTOCOLS.md §1.11 has measured step times).",
        f"CPU: {cpu_macs_per_s() / 1e9:.1f} G multiply-adds/s all-in, calibrated on a `{config}` sitting "
        f"on the current code ({steps:,} steps in {seconds:,} s on 2 quiet cores, validations included). LRURec's "
        "sequential scan at L = 1,000 runs well below that rate (`python -m benchmarks.xlong` measures XLong's step).",
        f"One H200: {H200_MACS_PER_S / 1e12:.0f} T multiply-adds/s effective and at least {H200_STEP_FLOOR_S * 1000:.0f} ms "
        f"per training step (kernel launches of a 2-block d = 64 model), evaluation in batches of {H200_EVAL_BATCH:,} "
        f"at ≥ {H200_EVAL_BATCH_FLOOR_S * 1000:.0f} ms each: assumed, not measured (`scripts/gpu_repro.sh` measures).",
    ]


# ---------------------------------------------------------------------------------------------------
# Running cells
# ---------------------------------------------------------------------------------------------------


def shared_data_overrides(config: str, shared: Path) -> list[str]:
    """CLI overrides that read the LRURec copy of the config's dataset from ``shared`` ([] where none is there).

    ML-1M and Beauty must be there (FileNotFoundError otherwise): their configured sources are not LRURec's files.
    """
    dataset = dataset_of(config)
    if dataset in SHARED_SAME_SOURCE:
        path = shared / SHARED_SAME_SOURCE[dataset]
        return ["--data.init_args.source.init_args.path", str(path)] if path.is_file() else []
    if dataset == "xlong":
        root = shared / "xlong"
        return ["--data.init_args.source.init_args.root", str(root)] if root.is_dir() else []
    if dataset not in SHARED_FILES:
        raise ValueError(f"no shared copy known for {config!r}; known datasets: {sorted([*SHARED_FILES, *SHARED_SAME_SOURCE, 'xlong'])}")
    name, relative = SHARED_FILES[dataset]
    path = shared / relative
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: point --shared_data at the folder holding {relative}")
    source = {"class_path": "seqrec.data.sources.sasrec_text.SASRecText", "init_args": {"name": name, "path": str(path)}}
    # every field spelled out: a partial dict would merge into the config's LRURec filters, not replace them
    no_filters = asdict(Preprocessing(sort_by="time"))
    return ["--data.init_args.source", json.dumps(source), "--data.init_args.preprocessing", json.dumps(no_filters)]


def run_config(config: str, runs_dir: Path, extra: list[str], resume: bool) -> tuple[list[str], float, int]:
    """Run one cell to completion (or its time limit) in a subprocess; returns (command, seconds, exit code). A
    variant cell runs its base config, its runs named after the cell (runs_dir/<config>@<variant>/version_N). A
    SIGINT/SIGTERM to this process reaches the fit once and it stops at its resume point (``seqrec.child_process``)."""
    command = [sys.executable, "-m", "seqrec", "fit", "--config", f"{base_config(config)}.yaml",
               "--trainer.logger.init_args.save_dir", str(runs_dir), *extra]
    if base_config(config) != config:
        command += ["--trainer.logger.init_args.name", config]
    if resume:
        command += ["--ckpt_path", "last"]
    started = time.perf_counter()
    code = child_process.run(command)
    return command, time.perf_counter() - started, code


def public_command(argv: list[str], shared: Path | None) -> str:
    """The command as the report shows it, ready to paste: ``python -m ...``, the shared-data folder written
    ``"$SEQREC_SHARED_DATA"`` (outside the quotes around the rest of its argument, so the shell expands it)."""
    words = []
    for arg in ["python", *argv[1:]]:
        if shared is None or str(shared) not in arg:
            words.append(shlex.quote(arg))
            continue
        words.append('"$SEQREC_SHARED_DATA"'.join(shlex.quote(part) if part else "" for part in arg.split(str(shared))))
    return " ".join(words)


def latest_run(runs_dir: Path, config: str) -> Path | None:
    """The newest ``version_N`` directory of ``config`` holding test metrics."""
    found = sorted((runs_dir / config).glob(f"{VERSION_PREFIX}*/{TEST_METRICS}"), key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None


def uses_gpu(extra: list[str]) -> bool:
    """True when the overrides put the trainer on a GPU (``--trainer.accelerator gpu|cuda``, or auto with CUDA)."""
    accelerator = None
    for flag, value in zip(extra, extra[1:]):
        if flag == "--trainer.accelerator":
            accelerator = value
    for arg in extra:
        if arg.startswith("--trainer.accelerator="):
            accelerator = arg.split("=", 1)[1]
    if accelerator in ("gpu", "cuda"):
        return True
    if accelerator in (None, "auto"):
        import torch

        return torch.cuda.is_available()
    return False


def detect_hardware(gpu: bool) -> str:
    """What a run ran on, for its label: the GPU's name, or the CPU model and usable cores."""
    import torch

    if gpu and torch.cuda.is_available():
        return f"1× {torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    return f"CPU: {cpu_model()}, {usable_cores()} cores, torch {torch.__version__}"


def run_entry(run: Path, hardware_label: str, command: str) -> dict[str, Any]:
    """A ledger entry from a run directory: test metrics, why it stopped, its size, where it ran, its seed, and its
    validation curve with the best step (kept in the ledger so the report's figure outlives the run directory)."""
    metrics = json.loads((run / TEST_METRICS).read_text())
    summary = json.loads((run / SUMMARY).read_text()) if (run / SUMMARY).exists() else {}
    curve = validation_curve(run)
    return {
        "metrics": {k.removeprefix("test/"): v for k, v in metrics.items() if k.startswith("test/")},
        "status": summary.get("status", "unknown"),
        "epochs": summary.get("epochs"),
        "global_step": summary.get("global_step"),
        "seconds": summary.get("seconds_this_sitting"),
        "steps_this_sitting": summary.get("steps_this_sitting"),
        "seconds_per_step": summary.get("seconds_per_step"),
        "best_step": best_step(curve, summary.get("best_checkpoint"), summary.get("best_score")),
        "best_score": summary.get("best_score"),
        "seed": seed_of(run),
        "hardware": hardware_label,
        "command": command,
        "run_dir": str(run),
        "val_curve": curve,
        "finished": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        # the last sitting's CPU generation: hosts sharing one model name ran the same step up to 2x apart
        **({"cpu": cpu_isa()} if hardware_label.startswith("CPU") else {}),
    }


def read_ledger(path: Path) -> dict[str, list[dict[str, Any]]]:
    """``{cell: [entry, ...]}`` from the ledger file ({} when absent)."""
    if not path.is_file():
        return {}
    return json.loads(path.read_text()).get("cells", {})


def continued(entry: dict[str, Any], earlier: dict[str, Any]) -> dict[str, Any]:
    """``entry`` with the run's totals so far when it is a later sitting of ``earlier``'s run (same run directory,
    further on): ``sittings`` and ``seconds_total`` (each sitting's wall time, startup, validations and test
    included), so a run resumed over several sittings keeps its whole cost, not only its last sitting's.

    A sitting continues ``earlier`` only where it started at or after earlier's last step (global_step −
    steps_this_sitting): a new run written to the same directory path (runs_dir lost with a machine, the
    version numbering started again) starts at step 0 and keeps its own count."""
    if entry.get("run_dir") != earlier.get("run_dir") or (entry.get("global_step") or 0) <= (earlier.get("global_step") or 0):
        return entry
    if entry.get("steps_this_sitting") is not None:
        started = entry["global_step"] - entry["steps_this_sitting"]
        if started <= 0 or started < (earlier.get("global_step") or 0):
            return entry
    seconds = earlier.get("seconds_total", earlier.get("seconds"))
    if seconds is None or entry.get("seconds") is None:
        return entry
    pending, stopped = earlier.get("interrupted_seconds", 0.0), earlier.get("interrupted_sittings", 0)  # count_interrupted
    return {**entry, "sittings": earlier.get("sittings", 1) + stopped + 1,
            "seconds_total": round(seconds + pending + entry["seconds"], 1)}


def record(ledger_path: Path, config: str, entry: dict[str, Any],
           totalled: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Add ``entry`` to the ledger, replacing the cell's entry of the same hardware (a later sitting of the same run
    carries its totals: ``continued``; ``totalled``: the entry carries them already and is stored as it is);
    written atomically."""
    cells = read_ledger(ledger_path)
    kept, replaced = [], None
    for earlier in cells.get(config, []):
        if earlier.get("hardware") == entry["hardware"]:
            replaced = earlier
        else:
            kept.append(earlier)
    cells[config] = [*kept, entry if replaced is None or totalled else continued(entry, replaced)]
    write_json(ledger_path, {"cells": cells})
    return cells


def count_interrupted(ledger_path: Path, config: str, hardware: str, since: float) -> dict[str, list[dict[str, Any]]]:
    """Count a sitting stopped by a signal into its run's ledger entry. The fit saved its resume point and wrote its
    summary (status "interrupted", ``seconds_this_sitting``) but ran no test, so there is no new entry to record;
    without this, its wall time would be missing from the run's total and the next sitting would be counted as the
    one after the last tested one. The entry's metrics, steps and curve stay its last test's; the sitting goes into
    ``interrupted_seconds``, ``interrupted_sittings`` and ``interrupted_at_step``, which the report's wall time
    shows and ``continued`` folds into the totals of the next recorded sitting. Only a summary written after
    ``since`` (the sitting's start, a ``time.time()``) counts, so one sitting is never counted twice. A run stopped
    before its first test has no entry yet: that sitting stays in its run directory's summary only."""
    cells = read_ledger(ledger_path)
    entries = cells.get(config, [])
    for i, entry in enumerate(entries):
        summary_path = Path(entry.get("run_dir", "")) / SUMMARY
        # a file's time stamp may lag time.time() by a clock tick: a second's slack, and never the same stop twice
        if entry.get("hardware") != hardware or not summary_path.is_file() or summary_path.stat().st_mtime < since - 1.0:
            continue
        summary = json.loads(summary_path.read_text())
        if (summary.get("status") != "interrupted" or summary.get("seconds_this_sitting") is None
                or summary.get("global_step") == entry.get("interrupted_at_step")):
            continue
        entries[i] = {**entry, "interrupted_sittings": entry.get("interrupted_sittings", 0) + 1,
                      "interrupted_seconds": round(entry.get("interrupted_seconds", 0.0) + summary["seconds_this_sitting"], 1),
                      "interrupted_at_step": summary.get("global_step")}
        write_json(ledger_path, {"cells": cells})
    return cells


def adopt(ledger_path: Path, source: Path, cell: str, hardware: str) -> dict[str, list[dict[str, Any]]]:
    """Record into ``ledger_path`` the entry of ``cell`` on ``hardware`` that the ledger ``source`` holds (its
    newest), as ``record`` does; the ledger as it was when ``source`` has none. Cells run side by side
    (``scripts/gpu_repro.sh --parallel``) each write a ledger of their own, adopted here one at a time, so no
    two processes rewrite one file: a ledger is read, changed and replaced whole, and two writers would lose
    one cell. The entry is stored as ``source`` totalled it: ``source`` began as a copy of the shared ledger and
    counted every sitting since, also ones the shared ledger never saw."""
    entry = next((e for e in reversed(read_ledger(source).get(cell, [])) if e.get("hardware") == hardware), None)
    if entry is None:
        return read_ledger(ledger_path)
    return record(ledger_path, cell, entry, totalled=True)


# ---------------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------------


def cell_status(entries: list[dict[str, Any]]) -> tuple[str, dict[str, Any] | None]:
    """("converged" | "partial (...)" | "not yet run", the entry it rests on): converged wins, then the newest."""
    if not entries:
        return "not yet run", None
    converged = [e for e in entries if e.get("status") == "early_stopping"]
    if converged:
        return "converged", converged[-1]
    entry = entries[-1]
    note = f"; {entry['note']}" if entry.get("note") else ""
    return f"partial ({entry.get('status')}{note})", entry


def report(cells: dict[str, list[dict[str, Any]]], configs: list[str] | None = None) -> str:
    """Markdown: every cell's status with its hardware and estimate, then ours against the paper per metric."""
    configs = list(dict.fromkeys([*CELLS, *(configs or []), *cells]))
    lines = [
        "# Reproduction", "",
        f"LRURec's benchmark, one shipped config per cell. Paper figures: {SOURCE}; PROTOCOLS.md §1.8. Ours: test "
        "split, best-validation checkpoint. Written by `python -m seqrec repro` (and `scripts/gpu_repro.sh` on a GPU); "
        f"every result is kept in `{LEDGER}` beside this file, labelled with the hardware it ran on.", "",
        "## Status of every cell", "",
        "| cell | status | hardware | epochs (steps) | wall time "
        "| est. time to converge: 2-core CPU (calibrated) / one H200 (assumed) |",
        "|---|---|---|---|---|---|",
    ]
    for config in configs:
        status, entry = cell_status(cells.get(config, []))
        estimate = "—"
        if dataset_of(config) in DATASETS:
            estimate = f"{hours(estimate_seconds(config, 'cpu'))} / {hours(estimate_seconds(config, 'h200'))}"
            pace = measured_pace(entry)
            if pace is not None:
                estimate += f"; at its measured CPU pace ({pace:.3g} s/step): {hours(assumed_steps(config) * pace)}"
        if entry is None:
            lines.append(f"| {config} | not yet run | | | | {estimate} |")
            continue
        lines.append(f"| {config} | {status} | {entry.get('hardware', '?')} | {entry.get('epochs', '?')} "
                     f"({entry.get('global_step', '?')}) | {wall_time(entry)} | {estimate} |")
    lines += ["", "## Ours against the paper", "",
              "| cell | metric | ours | paper | rel. diff | status | hardware |", "|---|---|---|---|---|---|---|"]
    for config in configs:
        for entry in cells.get(config, []):
            for metric, paper in PAPER.get(base_config(config), {}).items():
                ours = entry.get("metrics", {}).get(metric)
                if ours is None:
                    continue
                lines.append(f"| {config} | {metric} | {ours:.5f} | {paper:.5f} | {signed_percent((ours - paper) / paper)} "
                             f"| {entry.get('status', '?')} | {entry.get('hardware', '?')} |")
    lines += ["", "A status other than `early_stopping` marks a partial run: continue it with `--resume`."]
    lines += verdicts(cells, configs)
    lines += seed_spread(converged_cells(cells, configs), PAPER)
    lines += selection(converged_cells(cells, configs), PAPER, partial=partial_cells(cells, configs))
    lines += ["",
              "## How the estimates are made", ""] + [f"- {a}" for a in assumptions()]
    commands = [(config, e["command"]) for config in configs for e in cells.get(config, []) if e.get("command")]
    if commands:
        lines += ["", "## Commands", ""] + [f"- `{config}`: `{command}`" for config, command in commands]
    return "\n".join(lines) + "\n"


def cells_with_status(cells: dict[str, list[dict[str, Any]]], configs: list[str], wanted: str) -> dict[str, dict[str, Any]]:
    """``{cell: the entry its status rests on}`` of the cells whose ``cell_status`` starts with ``wanted``
    ("converged", "partial"), in report order."""
    found = {config: cell_status(cells.get(config, [])) for config in configs}
    return {config: entry for config, (status, entry) in found.items() if status.startswith(wanted) and entry is not None}


def converged_cells(cells: dict[str, list[dict[str, Any]]], configs: list[str]) -> dict[str, dict[str, Any]]:
    """``{cell: its converged entry}`` in report order."""
    return cells_with_status(cells, configs, "converged")


def partial_cells(cells: dict[str, list[dict[str, Any]]], configs: list[str]) -> dict[str, dict[str, Any]]:
    """``{cell: its newest entry}`` of the cells that have run but not converged, in report order."""
    return cells_with_status(cells, configs, "partial")


def verdicts(cells: dict[str, list[dict[str, Any]]], configs: list[str]) -> list[str]:
    """The report's verdict section: one line per converged cell (``repro_compare.verdict``), then the figure of
    the validation curves the ledger holds (cells recorded before it kept curves are named)."""
    converged = converged_cells(cells, configs)
    if not converged:
        return []
    lines = ["", "## Verdicts (converged cells, test split against the paper; 3% tolerance)", ""]
    for config, entry in converged.items():
        facts = [f"seed {entry['seed']}" if entry.get("seed") is not None else "seed not recorded",
                 f"best step {entry['best_step']:,}" if entry.get("best_step") is not None else "best step not recorded"]
        lines.append(f"- `{config}` ({', '.join(facts)}): {verdict(entry, PAPER.get(base_config(config), {}))}")
    drawn = [config for config, entry in converged.items() if entry.get("val_curve")]
    missing = [config for config in converged if config not in drawn]
    if drawn:
        lines += ["", f"![validation {CURVE_METRIC} of each converged cell against the paper's test figure]({FIGURE})", "",
                  f"`{FIGURE}`: validation {CURVE_METRIC} per training step, one panel per shipped config: its "
                  "shipped setting (thicker) and each converged variant or seed, labelled with its test figure; the "
                  "star on a line: its best-validation checkpoint, the one tested; the paper's test figure dashed."]
    if missing:
        lines += ["", f"No curve in the ledger for {', '.join(f'`{c}`' for c in missing)} (recorded before the ledger "
                  "kept validation curves)."]
    return lines


def write_report(out: Path, cells: dict[str, list[dict[str, Any]]], configs: list[str] | None = None) -> str:
    """Render and write the report and its figure (``FIGURE`` beside it) atomically; returns the report's text."""
    text = report(cells, configs)
    out.parent.mkdir(parents=True, exist_ok=True)
    curves = converged_cells(cells, list(dict.fromkeys([*CELLS, *(configs or []), *cells])))
    plot_curves(curves, PAPER, out.parent / FIGURE)
    write_text(out, text)
    return text


def main(argv: list[str] | None = None) -> None:
    """``seqrec repro`` (``seqrec.cli``): run each config (recording it as it finishes), write the report."""
    cli_main(["repro", *(sys.argv[1:] if argv is None else argv)])


def command(
    configs: list[str] | None = None,
    shared_data: Path | None = None,
    runs_dir: Path = Path("runs/repro"),
    resume: bool = False,
    sitting_time: str | None = None,
    hardware: str | None = None,
    report_only: bool = False,
    out: Path = Path("results/REPRODUCTION.md"),
    variant: str | None = None,
    overrides: list[str] | None = None,
) -> None:
    """Paper reproductions (LRURec's Table 3 and 4 cells) in resumable sittings, compared with the paper.

    Each config runs as its own seqrec fit; after each one its result joins the ledger reproduction.json beside
    --out and the report is rewritten. Exit 75 when a sitting's time ran out (continue with --resume), 130 after a
    signal, 1 when a config failed.

    Args:
        configs: cells to run (default: the first four, lru_ml1m sasrec_ml1m lru_beauty sasrec_beauty; all: every
            cell)
        shared_data: folder with lrurec/*.txt.gz and xlong/ (default: $SEQREC_SHARED_DATA); without it the configs'
            own sources
        runs_dir: where the runs go (runs_dir/<config>/version_N)
        resume: continue each config's last run (fit's --ckpt_path last)
        sitting_time: per-config limit of this sitting, DD:HH:MM:SS (fit's --sitting_time: it stops at an exact
            resume point, tests the best so far, exits 75); resume later with --resume
        hardware: the label of this machine's results (default: detected)
        report_only: record the configs' latest runs, rewrite the report
        out: the report (the ledger reproduction.json goes beside it)
        variant: run each config as its own cell "<config>@<variant>" (its own runs and ledger entries, compared
            with the config's paper figures), for runs with other flags (after --); without it their result
            replaces the config's entry of this hardware
        overrides: after --: extra flags for seqrec fit
    """
    env_data = os.environ.get("SEQREC_SHARED_DATA")
    args = argparse.Namespace(configs=list(configs or DEFAULT_RUN), runs_dir=Path(runs_dir), resume=resume,
                              shared_data=shared_data or (Path(env_data) if env_data else None),
                              max_time=sitting_time, hardware=hardware, report_only=report_only, out=Path(out),
                              overrides=list(overrides or []))
    configs = CELLS if args.configs == ["all"] else args.configs
    if variant is not None:
        if not VARIANT_NAME.match(variant):
            raise ValueError(f"--variant {variant!r}: use lower-case letters, digits, _ and -, and +seed_N for a "
                             "grid point's other seed (it names a runs folder and a ledger cell)")
        configs = [f"{base_config(config)}{VARIANT_MARK}{variant}" for config in configs]
    extra_common = [a for a in args.overrides if a != "--"]
    label = args.hardware or detect_hardware(uses_gpu(extra_common))
    ledger = args.out.parent / LEDGER
    cells = read_ledger(ledger)
    failed, interrupted, paused = [], [], []
    stop_code = 130  # a fit stopped by a signal this process did not get (kill PID): exit with its status
    with child_process.forwarding_signals():  # a signal stops the running cell at its resume point and ends the loop
        for config in configs:
            extra = list(extra_common)
            if args.max_time:  # an exact resume point (trainer.max_time is not one: it validates at its stop)
                extra += ["--sitting_time", args.max_time]
            if args.shared_data:
                extra = shared_data_overrides(config, Path(args.shared_data)) + extra
            before = latest_run(args.runs_dir, config)
            before_mtime = (before / TEST_METRICS).stat().st_mtime if before is not None else None
            command = ""
            if not args.report_only:
                started = time.time()
                argv_run, _, code = run_config(config, args.runs_dir, extra, args.resume)
                command = public_command(argv_run, args.shared_data)
                if code == os.EX_TEMPFAIL:  # the sitting's time ran out: checkpointed, best so far tested
                    paused.append(config)
                elif code in child_process.SIGNAL_EXITS:  # a checkpoint was saved at the signal, no test was run
                    interrupted.append(config)
                    stop_code = code
                    cells = count_interrupted(ledger, config, label, started)
                elif code != 0:
                    failed.append(config)
            run = latest_run(args.runs_dir, config)
            fresh = run is not None and (run != before or (run / TEST_METRICS).stat().st_mtime != before_mtime)
            known = run is not None and any(e.get("run_dir") == str(run) for e in cells.get(config, []))
            if fresh or (args.report_only and run is not None and not known):  # never an older run under a new command
                cells = record(ledger, config, run_entry(run, label, command))
            write_report(args.out, cells, configs)  # after every cell: partial results are on disk as they finish
            if child_process.stopped_by() is not None:
                break  # the remaining cells are not started
    print(write_report(args.out, cells, configs))
    if paused:
        print(f"repro: {', '.join(paused)} reached the sitting's --sitting_time with a checkpoint; continue with the same "
              "command and --resume", file=sys.stderr)
    if interrupted:
        print(f"repro: {', '.join(interrupted)} stopped by a signal with a checkpoint; continue with the same command "
              "and --resume", file=sys.stderr)
    if failed:
        print(f"repro: {', '.join(failed)} failed (see their output above)", file=sys.stderr)
        raise SystemExit(1)
    if child_process.stopped_by() is not None:
        raise SystemExit(128 + child_process.stopped_by())
    if interrupted:
        raise SystemExit(stop_code)
    if paused:
        raise SystemExit(os.EX_TEMPFAIL)


if __name__ == "__main__":
    main()
