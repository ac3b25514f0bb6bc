"""``python -m seqrec serve`` in a subprocess on a free loopback port, for the CLI and fault tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A server subprocess; ``start`` waits for /health, ``kill`` sends SIGKILL, ``stop`` SIGTERM and waits."""

    def __init__(self, run: Path, *args: str, cache: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [sys.executable, "-m", "seqrec", "serve", str(run), "--port", str(self.port), "--threads", "1",
                        "--log_level", "warning", *args]
        self.env = {**os.environ, "PYTHONPATH": str(ROOT)}
        if cache is not None:
            self.env["SEQREC_CACHE"] = str(cache)
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 120.0) -> ServerProcess:
        """Start and wait until /health answers (or the process exits: AssertionError with its stderr)."""
        self.process = subprocess.Popen(self.command, cwd=ROOT, env=self.env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                out, err = self.process.communicate()
                raise AssertionError(f"server exited with {self.process.returncode}: {err[-3000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.kill()
        raise AssertionError(f"server did not answer /health within {timeout} s")

    def kill(self) -> None:
        """SIGKILL (kill -9): no shutdown of any kind."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def stop(self, timeout: float = 60.0) -> tuple[int, str]:
        """SIGTERM, wait: (exit code, stderr)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        _, err = self.process.communicate(timeout=timeout)
        return self.process.returncode, err

    def run_to_exit(self, timeout: float = 120.0) -> tuple[int, str]:
        """Run a command that should exit by itself (e.g. on a bad store): (exit code, stderr)."""
        done = subprocess.run(self.command, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout)
        return done.returncode, done.stderr
