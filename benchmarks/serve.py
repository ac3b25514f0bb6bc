"""``python -m benchmarks.serve``: serving measured end to end (results/SERVING.md and its PNG).

Two parts, each figure printed with the command behind it:

1. **Replay over HTTP** (``python -m seqrec serve`` in a subprocess, loopback): each ML-1M user's history before
   its test event is loaded in one request (``items``), then the test events are replayed in time order
   (SASRec-format ML-1M has no timestamps: there the users come in a seeded random order) at 1, 4 and 16
   concurrent clients, each level on its own users.
   Per event a client asks for the user's top-10 (``exclude_seen=window``, as the evaluation masks) and then
   posts the event: p50/p99 latency of each request and of the pair, events/s, the served model's next-event
   HR@10 (the evaluation's test HR@10 where the served state equals it), the store's bytes per user (SQLite
   file after shutdown, and the state blobs alone) and the server's peak RSS. Bounded by ``--events`` per level
   and ``--seconds`` per level.
2. **Per-event cost vs history length** (in process: the same ``Serving`` the app calls, SQLite store with the
   same durability): a user is loaded with L events, then ``--sweep_events`` more events are timed, each an
   update (state advanced, one transaction committed) and a top-10 over the catalogue. LRURec (stored O(1)
   state, the trained weights), SASRec (recompute over the history) and the CTR transformer (its KV cache, and
   a compressed KV cache at each ``--budgets`` fraction); the attention models are rebuilt with the trained
   runs' hyperparameters and ``max_len`` >= the longest L (random weights: cost does not depend on them). Goal:
   LRURec's event latency at L=1,000 <= 1.2x at L=50.
3. **Hostile requests** (``benchmarks.serve_limits``): a server on the first served model with its default limits;
   ``/health`` latency while a request of the largest accepted size is in flight (goal: p99 within 2x the idle
   p99) and the peak RSS that request adds (goal: under 10 MB), for ``--hostile_seconds`` per request shape; and
   a control row, /health beside a CPU-bound process and no request, for what the machine alone does.

The models are short fits on real ML-1M (``--epochs``, default 1) trained into ``--runs_dir`` when not there.
Smoke run (seconds to minutes): ``--events 50 --seconds 20 --sweep_events 10``; the full measurement is the
default sizes on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.flags import Parser
from benchmarks.serve_limits import (
    HostileResult,
    measure_control,
    measure_shape,
    percentile_ms,
    proc_status_bytes,
    report_lines,
)
from benchmarks.serve_limits import shapes as hostile_shapes
from seqrec.atomic import write_text
from seqrec.bench.report import load_average
from seqrec.runs import CONFIG, TEST_METRICS, newest_version
from seqrec.serve.limits import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_ID_LENGTH

log = logging.getLogger("benchmarks.serve")
SHARED_ENV = "SEQREC_SHARED_DATA"
MODELS = {"lru": "lru_ml1m", "sasrec": "sasrec_ml1m", "ctr": "ctr_transformer_ml1m"}
NO_FILTERS = {"min_rating": None, "dedupe_consecutive": False, "min_item_interactions": 0,
              "min_user_interactions": 0, "kcore": "one_pass", "sort_by": "time"}


# --- the runs ------------------------------------------------------------------------------------------------
def data_overrides(model: str, data: Path) -> list[str]:
    """Config overrides that read LRURec's ML-1M file (SASRec format, already filtered)."""
    if model == "ctr":
        return ["--data.init_args.source.init_args.path", str(data)]
    source = {"class_path": "seqrec.data.sources.sasrec_text.SASRecText", "init_args": {"name": "ml-1m", "path": str(data)}}
    return ["--data.init_args.source", json.dumps(source), "--data.init_args.preprocessing", json.dumps(NO_FILTERS)]


def find_run(runs_dir: Path, model: str) -> Path | None:
    """The newest trained version of the model's experiment under runs_dir."""
    return newest_version(runs_dir / MODELS[model])


def shown(command: list[str]) -> str:
    """A command as the report shows it: ``python`` for this interpreter."""
    return shlex.join(["python" if command[0] == sys.executable else command[0], *command[1:]])


def train_command(model: str, data: Path, runs_dir: Path, epochs: int, threads: int) -> list[str]:
    """The short fit a served model comes from."""
    return [sys.executable, "-m", "seqrec", "fit", "--config", f"{MODELS[model]}.yaml", *data_overrides(model, data),
            "--trainer.max_epochs", str(epochs), "--trainer.logger.init_args.save_dir", str(runs_dir),
            "--trainer.enable_progress_bar", "false", "--threads", str(threads)]


