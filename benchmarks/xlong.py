"""XLong at its size, on an XLong-shaped synthetic corpus: preprocessing, cache, training step, evaluation.

    python -m benchmarks.xlong [--scale 1.0] [--configs lru_xlong,sasrec_xlong] [--threads N]
        [--steps 5] [--warmup 2] [--eval_batches 4] [--catalogue_users 256]
        [--catalogue_chunks 65536,262144,1048576] [--max_len 1000] [--batch_size 32] [--eval_negatives 10000]
        [--work DIR] [--out results/BENCHMARKS.md]

XLong itself has no public URL, so the corpus is made here, in XLong's two-file format
(``train_corpus_total_dual.txt`` / ``test_corpus_total_dual.txt``: ``index \\t user \\t history \\t target \\t
negatives``), at ``--scale`` × XLong's size: 69,691 users and 2,122,932 items at scale 1, history lengths
log-normal around 958.8 (66.8M events), every item drawn at least 5 times (so the 5-core keeps the whole
catalogue, as XLong's published counts are after it) and the rest ∝ (rank + 10)^-0.9 (popularity-skewed).
Everything after that is the shipped pipeline (``configs/lru_xlong.yaml`` built by ``seqrec.build``):

1. **Preprocessing**: the ``XLong`` source (locate + sha256, parse), ``preprocess`` (LRURec's: consecutive
   repeats dropped, items ≥ 5 then users ≥ 5) and the atomic cache write, each timed; the cache's size; a
   cached ``Sequences.load`` (read into memory, checksums verified) against ``np.load(mmap_mode="r")`` of the
   same files (what a memory-mapped ``Sequences.load`` would cost).
2. **Training step** at L = 1,000, batch 32, with LRURec's XLong loss: softmax over the target and 100 uniform
   negatives per labelled position (the config's ``loss: sampled_ce``, ``seqrec.tasks.losses.sampled_cross_entropy``),
   backward, gradient clipping at 5, AdamW step; the loader
   is not timed (its own rate is reported).
3. **Evaluation** with 10,000 generated uniform negatives per user (``negatives_storage: generated``):
   ``NextItemTask.ranks`` over the validation loader, loader included, users/s.
4. **Full-catalogue ranking** (the exact alternative): ``catalogue_scan`` over ``--catalogue_items`` items
   (XLong's 2,122,932 whatever ``--scale``: an LRURec item table of that size and random hidden states, since
   the scan's cost depends on the shapes only) for ``--catalogue_users`` users in evaluation batches, at
   several chunk sizes, fp32 and bf16 (CPU autocast): users/s of the scan, end to end with the encoder's
   measured forward, and how many bf16 ranks differ from fp32.
5. **Estimated hours per converged run**: 30 validation intervals of 2,000 steps plus 32 evaluation passes
   over 69,691 users, at the measured step time and users/s on this CPU; on one H200 as
   ``seqrec.bench.repro.estimate_seconds`` assumes.

Step time, users/s with 10,000 negatives and the full-catalogue rate do not depend on ``--scale`` (the
shapes are the protocol's); preprocessing, cache size and RSS do. Each phase runs in its own forked process, so peak RSS (``ru_maxrss``) is per phase. One
section, "XLong-shaped synthetic corpus", in ``--out``.
"""

from __future__ import annotations

import hashlib
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.flags import Parser
from benchmarks.forked import peak_rss_kb, run_forked, single_optimizer, training_step
from seqrec.bench.report import format_spread, machine_description, median, write_section

TITLE = "XLong-shaped synthetic corpus"
XLONG_USERS, XLONG_ITEMS, XLONG_MEAN_LENGTH = 69_691, 2_122_932, 958.8
STEPS_TO_CONVERGE = 30 * 2000  # 30 validation intervals (PROTOCOLS.md §1.6; the repro harness's assumption)
EVAL_PASSES = 32  # 31 validations (step 0 included) and one test


# ---------------------------------------------------------------------------------------------------
# The corpus
# ---------------------------------------------------------------------------------------------------


def corpus_sizes(scale: float) -> tuple[int, int]:
    """(users, items) at ``scale`` × XLong's (at least 4 users and 50 items)."""
    if scale <= 0:
        raise ValueError(f"--scale must be > 0, got {scale}")
    return max(4, round(XLONG_USERS * scale)), max(50, round(XLONG_ITEMS * scale))


