"""``python -m seqrec <command>``: dispatch, one-line errors, and ``test`` reproducing fit's test metrics."""

import json

import pytest

from seqrec.__main__ import main
from tests.test_fit import tiny


def test_help_lists_every_command(capsys):
    main(["--help"])
    printed = capsys.readouterr().out
    for command in ("fit", "test", "predict", "serve", "tune", "repro", "summarize", "lrd"):
        assert f"\n  {command} " in printed


def test_unknown_command_is_a_one_line_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fitt"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_test_command_reproduces_the_fit_test_metrics(ml100k_root, tmp_path):
    fitted = main(["fit", *tiny(ml100k_root, tmp_path / "runs", "--trainer.max_epochs", "2")])
    [run] = (tmp_path / "runs" / "sasrec_ml100k").glob("version_*")
    best = json.loads((run / "fit_summary.json").read_text())["best_checkpoint"]
    tested = main(["test", *tiny(ml100k_root, tmp_path / "runs"), "--ckpt_path", best])
    ranking = {k: v for k, v in fitted.items() if "@" in k}
    assert ranking and {k: tested[k] for k in ranking} == pytest.approx(ranking, abs=1e-7)


def test_test_command_needs_a_checkpoint(ml100k_root, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["test", *tiny(ml100k_root, tmp_path / "runs")])
    assert exit_info.value.code == 2 and "--ckpt_path" in capsys.readouterr().err


def test_test_command_names_a_corrupt_checkpoint_in_one_line(ml100k_root, tmp_path, capsys):
    broken = tmp_path / "best.ckpt"
    broken.write_bytes(b"PK\x03\x04 not a whole checkpoint")
    with pytest.raises(SystemExit) as exit_info:
        main(["test", *tiny(ml100k_root, tmp_path / "runs"), "--ckpt_path", str(broken)])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert exit_info.value.code == 2 and len(err) == 1 and f"checkpoint {broken} cannot be used" in err[0]
    assert not (tmp_path / "runs").exists()  # refused before anything was built
