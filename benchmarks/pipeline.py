"""Pipeline benchmark: preprocessing (cold and cached), training samples/s, full-ranking users/s, peak RSS.

    python -m benchmarks.pipeline [--config sasrec_ml100k.yaml] [--data_source ml-1m-lrurec | JSON]
        [--repeats 5] [--threads 1] [--max_lens 50,200] [--out results/BENCHMARKS.md]

Everything runs on the config's real data path: its source (or ``--data_source``), its preprocessing,
its datamodule's loaders and its model inside its task. Phases, each in its own forked process:

- ``preprocess``: the cold path of ``load_sequences`` into a fresh cache folder (locate + sha256 of the
  raw files, parse, preprocess, save), plus its parts timed separately (prepare, parse, preprocess, save).
  The raw files themselves must already be downloaded (a download is not what is measured).
- ``cached``: ``Sequences.load`` of that cache, and the whole cache hit of ``load_sequences`` (which
  also fingerprints the raw files, as every run does).
- ``train`` (per max_len): forward + backward + optimiser step (+ the config's gradient clipping) of the
  config's task on batches from the datamodule's shuffled train loader, after ``--warmup`` steps; loader
  time is included (``num_workers`` as configured, 0 by default) and also timed alone.
  tokens/s counts labelled positions (positions with a loss term; padding excluded).
- ``eval`` (per max_len): ``NextItemTask.ranks`` under ``torch.inference_mode`` over the test loader
  (at most ``--eval_batches`` batches per repeat), in users (queries) per second.

Why one forked process per phase: ``ru_maxrss`` is a process-lifetime high-water mark, so in one process
a phase's peak would hide every later, smaller one (and memory freed by an earlier phase stays in the
allocator's heap). A child forked from the parent (which has imported torch, Lightning and seqrec and
holds nothing else) starts with the parent's current RSS as its high-water mark, so each phase reports
its own peak and the increase over that post-import baseline, without paying the imports again
(a fresh interpreter per phase would cost several seconds each on a loaded small machine).

Every figure is the median of ``--repeats`` runs with the spread (min–max); the section written to
``--out`` names the exact command. Threads: torch intra-op threads are set explicitly (``--threads``,
default 1, as on a shared small machine) before any phase runs, and again in every child.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from benchmarks.flags import Parser
from benchmarks.forked import peak_rss_kb, run_forked, single_optimizer, training_step
from seqrec.bench.report import (
    format_spread,
    machine_description,
    median_and_spread,
    rss_cell,
    write_section,
)

log = logging.getLogger("benchmarks.pipeline")

SHARED_ENV = "SEQREC_SHARED_DATA"

# Named data sources (``--data_source NAME``): the source spec and the preprocessing that fits it.
# ml-1m-lrurec: the shared copy of ML-1M exactly as LRURec trains on it (already filtered and in time
# order), so no further filter is applied; "time" keeps the file's order (times are positions).
PRESETS: dict[str, dict[str, Any]] = {
    "ml-1m-lrurec": {
        "source": {
            "class_path": "seqrec.data.sources.sasrec_text.SASRecText",
            "init_args": {"name": "ml-1m", "path": f"${{{SHARED_ENV}}}/lrurec/ml-1m.txt.gz"},
        },
        "preprocessing": {"sort_by": "time"},
        "label": "ml-1m (LRURec copy)",
    },
}


# ---------------------------------------------------------------------------------------------------
# Building the config's objects (children)
# ---------------------------------------------------------------------------------------------------


def _source_and_preprocessing(data_cfg: dict[str, Any]) -> tuple[Any, Any]:
    """A fresh ``Source`` and the ``Preprocessing`` of a resolved data section (as ``seqrec.build`` resolves it)."""
    from seqrec.build import import_class
    from seqrec.data.preprocess import Preprocessing

    init = data_cfg.get("init_args", {})
    if "source" not in init:
        raise ValueError(
            f"the config's data section has no init_args.source (found keys {sorted(init)}); the pipeline "
            "benchmark needs a datamodule built from a Source, such as NextItemDataModule"
        )
    source = init["source"]
    return import_class(source["class_path"])(**(source.get("init_args") or {})), Preprocessing(**(init.get("preprocessing") or {}))


def _datamodule_and_task(spec: dict[str, Any]) -> tuple[Any, Any]:
    """The datamodule (set up) and the task with its model, built by ``seqrec.build`` from the phase's arguments."""
    from seqrec.build import bind, build

    run = build(spec["args"], save_config=False)
    data = run.datamodule
    data.prepare_data()
    data.setup("fit")
    return data, bind(run.task, data)