def write_corpus(directory: Path, scale: float, seed: int = 0) -> dict[str, Any]:
    """Write the two XLong corpus files for ``scale``; returns users, items, events and bytes written."""
    rng = np.random.default_rng(seed)
    users, items = corpus_sizes(scale)
    sigma = 0.5
    lengths = rng.lognormal(math.log(XLONG_MEAN_LENGTH) - sigma**2 / 2, sigma, users)
    lengths = np.clip(lengths, 20, 10 * XLONG_MEAN_LENGTH).astype(np.int64)  # (U,)
    total = int(lengths.sum())
    floor = np.repeat(np.arange(items, dtype=np.int64), 5)  # every item at least 5 times
    if total < len(floor):
        raise ValueError(f"scale {scale} leaves {total} events for {items} items: use a larger --scale")
    weights = (np.arange(items) + 10.0) ** -0.9
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    drawn = np.minimum(np.searchsorted(cdf, rng.random(total - len(floor))), items - 1)  # popularity-skewed
    events = np.concatenate([floor, drawn])
    rng.shuffle(events)
    raw_ids = rng.permutation(items).astype(np.int64) + 1_000_000  # raw item ids as in a log: sparse, unordered
    events = raw_ids[events]  # (total,)
    directory.mkdir(parents=True, exist_ok=True)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    half = users // 2
    written = 0
    for name, rows in (("train_corpus_total_dual.txt", range(half)), ("test_corpus_total_dual.txt", range(half, users))):
        with open(directory / name, "w") as out:
            for row in rows:
                seq = events[starts[row] : starts[row] + lengths[row]]
                out.write(f"{row}\t{row}\t{','.join(seq[:-1].astype(str))}\t{seq[-1]}\t{raw_ids[row % items]}\n")
        written += (directory / name).stat().st_size
    return {"users": users, "items": items, "events": total, "bytes": written}


# ---------------------------------------------------------------------------------------------------
# Forked phases
# ---------------------------------------------------------------------------------------------------


def _rss_mib() -> float:
    """Peak RSS of this process so far, MiB."""
    return peak_rss_kb() / 1024


def xlong_preprocessing() -> Any:
    """LRURec's XLong preprocessing, as ``configs/protocol/lrurec_xlong.yaml`` sets it."""
    from seqrec.data.preprocess import Preprocessing

    return Preprocessing(dedupe_consecutive=True, min_item_interactions=5, min_user_interactions=5,
                         kcore="one_pass", sort_by="time")


def cache_entry(cache: Path, source: Any, preprocessing: Any) -> Path:
    """Where ``load_sequences`` keeps ``source`` under ``preprocessing`` (the same key it computes)."""
    key = hashlib.sha256(f"{source.fingerprint()}|{preprocessing.key()}".encode()).hexdigest()[:20]
    return cache / "sequences" / f"{source.name}-{key}"


def phase_preprocess(spec: dict[str, Any]) -> dict[str, Any]:
    """Cold preprocessing, timed piece by piece, into the cache entry ``load_sequences`` reads."""
    from seqrec.data.preprocess import load_sequences, preprocess
    from seqrec.data.sources.xlong import XLong

    baseline = _rss_mib()
    source, options = XLong(root=spec["raw"]), xlong_preprocessing()
    times = {}
    started = time.perf_counter()
    source.prepare()
    times["prepare"] = time.perf_counter() - started
    started = time.perf_counter()
    interactions = source.load()
    times["parse"] = time.perf_counter() - started
    started = time.perf_counter()
    sequences = preprocess(interactions, options)
    times["preprocess"] = time.perf_counter() - started
    del interactions
    directory = cache_entry(Path(spec["cache"]), source, options)
    started = time.perf_counter()
    sequences.save(directory)
    times["save"] = time.perf_counter() - started
    started = time.perf_counter()
    load_sequences(XLong(root=spec["raw"]), options, spec["cache"])  # a cache hit: fingerprint + load
    times["cached_load_sequences"] = time.perf_counter() - started
    entries = list((Path(spec["cache"]) / "sequences").iterdir())
    if entries != [directory]:
        raise RuntimeError(f"load_sequences did not find the entry this benchmark wrote ({directory}); found {entries}")
    files = {p.name: p.stat().st_size for p in directory.iterdir()}
    return {"seconds": times, "cache_bytes": sum(files.values()), "cache_files": files, "entry": str(directory),
            "summary": sequences.summary(), "users": sequences.num_users, "items": sequences.num_items,
            "interactions": sequences.num_interactions, "baseline_rss_mib": baseline}


