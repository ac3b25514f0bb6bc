"""scripts/gpu_repro.sh: without a GPU it says so and exits 0; --cpu_dry_run runs every step on fixture data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from seqrec.bench.repro import VARIANT_NAME

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
    assert "no CUDA GPU is visible" in done.stdout and "--cpu_dry_run" in done.stdout
    assert not list(tmp_path.glob("gpu_repro.*"))  # nothing started
    assert run(["--budget", "soon"], tmp_path).returncode == 2
    assert "no shipped config nope" in run(["--cpu_dry_run", "nope"], tmp_path).stderr
    old = run(["--cpu-dry-run", "--no-check", "nope"], tmp_path).stderr.splitlines()  # the old spellings still parse
    assert old[:2] == ["note: --cpu-dry-run is now --cpu_dry_run", "note: --no-check is now --no_check"]
    assert "no shipped config nope" in old[2]


def test_a_plan_or_parallel_that_cannot_run_is_refused_before_anything_starts(tmp_path):
    plan = tmp_path / "twice.plan"
    plan.write_text("sasrec_ml1m@seed_43 --seed_everything 43\n# a comment\nsasrec_ml1m@seed_43 --seed_everything 44\n")
    done = run(["--cpu_dry_run", "--plan", str(plan)], tmp_path)
    assert done.returncode == 2 and "cell sasrec_ml1m@seed_43 is named twice" in done.stderr
    plan.write_text("nope@dropout_04 --model.net.dropout 0.4\n")
    assert "no shipped config nope" in run(["--cpu_dry_run", "--plan", str(plan)], tmp_path).stderr
    done = run(["--cpu_dry_run", "--plan", str(tmp_path / "missing.plan")], tmp_path)
    assert done.returncode == 2 and "missing.plan: no such file" in done.stderr
    for bad in ("0", "two"):
        done = run(["--cpu_dry_run", "--parallel", bad, "lru_ml1m"], tmp_path)
        assert done.returncode == 2 and "--parallel takes a whole number" in done.stderr
    assert not list(tmp_path.glob("gpu_repro.*"))  # nothing started


def test_the_shipped_plan_names_shipped_configs_and_their_variants_flags():
    plan = ROOT / "scripts" / "plans" / "issue21_gpu.plan"
    cells = [line.split() for line in plan.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert len({cell for cell, *_ in cells}) == len(cells)
    for cell, *flags in cells:
        config, _, variant = cell.partition("@")
        assert (ROOT / "seqrec" / "configs" / f"{config}.yaml").is_file() and variant and flags, cell
        assert VARIANT_NAME.match(variant), cell  # what seqrec repro --variant accepts


@pytest.mark.slow  # the script's 63-second CPU dry run
def test_cpu_dry_run_runs_cells_in_order_within_the_budget_then_the_gpu_check(tmp_path):
    results = ROOT / "results"
    before = {p.name: p.stat().st_mtime_ns for p in results.iterdir()} if results.is_dir() else {}
    copy = tmp_path / "out"
    # budget 63 s with cells needing >= 60 s each: the first runs, the second finds < 60 s left and is skipped
    done = run(["--cpu_dry_run", "--budget", "63", "--copy_to", str(copy), "lru_xlong", "sasrec_ml1m"], tmp_path)
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
    assert {p.name for p in copy.iterdir()} == {"REPRODUCTION.md", "reproduction.json", "GPU.md", "runs.tgz"}
    after = {p.name: p.stat().st_mtime_ns for p in results.iterdir()} if results.is_dir() else {}
    assert after == before  # a dry run never writes results/


@pytest.mark.slow  # three dry-run cells, two at a time (~45 s)
def test_cells_of_a_plan_run_side_by_side_each_with_its_flags_and_all_reach_the_ledger(tmp_path):
    plan = tmp_path / "grid.plan"
    plan.write_text("# a SASRec grid point, a second seed, a padding variant\n"
                    "sasrec_ml1m@dropout_04 --model.net.dropout 0.4   # trailing comment\n\n"
                    "lru_ml1m@seed_43 --seed_everything 43\n"
                    "lru_beauty@official_padding --model.net.padding official\n")
    copy, runs, results = tmp_path / "out", tmp_path / "runs", tmp_path / "results"
    common = ["--cpu_dry_run", "--no_check", "--runs_dir", str(runs), "--results", str(results)]
    done = run([*common, "--parallel", "2", "--plan", str(plan), "--copy_to", str(copy)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--no_check: scripts/gpu_check.sh not run" in done.stdout
    cells = ["sasrec_ml1m@dropout_04", "lru_ml1m@seed_43", "lru_beauty@official_padding"]
    for cell in cells:
        assert f"[{cell}] ok" in done.stdout
    # the third waits for a free slot: it starts after one of the first two has ended
    lines = done.stdout.splitlines()
    third = next(i for i, line in enumerate(lines) if "[lru_beauty@official_padding] allowance" in line)
    assert any(" ok (" in line for line in lines[:third])
    ledger = json.loads((copy / "reproduction.json").read_text())["cells"]
    assert sorted(ledger) == sorted(cells)  # each process wrote its own ledger; all three were adopted
    label = "CPU dry run of scripts/gpu_repro.sh (not a result), up to 2 cells sharing it (scripts/gpu_repro.sh)"
    flags = {"sasrec_ml1m@dropout_04": "--model.net.dropout 0.4", "lru_ml1m@seed_43": "--seed_everything 43",
             "lru_beauty@official_padding": "--model.net.padding official"}
    for cell, flag in flags.items():
        (entry,) = ledger[cell]
        assert entry["hardware"] == label and flag in entry["command"] and "recall@10" in entry["metrics"]
    assert ledger["lru_ml1m@seed_43"][0]["seed"] == 43
    assert {p.name for p in copy.iterdir()} == {"REPRODUCTION.md", "reproduction.json", "GPU.md", "runs.tgz"}
    with tarfile.open(copy / "runs.tgz") as tar:
        names = tar.getnames()
    assert "runs/lru_ml1m@seed_43/version_0/metrics.csv" in names and "lru_ml1m@seed_43.log" in names
    assert not [n for n in names if n.endswith(".ckpt")]
    # a second call with --resume continues the cell's run in the same runs folder (a lent machine still warm)
    again = tmp_path / "again.plan"
    again.write_text("lru_ml1m@seed_43 --seed_everything 43 --trainer.max_steps 6\n")  # two steps more than the dry run's 4
    done = run([*common, "--resume", "--parallel", "2", "--plan", str(again)], tmp_path)  # the same label: same --parallel
    assert done.returncode == 0, done.stdout + done.stderr
    (entry,) = json.loads((results / "reproduction.json").read_text())["cells"]["lru_ml1m@seed_43"]
    assert entry["command"].endswith("--ckpt_path last") and entry["run_dir"].endswith("lru_ml1m@seed_43/version_0")
    assert entry["global_step"] == 6 and entry["steps_this_sitting"] == 2 and entry["sittings"] == 2
    assert not (runs / "lru_ml1m@seed_43" / "version_1").exists()
