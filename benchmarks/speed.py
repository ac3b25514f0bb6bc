"""Speed: this machine's arithmetic limit, training steps against it, full-ranking validation, the official
LRURec code side by side, and the time to RecBole's 3-epoch SASRec figure.

    python -m benchmarks.speed [--threads 1] [--repeats 5] [--steps 5] [--warmup 2]
        [--official_lrurec DIR] [--out results/BENCHMARKS.md]
        [--ml1m_data ml-1m-lrurec | JSON] [--ml100k_data JSON] [--set KEY=VALUE ...]
        [--parts matmul,train,eval,official,fit] [--models SASRec,BERT4Rec] [--matmul_size 2048]
        [--loss_shape 16384x64x3417]
        [--fit_epochs 30]

One section, "Speed", in ``--out``; every figure is the median of ``--repeats`` runs with (min–max):

1. **Arithmetic limit**: ``torch.mm`` into a preallocated output, fp32 and bf16, at ``--threads``, on a
   large square product and on the next-item loss's product (P positions × d)·(d × N+1), in G
   multiply-adds/s (1 MAC = 2 FLOP).
2. **Training step** of ``sasrec_ml1m``, ``lru_ml1m`` and ``bert4rec_ml1m`` (ML-1M as LRURec ships it,
   ``--ml1m_data``; BERT4Rec's batches are cloze windows, its tokens/s the masked positions) and
   ``mlp4rec_ml100k`` (``--ml100k_data``, default the config's own source), each in fp32 and under
   ``--trainer.precision bf16-mixed``: the config's ``training_step`` (forward + loss) inside the trainer's
   precision context, backward, the config's gradient clipping and the optimiser step, on batches from the
   datamodule's train loader after ``--warmup`` steps; the loader is not timed. The MACs of one step
   (forward + backward) are counted once per model with ``FlopCounterMode`` (``count_step_macs``), which
   gives the step's arithmetic limit MACs / (best measured rate of the row's dtype) and the ratio
   step / limit.
3. **Full-ranking validation** on ML-1M: ``NextItemTask.ranks`` over the whole validation loader (loader
   included) under ``torch.inference_mode``, for LRURec, SASRec and BERT4Rec.
4. **The official LRURec code** (``--official_lrurec DIR``, a checkout of github.com/yueqirex/LRURec; its
   ``model/lru.py`` is imported at run time, nothing of it is copied): its ``LRU(args)`` at our config's
   size, trained as its ``trainer/lru.py`` does (``model(seqs)[0]``, ``CrossEntropyLoss(ignore_index=0)``
   over N+1 logits, AdamW with LRURec's decay groups, lr 1e-3, weight decay 0.01, eps 1e-9, gradient norm
   clipped at 5) on the same batches as ours, the two stepped in turns in one process; and its validation
   (``calculate_metrics``: last-position scores, the input items and padding set to -1e9, then the full
   argsort its metric function runs) against ours over the same loader, in turns.
5. **Time to RecBole's figure**: ``seqrec.fit`` of ``sasrec_ml100k`` (the ``make fit`` protocol; progress
   bar off, run directory in a temporary folder) validating every epoch and stopping as soon as validation
   NDCG@10 reaches RecBole 1.2.1's 3-epoch SASRec test figure (0.0375, 333 s there; EarlyStopping's
   ``stopping_threshold``), at most ``--fit_epochs`` epochs: wall time of fit + test of that checkpoint in a
   process that has imported torch and seqrec, and its test NDCG@10; the target is at most 5 % of
   RecBole's time with the test figure reached.

Each phase runs in its own forked child (as in ``benchmarks.pipeline``), so peak RSS (``ru_maxrss``) is
per phase; every data set is prepared (cache built) in a child of its own before anything is measured.
Every run is built by ``seqrec.build.build``; ``--set KEY=VALUE`` adds ``--KEY VALUE`` to every build
(e.g. ``--set data.max_len=10`` for a smoke run). Without $SEQREC_SHARED_DATA the ML-1M rows (training,
validation, official code) are skipped, said so on stderr and in the section, and the ML-100k rows run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from benchmarks.flags import Parser
from benchmarks.forked import peak_rss_kb as _rss_kb
from benchmarks.forked import run_forked, single_optimizer, training_step
from benchmarks.pipeline import PRESETS, SHARED_ENV, data_source_overrides
from seqrec.bench.report import (
    decimals,
    format_spread,
    machine_description,
    median,
    rss_cell,
    spread,
    write_section,
)
from seqrec.models.kernels.build import BF16_FLAGS, cpu_flags
from seqrec.runs import SUMMARY
from seqrec.tasks.losses import CHUNK_LOGITS, auto_chunk_rows

TITLE = "Speed"
PARTS = ("matmul", "train", "eval", "official", "fit")
# RecBole 1.2.1's SASRec on ML-100k after 3 epochs (the figure this benchmark is held to) and the target share.
RECBOLE = {"version": "1.2.1", "ndcg@10": 0.0375, "seconds": 333.0}
# The make-fit protocol's checkpointing, with early stopping as soon as validation NDCG@10 reaches RecBole's figure.
TO_TARGET_CALLBACKS = [
    {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
     "init_args": {"monitor": "val/ndcg@10", "mode": "max", "save_last": True, "filename": "best-{epoch}-{step}"}},
    {"class_path": "lightning.pytorch.callbacks.EarlyStopping",
     "init_args": {"monitor": "val/ndcg@10", "mode": "max", "patience": 5, "stopping_threshold": RECBOLE["ndcg@10"]}},
]
TARGET_SHARE = 0.05
# (label, config, data key): the training rows; the validation rows are the ML-1M ones.
TRAIN_ROWS = (("SASRec", "sasrec_ml1m", "ml1m"), ("LRURec", "lru_ml1m", "ml1m"), ("BERT4Rec", "bert4rec_ml1m", "ml1m"),
              ("MLP4Rec", "mlp4rec_ml100k", "ml100k"))
EVAL_ROWS = (("LRURec", "lru_ml1m"), ("SASRec", "sasrec_ml1m"), ("BERT4Rec", "bert4rec_ml1m"))
PRECISIONS = ("fp32", "bf16-mixed")
FIT_CONFIG = "sasrec_ml100k"
OFFICIAL_CONFIG = "lru_ml1m"
DATA_LABELS = {"ml1m": "ML-1M rows (`--ml1m_data`)", "ml100k": "ML-100k rows (`--ml100k_data`)"}
SEED = 42  # torch's seed before each build (the build seeds again with the config's seed_everything)


# ---------------------------------------------------------------------------------------------------
# Forked phases
# ---------------------------------------------------------------------------------------------------


def _set_threads(threads: int) -> None:
    """torch intra-op threads of this (child) process."""
    import torch

    torch.set_num_threads(threads)


def _built(args: list[str]) -> tuple[Any, Any, Any]:
    """(run, datamodule set up for fit, task bound to it), built by ``seqrec.build``."""
    from seqrec.build import bind, build

    run = build(args, save_config=False)
    data = run.datamodule
    data.prepare_data()
    data.setup("fit")
    return run, data, bind(run.task, data)


def _endless(loader: Any) -> Iterator[Any]:
    """The loader's batches, epoch after epoch (reshuffled)."""
    while True:
        yield from loader