def phase_cache_read(spec: dict[str, Any]) -> dict[str, Any]:
    """``Sequences.load`` (into memory, checksums verified) or ``np.load(mmap_mode="r")`` of its files."""
    from seqrec.data.sequences import Sequences

    baseline = _rss_mib()
    entry = Path(spec["entry"])
    started = time.perf_counter()
    if spec["mode"] == "load":
        sequences = Sequences.load(entry)
        total = int(sequences.items.sum())  # touch every page, as training eventually does
    else:
        arrays = {p.stem: np.load(p, mmap_mode="r", allow_pickle=False) for p in entry.glob("*.npy")}
        total = int(np.asarray(arrays["items"]).sum())
    return {"seconds": time.perf_counter() - started, "baseline_rss_mib": baseline, "checksum": total}


def _built(spec: dict[str, Any], config: str) -> tuple[Any, Any, Any]:
    """(run, datamodule set up, task bound), the shipped config on the synthetic corpus, built by ``seqrec.build``."""
    from seqrec.build import bind, build

    args = ["--config", config, "--data.init_args.source.init_args.root", spec["raw"],
            "--data.init_args.cache_dir", spec["cache"], "--data.init_args.expected_counts", "null",
            "--data.init_args.max_len", str(spec["max_len"]), "--data.init_args.batch_size", str(spec["batch_size"]),
            "--data.init_args.eval_batch_size", str(spec["eval_batch_size"]),
            "--data.init_args.eval_negatives", str(spec["eval_negatives"]),
            "--trainer.logger.init_args.save_dir", spec["runs"], "--threads", str(spec["threads"])]
    if spec["eval_negatives"] < 50:  # the protocol's metrics go to k = 50
        args += ["--model.init_args.metrics", "[recall@10,ndcg@10]"]
    run = build(args, save_config=False)
    data = run.datamodule
    data.prepare_data()
    data.setup("fit")
    return run, data, bind(run.task, data)


def phase_train(spec: dict[str, Any]) -> dict[str, Any]:
    """Seconds per training step with the sampled loss (loader untimed), and the loader's own rate."""
    import torch


    baseline = _rss_mib()
    torch.manual_seed(0)
    _, data, task = _built(spec, spec["config"])
    task.net.train()
    if getattr(task, "loss_kind", None) != "sampled_ce":
        raise ValueError(f"{spec.get('config')}: the XLong benchmark times LRURec's sampled softmax (loss: sampled_ce)")
    step = training_step(task, single_optimizer(task), clip=5.0)

    loader = iter(data.train_dataloader())
    started = time.perf_counter()
    batches = [next(loader) for _ in range(spec["warmup"] + spec["steps"])]
    loader_seconds = time.perf_counter() - started
    times, positions = [], []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*self.log.*")
        for index, batch in enumerate(batches):
            started = time.perf_counter()
            step(batch)
            if index >= spec["warmup"]:
                times.append(time.perf_counter() - started)
                positions.append(int((batch["labels"] > 0).sum()))
    return {"step_s": times, "positions": positions, "batch": int(batches[0]["items"].shape[0]),
            "length": int(batches[0]["items"].shape[1]), "train_examples": len(data.datasets["train"]),
            "loader_samples_per_s": sum(len(b["items"]) for b in batches) / loader_seconds,
            "parameters": sum(p.numel() for p in task.parameters() if p.requires_grad),
            "baseline_rss_mib": baseline}


