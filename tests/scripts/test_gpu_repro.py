"""scripts/gpu_repro.sh: without a GPU it says so and exits 0; --cpu-dry-run runs every step on fixture data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_repro.sh"


def run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path), **env}
    environ.pop("GPU_REPRO_COPY_TO", None)
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=240)


def test_without_a_gpu_it_says_so_and_exits_0(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the script would run for real")
    done = run(["lru_ml1m"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "no CUDA GPU is visible" in done.stdout and "--cpu-dry-run" in done.stdout
    assert not list(tmp_path.glob("gpu_repro.*"))  # nothing started
    assert run(["--budget", "soon"], tmp_path).returncode == 2
    assert "no shipped config nope" in run(["--cpu-dry-run", "nope"], tmp_path).stderr


@pytest.mark.slow  # the script's 63-second CPU dry run
def test_cpu_dry_run_runs_cells_in_order_within_the_budget_then_the_gpu_check(tmp_path):
    results = ROOT / "results"
    before = {p.name: p.stat().st_mtime_ns for p in results.iterdir()} if results.is_dir() else {}
    copy = tmp_path / "out"
    # budget 63 s with cells needing >= 60 s each: the first runs, the second finds < 60 s left and is skipped
    done = run(["--cpu-dry-run", "--budget", "63", "--copy-to", str(copy), "lru_xlong", "sasrec_ml1m"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[lru_xlong] ok" in done.stdout and "[sasrec_ml1m] skipped" in done.stdout
    assert "scripts/gpu_check.sh with BUDGET_S=1" in done.stdout
    work = next(tmp_path.glob("gpu_repro.*"))
    reproduction = (work / "results" / "REPRODUCTION.md").read_text()
    assert "| lru_xlong | partial (max_steps) | CPU dry run of scripts/gpu_repro.sh (not a result) |" in reproduction
    assert "| sasrec_ml1m | not yet run |" in reproduction
    ledger = json.loads((work / "results" / "reproduction.json").read_text())["cells"]
    assert list(ledger) == ["lru_xlong"] and "recall@10" in ledger["lru_xlong"][0]["metrics"]
    gpu = (work / "results" / "GPU.md").read_text()
    assert gpu.startswith("# GPU check (CPU dry run of the script: not GPU figures)")
    assert "## Reproduction cells (scripts/gpu_repro.sh)" in gpu
    assert "| lru_xlong | ok |" in gpu and "| sasrec_ml1m | skipped: budget |" in gpu
    assert {p.name for p in copy.iterdir()} == {"REPRODUCTION.md", "reproduction.json", "GPU.md"}
    after = {p.name: p.stat().st_mtime_ns for p in results.iterdir()} if results.is_dir() else {}
    assert after == before  # a dry run never writes results/
