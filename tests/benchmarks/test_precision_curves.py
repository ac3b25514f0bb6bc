"""benchmarks.precision_curves: two runs of one config side by side (curves, test metrics, pace, figure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import precision_curves
from seqrec.bench.report import split_sections


def _run(root: Path, name: str, precision: str, curve: dict[int, float], test: float, pace: float) -> Path:
    run = root / name / "version_0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"seed_everything: 42\ntrainer:\n  precision: {precision}\n")
    rows = ["step,train/loss,val/recall@10,val/ndcg@10"]
    for step, value in curve.items():
        rows += [f"{step},1.0,,", f"{step},,{value},{value / 2}"]
    (run / "metrics.csv").write_text("\n".join(rows) + "\n")
    (run / "fit_summary.json").write_text(json.dumps({"seconds_per_step": pace, "global_step": max(curve) + 1}))
    (run / "test_metrics.json").write_text(json.dumps({"test/recall@10": test, "test/ndcg@10": test / 2}))
    return run


def test_the_section_lists_each_validation_step_the_test_metrics_and_the_pace(tmp_path: Path) -> None:
    fp32 = _run(tmp_path, "fp32", "32-true", {0: 0.01, 499: 0.30, 999: 0.32}, 0.31, 0.50)
    bf16 = _run(tmp_path, "bf16", "bf16-mixed", {0: 0.01, 499: 0.33, 999: 0.32}, 0.30, 0.35)
    out, figure = tmp_path / "BENCHMARKS.md", tmp_path / "curves.png"
    out.write_text("# Benchmarks\n\n## Other\n\nkept\n")
    precision_curves.main([str(fp32), str(bf16), "--name", "lru_ml1m", "--out", str(out), "--figure", str(figure)])
    sections = dict(split_sections(out.read_text())[1])
    assert "kept" in sections["Other"]  # other sections survive
    body = sections["Precision: lru_ml1m"]
    assert "| 499 | 0.3000 | 0.3300 | +10.0% | 0.1500 | 0.1650 | +10.0% |" in body
    assert "| 999 | 0.3200 | 0.3200 | +0.0% |" in body
    assert "recall@10 0.3100 (32-true) vs 0.3000 (bf16-mixed), -3.2%" in body
    assert "0.5000 (32-true) and 0.3500 (bf16-mixed), 0.70×" in body
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "(32-true, seed 42)" in body and "they differ only in the precision" in body


def test_labels_name_what_tells_the_runs_apart_and_a_folder_without_a_run_is_one_line(tmp_path: Path) -> None:
    before = _run(tmp_path, "before", "32-true", {0: 0.0, 499: 0.2}, 0.2, 0.7)
    after = _run(tmp_path, "after", "32-true", {0: 0.0, 499: 0.2}, 0.2, 0.5)
    body = precision_curves.main([str(before), str(after), "--labels", "eb7bd69", "this code"])
    assert "recall@10 eb7bd69 | recall@10 this code" in body and "(eb7bd69: 32-true, seed 42)" in body
    assert "they differ only in what the labels name" in body
    with pytest.raises(SystemExit, match="holds no config.yaml"):
        precision_curves.main([str(tmp_path), str(after)])
