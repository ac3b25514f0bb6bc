"""Fault injection on real runs: kill -9, SIGINT/SIGTERM, a full disk, a corrupt checkpoint, two runs at once.

Every sitting is a real process (``python -m tests.reliability.faulty FAULT -- fit ...``, i.e. ``python -m
seqrec fit`` with the fault patched in) on the small MovieLens fixture with one thread. Each scenario checks
that nothing is lost (every row logged before stays in metrics.csv, the last complete checkpoint stays
loadable, config.yaml keeps what ran) and that the run, resumed after its faults, ends with exactly the test
metrics of an uninterrupted run. Two validation cadences, as shipped: every 2 epochs (``sasrec_ml100k``) and
every N steps (``val_check_interval``, as the LRURec configs). The three independent sequences of processes
run side by side.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from seqrec.callbacks.checkpoint_io import checkpoint_problem
from seqrec.data.array_cache import verify_arrays
from tests.conftest import tiny_fit_args, write_ml100k

pytestmark = pytest.mark.slow  # fault injection: fit processes killed, interrupted and resumed

REPO = Path(__file__).resolve().parents[2]
EPOCHS = ("--trainer.max_epochs", "6")  # validations after epochs 1, 3, 5 (8 batches an epoch: steps 16, 32, 48)
STEPS = ("--trainer.max_epochs", "3", "--trainer.check_val_every_n_epoch", "null", "--trainer.val_check_interval", "5")
# cadence "every 2 epochs": kill -9 in epoch 2, SIGINT during the next validation, kill -9 while last.ckpt is
# written, a full disk while last.ckpt is written, then to the end
CHAIN_EPOCHS = ["kill@train_batch=20", "SIGINT@val_batch=1", "kill@checkpoint=last.ckpt", "enospc@checkpoint=last.ckpt", "none"]
# cadence "every 5 steps": SIGTERM mid-epoch (step 7, not a validation point), kill -9 during the validation at step 10
CHAIN_STEPS = ["SIGTERM@train_batch=7", "kill@val_batch=1", "none"]


def fit_args(root: Path, runs: Path, cadence: tuple[str, ...]) -> list[str]:
    """``seqrec fit`` and the tiny run's flags (tests/conftest.py), CSV logging only, validating at ``cadence``."""
    return ["fit", *tiny_fit_args(root, runs, "--trainer.logger.init_args.loggers", "[csv]", *cadence,
                                  config="sasrec_ml100k", val_every=None)]


@dataclass
class Sitting:
    """One process: its fault, exit status, stderr, and the run directory's state after it."""

    fault: str
    returncode: int
    stderr: str
    rows: list[dict[str, str]] = field(default_factory=list)
    last_step: int | None = None
    last_problem: str | None = None
    config: str = ""
    files: list[str] = field(default_factory=list)


