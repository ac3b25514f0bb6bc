"""``seqrec.cli``: one parser for every command from typed signatures, snake_case flags, old spellings as aliases with
one note line, argparse-style forms (bare booleans, space-separated lists), one-line errors, the console scripts."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from seqrec import cli
from seqrec.cli import COMMANDS, LIGHTNING, Signature, command_parser, main, normalize

ROOT = Path(__file__).resolve().parents[1]


def parsed(name: str, argv: list[str]) -> tuple[dict, list[str], list[str]]:
    """(the function's arguments, the config overrides, the notes) of ``seqrec NAME ARGV``."""
    command = COMMANDS[name]
    function = command.function()
    signature = Signature.of(function)
    result = normalize(argv, command, signature)
    config = command_parser(name, function).parse_args(result.argv)
    return config.as_dict(), result.overrides, result.notes


# (command, old spelling, the same in the new spelling): every flag whose spelling changed
RENAMED = [
    ("predict", ["RUN", "--checkpoint", "last"], ["RUN", "--ckpt_path", "last"]),
    ("serve", ["RUN", "--checkpoint", "x.ckpt"], ["RUN", "--ckpt_path", "x.ckpt"]),
    ("serve", ["RUN", "--redis-prefix", "m2"], ["RUN", "--redis_prefix", "m2"]),
    ("serve", ["RUN", "--cache-size", "0"], ["RUN", "--cache_size", "0"]),
    ("serve", ["RUN", "--reset-store"], ["RUN", "--reset_store"]),
    ("serve", ["RUN", "--no-check"], ["RUN", "--no_check"]),
    ("serve", ["RUN", "--request-threads", "4"], ["RUN", "--request_threads", "4"]),
    ("serve", ["RUN", "--max-body-bytes", "1000"], ["RUN", "--max_body_bytes", "1000"]),
    ("serve", ["RUN", "--max-id-length", "64"], ["RUN", "--max_id_length", "64"]),
    ("serve", ["RUN", "--log-level", "warning"], ["RUN", "--log_level", "warning"]),
    ("repro", ["--max-time", "00:02:00:00"], ["--sitting_time", "00:02:00:00"]),
    ("repro", ["--shared-data", "/data"], ["--shared_data", "/data"]),
    ("repro", ["--runs-dir", "r"], ["--runs_dir", "r"]),
    ("repro", ["--report-only"], ["--report_only"]),
    ("lrd", ["--text", "t", "--min-lag", "2"], ["--text", "t", "--min_lag", "2"]),
    ("lrd", ["--text", "t", "--max-lag", "9"], ["--text", "t", "--max_lag", "9"]),
    ("lrd", ["--text", "t", "--num-lags", "5"], ["--text", "t", "--num_lags", "5"]),
    ("lrd", ["--text", "t", "--max-events", "10"], ["--text", "t", "--max_events", "10"]),
    ("lrd", ["--text", "t", "--max-len", "50"], ["--text", "t", "--max_len", "50"]),
    ("lrd", ["--text", "t", "--d-model", "32"], ["--text", "t", "--d_model", "32"]),
    ("lrd", ["--text", "t", "--max-hidden", "32"], ["--text", "t", "--max_hidden", "32"]),
    ("lrd", ["--text", "t", "--min-hidden", "4"], ["--text", "t", "--min_hidden", "4"]),
    ("lrd", ["--text", "t", "--cost-ratio", "3"], ["--text", "t", "--cost_ratio", "3"]),
    ("lrd", ["--text", "t", "--size-multiple", "4"], ["--text", "t", "--size_multiple", "4"]),
]


@pytest.mark.parametrize(("name", "old", "new"), RENAMED, ids=[f"{n}{o[-2] if len(o) > 1 else o[0]}" for n, o, _ in RENAMED])
def test_every_old_spelling_parses_as_the_new_one_with_one_note(name, old, new):
    old_args, _, notes = parsed(name, old)
    new_args, _, no_notes = parsed(name, new)
    flag = next(a for a in old if a.startswith("--") and "-" in a[2:] or a == "--checkpoint")
    renamed = next(a for a in new if a.startswith("--") and a not in old)
    assert old_args == new_args and no_notes == []
    assert notes == [f"note: {flag} is now {renamed}"]


def test_an_old_spelling_prints_one_note_line_then_the_command_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", str(tmp_path / "no-run"), "--checkpoint", "last", "--checkpoint", "best"])
    err = capsys.readouterr().err.splitlines()
    assert exit_info.value.code == 2
    assert err[0] == "note: --checkpoint is now --ckpt_path" and len(err) == 2 and err[1].startswith("error: ")


def test_flags_take_the_forms_the_commands_always_took():
    args, overrides, notes = parsed("repro", ["--configs", "lru_ml1m", "sasrec_ml1m", "--resume", "--report_only",
                                              "false", "--out=R.md", "--", "--trainer.accelerator", "gpu"])
    assert args["configs"] == ["lru_ml1m", "sasrec_ml1m"] and args["resume"] is True and args["report_only"] is False
    assert str(args["out"]) == "R.md" and overrides == ["--trainer.accelerator", "gpu"] and notes == []
    assert parsed("repro", ["--configs=[a, b]"])[0]["configs"] == ["a", "b"]
    tune, rest, _ = parsed("tune", ["--config", "a", "--study", "s", "--config", "b", "--seed_everything", "3",
                                    "--model.lr=0.1", "--trainer.fast_dev_run"])
    assert tune["config"] == ["a", "b"] and tune["study"] == "s"  # repeated: stacked, in order
    assert rest == ["--seed_everything", "3", "--model.lr=0.1", "--trainer.fast_dev_run"]
    runs = parsed("summarize", ["runs/a", "runs/b", "--out", "o"])[0]
    assert runs == {"runs": ["runs/a", "runs/b"], "out": "o"}
    predict, rest, _ = parsed("predict", ["RUN", "--data.source.path", "x.csv", "--k", "5", "--skip_unknown"])
    assert predict["run"] == "RUN" and predict["k"] == 5 and predict["skip_unknown"] is True
    assert rest == ["--data.source.path", "x.csv"]


@pytest.mark.parametrize(("argv", "expected"), [
    (["predict", "RUN", "--k", "ten"], "error: --k ten: expected an integer (see seqrec predict --help)"),
    (["predict", "RUN", "--exclude_seen", "some"],
     "error: --exclude_seen some: expected one of window, all, none (see seqrec predict --help)"),
    (["predict"], "error: the following arguments are required: run (see seqrec predict --help)"),
    (["repro", "--max_tim", "1"], "error: unrecognized arguments: --max_tim 1 (see seqrec repro --help)"),
    (["serve", "RUN", "--port"], "error: --port: expected a value (an integer)"),
    (["lrd"], "error: give one of --config (a fit config) or --text (a text file)"),
    (["summarize", "a", "b", "--out", "o"], "error: --out takes one run directory"),
    (["fitt"], "error: unknown command 'fitt'; commands: fit, test, predict, serve, tune, repro, summarize, lrd, compare "
               "(seqrec --help)"),
    (["bench", "speed"], "error: the development benchmarks moved out of the package: from a source checkout's root "
                         "run python -m benchmarks.<pipeline|lru_speed|lru_recurrence|compress|speed|xlong|serve|"
                         "mlp4rec_mixers|step_ab|precision_curves|split_difficulty|baselines|evornn|mlp4rec> ..."),
])
def test_a_bad_command_line_is_one_line_exit_2(argv, expected, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and capsys.readouterr().err.splitlines() == [expected]


def test_help_lists_every_command_with_one_line(capsys):
    main(["--help"])
    lines = capsys.readouterr().out.splitlines()
    for name in [*LIGHTNING, *COMMANDS]:
        [line] = [line for line in lines if line.startswith(f"  {name} ")]
        assert len(line.split(maxsplit=1)[1]) > 15, line
    assert [line.split()[0] for line in lines if line.startswith("  ")] == [*LIGHTNING, *COMMANDS]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_commands_help_is_its_docstring(name, capsys):
    function = COMMANDS[name].function()
    with pytest.raises(SystemExit) as exit_info:
        main([name, "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and out.startswith(f"usage: seqrec {name} ")
    assert function.__doc__.split("\n")[0] in out
    for parameter in Signature.of(function).kinds:
        assert f"--{parameter}" in out or parameter in Signature.of(function).positional
        assert "-" not in parameter  # one flag style: snake_case


def test_python_m_seqrec_and_the_console_scripts_are_the_same_command(monkeypatch):
    section = (ROOT / "pyproject.toml").read_text().split("[project.scripts]\n", 1)[1].split("\n[", 1)[0]
    scripts = dict(re.findall(r'^([\w-]+) = "([^"]+)"$', section, re.MULTILINE))  # tomllib is Python 3.11+
    assert scripts == {"seqrec": "seqrec.cli:script", "seqrec-fit": "seqrec.cli:fit_script"}
    import seqrec.__main__

    assert seqrec.__main__.main is cli.main
    calls = []
    monkeypatch.setattr("seqrec.fit.main", lambda argv: calls.append(argv) or {"test/ndcg@10": 0.5})
    monkeypatch.setattr(sys, "argv", ["seqrec-fit", "--config", "x.yaml"])
    cli.fit_script()
    monkeypatch.setattr(sys, "argv", ["seqrec", "fit", "--config", "x.yaml"])
    with pytest.raises(SystemExit) as exit_info:
        cli.script()  # a command's metrics are not an exit status
    assert calls == [["--config", "x.yaml"]] * 2 and exit_info.value.code == 0


def test_the_console_script_exits_with_a_commands_status(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["seqrec", "summarize", str(tmp_path / "missing")])
    with pytest.raises(SystemExit) as exit_info:
        cli.script()
    assert exit_info.value.code == 1 and capsys.readouterr().err.startswith("error: ")


def test_python_m_seqrec_help_needs_no_lightning():
    code = "import sys, seqrec.__main__ as m; m.main(['--help']); print('lightning' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "False", done.stderr[-2000:]