def ensure_run(model: str, data: Path, runs_dir: Path, epochs: int, threads: int) -> tuple[Path, list[str]]:
    """(run directory, the command that trained it); trains when runs_dir has none."""
    command = train_command(model, data, runs_dir, epochs, threads)
    found = find_run(runs_dir, model)
    if found is None:
        log.info("training %s: %s", model, shlex.join(command))
        subprocess.run(command, check=True)
        found = find_run(runs_dir, model)
        if found is None:
            raise FileNotFoundError(f"training {model} left no checkpoint under {runs_dir / MODELS[model]}")
    return found, command


# --- the server ----------------------------------------------------------------------------------------------
def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_rss_bytes(pid: int) -> int | None:
    """The process's peak resident set (Linux ``VmHWM``), or None where /proc has none."""
    return proc_status_bytes(pid, "VmHWM")


class Server:
    """``python -m seqrec serve`` on a free loopback port; ``start`` waits for /health."""

    def __init__(self, run: Path, store: Path, extra: list[str], threads: int, sync: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [sys.executable, "-m", "seqrec", "serve", str(run), "--port", str(self.port), "--store", str(store),
                        "--reset_store", "--threads", str(threads), "--sync", sync, "--log_level", "warning", *extra]
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 300.0) -> Server:
        """Start and wait for /health (RuntimeError with the server's stderr when it exits)."""
        import httpx

        self.process = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited ({self.process.returncode}): {self.process.stderr.read()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.2)
        self.process.kill()
        raise RuntimeError(f"the server did not answer within {timeout} s")

    def stop(self) -> int | None:
        """SIGTERM (graceful: the store is flushed); the peak RSS read just before."""
        assert self.process is not None
        rss = peak_rss_bytes(self.process.pid)
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(120)
        except subprocess.TimeoutExpired:
            self.process.kill()
        return rss


# --- part 1: the replay --------------------------------------------------------------------------------------
@dataclass
class LevelResult:
    """One concurrency level of one served model."""

    model: str
    clients: int
    events: int
    seconds: float
    events_per_s: float
    hr10: float
    topk_p50_ms: float
    topk_p99_ms: float
    update_p50_ms: float
    update_p99_ms: float
    event_p50_ms: float
    event_p99_ms: float


@dataclass
class ServedResult:
    """A served model's replay: its levels and its store."""

    model: str
    adapter: str
    command: str
    train_command: str
    load_seconds: float
    users: int
    mean_events_per_user: float
    file_bytes_per_user: float
    blob_bytes_per_user: float
    declared_state_bytes: float | None
    offline_metric: str
    peak_rss_mb: float | None
    levels: list[LevelResult] = field(default_factory=list)


def replay_events(sequences: Any, per_user: int, seed: int = 0) -> tuple[list[tuple[int, int, int]], bool]:
    """(user row, offset of the event, event number) of the last ``per_user`` events of each user in time order,
    and whether the data has real times. Without timestamps (``times`` is each event's position in its user's
    history, as SASRec-format files load) the users come in a seeded random order, so that every slice of the
    replay is a sample of all users rather than the shortest histories first."""
    lengths = np.diff(sequences.indptr)
    positions = np.arange(len(sequences.items)) - np.repeat(sequences.indptr[:-1], lengths)
    timed = not np.array_equal(np.asarray(sequences.times, dtype=np.float64), positions.astype(np.float64))
    rows = np.flatnonzero(lengths > per_user)
    order = {int(r): i for i, r in enumerate(np.random.default_rng(seed).permutation(rows))}
    out = []
    for k in range(per_user, 0, -1):
        offsets = sequences.indptr[rows + 1] - k
        out += [(int(r), int(o), int(o - sequences.indptr[r])) for r, o in zip(rows, offsets)]
    if timed:
        out.sort(key=lambda e: (float(sequences.times[e[1]]), e[0], e[2]))
    else:
        out.sort(key=lambda e: (order[e[0]], e[2]))
    return out, timed


