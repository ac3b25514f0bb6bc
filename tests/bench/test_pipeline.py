"""Pipeline benchmark: a smoke run on the tiny ML-100k fixture, and the shared-report section writer."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from seqrec.bench import pipeline
from seqrec.bench.report import format_spread, median_and_spread, split_sections, write_section
from seqrec.build import resolved_dict
from tests.conftest import write_ml100k

OTHER = "## LRURec speed (torch x, 1 threads)\n\n### Training\n\n| max_len | ms / step |\n|---|---|\n| 200 | 12 |\n"
NUMBER = r"[\d,]+(?:\.\d+)?"


def _section(text: str, title: str) -> str:
    """The ``## <title>`` section (heading included), split as ``write_section`` splits the file."""
    matches = [section for name, section in split_sections(text)[1] if name == title]
    assert len(matches) == 1, f"expected one section {title!r} in:\n{text}"
    return matches[0]


def test_pipeline_smoke_writes_its_section_and_keeps_others(tmp_path: Path) -> None:
    root = write_ml100k(tmp_path / "ml-100k", num_users=40, num_items=30, length=20)
    out = tmp_path / "BENCHMARKS.md"
    out.write_text("# Benchmarks\n\nintro line\n\n" + OTHER)
    source = {"class_path": "seqrec.data.sources.movielens.MovieLens100K", "init_args": {"root": str(root)}}
    pipeline.main([
        "--config", "sasrec_ml100k.yaml", "--data-source", json.dumps(source), "--preprocessing", "{}",
        "--repeats", "1", "--max-lens", "", "--train-steps", "1", "--warmup", "0", "--eval-batches", "1",
        "--title", "Pipeline smoke", "--out", str(out),
    ])
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\nintro line\n")
    assert OTHER.strip() in text  # the other benchmark's section survives byte for byte
    body = _section(text, "Pipeline smoke")
    assert "python -m seqrec.bench.pipeline --config sasrec_ml100k.yaml" in body
    assert "40 users, 30 items" in body  # the fixture, not the real ML-100k
    assert re.search(rf"^\| cold: .*\| {NUMBER} \| {NUMBER} \(\+{NUMBER}\) \|$", body, flags=re.M)
    assert re.search(rf"^\| cached: `Sequences.load` \| {NUMBER} \|", body, flags=re.M)
    max_len = resolved_dict(["--config", "sasrec_ml100k"])["data"]["init_args"]["max_len"]
    rows = re.findall(r"^\| \d+ \|.*$", body, flags=re.M)
    assert len(rows) == 1, rows  # --max-lens '': only the config's max_len
    row = rows[0]
    assert row.startswith(f"| {max_len} |")
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == 9
    values = [float(re.match(NUMBER, c).group().replace(",", "")) for c in cells]
    assert all(v > 0 for v in values), row
    assert not list(tmp_path.glob(".BENCHMARKS.md.*"))  # no temporary file left behind


def test_write_section_replaces_appends_and_keeps_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "results" / "B.md"
    write_section(path, "A", "first a")
    assert path.read_text().startswith("# Benchmarks")
    write_section(path, "B", "body b\n\n```\n## not a heading inside a fence\n```\n\n### sub of b")
    write_section(path, "A", "second a")
    text = path.read_text()
    assert "first a" not in text and text.count("## A\n") == 1
    assert text.index("## A") < text.index("## B")  # replaced in place, not moved to the end
    assert _section(text, "B").strip().endswith("### sub of b")
    assert "## not a heading inside a fence" in _section(text, "B")
    path.write_text(text + "\n## A\n\nduplicate by hand\n")
    write_section(path, "A", "third a")
    text = path.read_text()
    assert text.count("## A\n") == 1 and "duplicate by hand" not in text and "third a" in text
    assert sorted(p.name for p in path.parent.iterdir()) == ["B.md"]
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask  # not mkstemp's 0600
    path.chmod(0o640)
    write_section(path, "C", "c")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # an existing file keeps its mode
    with pytest.raises(ValueError, match="one non-empty line"):
        write_section(path, "two\nlines", "x")


def test_median_and_spread() -> None:
    assert median_and_spread([3.0, 1.0, 2.0, 10.0]) == (2.5, 1.0, 10.0)
    assert format_spread([1000.0, 3000.0, 2000.0]) == "2,000 (1,000–3,000)"
    assert format_spread([0.0123], digits=1, scale=1e3) == "12.3"
    with pytest.raises(ValueError):
        median_and_spread([])


def test_data_source_presets_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEQREC_SHARED_DATA", "/data/shared")
    overrides, label = pipeline.data_source_overrides("ml-1m-lrurec", None)
    given = dict(zip(overrides[::2], overrides[1::2]))
    source = json.loads(given["--data.init_args.source"])
    assert source["init_args"] == {"name": "ml-1m", "path": "/data/shared/lrurec/ml-1m.txt.gz"}
    options = json.loads(given["--data.init_args.preprocessing"])
    assert options["sort_by"] == "time" and options["min_item_interactions"] == 0 and label.startswith("ml-1m")
    monkeypatch.delenv("SEQREC_SHARED_DATA")
    with pytest.raises(ValueError, match="SEQREC_SHARED_DATA"):
        pipeline.data_source_overrides("ml-1m-lrurec", None)
    with pytest.raises(ValueError, match="preset"):
        pipeline.data_source_overrides("not-a-dataset", None)