def _training_step(run: Any, task: Any) -> Callable[[dict[str, Any]], None]:
    """One optimiser step as the trainer runs it (``benchmarks.forked.training_step`` with this run's
    clipping and precision context)."""
    trainer_cfg = run.config.trainer
    return training_step(task, single_optimizer(task), getattr(trainer_cfg, "gradient_clip_val", None),
                         getattr(trainer_cfg, "gradient_clip_algorithm", None) == "value",
                         run.trainer.strategy.precision_plugin.train_step_context)


@contextlib.contextmanager
def _quiet_logging_calls() -> Iterator[None]:
    """training_step logs through ``self.log``, which only warns without a Trainer attached."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*self.log.*")
        yield


def count_step_macs(task: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """MACs of one training step (forward + loss + backward) by ``FlopCounterMode``, fused loss and plain loss.

    The fused loss (``seqrec.tasks.losses``) runs its three products inside an autograd Function's forward;
    FlopCounterMode works at dispatch level and sees them (the in-place ``addmm_`` that accumulates ∂loss/∂W
    has its formula in ``seqrec.cost.flops``). The plain reference loss (``ce_chunk_rows: None``) runs the
    same products through autograd; both counts are returned.
    """
    from torch.utils.flop_counter import FlopCounterMode

    from seqrec.cost.flops import flop_counter_mapping

    mapping = flop_counter_mapping()

    def count() -> tuple[int, dict[str, int]]:
        counter = FlopCounterMode(display=False, custom_mapping=mapping)
        with counter, _quiet_logging_calls():
            task.training_step(batch, 0).backward()
        task.zero_grad(set_to_none=True)
        by_op = {str(k): int(v) // 2 for k, v in counter.get_flop_counts().get("Global", {}).items() if v}
        return counter.get_total_flops() // 2, by_op

    fused_macs, by_op = count()
    plain_macs = fused_macs
    chunk_rows = getattr(task, "ce_chunk_rows", None)
    if chunk_rows is not None and getattr(task, "loss_kind", None) == "ce":
        task.ce_chunk_rows = None
        try:
            plain_macs = count()[0]
        finally:
            task.ce_chunk_rows = chunk_rows
    return {"macs": fused_macs, "macs_plain": plain_macs, "macs_by_op": by_op,
            "macs_positions": int((batch["labels"] > 0).sum())}


def phase_prepare(spec: dict[str, Any]) -> dict[str, Any]:
    """Build the config's data once (download or cache), so later phases measure cache hits only."""
    _set_threads(spec["threads"])
    run, data, task = _built(spec["args"])
    split = data.split
    return {"data": f"{data.source.describe()}: {data.sequences.summary()}", "num_items": data.num_items,
            "train_examples": len(data.datasets["train"]), "valid_queries": len(split.valid)}


def phase_matmul(spec: dict[str, Any]) -> dict[str, Any]:
    """G multiply-adds/s of ``torch.mm(a, b, out=c)`` per (shape, dtype); each repeat runs ≥ ``min_seconds``."""
    import torch

    _set_threads(spec["threads"])
    torch.manual_seed(0)
    rates: dict[str, list[float]] = {}
    for name, (m, k, n) in spec["shapes"].items():
        for dtype_name in ("float32", "bfloat16"):
            dtype = getattr(torch, dtype_name)
            a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
            c = torch.empty(m, n, dtype=dtype)
            torch.mm(a, b, out=c)  # warm-up (kernel selection, pages of c)
            started = time.perf_counter()
            torch.mm(a, b, out=c)
            once = time.perf_counter() - started
            inner = max(1, math.ceil(spec["min_seconds"] / max(once, 1e-9)))
            runs = []
            for _ in range(spec["repeats"]):
                started = time.perf_counter()
                for _ in range(inner):
                    torch.mm(a, b, out=c)
                runs.append(m * k * n * inner / (time.perf_counter() - started) / 1e9)
            rates[f"{name}/{dtype_name}"] = runs
    return {"gmacs_per_s": rates, "threads": torch.get_num_threads()}


