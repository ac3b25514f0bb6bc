"""Part 3 of ``python -m benchmarks.serve``: hostile requests against a running server (``seqrec.serve.limits``).

For each request shape of the largest size the server accepts (a body of exactly ``serve --max_body_bytes``, ids the
catalogue does not have, so the server parses, checks and looks up all of them before its 404), and for the fault
probe's request (one 1 Mi-character id, refused unread):

- **/health while it is in flight**: one client sends the request back to back (one always in flight) while another
  asks ``/health`` every ``GAP_S``; p50/p99 against ``/health`` on the idle server, asked the same way. The two
  conditions alternate in windows of ``WINDOW_S`` (an idle window starts ``SETTLE_S`` after the flood's request in flight was answered),
  ``--hostile_seconds`` of each, so both see the same machine: on a shared 2-core machine the p99 of a few seconds
  moved by 2x between identical back-to-back runs when idle was measured first and the flood after. The /health
  client is ``http.client`` on one keep-alive connection (a lighter instrument than httpx: less of the measured time
  is the client's own). Goal: p99 within 2x the idle p99.
- **peak RSS added by one such request**: the peak resident sets of the server and its screening process
  (``seqrec.serve.screen``) are reset (``/proc/PID/clear_refs``, 5) before a request and read (``VmHWM``) after it:
  each peak minus its resident set before, summed; for the first request of
  the shape on a fresh server (heap pages a request frees stay resident and serve the next ones, so later requests
  add less) and the largest of 1 + ``RSS_TRIALS``. Goal: under 10 MB.

Each shape gets a fresh server (``measure_shape``); the flood runs in a process of its own.

- **the control** (``measure_control``): the same windows, but the in-flight ones run ``spin``, a process of the
  benchmark's own busy on the CPU, and send the server nothing. Its p99 ratio is what CPU contention alone does to
  /health on this machine: on 2 cores the flood's client, the server's request thread and the /health client take
  turns on them whatever the server does. A hostile row near the control's ratio is the machine, not the server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

GAP_S = 0.005  # between /health requests
WINDOW_S = 0.5  # one idle or one in-flight window of /health requests
SETTLE_S = 0.05  # after the flood pauses, before an idle window: what its last request left to do is not "idle"
RSS_TRIALS = 5
HEALTH_GOAL = 2.0  # p99 during / idle p99
RSS_GOAL_MB = 10.0


@dataclass
class HostileResult:
    """One request shape: what the server answered, how long, what /health did meanwhile, the memory it added."""

    request: str
    body_bytes: int
    ids: int
    status: int | None  # None: the control (no request)
    request_p50_ms: float
    health_idle_p50_ms: float
    health_idle_p99_ms: float
    health_p50_ms: float
    health_p99_ms: float
    health_ratio: float
    first_rss_added_mb: float | None  # the first such request on a fresh server
    peak_rss_added_mb: float | None  # the largest of all, the first included


def unknown_ids_body(max_body_bytes: int, id_length: int, max_ids: int = 100_000) -> tuple[bytes, int]:
    """``{"items": [...]}`` of ids of ``id_length`` characters no catalogue has, at most ``max_body_bytes`` long."""
    per_id = id_length + 4  # the quotes and ", " of json.dumps
    count = max(1, min(max_ids, (max_body_bytes - len('{"items": []}') + 2) // per_id))
    ids = [f"zz{i:0{id_length - 2}d}" for i in range(count)]  # "zz000041": no catalogue's ids (id_length >= 8)
    return json.dumps({"items": ids}).encode(), count


def shapes(max_body_bytes: int, max_id_length: int) -> list[tuple[str, bytes, int]]:
    """(label, body, ids) of the requests measured (module docstring)."""
    longest, n_long = unknown_ids_body(max_body_bytes, max_id_length)
    shortest, n_short = unknown_ids_body(max_body_bytes, 8)
    probe = json.dumps({"item": "x" * (1 << 20)}).encode()
    return [(f"{max_body_bytes:,}-byte body of {max_id_length}-character unknown ids", longest, n_long),
            (f"{max_body_bytes:,}-byte body of 8-character unknown ids", shortest, n_short),
            ("the probe's 1 Mi-character item id (over the body limit)", probe, 1)]


def percentile_ms(values: list[float], q: float) -> float:
    """The q-th percentile of seconds, in ms (nan for none)."""
    return float(np.percentile(values, q) * 1e3) if values else float("nan")


def health_times(url: str, seconds: float) -> list[float]:
    """Seconds of each ``GET /health`` asked every ``GAP_S`` for ``seconds``, on one keep-alive connection."""
    import http.client
    from urllib.parse import urlsplit

    where = urlsplit(url)
    times = []
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=120.0)
    try:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            connection.request("GET", "/health")
            response = connection.getresponse()
            response.read()
            times.append(time.perf_counter() - start)
            if response.status != 200:
                raise RuntimeError(f"/health answered {response.status}")
            time.sleep(GAP_S)
    finally:
        connection.close()
    return times


def proc_status_bytes(pid: int, key: str) -> int | None:
    """A ``/proc/PID/status`` figure in bytes (``VmRSS``, ``VmHWM``), or None where there is none."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def family(pid: int) -> list[int]:
    """``pid`` and its descendants (the server and its screening process, ``seqrec.serve.screen``)."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                todo += [int(child) for child in task.read_text().split()]
            except OSError:
                pass
    return out


def peak_rss_added(pid: int, send: Callable[[], object]) -> int | None:
    """Bytes the peak resident sets of the process and its descendants rose above their resident sets during
    ``send()``, summed (None without /proc): the server and its screening process."""
    pids = family(pid)
    try:
        for each in pids:
            Path(f"/proc/{each}/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)
    except OSError:
        return None
    before = [proc_status_bytes(each, "VmRSS") for each in pids]
    send()
    peak = [proc_status_bytes(each, "VmHWM") for each in pids]
    if any(value is None for value in before + peak):
        return None
    return sum(max(p - b, 0) for p, b in zip(peak, before))  # type: ignore[operator]


def windows(go: Any, paused: Any, stop: Any, step: Callable[[bool], None]) -> None:
    """The loads' loop: ``step(first)`` again and again while ``go`` is set (``first``: the window's first step),
    until ``stop`` is set; ``paused`` is set while no step is under way."""
    first = True
    while not stop.is_set():
        if not go.is_set():
            paused.set()
            first = True
            go.wait(0.05)
            continue
        paused.clear()
        step(first)
        first = False
    paused.set()


def flood(url: str, body: bytes, go: Any, paused: Any, stop: Any, took: Any) -> None:
    """Send ``body`` back to back in the windows (``windows``); each request's seconds into the ``took`` queue.

    Runs in a process of its own (``measure_shape``): in the process that times ``/health`` its GIL would delay
    those requests and the figure would be the client's, not the server's.
    """
    import httpx

    headers = {"content-type": "application/json"}
    with httpx.Client(base_url=url, timeout=120.0) as http:
        def post(first: bool) -> None:
            start = time.perf_counter()
            http.post("/v1/users/hostile/events", content=body, headers=headers)
            took.put(time.perf_counter() - start)

        windows(go, paused, stop, post)


def spin(go: Any, paused: Any, stop: Any, took: Any) -> None:
    """The control's load (module docstring): busy on the CPU in the windows, sending nothing; one entry into
    ``took`` as each window starts, as ``flood`` puts one per request."""

    def busy(first: bool) -> None:
        if first:
            took.put(0.0)
        deadline = time.perf_counter() + 0.01
        while time.perf_counter() < deadline:
            pass

    windows(go, paused, stop, busy)


def health_windows(url: str, seconds: float, load: Callable[..., None], args: tuple = ()
                   ) -> tuple[list[float], list[float], list[float]]:
    """/health seconds idle and under ``load`` (``flood`` or ``spin``, in a process of its own), in alternating
    windows (module docstring); and the seconds of each of the load's requests."""
    import multiprocessing
    import queue

    context = multiprocessing.get_context("spawn")
    go, paused, stop, took = context.Event(), context.Event(), context.Event(), context.Queue()
    sender = context.Process(target=load, args=(*args, go, paused, stop, took), daemon=True)
    sender.start()
    idle: list[float] = []
    during: list[float] = []
    times: list[float] = []
    try:
        for _ in range(max(1, round(seconds / WINDOW_S))):
            go.clear()
            if not paused.wait(120):
                raise RuntimeError("the loading process did not pause within 120 s")
            time.sleep(SETTLE_S)
            idle += health_times(url, WINDOW_S)
            go.set()
            times.append(took.get(timeout=120))  # its first request of the window was answered: the load runs
            during += health_times(url, WINDOW_S)
    finally:
        stop.set()
        go.set()
        while sender.is_alive():
            try:
                times.append(took.get(timeout=0.1))
            except queue.Empty:
                pass
        sender.join()
    return idle, during, times