def run_level(url: str, clients: int, events: list[tuple[str, Any, int]], seconds: float) -> tuple[dict, float]:
    """Replay events (user, raw item, event number) with ``clients`` threads, a user's events in one thread, in order."""
    import httpx

    queues: list[list[tuple[str, Any, int]]] = [[] for _ in range(clients)]
    owner: dict[str, int] = {}
    for event in events:
        queues[owner.setdefault(event[0], len(owner) % clients)].append(event)
    times: dict[str, list[float]] = {"topk": [], "update": [], "event": []}
    hits: list[bool] = []
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds
    errors: list[str] = []

    def client(queue: list[tuple[str, Any, int]]) -> None:
        with httpx.Client(base_url=url, timeout=120.0) as http:
            for user, item, seq in queue:
                if time.perf_counter() > deadline:
                    return
                t0 = time.perf_counter()
                top = http.get(f"/v1/users/{user}/topk", params={"k": 10, "exclude_seen": "window"})
                t1 = time.perf_counter()
                ack = http.post(f"/v1/users/{user}/events", json={"item": item, "seq": seq})
                t2 = time.perf_counter()
                if top.status_code != 200 or ack.status_code != 200:
                    errors.append(f"{top.status_code} {top.text[:200]} / {ack.status_code} {ack.text[:200]}")
                    return
                hit = any(r["item"] == item for r in top.json()["items"][:10])
                with lock:
                    times["topk"].append(t1 - t0)
                    times["update"].append(t2 - t1)
                    times["event"].append(t2 - t0)
                    hits.append(hit)

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(q,)) for q in queues]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"replay failed: {errors[0]}")
    return {"times": times, "hits": hits}, wall


