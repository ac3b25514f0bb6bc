"""The shared report helpers (``seqrec.bench.report``): the section writer, medians with spread, MiB cells."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from seqrec.bench.report import (
    cpu_isa,
    decimals,
    format_spread,
    load_average,
    median,
    median_and_spread,
    rss_cell,
    shown_command,
    split_sections,
    spread,
    write_section,
)


def _section(text: str, title: str) -> str:
    """The ``## <title>`` section (heading included), split as ``write_section`` splits the file."""
    matches = [section for name, section in split_sections(text)[1] if name == title]
    assert len(matches) == 1, f"expected one section {title!r} in:\n{text}"
    return matches[0]


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


def test_spread_keeps_three_significant_digits_and_rss_cells_are_mib() -> None:
    assert median([4.0, 1.0, 2.0]) == 2.0
    assert [decimals(v) for v in (1234.0, 12.34, 0.01234, 0.0, float("nan"))] == [1, 1, 4, 1, 1]
    assert spread([0.01234, 0.02, 0.01]) == "0.0123 (0.0100–0.0200)"
    assert spread([1234.5]) == "1,234.5"
    assert rss_cell({"rss_peak_kb": 3 * 1024 * 1024, "rss_baseline_kb": 1024 * 1024}) == "3,072 (+2,048)"


def test_shown_command_names_the_shared_folder_by_its_variable(tmp_path: Path, monkeypatch) -> None:
    """A report's command never names one machine's data folder: paths under $SEQREC_SHARED_DATA (as given or
    resolved through a link) are written with the variable; other arguments are shell-quoted."""
    shared = tmp_path / "shared"
    (shared / "lrurec").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(shared)
    monkeypatch.setenv("SEQREC_SHARED_DATA", str(link))
    argv = ["--data_path", f"{link}/lrurec/ml-1m.txt.gz", f"--out={shared.resolve()}/x y.md", "a b", str(tmp_path / "other")]
    assert shown_command("benchmarks.compress", argv) == (
        "python -m benchmarks.compress --data_path $SEQREC_SHARED_DATA/lrurec/ml-1m.txt.gz "
        f"--out=$SEQREC_SHARED_DATA'/x y.md' 'a b' {tmp_path / 'other'}")
    monkeypatch.delenv("SEQREC_SHARED_DATA")
    assert shown_command("benchmarks.speed", []) == "python -m benchmarks.speed"
    assert load_average().count(" ") == 2


ZEN3 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx fma avx2\n\nprocessor\t: 1\nflags\t\t: avx512f avx512_bf16\n"
ZEN4 = "processor\t: 0\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\nflags\t\t: avx avx2 avx512f avx512_bf16\n"


@pytest.mark.parametrize(("cpuinfo", "expected"), [
    (ZEN3, "family 25 model 1, AVX2"),  # the first processor's block only
    (ZEN4, "family 25 model 17, AVX-512 with bf16"),
    ("cpu family\t: 6\nmodel\t\t: 85\nflags\t\t: avx2 avx512f\n", "family 6 model 85, AVX-512"),
    ("model name\t: some ARM\nflags\t\t: neon\n", "no AVX2"),
    ("model name\t: no flags line\n", ""),
])
def test_cpu_isa_names_the_generation_a_model_name_hides(cpuinfo, expected):
    """Two "AMD EPYC" hosts with one model name: family, model and the widest vector instructions tell them apart."""
    assert cpu_isa(cpuinfo) == expected