def measure_shape(url: str, pid: int, label: str, body: bytes, ids: int, seconds: float) -> HostileResult:
    """One request shape against a fresh server (module docstring): the first request's peak RSS added, then the
    largest of ``RSS_TRIALS`` more, then /health idle and with the request in flight."""
    import httpx

    headers = {"content-type": "application/json"}
    with httpx.Client(base_url=url, timeout=120.0) as http:
        def post() -> None:
            nonlocal status
            status = http.post("/v1/users/hostile/events", content=body, headers=headers).status_code

        status = 0
        http.get("/health").raise_for_status()
        added = [a for a in (peak_rss_added(pid, post) for _ in range(1 + RSS_TRIALS)) if a is not None]
    idle, during, times = health_windows(url, seconds, flood, (url, body))
    idle_p99, during_p99 = percentile_ms(idle, 99), percentile_ms(during, 99)
    return HostileResult(label, len(body), ids, status, percentile_ms(times, 50), percentile_ms(idle, 50), idle_p99,
                         percentile_ms(during, 50), during_p99, during_p99 / idle_p99,
                         added[0] / 2**20 if added else None, max(added) / 2**20 if added else None)


CONTROL = "control: no request, one CPU-bound process of the benchmark's own"


def measure_control(url: str, seconds: float) -> HostileResult:
    """The control row (module docstring): /health idle and beside ``spin``, on a server that is sent nothing."""
    idle, during, _ = health_windows(url, seconds, spin)
    idle_p99, during_p99 = percentile_ms(idle, 99), percentile_ms(during, 99)
    return HostileResult(CONTROL, 0, 0, None, float("nan"), percentile_ms(idle, 50), idle_p99,
                         percentile_ms(during, 50), during_p99, during_p99 / idle_p99, None, None)