def load_histories(url: str, loads: list[tuple[str, list[Any]]], workers: int = 4) -> float:
    """Each user's history before its replayed events in one request; seconds taken."""
    import httpx

    chunks = [loads[i::workers] for i in range(workers)]

    def work(chunk: list[tuple[str, list[Any]]]) -> None:
        with httpx.Client(base_url=url, timeout=600.0) as http:
            for user, items in chunk:
                if items:
                    response = http.post(f"/v1/users/{user}/events", json={"items": items, "seq": 0})
                    response.raise_for_status()

    start = time.perf_counter()
    threads = [threading.Thread(target=work, args=(c,)) for c in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def offline_metric(run_dir: Path) -> str:
    """The run's own test figure from test_metrics.json: recall@10 (= HR@10, one target) or, for CTR, AUC."""
    path = run_dir / TEST_METRICS
    if not path.is_file():
        return "–"
    metrics = json.loads(path.read_text())
    for key in ("test/recall@10", "test/hr@10", "test/auc"):
        if key in metrics:
            return f"{key.split('/')[1]} {float(metrics[key]):.4f}"
    return "–"


def declared_bytes(run_dir: Path) -> float | None:
    """The run's ``cost/state_bytes_per_user`` (what the memory callback counted offline)."""
    path = run_dir / TEST_METRICS
    if not path.is_file():
        return None
    value = json.loads(path.read_text()).get("cost/state_bytes_per_user")
    return None if value is None else float(value)


def replay_model(name: str, run_dir: Path, train_cmd: list[str], extra: list[str], args: argparse.Namespace,
                 work: Path) -> ServedResult:
    """Part 1 for one served model (module docstring)."""
    import seqrec
    from seqrec.serve.store import SQLiteStore

    run = seqrec.load_run(run_dir, threads=args.threads)
    sequences = run.sequences
    events, _ = replay_events(sequences, 1)
    levels = [int(c) for c in args.clients.split(",")]
    slices, first = [], 0
    for _ in levels:
        slices.append(events[first:first + args.events])
        first += args.events
    used = [e for s in slices for e in s]
    raw_users = sequences.raw_user_ids()
    loads = [(str(raw_users[r]), sequences.raw_item_ids(sequences.items[sequences.indptr[r]:o]).tolist()) for r, o, _ in used]
    store = work / f"state-{name}.sqlite"
    server = Server(run_dir, store, extra, args.server_threads, args.sync).start()
    result = ServedResult(name, "", shown(server.command), shown(train_cmd), 0.0, 0, 0.0, 0.0, 0.0,
                          declared_bytes(run_dir), offline_metric(run_dir), None)
    try:
        import httpx

        result.adapter = httpx.get(f"{server.url}/v1/info").json()["adapter"]
        result.load_seconds = load_histories(server.url, loads)
        for clients, chosen in zip(levels, slices):
            replay = [(str(raw_users[r]), sequences.raw_item_ids(np.array([sequences.items[o]]))[0].item(), n) for r, o, n in chosen]
            measured, wall = run_level(server.url, clients, replay, args.seconds)
            t, hits = measured["times"], measured["hits"]
            result.levels.append(LevelResult(
                name, clients, len(hits), round(wall, 3), len(hits) / wall if wall else 0.0,
                float(np.mean(hits)) if hits else float("nan"),
                percentile_ms(t["topk"], 50), percentile_ms(t["topk"], 99), percentile_ms(t["update"], 50),
                percentile_ms(t["update"], 99), percentile_ms(t["event"], 50), percentile_ms(t["event"], 99)))
            log.info("%s x%d: %s", name, clients, result.levels[-1])
    finally:
        rss = server.stop()
    result.peak_rss_mb = None if rss is None else rss / 2**20
    stats = SQLiteStore(store, check=False)
    figures = stats.stats()
    stats.close()
    users = max(int(figures["users"]), 1)
    result.users = int(figures["users"])
    result.mean_events_per_user = figures["events"] / users
    result.file_bytes_per_user = figures["file_bytes"] / users
    result.blob_bytes_per_user = figures["state_blob_bytes"] / users
    return result


# --- part 3: hostile requests --------------------------------------------------------------------------------
def hostile_requests(run_dir: Path, args: argparse.Namespace, work: Path) -> list[HostileResult]:
    """Part 3 (``benchmarks.serve_limits``): per request shape, a fresh server of ``run_dir`` with the limits."""
    out = []
    limits = ["--max_body_bytes", str(args.max_body_bytes), "--max_id_length", str(args.max_id_length)]
    for label, body, ids in hostile_shapes(args.max_body_bytes, args.max_id_length):
        server = Server(run_dir, work / "state-hostile.sqlite", limits, args.server_threads, args.sync).start()
        try:
            assert server.process is not None
            out.append(measure_shape(server.url, server.process.pid, label, body, ids, args.hostile_seconds))
            log.info("hostile: %s", out[-1])
        finally:
            server.stop()
    server = Server(run_dir, work / "state-hostile.sqlite", limits, args.server_threads, args.sync).start()
    try:
        out.append(measure_control(server.url, args.hostile_seconds))
        log.info("hostile: %s", out[-1])
    finally:
        server.stop()
    return out


# --- part 2: per-event cost vs history length ---------------------------------------------------------------
@dataclass
class SweepResult:
    """One (model, history length) point."""

    model: str
    adapter: str
    length: int
    update_p50_ms: float
    update_p99_ms: float
    topk_p50_ms: float
    topk_p99_ms: float
    event_p50_ms: float
    event_p99_ms: float
    state_bytes: int
    load_seconds: float
    memory_update_p50_ms: float = float("nan")
    memory_event_p50_ms: float = float("nan")


def rebuilt(run: Any, max_len: int) -> Any:
    """The run's model class and hyperparameters with ``max_len`` raised (random weights)."""
    import importlib

    import yaml

    config = yaml.safe_load((run.run_dir / CONFIG).read_text())
    spec = config["model"]["init_args"]["net"]
    module, _, name = spec["class_path"].rpartition(".")
    kwargs = dict(spec.get("init_args") or {})
    kwargs.update(num_items=int(run.sequences.num_items), max_len=max_len)
    return getattr(importlib.import_module(module), name)(**kwargs).eval()


def sweep_models(runs: dict[str, Any], max_len: int, budgets: list[float], method: str) -> list[tuple[str, Any, int | None]]:
    """(label, model, max_len) of part 2."""
    from seqrec.compress import build

    out: list[tuple[str, Any, int | None]] = []
    if "lru" in runs:
        out.append(("LRURec (stored state)", runs["lru"].model.eval(), max_len))
    if "sasrec" in runs:
        out.append(("SASRec (recompute)", rebuilt(runs["sasrec"], max_len), max_len))
    if "ctr" in runs:
        transformer = rebuilt(runs["ctr"], max_len)
        out.append(("CTR transformer (KV cache)", transformer, max_len))
        for budget in budgets:
            out.append((f"CTR transformer + {method}@{budget:.0%}", build(method, transformer, budget).eval(), max_len))
    return out


def time_events(serving: Any, user: str, items: list[int]) -> dict[str, list[float]]:
    """Seconds of each (update, top-10) pair for ``items`` fed one at a time."""
    from seqrec.serve.service import Event

    times: dict[str, list[float]] = {"update": [], "topk": [], "event": []}
    for item in items:
        t0 = time.perf_counter()
        serving.update([Event(user, item)])
        t1 = time.perf_counter()
        serving.topk([user], 10)
        t2 = time.perf_counter()
        times["update"].append(t1 - t0)
        times["topk"].append(t2 - t1)
        times["event"].append(t2 - t0)
    return times


def sweep(models: list[tuple[str, Any, int | None]], lengths: list[int], history: np.ndarray, events: int,
          sync: str, work: Path) -> list[SweepResult]:
    """Part 2 (module docstring): per model and length, load L events, then time ``events`` update + top-10 pairs,
    once with the durable SQLite store and once with a memory store (the model's and the cache's own cost)."""
    from seqrec.serve.service import Event, serve_model
    from seqrec.serve.store import MemoryStore, SQLiteStore

    out = []
    for label, model, max_len in models:
        for length in lengths:
            items = [int(history[i % len(history)]) for i in range(length + 3 + 2 * events)]
            measured = {}
            for kind in ("memory", "sqlite"):
                path = work / f"sweep-{len(out)}.sqlite"
                store = MemoryStore() if kind == "memory" else SQLiteStore(path, sync=sync)
                serving = serve_model(model, store, max_len)
                user = f"L{length}"
                start = time.perf_counter()
                serving.update([Event(user, item) for item in items[:length]])
                load = time.perf_counter() - start
                serving.store.flush()  # the load's WAL pages checkpointed: timed commits start from a steady state
                state_bytes = int(serving.user_info(user)["state_bytes"])  # the state of exactly L events
                time_events(serving, user, items[length:length + 3])  # warm-up
                offset = length + 3 + (events if kind == "sqlite" else 0)
                measured[kind] = time_events(serving, user, items[offset:offset + events])
                serving.close()
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)
            t, m = measured["sqlite"], measured["memory"]
            out.append(SweepResult(label, serving.adapter.name, length,
                                   percentile_ms(t["update"], 50), percentile_ms(t["update"], 99),
                                   percentile_ms(t["topk"], 50), percentile_ms(t["topk"], 99),
                                   percentile_ms(t["event"], 50), percentile_ms(t["event"], 99),
                                   state_bytes, round(load, 3),
                                   percentile_ms(m["update"], 50), percentile_ms(m["event"], 50)))
            log.info("sweep %s", out[-1])
    return out


