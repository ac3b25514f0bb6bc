"""seqrec.child_process: a signal to the parent reaches its fit once, and the fit gets to write its resume point.

Real processes: a parent script runs ``child_process.run`` on a child that behaves as ``seqrec fit`` does at a signal
(it finishes its batch and writes its checkpoint, here 1 s, longer than the 0.25 s ``subprocess.run`` granted
before its SIGKILL, then exits 128 + the signal; a second signal ends it at once).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from seqrec import child_process

REPO = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent("""
    import os, signal, sys, time
    out = open(sys.argv[1], "a", buffering=1)
    got = []
    def handler(signum, frame):
        out.write(f"signal {signum}\\n")
        if got:
            out.write("exit at once\\n")
            sys.exit(1)
        got.append(signum)
    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    out.write(f"ready {os.getpid()}\\n")
    while not got:
        time.sleep(0.02)
    time.sleep(1.0)  # the rest of the batch and the checkpoint
    out.write("saved\\n")
    sys.exit(128 + got[0])
""")

PARENT = textwrap.dedent("""
    import sys
    from concurrent.futures import ThreadPoolExecutor
    from seqrec import child_process
    child, mode, outs = sys.argv[1], sys.argv[2], sys.argv[3:]
    command = lambda out: [sys.executable, child, out]
    if mode == "one":
        sys.exit(child_process.run(command(outs[0])))
    if mode == "loop":  # seqrec repro's loop over cells
        with child_process.forwarding_signals():
            for out in outs:
                code = child_process.run(command(out))
                if child_process.stopped_by() is not None:
                    break
        sys.exit(code)
    if mode == "pool":  # benchmarks.fit_grid's threads
        with child_process.forwarding_signals(), ThreadPoolExecutor(max_workers=2) as pool:
            codes = list(pool.map(lambda out: child_process.run(command(out)), outs))
        print(" ".join(map(str, codes)))
""")


@pytest.fixture
def start_parent(tmp_path):
    """start(mode, n) -> (parent, the children's logs); at teardown every process left is killed, so a failing
    test leaves none behind (the children sit in their own sessions)."""
    started: list[tuple[subprocess.Popen, list[Path]]] = []

    def start(mode: str, n: int) -> tuple[subprocess.Popen, list[Path]]:
        started.append(launch(tmp_path, mode, n))
        return started[-1]

    yield start
    for parent, outs in started:
        parent.kill()
        parent.wait()
        for out in outs:  # only a child that has not ended: an ended one's PID may belong to another process now
            if child_pid(out) and lines(out)[-1] not in ("saved", "exit at once"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child_pid(out), signal.SIGKILL)


def launch(tmp_path: Path, mode: str, n: int) -> tuple[subprocess.Popen, list[Path]]:
    (tmp_path / "child.py").write_text(CHILD)
    (tmp_path / "parent.py").write_text(PARENT)
    outs = [tmp_path / f"child{i}.log" for i in range(n)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen([sys.executable, str(tmp_path / "parent.py"), str(tmp_path / "child.py"), mode, *map(str, outs)],
                              env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    return parent, outs


def child_pid(out: Path) -> int | None:
    """The child's PID from its first line (``ready PID``), None before it wrote it."""
    first = out.read_text().split("\n", 1)[0] if out.is_file() else ""
    return int(first.split()[1]) if first.startswith("ready ") else None


def wait_ready(outs: list[Path], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(child_pid(out) for out in outs):
        assert time.monotonic() < deadline, "the children never started"
        time.sleep(0.05)


def lines(out: Path) -> list[str]:
    """The child's log without its PID."""
    return [line.split()[0] if line.startswith("ready ") else line for line in out.read_text().splitlines()]


def test_sigterm_to_the_parent_alone_stops_the_child_at_its_resume_point(start_parent):
    parent, (out,) = start_parent("one", 1)
    wait_ready([out])
    os.kill(parent.pid, signal.SIGTERM)  # kill PID: before, the parent died and the fit trained on, orphaned
    assert parent.wait(timeout=60) == 128 + signal.SIGTERM
    assert lines(out) == ["ready", f"signal {signal.SIGTERM}", "saved"]


def test_ctrl_c_to_the_process_group_reaches_the_child_once_and_it_saves(start_parent):
    parent, (out,) = start_parent("one", 1)
    wait_ready([out])
    assert os.getsid(child_pid(out)) == child_pid(out) != os.getsid(parent.pid)  # its own session: no group signal
    os.killpg(parent.pid, signal.SIGINT)  # the terminal signals the whole foreground group
    assert parent.wait(timeout=60) == 128 + signal.SIGINT
    # one signal (a second would end the fit before its checkpoint), and no SIGKILL 0.25 s later
    assert lines(out) == ["ready", f"signal {signal.SIGINT}", "saved"]


def test_a_second_signal_is_forwarded_too(start_parent):
    parent, (out,) = start_parent("one", 1)
    wait_ready([out])
    os.kill(parent.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while "signal" not in out.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(parent.pid, signal.SIGTERM)
    assert parent.wait(timeout=60) == 1
    assert lines(out) == ["ready", f"signal {signal.SIGTERM}", f"signal {signal.SIGTERM}", "exit at once"]


def test_after_a_signal_a_loop_starts_no_further_child(start_parent):
    parent, outs = start_parent("loop", 2)
    wait_ready(outs[:1])
    os.kill(parent.pid, signal.SIGTERM)
    assert parent.wait(timeout=60) == 128 + signal.SIGTERM
    assert lines(outs[0])[-1] == "saved"
    assert not outs[1].exists()


def test_threads_under_the_main_threads_forwarding_all_stop_and_the_queue_starts_nothing(start_parent):
    parent, outs = start_parent("pool", 3)
    wait_ready(outs[:2])  # two workers: the third fit waits in the queue
    os.kill(parent.pid, signal.SIGINT)
    stdout, _ = parent.communicate(timeout=60)
    assert parent.returncode == 0
    assert stdout.split() == [str(128 + signal.SIGINT)] * 3  # the queued one returns at once, not started
    for out in outs[:2]:
        assert lines(out) == ["ready", f"signal {signal.SIGINT}", "saved"]
    assert not outs[2].exists()


def test_a_worker_thread_without_the_main_threads_forwarding_is_refused():
    errors = []

    def worker() -> None:
        try:
            child_process.run([sys.executable, "-c", "pass"])
        except RuntimeError as error:
            errors.append(str(error))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert errors and "forwarding_signals()" in errors[0]


def test_run_returns_the_childs_status_and_restores_the_handlers():
    before = signal.getsignal(signal.SIGTERM)
    assert child_process.run([sys.executable, "-c", "import sys; sys.exit(3)"]) == 3
    assert signal.getsignal(signal.SIGTERM) is before
    assert child_process.stopped_by() is None


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_stopped_by_names_the_first_signal(signum):
    with child_process.forwarding_signals():
        os.kill(os.getpid(), signum)  # handled by the forwarder: no KeyboardInterrupt, no exit
        time.sleep(0.05)
        assert child_process.stopped_by() == signum
        assert child_process.run([sys.executable, "-c", "pass"]) == 128 + signum  # nothing starts after a signal