def phase_eval(spec: dict[str, Any]) -> dict[str, Any]:
    """Users/s of ``NextItemTask.ranks`` over the validation loader with generated negatives (loader included)."""
    import torch

    baseline = _rss_mib()
    torch.manual_seed(0)
    _, data, task = _built(spec, spec["config"])
    task.eval()
    loader = iter(data.val_dataloader())
    rates, forward = [], []
    with torch.inference_mode():
        warmed = False
        for _ in range(spec["eval_batches"] + 1):
            started = time.perf_counter()
            batch = next(loader, None)
            if batch is None:
                break
            task.ranks(batch)
            if warmed or len(data.datasets["valid"]) <= len(batch["target"]):  # one batch only: it is measured
                rates.append(len(batch["target"]) / (time.perf_counter() - started))
                started = time.perf_counter()
                task.net.last_hidden(batch["items"])
                forward.append(len(batch["target"]) / (time.perf_counter() - started))
            warmed = True
    return {"users_per_s": rates, "forward_users_per_s": forward, "queries": len(data.datasets["valid"]),
            "candidates": int(data.datasets["valid"].negatives.shape[1]), "baseline_rss_mib": baseline}


def phase_catalogue(spec: dict[str, Any]) -> dict[str, Any]:
    """``catalogue_scan`` over ``catalogue_items`` items per (dtype, chunk size), in evaluation batches.

    The catalogue is an LRURec item table of XLong's size (whatever ``--scale``), randomly initialised as the
    model is, and the hidden states are random: the scan's cost depends only on the shapes. Ranks are
    compared with the first (fp32) variant's.
    """
    import torch

    from seqrec.models.next_item.lru import LRURec
    from seqrec.tasks.catalogue import catalogue_scan

    baseline = _rss_mib()
    torch.manual_seed(0)
    model = LRURec(num_items=spec["catalogue_items"], d_model=64, num_layers=1).eval()
    users, batch = spec["catalogue_users"], spec["eval_batch_size"]
    hidden = torch.randn(users, 64)
    target = torch.randint(1, spec["catalogue_items"] + 1, (users,))
    rows, reference = [], None
    with torch.inference_mode():
        for dtype in ("float32", "bfloat16"):
            for chunk in spec["chunks"]:
                runs = []
                for _ in range(spec["repeats"]):
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
                        started = time.perf_counter()
                        ranks = torch.cat([catalogue_scan(model, hidden[i : i + batch], target[i : i + batch], None, chunk)[0]
                                           for i in range(0, users, batch)])
                        runs.append(time.perf_counter() - started)
                if reference is None:
                    reference = ranks
                rows.append({"dtype": dtype, "chunk": chunk, "seconds": runs,
                             "users_per_s": users / statistics.median(runs),
                             "ranks_differ": int((ranks != reference).sum()),
                             "median_rank_ratio": float((ranks.double() / reference.double()).median())})
    return {"users": users, "items": spec["catalogue_items"], "batch": batch, "rows": rows, "baseline_rss_mib": baseline}


# ---------------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------------


def estimate_hours(step_s: float, eval_users_per_s: float) -> float:
    """Hours of one converged run: 60,000 steps and 32 evaluation passes over XLong's 69,691 users."""
    return (STEPS_TO_CONVERGE * step_s + EVAL_PASSES * XLONG_USERS / eval_users_per_s) / 3600