# --- the report ------------------------------------------------------------------------------------------------
def plot(results: list[SweepResult], path: Path, note: str = "") -> bool:
    """Latency vs history length per model (event = update + top-10, and the update alone); False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: skipping %s", path)
        return False
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, title in ((axes[0], "event_p50_ms", "event = update + top-10 (p50)"), (axes[1], "update_p50_ms", "update alone (p50)")):
        for label in dict.fromkeys(r.model for r in results):
            rows = [r for r in results if r.model == label]
            ax.plot([r.length for r in rows], [getattr(r, key) for r in rows], marker="o", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("history length L (events)")
        ax.set_ylabel("ms per event")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"seqrec serve: per-event latency vs history length (in process, SQLite store){note}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def fmt(value: float | None, digits: int = 2) -> str:
    """A table cell."""
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "–"
    return f"{value:,.{digits}f}"


def report(served: list[ServedResult], swept: list[SweepResult], args: argparse.Namespace, command: str, png: Path | None,
           seconds: float) -> str:
    """results/SERVING.md."""
    smoke = args.events < 1000 or args.sweep_events < 50
    lines = ["# Serving: latency, throughput and state (`python -m benchmarks.serve`)", ""]
    if smoke:
        lines += [f"> **Smoke-size run** ({args.events} events per level, {args.sweep_events} timed events per length, "
                  f"{args.epochs}-epoch models) on a shared {os.cpu_count()}-core machine with the client on the same "
                  "cores: the numbers show the shape, not the final figures. The owner reruns it at full size on a "
                  "quiet machine (the command below without the size flags).", ""]
    lines += [f"Command: `{command}`  ", f"Machine: {platform.platform()}, {os.cpu_count()} cores, Python "
              f"{platform.python_version()}; total {seconds:.0f} s. Store: SQLite, `--sync {args.sync}` "
              f"({'fsync per acknowledged update' if args.sync == 'full' else 'no fsync: survives a killed server, not a power cut'}).",
              "", "Served models: short fits on real ML-1M (LRURec's `ml-1m.txt.gz`, 6,040 users, 3,416 items), "
              f"{args.epochs} epoch(s) each; the command behind each is in the table.", ""]
    if swept:
        lines += ["## Per-event cost vs history length", "",
                  "In process (the `Serving` object the HTTP app calls; no HTTP), SQLite store. Event = update (state "
                  "advanced, one transaction committed) + top-10 over the 3,416-item catalogue (`exclude_seen=all`); "
                  "`no store`: the same events with a memory store (the model, the cache and the ranking alone). "
                  "LRURec: the trained weights; SASRec and the CTR transformer: the trained runs' hyperparameters with "
                  f"`max_len` {max(int(x) for x in args.lengths.split(',')) + args.sweep_events + 3} (random weights; "
                  "cost does not depend on them). `state` is the stored blob (the adapter's tensors; SASRec keeps none: "
                  "its state is the item history, 4 bytes an event in the `seen` table).", "",
                  f"Command: `{command}` (part 2)", "",
                  "| model | adapter | L | update p50 / p99 ms | top-10 p50 / p99 ms | event p50 / p99 ms | "
                  "no store: update / event p50 ms | state bytes | load L events s |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in swept:
            lines.append(f"| {r.model} | {r.adapter} | {r.length:,} | {fmt(r.update_p50_ms)} / {fmt(r.update_p99_ms)} | "
                         f"{fmt(r.topk_p50_ms)} / {fmt(r.topk_p99_ms)} | {fmt(r.event_p50_ms)} / {fmt(r.event_p99_ms)} | "
                         f"{fmt(r.memory_update_p50_ms, 3)} / {fmt(r.memory_event_p50_ms, 3)} | {r.state_bytes:,} | "
                         f"{fmt(r.load_seconds)} |")
        lru = [r for r in swept if r.model.startswith("LRURec")]
        if len(lru) >= 2:
            short, long = min(lru, key=lambda r: r.length), max(lru, key=lambda r: r.length)
            ratio = long.event_p50_ms / short.event_p50_ms
            verdict = "met" if ratio <= 1.2 else "NOT met"
            compute = long.memory_event_p50_ms / short.memory_event_p50_ms
            lines += ["", f"**Goal (LRURec event latency at L={long.length:,} <= 1.2x at L={short.length:,}): {verdict}** "
                      f"— {fmt(long.event_p50_ms, 3)} ms vs {fmt(short.event_p50_ms, 3)} ms p50 with the SQLite store "
                      f"(x{ratio:.2f}; update alone x{long.update_p50_ms / short.update_p50_ms:.2f}); without the store's "
                      f"commit (the model, the cache and the top-10) x{compute:.2f}. The SQLite commit (an fsync with "
                      "`--sync full`) costs the same at every length; its variance is the disk's."]
        if png is not None:
            lines += ["", f"![latency vs history length]({png.name})", ""]
        lines += store_size_table(swept, served)
    if served:
        lines += ["## Replay of ML-1M's test events over HTTP", "",
                  "Each user's history before its test event loaded in one request, then the test events replayed in "
                  "time order (ML-1M's SASRec-format file has no timestamps, so the users come in a seeded random "
                  "order) through the API on loopback, each level on its own users; per event the client asks for "
                  "the top-10 (`exclude_seen=window`, as the evaluation masks) and posts the event. HR@10 is the "
                  "served model's next-event hit rate on those events; `offline recall@10` is the run's own test "
                  "figure over all users (recall@10 = HR@10 with one target; the CTR runs report AUC on 1 positive + 4 "
                  "negatives). LRURec's served state reads every past event, the evaluation the newest 200, so the two "
                  "may differ slightly; SASRec's equals it per event.", "",
                  "| model | adapter | clients | events | events/s | HR@10 | top-10 p50 / p99 ms | update p50 / p99 ms | event p50 / p99 ms |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for s in served:
            for r in s.levels:
                lines.append(f"| {s.model} | {s.adapter} | {r.clients} | {r.events:,} | {fmt(r.events_per_s, 1)} | {fmt(r.hr10, 4)} | "
                             f"{fmt(r.topk_p50_ms)} / {fmt(r.topk_p99_ms)} | {fmt(r.update_p50_ms)} / {fmt(r.update_p99_ms)} | "
                             f"{fmt(r.event_p50_ms)} / {fmt(r.event_p99_ms)} |")
        lines += ["", "| model | users stored | events/user | store file bytes/user | state blob bytes/user | "
                  "`cost/state_bytes_per_user` (offline) | peak RSS MB | history load s | offline test figure |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for s in served:
            lines.append(f"| {s.model} | {s.users:,} | {fmt(s.mean_events_per_user, 1)} | {fmt(s.file_bytes_per_user, 0)} | "
                         f"{fmt(s.blob_bytes_per_user, 0)} | {fmt(s.declared_state_bytes, 0)} | {fmt(s.peak_rss_mb, 0)} | "
                         f"{fmt(s.load_seconds, 1)} | {s.offline_metric} |")
        lines += ["", "Commands behind each row (the server, and the fit of its model):", ""]
        for s in served:
            lines += [f"- {s.model}: `{s.command}`", f"  - trained by `{s.train_command}`"]
        lines += ["", "`store file bytes/user`: the SQLite file after shutdown (WAL checkpointed) over the users in it: "
                  "the state blob, the items seen (one row per event: exclude_seen and the recompute window) and "
                  "SQLite's pages. `cost/state_bytes_per_user` is what the run's memory callback counted offline "
                  "(for SASRec a KV cache of max_len entries that the served model does not keep: it recomputes).", ""]
    return "\n".join(lines) + "\n"


def item_bytes_per_event(served: list[ServedResult]) -> float | None:
    """SQLite bytes per stored event beyond the state blobs, from the replay's stores (the largest history)."""
    rows = [s for s in served if s.users and s.mean_events_per_user > 0]
    if not rows:
        return None
    best = max(rows, key=lambda s: s.mean_events_per_user)
    return max(best.file_bytes_per_user - best.blob_bytes_per_user, 0.0) / best.mean_events_per_user