def _set_threads(threads: int) -> dict[str, int]:
    import torch

    torch.set_num_threads(threads)
    return {"threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads()}


# ---------------------------------------------------------------------------------------------------
# Phases (each runs in a child process; returns a JSON-able dict)
# ---------------------------------------------------------------------------------------------------


def phase_preprocess(spec: dict[str, Any]) -> dict[str, Any]:
    """Cold ``load_sequences`` into fresh cache folders, and its parts (prepare, parse, preprocess, save)."""
    from seqrec.data.preprocess import load_sequences, preprocess

    baseline = peak_rss_kb()
    root = Path(spec["cache_root"])
    cold, prepare, parse, build, save = [], [], [], [], []
    sequences = None
    for r in range(spec["repeats"]):
        source, options = _source_and_preprocessing(spec["data"])
        folder = root / f"cold-{r}"
        started = time.perf_counter()
        sequences = load_sequences(source, options, folder)
        cold.append(time.perf_counter() - started)
        if r:  # keep one cache (the first) for the later phases
            shutil.rmtree(folder)
        # The parts, on another fresh source (its prepare() hashes the raw files again).
        source, options = _source_and_preprocessing(spec["data"])
        t0 = time.perf_counter()
        source.prepare()
        t1 = time.perf_counter()
        interactions = source.load()
        t2 = time.perf_counter()
        built = preprocess(interactions, options)
        t3 = time.perf_counter()
        built.save(root / f"parts-{r}")
        t4 = time.perf_counter()
        shutil.rmtree(root / f"parts-{r}")
        prepare.append(t1 - t0)
        parse.append(t2 - t1)
        build.append(t3 - t2)
        save.append(t4 - t3)
        del interactions, built
    assert sequences is not None
    [cache_dir] = (root / "cold-0" / "sequences").iterdir()
    return {
        "cold_s": cold, "prepare_s": prepare, "parse_s": parse, "preprocess_s": build, "save_s": save,
        "cache_dir": str(cache_dir), "cache_root": str(root / "cold-0"),
        "source_name": source.name, "source": source.describe(), "summary": sequences.summary(),
        "cache_bytes": sum(p.stat().st_size for p in cache_dir.iterdir()),
        "rss_baseline_kb": baseline, "rss_peak_kb": peak_rss_kb(),
    }


def phase_cached(spec: dict[str, Any]) -> dict[str, Any]:
    """``Sequences.load`` of the cache, and the full cache hit of ``load_sequences`` (fingerprint + load)."""
    from seqrec.data.preprocess import load_sequences
    from seqrec.data.sequences import Sequences

    baseline = peak_rss_kb()
    load, hit = [], []
    for _ in range(spec["repeats"]):
        started = time.perf_counter()
        Sequences.load(spec["cache_dir"])
        load.append(time.perf_counter() - started)
        source, options = _source_and_preprocessing(spec["data"])
        started = time.perf_counter()
        load_sequences(source, options, spec["cache_root"])
        hit.append(time.perf_counter() - started)
    return {"load_s": load, "hit_s": hit, "rss_baseline_kb": baseline, "rss_peak_kb": peak_rss_kb()}


def phase_train(spec: dict[str, Any]) -> dict[str, Any]:
    """Samples/s and labelled tokens/s of full training steps on real batches, and of the loader alone."""
    import torch

    threads = _set_threads(spec["threads"])
    baseline = peak_rss_kb()
    torch.manual_seed(spec["seed"])
    data, task = _datamodule_and_task(spec)
    task.train()
    step = training_step(task, single_optimizer(task), spec["trainer"].get("gradient_clip_val"),
                         spec["trainer"].get("gradient_clip_algorithm") == "value")
    loader = data.train_dataloader()
    iterator = iter(loader)

    def next_batch() -> dict[str, torch.Tensor]:
        nonlocal iterator
        try:
            return next(iterator)
        except StopIteration:  # a new epoch (reshuffled)
            iterator = iter(loader)
            return next(iterator)

    with warnings.catch_warnings():
        # training_step logs through self.log, which only warns without a Trainer.
        warnings.filterwarnings("ignore", message=".*self.log.*")
        for _ in range(spec["warmup"]):
            step(next_batch())
        step_s, samples, tokens, loader_s, loader_samples = [], [], [], [], []
        for _ in range(spec["repeats"]):
            started = time.perf_counter()
            count = 0
            for _ in range(spec["train_steps"]):
                count += len(next_batch()["items"])
            loader_s.append(time.perf_counter() - started)
            loader_samples.append(count)
            n_samples = n_tokens = 0
            started = time.perf_counter()
            for _ in range(spec["train_steps"]):
                batch = next_batch()
                step(batch)
                n_samples += len(batch["items"])
                n_tokens += int((batch["labels"] > 0).sum())
            step_s.append(time.perf_counter() - started)
            samples.append(n_samples)
            tokens.append(n_tokens)
    return {
        "samples_per_s": [n / t for n, t in zip(samples, step_s)],
        "tokens_per_s": [n / t for n, t in zip(tokens, step_s)],
        "ms_per_step": [t / spec["train_steps"] * 1e3 for t in step_s],
        "loader_samples_per_s": [n / t for n, t in zip(loader_samples, loader_s)],
        "train_examples": len(data.datasets["train"]), "batch_size": loader.batch_size,
        "model": type(task.net).__name__, "parameters": sum(p.numel() for p in task.parameters()),
        "num_items": data.num_items, "rss_baseline_kb": baseline, "rss_peak_kb": peak_rss_kb(), **threads,
    }


def phase_eval(spec: dict[str, Any]) -> dict[str, Any]:
    """Users/s of ``NextItemTask.ranks`` over the test loader (full ranking when the config has no negatives)."""
    import torch

    threads = _set_threads(spec["threads"])
    baseline = peak_rss_kb()
    torch.manual_seed(spec["seed"])
    data, task = _datamodule_and_task(spec)
    task.eval()
    loader = data.test_dataloader()

    def run(max_batches: int) -> int:
        users = 0
        with torch.inference_mode():
            for i, batch in enumerate(loader):
                if i == max_batches:
                    break
                task.ranks(batch)
                users += len(batch["target"])
        return users

    run(1)  # warm-up
    rates = []
    users = 0
    for _ in range(spec["repeats"]):
        started = time.perf_counter()
        users = run(spec["eval_batches"])
        rates.append(users / (time.perf_counter() - started))
    return {
        "users_per_s": rates, "users_per_repeat": users, "test_queries": len(data.datasets["test"]),
        "full_ranking": getattr(data, "eval_negatives", None) is None, "eval_batch_size": loader.batch_size,
        "rss_baseline_kb": baseline, "rss_peak_kb": peak_rss_kb(), **threads,
    }


PHASES = {"preprocess": phase_preprocess, "cached": phase_cached, "train": phase_train, "eval": phase_eval}


def run_phase(spec: dict[str, Any]) -> dict[str, Any]:
    """Run the phase ``spec["phase"]`` in a forked child (``benchmarks.forked``: its own peak RSS)."""
    return run_forked(PHASES[spec["phase"]], {**spec, "label": f"{spec['phase']}, max_len {spec.get('max_len', '')}"})


# ---------------------------------------------------------------------------------------------------
# Orchestration and report (parent)
# ---------------------------------------------------------------------------------------------------


def _expand(value: Any) -> Any:
    """Expand ``$VARS`` in the strings of a spec; a missing $SEQREC_SHARED_DATA is a clear error."""
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v) for v in value]
    if isinstance(value, str) and "$" in value:
        if SHARED_ENV in value and not os.environ.get(SHARED_ENV):
            raise ValueError(
                f"{value!r} needs ${SHARED_ENV}: set it to a folder holding lrurec/ml-1m.txt.gz (LRURec's ML-1M file), "
                "or pass --data_source as a JSON source spec with a real path"
            )
        return os.path.expandvars(value)
    return value