def render(results: dict[str, Any], command: str, machine: str, load_end: str) -> str:
    """The markdown section."""
    from seqrec.bench.repro import estimate_seconds

    corpus, pre = results["corpus"], results["preprocess"]
    mib = 1024 * 1024
    lines = [
        f"Command (every figure below; wall time {results['wall_s']:,.0f} s): `{command}`", "",
        f"Machine: {machine}; load average at the end {load_end}.", "",
        f"Corpus: scale {results['scale']:g} of XLong: {corpus['users']:,} users, {corpus['items']:,} items, "
        f"{corpus['events']:,} events written as XLong's two corpus files ({corpus['bytes'] / mib:,.0f} MiB of text); "
        f"after LRURec's preprocessing {pre['summary']}. "
        + ("A smoke-test scale: preprocessing, cache and RSS grow with the scale; the step time, the 10,000-negative "
           "evaluation rate and the full-catalogue scan do not. " if results["scale"] < 1 else "")
        + "One forked process per phase (peak RSS per phase, MiB).", "",
        "| preprocessing (cold) | seconds | peak RSS MiB |", "|---|---|---|",
    ]
    seconds = pre["seconds"]
    lines.append(f"| all: locate + sha256, parse, preprocess, cache write | {sum(seconds[k] for k in ('prepare', 'parse', 'preprocess', 'save')):,.2f} | {pre['peak_rss_mib']:,.0f} |")
    for key, label in (("prepare", "… locate + sha256 of the corpora (`XLong.prepare`)"), ("parse", "… parse (`XLong.load`)"),
                       ("preprocess", "… dedupe, 5-core, remap (`preprocess`)"), ("save", "… atomic cache write (`Sequences.save`)"),
                       ("cached_load_sequences", "cached: `load_sequences` (fingerprint: sha256 of the corpora, then load)")):
        lines.append(f"| {label} | {seconds[key]:,.2f} | |")
    files = ", ".join(f"{name} {size / mib:,.1f} MiB" for name, size in sorted(pre["cache_files"].items()) if size > mib)
    lines += ["", f"Cache entry: {pre['cache_bytes'] / mib:,.1f} MiB ({files or 'every file < 1 MiB'}).", "",
              "| reading the cached sequences | seconds | peak RSS MiB (+ over the phase's start) |", "|---|---|---|"]
    for key, label in (("load", "`Sequences.load`: read into memory, CRC32s verified, every item touched"),
                       ("mmap", "`np.load(mmap_mode=\"r\")` of the same files, every item touched")):
        row = results["cache_read"][key]
        lines.append(f"| {label} | {row['seconds']:,.2f} | {row['peak_rss_mib']:,.0f} (+{row['peak_rss_mib'] - row['baseline_rss_mib']:,.0f}) |")
    lines += ["", "| config | train step s (sampled loss, K = 100) | labelled positions / step | train peak RSS MiB "
              "| loader samples/s | eval users/s (10,000 negatives) | eval peak RSS MiB | est. hours to converge: this CPU / one H200 (assumed) |",
              "|---|---|---|---|---|---|---|---|"]
    for config, row in results["models"].items():
        train, evaluation = row["train"], row["eval"]
        step = median(train["step_s"])
        users = median(evaluation["users_per_s"])
        cpu = estimate_hours(step, users)
        gpu = estimate_seconds(config, "h200") / 3600
        lines.append(f"| {config} | {format_spread(train['step_s'], 2)} | {median(train['positions']):,.0f} | {train['peak_rss_mib']:,.0f} "
                     f"| {train['loader_samples_per_s']:,.0f} | {format_spread(evaluation['users_per_s'], 1)} "
                     f"| {evaluation['peak_rss_mib']:,.0f} | {cpu:,.1f} / {gpu:,.2f} |")
    first = next(iter(results["models"].values()))["train"]
    lines += ["", f"Training: batch {first['batch']}, L = {first['length']}, the step = forward, "
              + "the task's `loss: sampled_ce` (softmax over the target and 100 uniform negatives per labelled position)"
              + f", backward, clipping at 5, AdamW; median (min–max) of {len(first['step_s'])} steps after warm-up. Evaluation: "
              f"`NextItemTask.ranks` with {next(iter(results['models'].values()))['eval']['candidates']:,} generated negatives, "
              "no history masking, loader included. CPU hours = (60,000 steps × step + 32 passes × 69,691 users / users/s) / "
              "3,600 (30 validation intervals of 2,000 steps: the repro harness's assumption); H200 hours: "
              "`seqrec.bench.repro.estimate_seconds` (assumed rates, not measured)."]
    cat = results.get("catalogue")
    if cat:
        lru = next((row for config, row in results["models"].items() if config.startswith("lru")), None)
        forward = median(lru["eval"]["forward_users_per_s"]) if lru else None
        lines += ["", f"Full-catalogue ranking, the exact alternative (`catalogue_scan` over {cat['items']:,} items"
                  + (", XLong's catalogue whatever the scale" if cat["items"] == XLONG_ITEMS else "")
                  + f", {cat['users']:,} users in batches of {cat['batch']}, no history masking, "
                  "an LRURec item table and random hidden states: the cost depends on the shapes only)"
                  + (f"; LRURec's encoder forward at L = {first['length']} adds {forward:,.1f} users/s (measured above), "
                     "so end to end = 1 / (1/scan + 1/forward):" if forward else ":"), "",
                  "| dtype | chunk (items) | scan users/s | end to end users/s | ranks ≠ fp32 (of users) | median rank ratio to fp32 |",
                  "|---|---|---|---|---|---|"]
        for row in cat["rows"]:
            end_to_end = 1 / (1 / row["users_per_s"] + 1 / forward) if forward else float("nan")
            lines.append(f"| {row['dtype']} | {row['chunk']:,} | {format_spread([cat['users'] / s for s in row['seconds']], 1)} "
                         f"| {end_to_end:,.1f} | {row['ranks_differ']} | {row['median_rank_ratio']:.4f} |")
        lines += ["", "bf16 runs the scoring products under CPU autocast: its scores keep 8 significant bits, so many more "
                  "items tie with the target, and ties count for the target (PROTOCOLS.md §6); the rank changes are "
                  "counted above (random weights here: a trained model's may differ). Full ranking of XLong in fp32 "
                  "stays the exact option."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run every phase and write the section."""
    from seqrec.build import default_threads

    parser = Parser("benchmarks.xlong", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of XLong's users and items (1: full size)")
    parser.add_argument("--configs", default="lru_xlong,sasrec_xlong")
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--eval_batches", type=int, default=4)
    parser.add_argument("--catalogue_users", type=int, default=256)
    parser.add_argument("--catalogue_chunks", default="65536,262144,1048576")
    parser.add_argument("--catalogue_items", type=int, default=XLONG_ITEMS, help="catalogue of the scan (XLong's size)")
    parser.add_argument("--eval_batch_size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max_len", type=int, default=1000)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--eval_negatives", type=int, default=10_000)
    parser.add_argument("--work", type=Path, default=None, help="keep the corpus and cache here (default: a temporary folder)")
    parser.add_argument("--out", type=Path, default=Path("results/BENCHMARKS.md"))
    args = parser.parse_args(argv)
    configs = [c for c in args.configs.split(",") if c]
    if not configs:
        raise SystemExit("--configs names at least one config")
    started = time.perf_counter()
    machine = machine_description(threads=args.threads)
    with tempfile.TemporaryDirectory(prefix="seqrec-xlong-bench-") as tmp:
        work = args.work or Path(tmp)
        raw, cache, runs = work / "raw", work / "cache", work / "runs"
        if cache.exists() and any(cache.iterdir()):
            raise SystemExit(f"{cache} is not empty: the preprocessing is timed cold; give an empty --work")
        print(f"xlong bench: writing the corpus (scale {args.scale:g}) to {raw}", file=sys.stderr)
        corpus = write_corpus(raw, args.scale)
        base = {"raw": str(raw), "cache": str(cache), "runs": str(runs), "threads": args.threads,
                "max_len": args.max_len, "batch_size": args.batch_size, "eval_negatives": args.eval_negatives,
                "steps": args.steps, "warmup": args.warmup, "eval_batches": args.eval_batches,
                "catalogue_users": args.catalogue_users, "catalogue_items": args.catalogue_items,
                "eval_batch_size": args.eval_batch_size, "repeats": args.repeats,
                "chunks": [int(c) for c in args.catalogue_chunks.split(",") if c]}
        results: dict[str, Any] = {"scale": args.scale, "corpus": corpus}
        print("xlong bench: preprocessing", file=sys.stderr)
        results["preprocess"] = run_forked(phase_preprocess, base)
        results["cache_read"] = {mode: run_forked(phase_cache_read, {**base, "entry": results["preprocess"]["entry"], "mode": mode})
                                 for mode in ("load", "mmap")}
        results["models"] = {}
        for config in configs:
            print(f"xlong bench: {config}: training steps, evaluation", file=sys.stderr)
            results["models"][config] = {"train": run_forked(phase_train, {**base, "config": config}),
                                         "eval": run_forked(phase_eval, {**base, "config": config})}
        if args.catalogue_users > 0 and base["chunks"]:
            print("xlong bench: full-catalogue ranking", file=sys.stderr)
            results["catalogue"] = run_forked(phase_catalogue, base)
    results["wall_s"] = time.perf_counter() - started
    load = os.getloadavg()
    command = parser.command()
    section = render(results, command.strip(), machine, f"{load[0]:.2f} (1 min), {load[1]:.2f} (5 min)")
    write_section(args.out, TITLE, section)
    print(section)
    return results


if __name__ == "__main__":
    main()