def store_size_table(swept: list[SweepResult], served: list[ServedResult]) -> list[str]:
    """Stored bytes per user and per million users at each swept length: the state blob (measured) plus the
    item history (4 bytes an event in Redis; SQLite's measured bytes per event when the replay ran)."""
    per_event = item_bytes_per_event(served)
    head = "| model | L | state blob bytes/user | + items, Redis (4 B/event) | GB per 1M users, Redis |"
    rule = "|---|---:|---:|---:|---:|"
    if per_event is not None:
        head += f" + items, SQLite ({per_event:.1f} B/event measured) | GB per 1M users, SQLite |"
        rule += "---:|---:|"
    lines = ["### Stored bytes per user and per million users", "",
             "From the measured state blobs of the sweep (independent of timing: exact at any run size) plus the item "
             "history every user keeps (exclude_seen; the recompute window).", "", head, rule]
    for r in swept:
        redis = r.state_bytes + 4 * r.length
        row = f"| {r.model} | {r.length:,} | {r.state_bytes:,} | {redis:,} | {redis * 1e6 / 1e9:,.2f} |"
        if per_event is not None:
            sqlite = r.state_bytes + per_event * r.length
            row += f" {sqlite:,.0f} | {sqlite * 1e6 / 1e9:,.2f} |"
        lines.append(row)
    return lines + [""]


