"""benchmarks.flags: the benchmarks spell flags as ``seqrec`` does (snake_case), old kebab-case spellings parse with
one note line, a bad command line is one error line; every benchmark's parser is one of these."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.flags import Parser

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))


def parser() -> Parser:
    p = Parser("benchmarks.example")
    p.add_argument("--runs_dir", default="runs")
    p.add_argument("--one_seed", nargs="+", default=[])
    p.add_argument("--report_only", action="store_true")
    p.add_argument("--set", nargs="+", default=[])
    return p


def test_an_old_kebab_spelling_parses_as_the_snake_one_with_one_note_per_flag(capsys) -> None:
    old_parser = parser()
    old = old_parser.parse_args(["--runs-dir", "r", "--one-seed", "a", "b", "--report-only", "--runs-dir=s"])
    new = parser().parse_args(["--runs_dir", "r", "--one_seed", "a", "b", "--report_only", "--runs_dir=s"])
    assert vars(old) == vars(new) == {"runs_dir": "s", "one_seed": ["a", "b"], "report_only": True, "set": []}
    # the command a results file quotes is in today's spelling
    assert old_parser.command() == "python -m benchmarks.example --runs_dir r --one_seed a b --report_only --runs_dir=s"
    assert capsys.readouterr().err.splitlines() == [
        "note: --runs-dir is now --runs_dir", "note: --one-seed is now --one_seed", "note: --report-only is now --report_only"]


def test_values_and_everything_after_a_bare_double_dash_stay_as_written(capsys) -> None:
    p = parser()
    p.add_argument("rest", nargs="*")
    args = p.parse_args(["--set", "a-b=c-d", "--", "--runs-dir", "x"])
    assert args.set == ["a-b=c-d"] and args.rest == ["--runs-dir", "x"] and args.runs_dir == "runs"
    assert capsys.readouterr().err == ""


def test_a_renamed_flag_parses_as_its_new_name_in_either_spelling_and_a_retired_one_is_refused(capsys) -> None:
    p = Parser("benchmarks.example", renamed={"--models_dir": "--runs_dir"}, retired={"--out_dir": "give --out FILE"})
    p.add_argument("--runs_dir", default="runs")
    assert p.parse_args(["--models-dir", "a"]).runs_dir == "a"
    assert p.command() == "python -m benchmarks.example --runs_dir a"
    assert p.parse_args(["--models_dir=b"]).runs_dir == "b"
    assert capsys.readouterr().err.splitlines() == [
        "note: --models-dir is now --runs_dir", "note: --models_dir is now --runs_dir"]
    for flag in ("--out_dir", "--out-dir"):
        with pytest.raises(SystemExit):
            p.parse_args([flag, "x"])
        assert capsys.readouterr().err.splitlines() == [
            f"error: {flag} is no longer a flag: give --out FILE (see python -m benchmarks.example --help)"]


def test_an_unknown_or_abbreviated_flag_is_one_error_line_naming_the_help(capsys) -> None:
    for flag in ("--runs-dirs", "--runs"):  # no abbreviations, as seqrec's commands
        with pytest.raises(SystemExit) as exit_info:
            parser().parse_args([flag, "r"])
        assert exit_info.value.code == 2
        assert capsys.readouterr().err.splitlines() == [
            f"error: unrecognized arguments: {flag} r (see python -m benchmarks.example --help)"]


def _calls(path: Path, name: str) -> list[ast.Call]:
    return [node for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call) and (getattr(node.func, "attr", None) == name or getattr(node.func, "id", None) == name)]


@pytest.mark.parametrize("path", BENCHMARKS, ids=[p.stem for p in BENCHMARKS])
def test_every_benchmark_flag_is_snake_case_on_a_flags_parser(path: Path) -> None:
    flags = [arg.value for call in _calls(path, "add_argument") for arg in call.args
             if isinstance(arg, ast.Constant) and str(arg.value).startswith("--")]
    assert [f for f in flags if "-" in f[2:]] == []
    assert _calls(path, "ArgumentParser") == [] or path.name == "flags.py"  # benchmarks.flags.Parser, not argparse's
    if flags:
        assert _calls(path, "Parser"), f"{path.name} adds flags to a parser that is not benchmarks.flags.Parser"


def test_a_benchmarks_help_shows_the_snake_spelling() -> None:
    shown = subprocess.run([sys.executable, "-m", "benchmarks.mlp4rec", "--help"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout
    assert shown.startswith("usage: python -m benchmarks.mlp4rec") and "--runs_dir" in shown and "--runs-dir" not in shown