def phase_train(spec: dict[str, Any]) -> dict[str, Any]:
    """ms per training step (loader untimed), samples/s, labelled tokens/s, peak RSS; then the step's MACs."""
    import torch

    _set_threads(spec["threads"])
    baseline = _rss_kb()
    torch.manual_seed(spec["seed"])
    run, data, task = _built(spec["args"])
    task.train()
    step = _training_step(run, task)
    batches = _endless(data.train_dataloader())
    with _quiet_logging_calls():
        for _ in range(spec["warmup"]):
            step(next(batches))
        step_s, samples, tokens = [], [], []
        for _ in range(spec["repeats"]):
            seconds, n_samples, n_tokens = 0.0, 0, 0
            for _ in range(spec["steps"]):
                batch = next(batches)
                started = time.perf_counter()
                step(batch)
                seconds += time.perf_counter() - started
                n_samples += len(batch["items"])
                n_tokens += int((batch["labels"] > 0).sum())
            step_s.append(seconds / spec["steps"])
            samples.append(n_samples / seconds)
            tokens.append(n_tokens / seconds)
    peak = _rss_kb()  # before counting MACs, which holds the plain loss's full logits
    result = {
        "ms_per_step": [s * 1e3 for s in step_s], "samples_per_s": samples, "tokens_per_s": tokens,
        "rss_baseline_kb": baseline, "rss_peak_kb": peak, "model": type(task.net).__name__,
        "parameters": sum(p.numel() for p in task.parameters()), "batch_size": data.batch_size,
        "max_len": data.max_len, "num_items": data.num_items, "train_examples": len(data.datasets["train"]),
        "threads": torch.get_num_threads(),
    }
    if spec["count_macs"]:
        result.update(count_step_macs(task, next(batches)))
    return result


def _validation_pass(task: Any, loader: Any, max_batches: int | None = None) -> int:
    """``task.ranks`` over the loader (at most ``max_batches``) under inference mode; the number of queries."""
    import torch

    from seqrec.tasks.padding import drop_padding

    users = 0
    with torch.inference_mode():
        for i, batch in enumerate(loader):
            if max_batches is not None and i == max_batches:
                break
            batch = drop_padding(batch)
            task.ranks(batch)
            users += len(batch["target"])
    return users


def phase_eval(spec: dict[str, Any]) -> dict[str, Any]:
    """Seconds per full validation pass (every validation user), after one warm-up batch; peak RSS."""
    import torch

    _set_threads(spec["threads"])
    baseline = _rss_kb()
    torch.manual_seed(spec["seed"])
    run, data, task = _built(spec["args"])
    task.eval()
    loader = data.val_dataloader()
    _validation_pass(task, loader, max_batches=1)
    seconds, users = [], 0
    for _ in range(spec["repeats"]):
        started = time.perf_counter()
        users = _validation_pass(task, loader)
        seconds.append(time.perf_counter() - started)
    return {"seconds": seconds, "users_per_s": [users / s for s in seconds], "users": users,
            "full_ranking": getattr(data, "eval_negatives", None) is None, "eval_batch_size": data.eval_batch_size,
            "rss_baseline_kb": baseline, "rss_peak_kb": _rss_kb()}


# --- the official LRURec code ----------------------------------------------------------------------


def official_module(directory: str | Path) -> Any:
    """The official checkout's ``model/lru.py``, imported from ``directory`` at run time (never copied)."""
    path = Path(directory) / "model" / "lru.py"
    if not path.is_file():
        raise FileNotFoundError(
            f"--official_lrurec {directory}: expected a checkout of github.com/yueqirex/LRURec with model/lru.py, "
            f"found no {path}"
        )
    spec = importlib.util.spec_from_file_location("seqrec_bench_official_lru", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "LRU", None)):
        raise ValueError(f"{path} defines no LRU(args): is it LRURec's model/lru.py?")
    return module


def official_args(run: Any, num_items: int) -> SimpleNamespace:
    """The official ``args`` at our config's size: hidden units, blocks and dropout of ``lru_ml1m``'s model."""
    model = run.config.model.init_args.net.init_args
    return SimpleNamespace(bert_hidden_units=int(model.d_model), bert_num_blocks=int(model.num_layers),
                           bert_dropout=float(model.dropout), bert_attn_dropout=float(model.dropout),
                           num_items=int(num_items), dataset_code="ml-1m")