# --- the command ---------------------------------------------------------------------------------------------
def parser() -> Parser:
    """The benchmark's options (module docstring)."""
    p = Parser("benchmarks.serve", description=__doc__.split("\n\n")[0])
    shared = os.environ.get(SHARED_ENV)
    p.add_argument("--data", type=Path, default=Path(shared) / "lrurec" / "ml-1m.txt.gz" if shared else None,
                   help="LRURec's ml-1m.txt(.gz) (default: $SEQREC_SHARED_DATA/lrurec/ml-1m.txt.gz)")
    p.add_argument("--runs_dir", type=Path, default=Path("runs/serve_bench"), help="where the served runs are (trained if absent)")
    p.add_argument("--models", default="lru,sasrec,ctr", help="served models: lru, sasrec, ctr")
    p.add_argument("--epochs", type=int, default=1, help="epochs of the short fits (default 1)")
    p.add_argument("--clients", default="1,4,16", help="concurrency levels of the replay")
    p.add_argument("--events", type=int, default=2000, help="replayed events per level (default 2000)")
    p.add_argument("--seconds", type=float, default=300.0, help="time limit per level (default 300)")
    p.add_argument("--lengths", default="50,200,1000", help="history lengths of the cost sweep")
    p.add_argument("--sweep_events", type=int, default=100, help="timed events per (model, length) (default 100)")
    p.add_argument("--method", default="snapkv", help="compression method of the CTR transformer (default snapkv)")
    p.add_argument("--budgets", default="0.25", help="compression budgets (fractions) served and swept")
    p.add_argument("--sync", choices=("full", "normal"), default="full", help="SQLite durability (default full)")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the in-process parts (default 1)")
    p.add_argument("--server_threads", type=int, default=1, help="torch threads per request in the server (default 1)")
    p.add_argument("--skip_replay", action="store_true", help="no replay")
    p.add_argument("--skip_sweep", action="store_true", help="no cost sweep")
    p.add_argument("--skip_hostile", action="store_true", help="no hostile-request part")
    p.add_argument("--hostile_seconds", type=float, default=10.0,
                   help="seconds of /health pings per hostile request shape (default 10)")
    p.add_argument("--max_body_bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                   help="the hostile part's server limit (default: serve's, 256 KiB)")
    p.add_argument("--max_id_length", type=int, default=DEFAULT_MAX_ID_LENGTH,
                   help="the hostile part's server limit (default: serve's, 512)")
    p.add_argument("--out", type=Path, default=Path("results/SERVING.md"))
    p.add_argument("--png", type=Path, default=None, help="latency plot (default: beside --out, serving_latency.png)")
    p.add_argument("--json", type=Path, default=None, help="also write the raw figures here")
    return p


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark and write the report; returns the figures."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    options = parser()
    args = options.parse_args(argv)
    if args.data is None or not args.data.is_file():
        print(f"error: ML-1M not found ({args.data}); pass --data ml-1m.txt.gz or set {SHARED_ENV}", file=sys.stderr)
        raise SystemExit(2)
    import torch

    import seqrec

    torch.set_num_threads(args.threads)
    command = options.command()
    load = load_average()
    started = time.perf_counter()
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        print(f"error: unknown models {unknown}; known: {sorted(MODELS)}", file=sys.stderr)
        raise SystemExit(2)
    budgets = [float(b) for b in args.budgets.split(",") if b.strip()]
    trained = {m: ensure_run(m, args.data, args.runs_dir, args.epochs, max(args.threads, 2)) for m in names}
    served: list[ServedResult] = []
    swept: list[SweepResult] = []
    hostile: list[HostileResult] = []
    with tempfile.TemporaryDirectory(prefix="seqrec-bench-serve-") as tmp:
        work = Path(tmp)
        if not args.skip_replay:
            plan = [(m, trained[m][0], trained[m][1], []) for m in names]
            if "ctr" in names:
                plan += [(f"ctr+{args.method}@{b:.0%}", trained["ctr"][0], trained["ctr"][1],
                          ["--compress", args.method, "--budget", str(b)]) for b in budgets]
            for label, run_dir, train_cmd, extra in plan:
                served.append(replay_model(label, run_dir, train_cmd, extra, args, work))
        if not args.skip_sweep:
            runs = {m: seqrec.load_run(trained[m][0], threads=args.threads) for m in names}
            any_run = next(iter(runs.values()))
            sequences = any_run.sequences
            longest = int(np.argmax(np.diff(sequences.indptr)))
            lengths = [int(x) for x in args.lengths.split(",")]
            max_len = max(lengths) + args.sweep_events + 3
            swept = sweep(sweep_models(runs, max_len, budgets, args.method), lengths, sequences.sequence(longest),
                          args.sweep_events, args.sync, work)
        if not args.skip_hostile:
            hostile = hostile_requests(trained[names[0]][0], args, work)
    png = None
    if swept:
        png = args.png or args.out.parent / "serving_latency.png"
        smoke = args.events < 1000 or args.sweep_events < 50
        png = png if plot(swept, png, " — smoke-size run" if smoke else "") else None
    text = report(served, swept, args, command, png, time.perf_counter() - started)
    if hostile:
        text += "\n" + "\n".join(report_lines(hostile, command, load, args.max_body_bytes, args.max_id_length)) + "\n"
    write_text(args.out, text)
    figures = {"command": command, "served": [asdict(s) for s in served], "sweep": [asdict(r) for r in swept],
               "hostile": [asdict(h) for h in hostile], "load_average": load}
    if args.json is not None:
        write_text(args.json, json.dumps(figures, indent=1))
    print(text)
    return figures


if __name__ == "__main__":
    main()
