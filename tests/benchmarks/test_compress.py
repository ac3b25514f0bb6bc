"""The compression benchmark end to end on a MovieLens-format fixture: table, JSON, Pareto plot."""

from __future__ import annotations

import json

import pytest

from benchmarks import compress as bench


def tiny_overrides(ml100k_root) -> list[str]:
    """Dotted overrides (after ``--``) for both shipped configs: the fixture's source, a narrow model."""
    source = {"class_path": "seqrec.data.sources.movielens.MovieLens100K", "init_args": {"root": str(ml100k_root)}}
    return ["--", "--data.init_args.source", json.dumps(source), "--model.net.d_model", "16"]


@pytest.mark.slow  # a benchmark smoke run (trains two backbones)
def test_bench_writes_table_json_and_plot(tmp_path, ml100k_root):
    out = tmp_path / "results"
    runs = bench.main([
        "--config", "ctr_transformer_ml1m.yaml", "--lru_config", "ctr_lru_ml1m.yaml",
        "--name", "fixture", "--lengths", "12", "--epochs", "0.5", "--target_aware_users", "8",
        "--eval_batch_size", "16", "--threads", "1", "--out", str(out / "COMPRESSION.md"), "--runs_dir", str(tmp_path / "models"),
        *tiny_overrides(ml100k_root),
    ])
    rows = runs["12"]["results"]
    methods = {(r["method"], r["budget"]) for r in rows}
    for method in ("prune", "tome", "streaming", "h2o", "snapkv", "prune-target"):
        assert {(method, 0.5), (method, 0.25), (method, 0.1)} <= methods
    assert ("uncompressed", 1.0) in methods and ("lru (fixed state)", 1.0) in methods
    ref = next(r for r in rows if r["method"] == "uncompressed" and not r["subset"])
    for r in rows:
        if r["method"] in ("streaming", "h2o", "snapkv", "prune", "tome") and r["budget"] < 1:
            assert r["state_bytes_per_user"] < ref["state_bytes_per_user"]
            assert r["macs_per_request"] < ref["macs_per_request"]
    report = (out / "COMPRESSION.md").read_text()
    assert "## L = 12" in report and "| snapkv | 25% |" in report and "Criterion" in report
    assert json.loads((out / "compression_fixture.json").read_text())["12"]["max_len"] == 12
    assert (out / "compression_pareto_fixture_L12.png").stat().st_size > 1000
    assert any((tmp_path / "models").glob("*_L12_*.pt"))  # the backbones, in --runs_dir


def test_the_old_directory_flags_are_renamed_or_refused_with_the_fix(tmp_path, capsys):
    """``--models_dir`` is ``--runs_dir`` now (the benchmarks' one spelling), with a note; ``--out_dir`` named a folder
    where ``--out`` names the report, so it is refused with the replacement rather than reinterpreted."""
    args = bench.parse_args(["--models_dir", str(tmp_path / "m")])
    assert args.runs_dir == tmp_path / "m" and "--runs_dir" in args.command
    assert capsys.readouterr().err.splitlines() == ["note: --models_dir is now --runs_dir"]
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(["--out_dir", "results"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: --out_dir is no longer a flag: give the report's path, --out DIR/COMPRESSION.md (its JSON and plots go "
        "beside it) (see python -m benchmarks.compress --help)"]