def _official(spec: dict[str, Any], run: Any, data: Any) -> tuple[Any, Callable[[dict[str, Any]], None], SimpleNamespace]:
    """(the official model, its training step as its trainer runs it, its args)."""
    import torch

    from seqrec.tasks.optim import build_optimizer

    args = official_args(run, data.num_items)
    model = official_module(spec["official"]).LRU(args).train()
    # trainer/base.py _create_optimizer: AdamW, decay except 'bias'/'layer_norm', eps 1e-9 (config.py)
    optimizer = build_optimizer(model.named_parameters(), "adamw", lr=1e-3, weight_decay=0.01,
                                betas=(0.9, 0.999), eps=1e-9, no_decay=["bias", "layer_norm"])
    assert optimizer is not None
    cross_entropy = torch.nn.CrossEntropyLoss(ignore_index=0)
    max_grad_norm = float(getattr(run.config.trainer, "gradient_clip_val", None) or 5.0)

    def step(batch: dict[str, Any]) -> None:  # trainer/lru.py calculate_loss + trainer/base.py train_one_epoch
        optimizer.zero_grad(set_to_none=True)
        logits = model(batch["items"])[0]  # (B, L, N+1)
        loss = cross_entropy(logits.view(-1, logits.size(-1)), batch["labels"].view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()

    return model, step, args


def _official_validation_pass(model: Any, loader: Any) -> tuple[int, float]:
    """Its ``calculate_metrics`` scoring over the loader, then its metric function's full argsort.

    Returns (queries, seconds spent in the argsort).
    """
    import torch

    from seqrec.tasks.padding import drop_padding

    users, sort_s = 0, 0.0
    with torch.inference_mode():
        for batch in loader:
            batch = drop_padding(batch)
            seqs = batch["items"]  # (B, L)
            scores = model(seqs)[0][:, -1, :]  # (B, N+1)
            rows = torch.arange(scores.size(0))
            for i in range(seqs.shape[1]):
                scores[rows, seqs[:, i]] = -1e9
            scores[:, 0] = -1e9  # padding
            started = time.perf_counter()
            (-scores).argsort(dim=1)  # absolute_recall_mrr_ndcg_for_ks ranks by a full sort
            sort_s += time.perf_counter() - started
            users += len(seqs)
    return users, sort_s


def phase_official(spec: dict[str, Any]) -> dict[str, Any]:
    """Ours and the official LRU in one process on the same batches, in turns: training steps, validation passes."""
    import torch

    _set_threads(spec["threads"])
    torch.manual_seed(spec["seed"])
    run, data, task = _built(spec["args"])
    task.train()
    ours = _training_step(run, task)
    torch.manual_seed(spec["seed"])
    model, theirs, args = _official(spec, run, data)
    steps = {"ours": ours, "official": theirs}
    batches = _endless(data.train_dataloader())
    times: dict[str, list[float]] = {"ours": [], "official": []}
    with _quiet_logging_calls():
        for _ in range(spec["warmup"]):
            batch = next(batches)
            ours(batch)
            theirs(batch)
        turn = 0
        for _ in range(spec["repeats"]):
            spent = {"ours": 0.0, "official": 0.0}
            for _ in range(spec["steps"]):
                batch = next(batches)
                order = ("ours", "official") if turn % 2 == 0 else ("official", "ours")  # neither always goes first
                turn += 1
                for name in order:
                    started = time.perf_counter()
                    steps[name](batch)
                    spent[name] += time.perf_counter() - started
            for name in times:
                times[name].append(spent[name] / spec["steps"] * 1e3)
    # validation, in turns (a pass each per repeat), after one warm-up batch each
    task.eval()
    model.eval()
    loader = data.val_dataloader()
    _validation_pass(task, loader, max_batches=1)
    first = next(iter(loader))
    with torch.inference_mode():
        model(first["items"][:1])
    val: dict[str, list[float]] = {"ours": [], "official": [], "official_scoring": []}
    users = 0
    for r in range(spec["repeats"]):
        for name in (("ours", "official") if r % 2 == 0 else ("official", "ours")):
            started = time.perf_counter()
            if name == "ours":
                users = _validation_pass(task, loader)
                val["ours"].append(time.perf_counter() - started)
            else:
                users, sort_s = _official_validation_pass(model, loader)
                total = time.perf_counter() - started
                val["official"].append(total)
                val["official_scoring"].append(total - sort_s)
    return {"step_ms": times, "val_s": val, "users": users, "official_args": vars(args),
            "official_parameters": sum(p.numel() * (2 if p.is_complex() else 1) for p in model.parameters()),
            "our_parameters": sum(p.numel() for p in task.parameters())}


def phase_memory(spec: dict[str, Any]) -> dict[str, Any]:
    """Peak RSS of ``warmup + steps`` training steps of one side (``which``: ours or official) alone."""
    import torch

    _set_threads(spec["threads"])
    baseline = _rss_kb()
    torch.manual_seed(spec["seed"])
    run, data, task = _built(spec["args"])
    if spec["which"] == "official":  # our task is built too (by build), as in the side-by-side process
        _, step, _ = _official(spec, run, data)
    else:
        task.train()
        step = _training_step(run, task)
    batches = _endless(data.train_dataloader())
    with _quiet_logging_calls():
        for _ in range(spec["warmup"] + spec["steps"]):
            step(next(batches))
    return {"rss_baseline_kb": baseline, "rss_peak_kb": _rss_kb()}


# --- time to RecBole's figure -----------------------------------------------------------------------


def phase_fit(spec: dict[str, Any]) -> dict[str, Any]:
    """Wall seconds of ``seqrec.fit`` (build, fit, test of the best checkpoint) and its test metrics."""
    from seqrec.fit import fit

    _set_threads(spec["threads"])
    started = time.perf_counter()
    results = fit(spec["args"])
    seconds = time.perf_counter() - started
    summary = next(Path(spec["save_dir"]).rglob(SUMMARY), None)
    return {"seconds": seconds, "results": {k: float(v) for k, v in results.items()},
            "summary": json.loads(summary.read_text()) if summary else {}, "rss_peak_kb": _rss_kb()}


# ---------------------------------------------------------------------------------------------------
# Orchestration and report (parent)
# ---------------------------------------------------------------------------------------------------


def _shape(text: str) -> tuple[int, int, int]:
    """``MxKxN`` -> (M, K, N)."""
    try:
        m, k, n = (int(v) for v in text.lower().split("x"))
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected MxKxN (three positive integers), got {text!r}") from error
    if min(m, k, n) < 1:
        raise argparse.ArgumentTypeError(f"expected positive sizes, got {text!r}")
    return m, k, n


def _setting(text: str) -> list[str]:
    """``KEY=VALUE`` -> ["--KEY", "VALUE"]."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--set takes KEY=VALUE (e.g. data.max_len=10), got {text!r}")
    return [f"--{key.strip().lstrip('-')}", value]


def ml1m_unavailable(value: str) -> str | None:
    """Why the ML-1M rows cannot run (the preset's shared file is missing), or None."""
    if value not in PRESETS:
        return None
    shared = os.environ.get(SHARED_ENV)
    if not shared:
        return f"${SHARED_ENV} is not set (the {value} preset reads $SEQREC_SHARED_DATA/lrurec/ml-1m.txt.gz)"
    path = Path(os.path.expandvars(PRESETS[value]["source"]["init_args"]["path"]))
    if not path.is_file():
        return f"{path} does not exist (the {value} preset's file under ${SHARED_ENV})"
    return None


def _ratio(values: list[float], scale: float, digits: int = 2) -> str:
    """``format_spread`` of each value divided by ``scale``, with a × sign."""
    return format_spread([v / scale for v in values], digits) + "×"


def bf16_native() -> bool | None:
    """Whether this CPU multiplies bf16 natively (an x86 flag in ``BF16_FLAGS``); None where there is no x86 flag
    line to read (another architecture or OS)."""
    flags = cpu_flags().split()
    if "avx" not in flags and "sse2" not in flags:
        return None
    return any(flag in flags for flag in BF16_FLAGS)


def bf16_native_text() -> str:
    """The report's sentence on native bf16 (``bf16_native``)."""
    answer = {True: "yes", False: "no (emulated)", None: "unknown"}[bf16_native()]
    return f"Native bf16 products (CPU flags {' or '.join(BF16_FLAGS)}): {answer}."


def bf16_unsuited(matmul: dict[str, Any] | None) -> str | None:
    """Why bf16-mixed is not worth timing on this CPU (its bf16 products are emulated: measured slower than
    fp32 on the large square), or None. Without the matmul phase the CPU flags decide."""
    fp32, bf16 = _best_rate(matmul, "float32"), _best_rate(matmul, "bfloat16")
    native = bf16_native()
    if fp32 and bf16:
        if bf16 >= fp32:
            return None
        flags = "no native bf16 (the CPU flags lack avx512_bf16 and amx_bf16)" if native is False else "slower"
        return (f"this CPU's bf16 products run at {bf16:,.1f} G MACs/s, {bf16 / fp32:.2f}× its fp32 rate "
                f"({fp32:,.1f}): {flags}, so bf16 is never chosen here")
    if native is False:
        return "no native bf16 products on this CPU (the CPU flags lack avx512_bf16 and amx_bf16)"
    return None


PATH_ENVS = (SHARED_ENV, "SEQREC_LRUREC_OFFICIAL")  # folders the report names by their variable, not this machine's path


def name_env_paths(text: str) -> str:
    """``text`` with the value of each set variable in ``PATH_ENVS`` written as ``$NAME`` (a results file then
    reads the same on every machine, and the command in it can be pasted)."""
    for name in PATH_ENVS:
        value = os.environ.get(name, "").rstrip("/")
        if value:
            text = text.replace(str(Path(value).resolve()), f"${name}").replace(value, f"${name}")
    return text


def _best_rate(matmul: dict[str, Any] | None, dtype: str) -> float | None:
    """The best median rate (G MACs/s) measured for ``dtype`` over the shapes."""
    if matmul is None:
        return None
    rates = [median(v) for k, v in matmul["gmacs_per_s"].items() if k.endswith("/" + dtype)]
    return max(rates) if rates else None


def render(ctx: dict[str, Any]) -> str:
    """The section body."""
    args, results = ctx["args"], ctx["results"]
    matmul = results.get("matmul")
    lines = [
        f"Command (wall time {ctx['wall_s']:.0f} s): `{ctx['command']}`",
        "",
        f"Machine: {ctx['machine']}. Load average (1 / 5 / 15 min, `os.getloadavg`): "
        f"{' / '.join(f'{v:.2f}' for v in ctx['load_start'])} at start, "
        f"{' / '.join(f'{v:.2f}' for v in ctx['load_end'])} at end.",
        "",
        f"Median of {args.repeats} runs (min–max). Each phase runs in its own forked process; peak RSS in MiB "
        "(+ increase over the post-import RSS the process starts from). 1 MAC = one multiply-add = 2 FLOP.",
        "",
        "Data: " + "; ".join(f"{DATA_LABELS[key]}: {value['data']}" for key, value in ctx["prepared"].items()) + ".",
    ]
    if ctx["skipped"]:
        lines += ["", "Skipped: " + "; ".join(ctx["skipped"]) + "."]

    if matmul is not None:
        lines += [
            "", "### Arithmetic limit of this machine", "",
            f"`torch.mm(a, b, out=c)` at {matmul['threads']} thread(s), inputs already in the dtype, each run "
            f"repeats the product for at least {args.matmul_seconds:g} s. The loss product is the whole "
            "(positions × d)·(d × N+1) scoring; the fused loss runs it in chunks of `ce_chunk_rows` rows "
            f"(\"auto\": ⌊{CHUNK_LOGITS:,} / (N+1)⌋, {auto_chunk_rows(3417)} on ML-1M). {bf16_native_text()}",
            "", "| product | (M×K)·(K×N) | fp32 G MACs/s | bf16 G MACs/s |", "|---|---|---|---|",
        ]
        for name, (m, k, n) in ctx["shapes"].items():
            lines.append(
                f"| {name} | ({m:,}×{k:,})·({k:,}×{n:,}) | {spread(matmul['gmacs_per_s'][f'{name}/float32'])} | "
                f"{spread(matmul['gmacs_per_s'][f'{name}/bfloat16'])} |"
            )

    train = results.get("train", {})
    if train:
        fp32, bf16 = _best_rate(matmul, "float32"), _best_rate(matmul, "bfloat16")
        lines += [
            "", "### Training step", "",
            f"A step: `training_step` (forward + loss) in the trainer's precision context, backward, the config's "
            f"gradient clipping, optimiser step, on train-loader batches (loader not timed); {args.steps} steps per "
            f"run after {args.warmup} warm-up steps. Tokens = labelled positions. MACs: one step (forward + backward) "
            "counted once per model by `FlopCounterMode` on one batch (complex products in real MACs; the fused "
            "loss's in-place `addmm_` added); limit = MACs / the best measured rate of the row's dtype "
            f"(fp32 {f'{fp32:,.1f}' if fp32 else '–'}, bf16 {f'{bf16:,.1f}' if bf16 else '–'} G MACs/s).",
            "",
            "| model | config | precision | batch × L | ms/step | samples/s | tokens/s | peak RSS MiB "
            "| G MACs/step | limit ms | step / limit |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for label, config, _ in TRAIN_ROWS:
            fp32_row = train.get((label, "fp32"))
            macs = fp32_row.get("macs") if fp32_row else None
            for precision in PRECISIONS:
                row = train.get((label, precision))
                if row is None:
                    continue
                rate = fp32 if precision == "fp32" else bf16
                limit_ms = macs / (rate * 1e9) * 1e3 if macs and rate else None
                lines.append(
                    f"| {label} | `{config}` | {precision} | {row['batch_size']} × {row['max_len']} | "
                    f"{spread(row['ms_per_step'])} | {format_spread(row['samples_per_s'], 1)} | "
                    f"{format_spread(row['tokens_per_s'])} | {rss_cell(row)} | "
                    f"{f'{macs / 1e9:,.{decimals(macs / 1e9, 2)}f}' if macs else '–'} | "
                    f"{f'{limit_ms:,.{decimals(limit_ms)}f}' if limit_ms else '–'} | "
                    f"{_ratio(row['ms_per_step'], limit_ms, 1) if limit_ms else '–'} |"
                )
        checks = []
        for label, _, _ in TRAIN_ROWS:
            row = train.get((label, "fp32"))
            if row and "macs" in row:
                same = row["macs"] == row["macs_plain"]
                checks.append(
                    f"{label} {row['parameters']:,} parameters, {row['macs_positions']:,} labelled positions in the "
                    f"counted batch, fused loss {row['macs'] / 1e9:,.3f} G MACs "
                    f"{'=' if same else '≠'} plain loss {row['macs_plain'] / 1e9:,.3f}"
                )
        if checks:
            lines += ["", "MACs check (the fused loss against the plain reference loss): " + "; ".join(checks) + "."]

    evaluation = results.get("eval", {})
    if evaluation:
        lines += [
            "", "### Full-ranking validation", "",
            "`NextItemTask.ranks` over the whole validation loader (loader included) under `torch.inference_mode`, "
            "after one warm-up batch.",
            "", "| model | config | users | s / pass | users/s | peak RSS MiB |", "|---|---|---|---|---|---|",
        ]
        for label, config in EVAL_ROWS:
            row = evaluation.get(label)
            if row is not None:
                lines.append(
                    f"| {label} | `{config}` | {row['users']:,} | {spread(row['seconds'])} | "
                    f"{format_spread(row['users_per_s'])} | {rss_cell(row)} |"
                )

    official = results.get("official")
    if official is not None:
        side, memory = official["side"], official["memory"]
        a = side["official_args"]
        steps, val = side["step_ms"], side["val_s"]
        lines += [
            "", "### Side by side with the official LRURec code", "",
            f"The official `LRU(args)` from `{ctx['official_dir']}/model/lru.py` (imported at run time), args "
            f"bert_hidden_units={a['bert_hidden_units']}, bert_num_blocks={a['bert_num_blocks']}, "
            f"bert_dropout={a['bert_dropout']}, bert_attn_dropout={a['bert_attn_dropout']}, num_items={a['num_items']}, "
            f"dataset_code={a['dataset_code']!r} ({side['official_parameters']:,} real parameters; ours "
            f"{side['our_parameters']:,}). Its step as its trainer runs it: `model(seqs)[0]`, "
            "`CrossEntropyLoss(ignore_index=0)` over N+1 logits, AdamW (lr 1e-3, weight decay 0.01 except bias and "
            "layer norms, eps 1e-9), gradient norm clipped at 5. Both on the same `lru_ml1m` train batches, stepped "
            f"in turns in one process ({args.steps} steps each per run after {args.warmup} warm-up steps, "
            "alternating which goes first). Validation: over the same loader, a pass each per run in turns; "
            "theirs is `calculate_metrics`' scoring (last position, input items and padding set to -1e9) then the "
            "full argsort of its metric function. Peak RSS: each side alone in its own process "
            f"({args.warmup + args.steps} steps).",
            "",
            "| | ours | official | ours / official |", "|---|---|---|---|",
            f"| training step, ms | {spread(steps['ours'])} | {spread(steps['official'])} | "
            f"{median(steps['ours']) / median(steps['official']):.2f}× |",
            f"| training peak RSS MiB | {rss_cell(memory['ours'])} | {rss_cell(memory['official'])} | "
            f"{memory['ours']['rss_peak_kb'] / memory['official']['rss_peak_kb']:.2f}× |",
            f"| validation pass ({side['users']:,} users), s | {spread(val['ours'])} | "
            f"{spread(val['official'])} | {median(val['ours']) / median(val['official']):.2f}× |",
            f"| … official scoring only (without its argsort), s | | {spread(val['official_scoring'])} | "
            f"{median(val['ours']) / median(val['official_scoring']):.2f}× |",
        ]

    fit = results.get("fit")
    if fit is not None:
        seconds = [r["seconds"] for r in fit]
        ndcg = [r["results"].get("test/ndcg@10", float("nan")) for r in fit]
        summary = fit[0]["summary"]
        target = TARGET_SHARE * RECBOLE["seconds"]
        median_s = median(seconds)
        lines += [
            "", "### Time to RecBole's 3-epoch SASRec figure", "",
            f"`python -m seqrec fit --config {FIT_CONFIG} --trainer.max_epochs {args.fit_epochs} "
            "--trainer.check_val_every_n_epoch 1` with early stopping as soon as validation NDCG@10 reaches "
            f"{RECBOLE['ndcg@10']} (the `make fit` "
            "protocol otherwise; progress bar off, run directory in a temporary folder), timed in a process that has already "
            f"imported torch and seqrec: config, data from the cache, fit ({summary.get('epochs', '?')} epochs, "
            f"{summary.get('global_step', '?')} steps, status {summary.get('status', '?')}), test of the best "
            f"checkpoint. RecBole {RECBOLE['version']}'s SASRec: NDCG@10 {RECBOLE['ndcg@10']} in "
            f"{RECBOLE['seconds']:.0f} s; the target is at most {TARGET_SHARE:.0%} of that ({target:.2f} s).",
            "",
            "| | seqrec | RecBole 1.2.1 | seqrec / RecBole |", "|---|---|---|---|",
            f"| wall time of fit + test, s | {spread(seconds)} | {RECBOLE['seconds']:.0f} | "
            f"{_ratio(seconds, RECBOLE['seconds'], 3)} |",
            f"| test NDCG@10 | {format_spread(ndcg, 4)} | {RECBOLE['ndcg@10']} | {_ratio(ndcg, RECBOLE['ndcg@10'])} |",
            "",
            f"Target ≤ {TARGET_SHARE:.2f} × {RECBOLE['seconds']:.0f} s: time {'met' if median_s <= target else 'not met'} "
            f"(median {median_s / RECBOLE['seconds']:.3f} × RecBole's time); test NDCG@10 "
            f"{'reaches' if median(ndcg) >= RECBOLE['ndcg@10'] else 'below'} RecBole's {RECBOLE['ndcg@10']} "
            f"(median {median(ndcg):.4f}), so RecBole's figure is "
            f"{'matched' if median_s <= target and median(ndcg) >= RECBOLE['ndcg@10'] else 'not matched'} "
            f"within the target.",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> str:
    """Run the parts, print the section and write it into ``--out``; returns the section body."""
    parser = Parser("benchmarks.speed", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads in every phase")
    parser.add_argument("--repeats", type=int, default=5, help="runs per figure (median and min–max reported)")
    parser.add_argument("--steps", type=int, default=5, help="timed training steps per run")
    parser.add_argument("--warmup", type=int, default=2, help="untimed training steps before timing")
    parser.add_argument("--official_lrurec", default=None, help="checkout of github.com/yueqirex/LRURec (with model/lru.py)")
    parser.add_argument("--out", type=Path, default=None, help="markdown file to write the section into")
    parser.add_argument("--ml1m_data", default="ml-1m-lrurec", help=f"ML-1M rows' data: preset ({', '.join(PRESETS)}) or JSON source spec")
    parser.add_argument("--ml100k_data", default=None, help="ML-100k rows' data: JSON source spec (default: the configs' own)")
    parser.add_argument("--set", dest="settings", type=_setting, action="append", default=[], metavar="KEY=VALUE",
                        help="add --KEY VALUE to every build (repeatable), e.g. data.max_len=10")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    parser.add_argument("--models", default=None,
                        help=f"comma-separated training and validation rows to measure (default all: "
                             f"{','.join(dict.fromkeys(label for label, *_ in (*TRAIN_ROWS, *EVAL_ROWS)))})")
    parser.add_argument("--bf16", choices=("auto", "always", "never"), default="auto",
                        help="bf16-mixed training rows: auto times them only where this CPU's bf16 products are not "
                             "slower than its fp32 ones (native bf16)")
    parser.add_argument("--matmul_size", type=int, default=2048, help="side of the square product")
    parser.add_argument("--loss_shape", type=_shape, default=(16384, 64, 3417), help="the loss product MxKxN")
    parser.add_argument("--matmul_seconds", type=float, default=0.2, help="least seconds per matmul run")
    parser.add_argument("--fit_epochs", type=int, default=30,
                        help="at most this many epochs of the RecBole comparison fit (it stops at RecBole's figure)")
    args = parser.parse_args(argv)

    for name in ("threads", "repeats", "steps", "matmul_size", "fit_epochs"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0:
        raise SystemExit(f"--warmup must be >= 0, got {args.warmup}")
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown or not parts:
        raise SystemExit(f"--parts takes a comma-separated subset of {','.join(PARTS)}, got {args.parts!r}")
    official_dir = None
    if args.official_lrurec is not None:
        official_dir = str(Path(args.official_lrurec).resolve())
        try:
            official_module(official_dir)  # fail before anything runs
        except (FileNotFoundError, ValueError) as error:
            raise SystemExit(f"error: {error}") from error
    settings = [token for pair in args.settings for token in pair]

    load_start = os.getloadavg()
    started = time.perf_counter()
    skipped: list[str] = []
    data_args: dict[str, list[str]] = {}
    why = ml1m_unavailable(args.ml1m_data)
    try:
        if why is None:
            data_args["ml1m"] = data_source_overrides(args.ml1m_data, None)[0]
        data_args["ml100k"] = (data_source_overrides(args.ml100k_data, None)[0] if args.ml100k_data else [])
    except ValueError as error:
        raise SystemExit(f"error: {error}") from error
    if why is not None:
        rows = [f"{label} training" for label, _, key in TRAIN_ROWS if key == "ml1m" and "train" in parts]
        rows += [f"{label} validation" for label, _ in EVAL_ROWS if "eval" in parts]
        if "official" in parts and official_dir:
            rows.append("the official LRURec comparison")
        if rows:
            skipped.append(f"ML-1M rows ({', '.join(rows)}): {why}")
    if "official" in parts and official_dir is None:
        parts.remove("official")

    # Import once here: forked phases inherit the modules (and start their RSS from this baseline).
    import lightning  # noqa: F401
    import torch

    import seqrec.datamodules.next_item  # noqa: F401
    import seqrec.fit  # noqa: F401
    import seqrec.tasks.next_item  # noqa: F401

    torch.set_num_threads(args.threads)
    # machine_description ends with the load average now; the section gives it at start and end instead.
    machine = machine_description(torch.get_num_threads(), torch.get_num_interop_threads()).split("; load average")[0]
    base = {"threads": args.threads, "repeats": args.repeats, "steps": args.steps, "warmup": args.warmup,
            "official": official_dir, "seed": SEED}

    def build_args(config: str, key: str, *extra: str) -> list[str]:
        return ["--config", config, "--threads", str(args.threads), *data_args[key], "--trainer.logger", "false",
                *settings, *extra]

    def note(text: str) -> None:
        print(f"[speed] {text}", file=sys.stderr, flush=True)

    for line in skipped:
        note(f"skipped {line}")
    results: dict[str, Any] = {}
    prepared: dict[str, dict[str, Any]] = {}
    chosen = set(args.models.split(",")) if args.models else None
    train_rows = [row for row in TRAIN_ROWS if chosen is None or row[0] in chosen]
    eval_rows = [row for row in EVAL_ROWS if chosen is None or row[0] in chosen]
    needed = []  # (config, data key) whose data the measured parts read: prepared first, in a child each
    if "train" in parts:
        needed += [(config, key) for _, config, key in train_rows]
    if "eval" in parts:
        needed += [(config, "ml1m") for _, config in eval_rows]
    if "official" in parts:
        needed.append((OFFICIAL_CONFIG, "ml1m"))
    if "fit" in parts:
        needed.append((FIT_CONFIG, "ml100k"))
    for config, key in dict.fromkeys(needed):
        if key in data_args:
            info = run_forked(phase_prepare, {**base, "label": f"prepare {config}", "args": build_args(config, key)})
            prepared.setdefault(key, info)
            note(f"prepared {config}: {info['data']}")

    shapes = {"large square": (args.matmul_size,) * 3, "next-item loss": tuple(args.loss_shape)}
    if "matmul" in parts:
        results["matmul"] = run_forked(phase_matmul, {**base, "label": "matmul", "shapes": shapes,
                                                      "min_seconds": args.matmul_seconds})
        note("matmul: " + ", ".join(f"{k} {median(v):,.1f} G MACs/s" for k, v in results["matmul"]["gmacs_per_s"].items()))
    precisions = PRECISIONS
    if "train" in parts:
        why_not = {"auto": bf16_unsuited(results.get("matmul")), "always": None, "never": "--bf16 never"}[args.bf16]
        if why_not is not None:
            precisions = tuple(p for p in PRECISIONS if p != "bf16-mixed")
            skipped.append(f"bf16-mixed training rows: {why_not}")
            note(f"skipped bf16-mixed training rows: {why_not}")
        results["train"] = {}
        for label, config, key in train_rows:
            if key not in data_args:
                continue
            for precision in precisions:
                extra = ["--trainer.precision", "bf16-mixed"] if precision == "bf16-mixed" else []
                row = run_forked(phase_train, {**base, "label": f"train {label} {precision}",
                                               "args": build_args(config, key, *extra), "count_macs": precision == "fp32"})
                results["train"][(label, precision)] = row
                note(f"train {label} {precision}: {median(row['ms_per_step']):,.1f} ms/step")
    if "eval" in parts and "ml1m" in data_args:
        results["eval"] = {}
        for label, config in eval_rows:
            row = run_forked(phase_eval, {**base, "label": f"eval {label}", "args": build_args(config, "ml1m")})
            results["eval"][label] = row
            note(f"validation {label}: {median(row['seconds']):,.2f} s/pass")
    if "official" in parts and "ml1m" in data_args:
        spec = {**base, "args": build_args(OFFICIAL_CONFIG, "ml1m")}
        side = run_forked(phase_official, {**spec, "label": "official side by side"})
        memory = {which: run_forked(phase_memory, {**spec, "label": f"memory {which}", "which": which})
                  for which in ("ours", "official")}
        results["official"] = {"side": side, "memory": memory}
        note(f"official: ours {median(side['step_ms']['ours']):,.1f} ms/step, official "
             f"{median(side['step_ms']['official']):,.1f} ms/step")
    if "fit" in parts:
        runs = []
        for r in range(args.repeats):
            save_dir = tempfile.mkdtemp(prefix="seqrec-speed-fit-")
            try:
                fit_args = ["--config", FIT_CONFIG, "--threads", str(args.threads), *data_args["ml100k"], *settings,
                            "--trainer.max_epochs", str(args.fit_epochs), "--trainer.check_val_every_n_epoch", "1",
                            "--trainer.callbacks", json.dumps(TO_TARGET_CALLBACKS),
                            "--trainer.enable_progress_bar", "false", "--trainer.logger.init_args.save_dir", save_dir]
                runs.append(run_forked(phase_fit, {**base, "label": f"fit {r}", "args": fit_args, "save_dir": save_dir}))
            finally:
                shutil.rmtree(save_dir, ignore_errors=True)
            note(f"fit {r + 1}/{args.repeats}: {runs[-1]['seconds']:,.1f} s, test/ndcg@10 "
                 f"{runs[-1]['results'].get('test/ndcg@10', float('nan')):.4f}")
        results["fit"] = runs

    body = render({
        "args": args, "results": results, "skipped": skipped, "prepared": prepared, "shapes": shapes,
        "command": parser.command(),
        "machine": machine, "load_start": load_start, "load_end": os.getloadavg(),
        "wall_s": time.perf_counter() - started, "official_dir": official_dir,
    })
    body = name_env_paths(body)
    print(f"## {TITLE}\n\n{body}")
    if args.out is not None:
        write_section(args.out, TITLE, body)
        note(f"wrote section '{TITLE}' to {args.out}")
    return body


if __name__ == "__main__":
    main()