def data_source_overrides(value: str | None, preprocessing: str | None) -> tuple[list[str], str | None]:
    """(dotted CLI overrides of the data section, label) from ``--data_source`` (preset or JSON) and ``--preprocessing``.

    A preset or JSON source replaces the config's source; ``--preprocessing`` (or a preset's) replaces the
    config's preprocessing as a whole (unset options take ``Preprocessing``'s defaults).
    """
    from dataclasses import asdict

    from seqrec.data.preprocess import Preprocessing

    source, options, label = None, None, None
    if value:
        if value in PRESETS:
            preset = PRESETS[value]
            source, options, label = preset["source"], preset["preprocessing"], preset["label"]
        else:
            try:
                source = json.loads(value)
            except json.JSONDecodeError:
                source = None
            if not isinstance(source, dict) or "class_path" not in source:
                raise ValueError(
                    f"--data_source must be a preset ({', '.join(sorted(PRESETS))}) or a JSON source spec "
                    f'like {{"class_path": "seqrec.data.sources.sasrec_text.SASRecText", "init_args": '
                    f'{{"name": "ml-1m", "path": "..."}}}}; got {value!r}'
                )
    if preprocessing is not None:
        try:
            options = json.loads(preprocessing)
        except json.JSONDecodeError as error:
            raise ValueError(f"--preprocessing must be a JSON object of Preprocessing options, got {preprocessing!r}") from error
    overrides: list[str] = []
    if source is not None:
        overrides += ["--data.init_args.source", json.dumps(_expand(source))]
    if options is not None:
        overrides += ["--data.init_args.preprocessing", json.dumps({**asdict(Preprocessing()), **options})]
    return overrides, label