def report_lines(results: list[HostileResult], command: str, load: str, max_body_bytes: int, max_id_length: int
                 ) -> list[str]:
    """The report's section (``results/SERVING.md``)."""

    def cell(value: float | None, digits: int = 2) -> str:
        return "–" if value is None or not np.isfinite(value) else f"{value:,.{digits}f}"

    lines = ["## Hostile requests: /health while the largest request is in flight, and the memory it adds", "",
             f"A server on the LRURec run with `--max_body_bytes {max_body_bytes}` and `--max_id_length {max_id_length}`. Each "
             "request shape is sent back to back by one client (one always in flight) while another asks `/health` every "
             f"{GAP_S * 1e3:.0f} ms (`http.client`, one keep-alive connection); `idle` is `/health` asked the same way with "
             f"nothing else in flight, in windows of {WINDOW_S:g} s alternating with the flood's (each starting {SETTLE_S * 1e3:.0f} ms after "
             "the flood's last request was answered). The "
             "ids are unknown to the catalogue: the server reads the body, and its screening process (`seqrec.serve.screen`, "
             "bodies of `--screen_bytes`, 64 KiB, or more) parses, length-checks and looks up every id before the 404. "
             "`peak RSS added` is the peak resident set of the server and its screening process during one request minus "
             f"their resident sets before (`/proc/PID/clear_refs`), summed: the first request of the shape on a fresh server, and the largest of "
             f"{1 + RSS_TRIALS}. Each shape has a fresh server; the flood runs in a process of its own.", "",
             f"Command: `{command}` (part 3); load average at the start: {load}", "",
             "| request | body bytes | ids | status | request p50 ms | /health idle p50 / p99 ms | /health during "
             "p50 / p99 ms | p99 during / idle | peak RSS added MB, first / largest |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r.request} | {r.body_bytes:,} | {r.ids:,} | {r.status or '–'} | {cell(r.request_p50_ms)} | "
                     f"{cell(r.health_idle_p50_ms)} / {cell(r.health_idle_p99_ms)} | {cell(r.health_p50_ms)} / "
                     f"{cell(r.health_p99_ms)} | {cell(r.health_ratio)}x | {cell(r.first_rss_added_mb)} / "
                     f"{cell(r.peak_rss_added_mb)} |")
    hostile = [r for r in results if r.status is not None]
    control = next((r for r in results if r.status is None), None)
    worst_ratio = max((r.health_ratio for r in hostile), default=float("nan"))
    rss = [r.peak_rss_added_mb for r in results if r.peak_rss_added_mb is not None]
    lines += ["", f"**Goal (/health p99 within {HEALTH_GOAL:g}x its idle p99 while the largest request is in flight): "
              f"{'met' if worst_ratio <= HEALTH_GOAL else 'NOT met'}** (worst {cell(worst_ratio)}x). "
              f"**Goal (peak RSS added by the largest request under {RSS_GOAL_MB:g} MB): "
              f"{'met' if rss and max(rss) < RSS_GOAL_MB else 'NOT met' if rss else 'not measured (no /proc)'}** "
              f"(largest {cell(max(rss) if rss else None)} MB).", ""]
    if control is not None:
        lines[-1:-1] = ["", f"The control row sends the server nothing: its {cell(control.health_ratio)}x is what a busy CPU alone "
                        "does to /health on this machine (the goal is judged on the other rows; a row near the control's "
                        "ratio is the machine's, not the server's)."]
    return lines
