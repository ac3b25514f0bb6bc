"""Pipeline benchmark: a smoke run on the tiny ML-100k fixture, and its data-source presets."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks import pipeline
from seqrec.bench.report import split_sections
from seqrec.build import resolved_dict
from tests.conftest import write_ml100k

OTHER = "## LRURec speed (torch x, 1 threads)\n\n### Training\n\n| max_len | ms / step |\n|---|---|\n| 200 | 12 |\n"
NUMBER = r"[\d,]+(?:\.\d+)?"


def _section(text: str, title: str) -> str:
    """The ``## <title>`` section (heading included), split as ``write_section`` splits the file."""
    matches = [section for name, section in split_sections(text)[1] if name == title]
    assert len(matches) == 1, f"expected one section {title!r} in:\n{text}"
    return matches[0]


@pytest.mark.slow  # a benchmark smoke run (forked phases)
def test_pipeline_smoke_writes_its_section_and_keeps_others(tmp_path: Path) -> None:
    root = write_ml100k(tmp_path / "ml-100k", num_users=40, num_items=30, length=20)
    out = tmp_path / "BENCHMARKS.md"
    out.write_text("# Benchmarks\n\nintro line\n\n" + OTHER)
    source = {"class_path": "seqrec.data.sources.movielens.MovieLens100K", "init_args": {"root": str(root)}}
    pipeline.main([
        "--config", "sasrec_ml100k.yaml", "--data_source", json.dumps(source), "--preprocessing", "{}",
        "--repeats", "1", "--max_lens", "", "--train_steps", "1", "--warmup", "0", "--eval_batches", "1",
        "--title", "Pipeline smoke", "--out", str(out),
    ])
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\nintro line\n")
    assert OTHER.strip() in text  # the other benchmark's section survives byte for byte
    body = _section(text, "Pipeline smoke")
    assert "python -m benchmarks.pipeline --config sasrec_ml100k.yaml" in body
    assert "40 users, 30 items" in body  # the fixture, not the real ML-100k
    assert re.search(rf"^\| cold: .*\| {NUMBER} \| {NUMBER} \(\+{NUMBER}\) \|$", body, flags=re.M)
    assert re.search(rf"^\| cached: `Sequences.load` \| {NUMBER} \|", body, flags=re.M)
    max_len = resolved_dict(["--config", "sasrec_ml100k"])["data"]["init_args"]["max_len"]
    rows = re.findall(r"^\| \d+ \|.*$", body, flags=re.M)
    assert len(rows) == 1, rows  # --max_lens '': only the config's max_len
    row = rows[0]
    assert row.startswith(f"| {max_len} |")
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == 9
    values = [float(re.match(NUMBER, c).group().replace(",", "")) for c in cells]
    assert all(v > 0 for v in values), row
    assert not list(tmp_path.glob(".BENCHMARKS.md.*"))  # no temporary file left behind


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