def render(
    args: argparse.Namespace,
    command: str,
    pre: dict[str, Any],
    cached: dict[str, Any],
    runs: dict[int, tuple[dict[str, Any], dict[str, Any]]],
    wall_s: float,
    machine: str,
) -> str:
    """The section body: setup, command, preprocessing table, training/evaluation table, notes."""
    first_train = next(iter(runs.values()))[0]
    first_eval = next(iter(runs.values()))[1]
    ms = lambda key, src=pre: format_spread(src[key], 1, 1e3)  # noqa: E731
    lines = [
        f"Command (every figure below; wall time {wall_s:.0f} s): `{command}`",
        "",
        f"Machine: {machine}.",
        "",
        f"Data: {pre['source']}: {pre['summary']}; sequence cache {pre['cache_bytes'] / 2**20:,.1f} MiB. "
        f"Model: {first_train['model']} ({first_train['parameters']:,} parameters) in its task, fp32, "
        f"train batch {first_train['batch_size']}, eval batch {first_eval['eval_batch_size']}, "
        f"{'full ranking' if first_eval['full_ranking'] else 'sampled candidates'}.",
        "",
        f"Median of {args.repeats} runs (min–max). Peak RSS: per phase, each phase in its own forked process, in MiB "
        "(+ increase over the post-import RSS it starts from). Other jobs share the machine: compare medians.",
        "",
        "| preprocessing | ms | peak RSS MiB |",
        "|---|---|---|",
        f"| cold: `load_sequences` into an empty cache (locate + sha256, parse, preprocess, save) | {ms('cold_s')} | {rss_cell(pre)} |",
        f"| … of which locate + sha256 of the raw files (`source.prepare`) | {ms('prepare_s')} | |",
        f"| … of which parse (`source.load`) | {ms('parse_s')} | |",
        f"| … of which filters, ordering, remapping (`preprocess`) | {ms('preprocess_s')} | |",
        f"| … of which atomic write of the cache (`Sequences.save`) | {ms('save_s')} | |",
        f"| cached: `Sequences.load` | {ms('load_s', cached)} | {rss_cell(cached)} |",
        f"| cached: full cache hit of `load_sequences` (fingerprint + load) | {ms('hit_s', cached)} | |",
        "",
        "| max_len | train examples | train samples/s | train tokens/s | ms/step | loader alone, samples/s "
        "| train peak RSS MiB | eval users/s | eval peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for max_len, (train, ev) in runs.items():
        lines.append(
            f"| {max_len} | {train['train_examples']:,} | {format_spread(train['samples_per_s'])} | "
            f"{format_spread(train['tokens_per_s'])} | {format_spread(train['ms_per_step'], 1)} | "
            f"{format_spread(train['loader_samples_per_s'])} | {rss_cell(train)} | "
            f"{format_spread(ev['users_per_s'])} | {rss_cell(ev)} |"
        )
    lines += [
        "",
        f"Training: {args.train_steps} steps per run after {args.warmup} warm-up steps; a step = loader batch + "
        "`training_step` (forward, loss) + backward + gradient clipping as configured + optimiser step; "
        "tokens = labelled positions. Evaluation: `NextItemTask.ranks` under `torch.inference_mode` on "
        f"{first_eval['users_per_repeat']:,} of {first_eval['test_queries']:,} test users per run "
        f"(at most {args.eval_batches} batches), loader included, after one warm-up batch. "
        "Cold preprocessing reads raw files already in the cache (no download) from a warm OS page cache.",
    ]
    return "\n".join(lines) + "\n"


def _parse_lengths(text: str | None, config_len: int | None) -> list[int]:
    lengths = [int(v) for v in text.split(",") if v.strip()] if text else []
    if config_len is not None:
        lengths.insert(0, int(config_len))
    return sorted(dict.fromkeys(lengths))


def main(argv: list[str] | None = None) -> str:
    """Run every phase, print the section and write it into ``--out``; returns the section body."""
    parser = Parser("benchmarks.pipeline", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="sasrec_ml100k.yaml", help="config file or shipped config name")
    parser.add_argument("--data_source", default=None, help=f"preset ({', '.join(PRESETS)}) or JSON source spec")
    parser.add_argument("--preprocessing", default=None, help="JSON Preprocessing options replacing the config's")
    parser.add_argument("--repeats", type=int, default=5, help="runs per figure (median and min–max reported)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads in every phase")
    parser.add_argument("--max_lens", default="50,200", help="max_len values besides the config's ('' for only the config's)")
    parser.add_argument("--train_steps", type=int, default=8, help="timed training steps per run")
    parser.add_argument("--warmup", type=int, default=2, help="untimed training steps before timing")
    parser.add_argument("--eval_batches", type=int, default=8, help="test batches per evaluation run (at most)")
    parser.add_argument("--out", type=Path, default=None, help="markdown file to write the section into")
    parser.add_argument("--title", default=None, help="section title (default: 'Pipeline: <config> on <data>')")
    args = parser.parse_args(argv)

    for name in ("repeats", "threads", "train_steps", "eval_batches"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    from seqrec.build import resolved_dict

    started = time.perf_counter()
    try:
        overrides, label = data_source_overrides(args.data_source, args.preprocessing)
        build_args = ["--config", args.config, "--threads", str(args.threads), *overrides]
        config = resolved_dict(build_args)
    except (ValueError, FileNotFoundError) as error:
        raise SystemExit(f"error: {error}") from error
    data_cfg = config["data"]
    lengths = _parse_lengths(args.max_lens, data_cfg["init_args"].get("max_len"))
    config_name = Path(args.config).name

    # Import once here: forked phases inherit the modules (and start their RSS from this baseline).
    import lightning  # noqa: F401
    import torch

    import seqrec.datamodules.next_item  # noqa: F401
    import seqrec.tasks.next_item  # noqa: F401

    torch.set_num_threads(args.threads)
    machine = machine_description(torch.get_num_threads(), torch.get_num_interop_threads())
    root = Path(tempfile.mkdtemp(prefix="seqrec-bench-"))
    base = {
        "repeats": args.repeats, "threads": args.threads, "seed": int(config.get("seed_everything") or 42),
        "trainer": config.get("trainer") or {}, "train_steps": args.train_steps,
        "warmup": args.warmup, "eval_batches": args.eval_batches,
    }
    try:
        pre = run_phase({**base, "phase": "preprocess", "data": data_cfg, "cache_root": str(root)})
        cached = run_phase({**base, "phase": "cached", "data": data_cfg, "cache_dir": pre["cache_dir"],
                            "cache_root": pre["cache_root"]})
        runs = {}
        for max_len in lengths:
            args_len = [*build_args, "--data.max_len", str(max_len), "--data.init_args.cache_dir", pre["cache_root"],
                        "--trainer.logger", "false"]
            train = run_phase({**base, "phase": "train", "args": args_len})
            ev = run_phase({**base, "phase": "eval", "args": args_len})
            runs[max_len] = (train, ev)
            print(f"max_len {max_len}: train {median_and_spread(train['samples_per_s'])[0]:,.0f} samples/s, "
                  f"eval {median_and_spread(ev['users_per_s'])[0]:,.0f} users/s", file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    command = parser.command()
    body = render(args, command, pre, cached, runs, time.perf_counter() - started, machine)
    title = args.title or f"Pipeline: {config_name} on {label or pre['source_name']}"
    print(f"## {title}\n\n{body}")
    if args.out is not None:
        write_section(args.out, title, body)
        print(f"wrote section '{title}' to {args.out}", file=sys.stderr)
    return body


if __name__ == "__main__":
    main()