def start(args: list[str], fault: str, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "SEQREC_CACHE": str(cache), "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"}
    return subprocess.Popen([sys.executable, "-m", "tests.reliability.faulty", fault, "--", *args], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def rows_of(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="") as handle:
        return [{k: v for k, v in row.items() if v} for row in csv.DictReader(handle)]


def sitting(args: list[str], fault: str, cache: Path, run_dir: Path) -> Sitting:
    process = start(args, fault, cache)
    _, stderr = process.communicate(timeout=600)
    last = run_dir / "checkpoints" / "last.ckpt"
    record = Sitting(fault, process.returncode, stderr, rows_of(run_dir / "metrics.csv"))
    record.last_problem = checkpoint_problem(last)
    if record.last_problem is None:
        record.last_step = int(torch.load(last, map_location="cpu", weights_only=False)["global_step"])
    record.config = (run_dir / "config.yaml").read_text() if (run_dir / "config.yaml").is_file() else ""
    record.files = sorted(p.name for p in (run_dir / "checkpoints").iterdir()) if (run_dir / "checkpoints").is_dir() else []
    return record


def chain(args: list[str], faults: list[str], cache: Path, run_dir: Path) -> list[Sitting]:
    """The sittings of one run: the first starts it, each later one resumes it with ``--ckpt_path last``."""
    out = []
    for i, fault in enumerate(faults):
        out.append(sitting(args + (["--ckpt_path", "last"] if i else []), fault, cache, run_dir))
    return out


def concurrent(args: list[str], cache: Path) -> list[tuple[int, str]]:
    """Two identical runs started together on one empty cache."""
    processes = [start(args, "none", cache) for _ in range(2)]
    errors = [p.communicate(timeout=600)[1] for p in processes]
    return [(p.returncode, err) for p, err in zip(processes, errors)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("reliability")
    root = write_ml100k(base / "ml-100k")
    epochs, steps = fit_args(root, base / "epochs", EPOCHS), fit_args(root, base / "steps", STEPS)
    with ThreadPoolExecutor(3) as pool:
        pair = pool.submit(concurrent, fit_args(root, base / "pair", EPOCHS), base / "cache-shared")
        a = pool.submit(chain, epochs, CHAIN_EPOCHS, base / "cache-a", base / "epochs" / "sasrec_ml100k" / "version_0")
        b = pool.submit(lambda: (sitting(fit_args(root, base / "steps-ref", STEPS), "none", base / "cache-b",
                                         base / "steps-ref" / "sasrec_ml100k" / "version_0"),
                                 chain(steps, CHAIN_STEPS, base / "cache-b", base / "steps" / "sasrec_ml100k" / "version_0")))
        return {"base": base, "pair": pair.result(), "epochs": a.result(), "steps": b.result()[1]}


def metrics_of(run_dir: Path) -> dict[str, float]:
    values = json.loads((run_dir / "test_metrics.json").read_text())
    return {k: v for k, v in values.items() if "@" in k}


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(("error: ", "stopped by "))]


def nothing_lost(sittings: list[Sitting]) -> None:
    """Every row logged by an earlier sitting is still in metrics.csv; config.yaml never changes."""
    for before, after in zip(sittings, sittings[1:]):
        missing = [row for row in before.rows if row not in after.rows]
        assert not missing, f"after {after.fault}: rows lost from metrics.csv: {missing[:3]}"
        assert after.config == before.config


def test_two_runs_on_one_empty_cache_finish_with_distinct_versions_and_equal_results(runs):
    assert [code for code, _ in runs["pair"]] == [0, 0], [err[-2000:] for _, err in runs["pair"]]
    versions = sorted(p.name for p in (runs["base"] / "pair" / "sasrec_ml100k").iterdir())
    assert versions == ["version_0", "version_1"]
    first, second = (metrics_of(runs["base"] / "pair" / "sasrec_ml100k" / v) for v in versions)
    assert first == second
    entries = [p for p in (runs["base"] / "cache-shared").rglob("manifest.json")]
    assert entries and all(verify_arrays(p.parent) is None for p in entries)
    assert not [p for p in (runs["base"] / "cache-shared").rglob(".*") if p.is_dir()]  # no temporary entries left


def test_kill_9_during_an_epoch_resumes_from_the_last_checkpoint(runs):
    killed, resumed = runs["epochs"][:2]
    assert killed.returncode == -9 and killed.last_step == 16  # killed at step 20; the validation at 16 saved
    assert {"sitting": "1", "step": "16"} in resumed.rows  # the next sitting started from that checkpoint
    nothing_lost(runs["epochs"][:2])


def test_sigint_during_validation_saves_after_the_validation_and_exits_130(runs):
    stopped = runs["epochs"][1]
    assert stopped.returncode == 130 and stopped.last_step == 32
    [line] = error_lines(stopped.stderr)
    assert line.startswith("stopped by SIGINT at epoch 3, step 32") and "--ckpt_path" in line
    assert any(row.get("val/ndcg@10") and row.get("epoch") == "3" for row in stopped.rows)  # the validation ran


def test_kill_9_during_a_checkpoint_write_leaves_the_previous_checkpoint(runs):
    killed = runs["epochs"][2]
    assert killed.returncode == -9
    assert killed.last_problem is None and killed.last_step == 32  # the half-written step-48 file never replaced it
    nothing_lost(runs["epochs"][1:3])


def test_full_disk_during_a_checkpoint_write_is_one_line_and_keeps_the_previous_checkpoint(runs):
    full = runs["epochs"][3]
    assert full.returncode == 1
    [line] = error_lines(full.stderr)
    assert "could not write checkpoint" in line and "last.ckpt (the disk is full); the previous last.ckpt is intact" in line
    assert full.last_problem is None and full.last_step == 32
    assert not [name for name in full.files if name.endswith(".tmp")]  # the temporary file was removed


def test_run_resumed_after_every_fault_equals_the_uninterrupted_run(runs):
    sittings = runs["epochs"]
    assert sittings[-1].returncode == 0, sittings[-1].stderr[-3000:]
    run_dir = runs["base"] / "epochs" / "sasrec_ml100k" / "version_0"
    assert metrics_of(run_dir) == metrics_of(runs["base"] / "pair" / "sasrec_ml100k" / "version_0")
    nothing_lost(sittings)
    assert {row.get("sitting") for row in sittings[-1].rows} == {"0", "1", "2", "3", "4"}
    summary = (run_dir / "summary.md").read_text()  # the report reads the whole history
    assert "validations: 3 (epochs 1..5)" in summary


def test_val_check_interval_cadence_resumes_exactly_after_sigterm_and_kill_9(runs):
    stopped, killed, final = runs["steps"]
    assert stopped.returncode == 143 and stopped.last_step == 7  # mid-epoch, where the signal came
    [line] = error_lines(stopped.stderr)
    assert line.startswith("stopped by SIGTERM at epoch 0, step 7")
    assert killed.returncode == -9 and killed.last_step == 7  # killed during the validation at step 10
    assert final.returncode == 0, final.stderr[-3000:]
    nothing_lost(runs["steps"])
    base = runs["base"]
    assert metrics_of(base / "steps" / "sasrec_ml100k" / "version_0") == metrics_of(base / "steps-ref" / "sasrec_ml100k" / "version_0")


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_corrupt_last_checkpoint_is_one_line_and_touches_nothing(runs, damage, tmp_path, capsys):
    from seqrec.fit import main

    source = runs["base"] / "epochs" / "sasrec_ml100k"
    shutil.copytree(source, tmp_path / "sasrec_ml100k")
    run_dir = tmp_path / "sasrec_ml100k" / "version_0"
    last = run_dir / "checkpoints" / "last.ckpt"
    data = bytearray(last.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x40
    else:
        data = data[: len(data) // 3]
    last.write_bytes(bytes(data))
    before = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")}
    args = fit_args(runs["base"] / "ml-100k", tmp_path, EPOCHS)[1:] + ["--ckpt_path", "last"]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    [line] = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error: ")]
    assert exit_info.value.code == 2
    assert f"checkpoint {last} cannot be used" in line and "--ckpt_path " in line and "best-epoch=5-step=48.ckpt" in line
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")} == before  # nothing in the run directory changed
